"""One SSH key pair for the cluster's default user, so mpirun and ssh work node to node.

With /fsx the controller publishes the pair under ``/fsx/.hpq/ssh/<user>/`` (adopting
a pair already there) and every node installs it. Without a shared filesystem the
controller makes the pair and hands it to the workers through Slurm: one batch job,
queued until the workers have joined, that installs it on each of them.
The key gets its own file name (``id_ed25519_hpq``) so a user's own keys are untouched;
a managed block in ``~/.ssh/config`` and ``authorized_keys`` wires it in. Host keys are vouched for by
the cluster host CA (host_certs.py), so this block never relaxes host-key checking; only without a
shared filesystem (no CA) does it accept a first-seen key, and then for the cluster's own names only.
"""

from __future__ import annotations

import base64
import os
import pwd
import shlex
import subprocess
import tempfile
import time
from typing import List, Optional, Tuple

from . import files, fsx, identity, slurm
from .context import Degraded

KEY_NAME = "id_ed25519_hpq"
JOB_NAME = "hpq-ssh-keys"  # the Slurm job that hands the pair to the workers (no shared filesystem)
LOGIN_JOB_NAME = "hpq-ssh-keys-login"  # ... and to the login nodes, best effort (they may be in no partition)
SHARED = ".hpq/ssh"
MARKER = "/etc/hpq/ssh-keys-distributed"


class SshKeyError(Exception):
    pass


def generate(comment: str):
    tmp = tempfile.mkdtemp(prefix="hpq-ssh-")
    try:
        key = os.path.join(tmp, "k")
        res = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        if res.returncode != 0:
            raise SshKeyError("ssh-keygen failed: %s" % res.stdout.strip())
        return read_pair(key)
    finally:
        for fn in os.listdir(tmp):
            os.unlink(os.path.join(tmp, fn))
        os.rmdir(tmp)


def shared_pair(ctx, shared: str, user: str, role: str):
    d = os.path.join(shared, SHARED, user)
    priv, pub = os.path.join(d, KEY_NAME), os.path.join(d, KEY_NAME + ".pub")
    if role == identity.CONTROLLER and not os.path.exists(pub):
        private, public = generate("%s@%s" % (user, ctx.node.cluster_name))
        os.makedirs(d, mode=0o700, exist_ok=True)
        files.write_file(priv, private, 0o600)
        files.write_file(pub, public, 0o644)  # written last: its presence means the pair is complete
    deadline = time.time() + ctx.s.shared_wait_s
    while not os.path.exists(pub):
        if time.time() >= deadline:
            raise SshKeyError("waited %.0fs for the controller to publish the SSH key at %s" % (ctx.s.shared_wait_s, d))
        time.sleep(1.0)
    return read_pair(priv)


def read_pair(private_path: str):
    """(private, public) bytes of the pair at ``private_path`` and ``private_path``.pub."""
    with open(private_path, "rb") as fh:
        private = fh.read()
    with open(private_path + ".pub", "rb") as fh:
        public = fh.read()
    return private, public


def install_pair(home: str, uid: int, gid: int, private: bytes, public: bytes,
                 tofu_hosts: Optional[List[str]] = None) -> bool:
    """The pair, authorized_keys and ~/.ssh/config for one user; ``tofu_hosts``: cluster names and addresses
    whose first-seen host key is accepted (only used when there is no host CA)."""
    ssh = os.path.join(home, ".ssh")
    changed = False
    if not os.path.isdir(ssh):
        os.makedirs(ssh, mode=0o700)
        os.chown(ssh, uid, gid)
    if os.stat(ssh).st_mode & 0o077:  # it holds the private key: owner only (sshd refuses group-writable)
        os.chmod(ssh, 0o700)
        changed = True
    changed |= files.write_file(os.path.join(ssh, KEY_NAME), private, 0o600, uid, gid)
    changed |= files.write_file(os.path.join(ssh, KEY_NAME + ".pub"), public, 0o644, uid, gid)
    pub_line = public.decode().strip()
    config = ["Host *", "    IdentityFile ~/.ssh/%s" % KEY_NAME, "    IdentityFile ~/.ssh/id_ed25519",
              "    IdentityFile ~/.ssh/id_rsa"]
    if tofu_hosts:
        config += ["Host %s" % " ".join(tofu_hosts), "    StrictHostKeyChecking accept-new"]
    for name, lines, mode in (("authorized_keys", [pub_line], 0o600), ("config", config, 0o600)):
        path = os.path.join(ssh, name)
        changed |= files.set_block(path, "cluster-ssh-key", lines, mode)
        changed |= files.write_file(path, files.read_text(path) or "", mode, uid, gid)
    return changed


def node_root_shell(template: str) -> str:
    """Shell words for the root of the node a job runs on: HPQ_SLURM_NODE_ROOT with %n = $SLURMD_NODENAME."""
    return '"${SLURMD_NODENAME}"'.join(shlex.quote(part) if part else "" for part in template.split("%n"))


def slurm_job_script(user: str, private: bytes, public: bytes, node_root: str = "/",
                     tofu_hosts: Optional[List[str]] = None) -> str:
    """A batch script that installs the pair on every node of its allocation (no shared filesystem).

    The pair travels base64-encoded in the job's environment (``/proc/PID/environ`` is readable by
    the owner only), never in a command line, which ``ps`` shows to every user on the node.
    ``node_root``: where each node's file tree is, as the jobs see it (setting HPQ_SLURM_NODE_ROOT;
    ``/`` on a real cluster).
    """
    config = "Host *\n    IdentityFile ~/.ssh/%s\n" % KEY_NAME
    if tofu_hosts:
        config += "Host %s\n    StrictHostKeyChecking accept-new\n" % " ".join(tofu_hosts)
    inner = "\n".join([
        "set -e",
        "umask 077",
        "node_root=%s" % node_root_shell(node_root),
        'home="${node_root%%/}$(getent passwd %s | cut -d: -f6)"' % shlex.quote(user),
        'test -n "$home"',
        'mkdir -p "$home/.ssh" && chmod 700 "$home/.ssh"',
        'printf %%s "$HPQ_SSH_PRIVATE_B64" | base64 -d > "$home/.ssh/%s"' % KEY_NAME,
        'printf %%s "$HPQ_SSH_PUBLIC_B64" | base64 -d > "$home/.ssh/%s.pub"' % KEY_NAME,
        'chmod 600 "$home/.ssh/%s" && chmod 644 "$home/.ssh/%s.pub"' % (KEY_NAME, KEY_NAME),
        'touch "$home/.ssh/authorized_keys" && chmod 600 "$home/.ssh/authorized_keys"',
        'grep -qxF %s "$home/.ssh/authorized_keys" || echo %s >> "$home/.ssh/authorized_keys"'
        % (shlex.quote(public.decode().strip()), shlex.quote(public.decode().strip())),
        'grep -qF "IdentityFile ~/.ssh/%s" "$home/.ssh/config" 2>/dev/null || printf %%s %s >> "$home/.ssh/config"'
        % (KEY_NAME, shlex.quote(config)),
        'chmod 600 "$home/.ssh/config"',
        'chown -R %s: "$home/.ssh"' % shlex.quote(user),
    ])
    return "\n".join([
        "#!/bin/sh",
        "HPQ_SSH_PRIVATE_B64=%s" % base64.b64encode(private).decode(),
        "HPQ_SSH_PUBLIC_B64=%s" % base64.b64encode(public).decode(),
        "export HPQ_SSH_PRIVATE_B64 HPQ_SSH_PUBLIC_B64",
        "srun --ntasks-per-node=1 --export=ALL /bin/sh -c %s" % shlex.quote(inner),
        "",
    ])


def distribute_over_slurm(ctx, user: str, private: bytes, public: bytes) -> str:
    """Queue the key job on exactly the workers (and, in a job of its own, the login nodes).

    Named nodes, not a node count: HyperPod may put login nodes in the default partition too (its ``dev``
    partition is ``Nodes=ALL`` in the legacy model), where ``--nodes=<workers>`` could land on a login node
    and leave a worker without the key. A login node outside every partition cannot run the job: then it
    gets the key only through a shared filesystem, and the step says so.
    """
    node = ctx.node
    marker = ctx.path(MARKER)
    if (files.read_text(marker) or "").strip() == public.decode().strip():
        return "already handed to the workers through Slurm"
    if node.worker_count < 1:
        return "no workers to hand the key to"
    script = slurm_job_script(user, private, public, ctx.s.slurm_node_root, cluster_hosts(node))
    workers = list(node.worker_nodes)
    job, error = submit_key_job(ctx, script, workers, node.worker_count)
    if job is None:
        raise SshKeyError("sbatch of the key distribution job failed: %s" % error)
    files.write_file(marker, public.decode().strip() + "\n", 0o600)
    how = "queued Slurm job %s to install it on %d worker(s)" % (job, node.worker_count)
    if node.login_nodes:
        login_job, error = submit_key_job(ctx, script, list(node.login_nodes), len(node.login_nodes),
                                          LOGIN_JOB_NAME)
        if login_job is None:
            ctx.log.warning("the login node(s) %s cannot run the key job (%s): they get the cluster key only "
                            "through a shared filesystem", ",".join(node.login_nodes), error)
            return Degraded(how + "; login node(s) %s not reached" % ",".join(node.login_nodes))
        how += "; job %s for the login node(s) %s" % (login_job, ",".join(node.login_nodes))
    return how


def submit_key_job(ctx, script: str, nodelist: List[str], count: int,
                   job_name: str = JOB_NAME) -> Tuple[Optional[str], str]:
    """sbatch the key job on ``nodelist`` (all of them; by count when no names are known): (job id, "") or
    (None, sbatch's message)."""
    where = ["--nodelist=%s" % ",".join(nodelist), "--nodes=%d" % len(nodelist)] if nodelist else [
        "--nodes=%d" % count]
    res = subprocess.run(
        [slurm._bin(ctx, "sbatch"), "--parsable", "--job-name=%s" % job_name, "--output=/dev/null"] + where,
        input=script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60,
        env=dict(os.environ, SLURM_CONF=os.environ.get("SLURM_CONF") or slurm.conf_path(ctx)))
    if res.returncode != 0:
        return None, res.stdout.strip()
    return res.stdout.strip(), ""


def cluster_hosts(node: identity.NodeInfo) -> List[str]:
    """The cluster's own names and addresses (ssh_config Host patterns)."""
    return [h for h in list(node.cluster_hostnames) + list(node.cluster_ips) if h]


def run(ctx) -> str:
    node = identity.load_node(ctx)
    user = ctx.s.default_user
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        ctx.log.warning("user %r does not exist on this node: no cluster SSH key installed", user)
        return Degraded("skipped (no user %s)" % user)
    home = ctx.path(pw.pw_dir)
    shared = fsx.shared_dir(ctx)
    if shared:
        private, public = shared_pair(ctx, shared, user, node.role)
        changed = install_pair(home, pw.pw_uid, pw.pw_gid, private, public)  # host keys: the CA vouches
        return "key pair from %s %s for %s" % (shared, "installed" if changed else "unchanged", user)
    if node.role != identity.CONTROLLER:
        return "no shared filesystem: the controller installs the key here through Slurm"
    ssh = os.path.join(home, ".ssh")
    priv_path = os.path.join(ssh, KEY_NAME)
    if os.path.exists(priv_path) and os.path.exists(priv_path + ".pub"):
        private, public = read_pair(priv_path)
    else:
        private, public = generate("%s@%s" % (user, node.cluster_name))
    changed = install_pair(home, pw.pw_uid, pw.pw_gid, private, public, cluster_hosts(node))
    how = distribute_over_slurm(ctx, user, private, public)
    result = "key pair %s for %s; %s" % ("installed" if changed else "unchanged", user, how)
    return Degraded(result) if isinstance(how, Degraded) else result
