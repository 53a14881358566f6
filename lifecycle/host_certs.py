"""SSH host certificates from a cluster host CA, so ssh and mpirun keep working across node replacements.

A replaced HyperPod node comes back under the same name and address with new host keys
(awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/hyperpod-mental-model.md,
"Identity stability across reboot vs. replace": same Slurm NodeName and usually the same IP, root volume
new). A client that learned the old key refuses the new one. AWS's reference answers by switching host-key
checks off for cluster hosts (LifecycleScripts/base-config/utils/ssh-to-compute.sh:
``StrictHostKeyChecking no``, ``UserKnownHostsFile /dev/null``). Instead:

- one cluster host CA lives on the shared filesystem, ``/fsx/.hpq/ssh-ca/`` (private key root-only under
  ``private/``); the first node to get there creates it, all-or-nothing by renaming a complete directory;
- every node signs its own host keys with it at lifecycle time (``ssh-keygen -s ca -h``), with its names
  as principals (customer IP, ``ip-a-b-c-d`` Slurm NodeName, InstanceName, host name), and points sshd at
  the certificates (``HostCertificate`` in ``sshd_config.d``), reloading a running sshd;
- every node records ``@cert-authority <its names> <CA key>`` in the shared ``known_hosts`` there (one
  line per node address, replaced, under a lock), which ``GlobalKnownHostsFile`` in ``ssh_config.d`` adds
  to the system list. Clients therefore trust the CA for the cluster's own names and addresses only,
  including nodes added later; every other host is checked exactly as before.
Without a shared filesystem there is no place for the CA: the step says so and changes nothing.

Paths written into sshd/ssh configuration are the node's paths resolved under HPQ_ROOT (identical on a
node), so the daemons this host runs read the files this step wrote.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
from typing import List, Optional, Tuple

from . import files, fsx, identity
from .context import Degraded
from .resource_config import slurm_node_name

CA_DIR = ".hpq/ssh-ca"
KNOWN_HOSTS = "known_hosts"
KEY_TYPES = ("ed25519", "ecdsa", "rsa")
SSHD_DROPIN = "/etc/ssh/sshd_config.d/hpq-host-certificates.conf"
SSH_DROPIN = "/etc/ssh/ssh_config.d/hpq-cluster-ca.conf"
SSHD_CONFIG = "/etc/ssh/sshd_config"
SSH_CONFIG = "/etc/ssh/ssh_config"
SSHD_UNITS = ("ssh.service", "sshd.service")  # Ubuntu's name, then Amazon Linux's
HEADER = "# Written by the hpq lifecycle (step host-certs); replaced on every run.\n"


class HostCertError(Exception):
    pass


def _run(argv: List[str]) -> str:
    try:
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostCertError("%s: %s" % (argv[0], exc)) from None
    if res.returncode != 0:
        raise HostCertError("%s failed (%d): %s" % (" ".join(argv[:3]), res.returncode, res.stdout.strip()[-300:]))
    return res.stdout


def fingerprint(pub_path: str) -> str:
    """SHA256:... of a public key or certificate file (``ssh-keygen -l``)."""
    return _run(["ssh-keygen", "-l", "-f", pub_path]).split()[1]


def principals(node: identity.NodeInfo) -> List[str]:
    """This node's names as other cluster nodes write them; also the known_hosts patterns."""
    out: List[str] = []
    for name in (node.ip, node.slurm_node_name or slurm_node_name(node.ip), node.instance_name,
                 socket.gethostname(), socket.getfqdn()):
        if name and name not in out and not any(c in name for c in ",*?! \t") and name != "localhost":
            out.append(name)
    return out


def ensure_ca(shared: str, cluster: str) -> Tuple[str, str, bool]:
    """(CA private key path, CA public key line, created by this call)."""
    d = os.path.join(shared, CA_DIR)
    parent = os.path.dirname(d)
    os.makedirs(parent, exist_ok=True)
    if os.stat(parent).st_mode & 0o755 != 0o755:  # every user's ssh reads known_hosts below it
        os.chmod(parent, os.stat(parent).st_mode | 0o755)
    if not os.path.exists(os.path.join(d, "ca.pub")):
        tmp = tempfile.mkdtemp(prefix=".ssh-ca-", dir=parent)
        try:
            os.chmod(tmp, 0o755)
            os.mkdir(os.path.join(tmp, "private"), 0o700)
            key = os.path.join(tmp, "private", "ca")
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hpq host CA of cluster %s" % cluster,
                  "-f", key])
            os.rename(key + ".pub", os.path.join(tmp, "ca.pub"))
            os.chmod(os.path.join(tmp, "ca.pub"), 0o644)
            files.write_file(os.path.join(tmp, KNOWN_HOSTS), "", 0o644)
            os.rename(tmp, d)  # a complete CA appears at once; a node that lost the race uses the winner's
            created = True
        except OSError:
            created = False
        finally:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp)
        if not created and not os.path.exists(os.path.join(d, "ca.pub")):
            raise HostCertError("could not create the cluster host CA at %s" % d)
    else:
        created = False
    with open(os.path.join(d, "ca.pub")) as fh:
        return os.path.join(d, "private", "ca"), fh.read().strip(), created


def cert_matches(cert: str, key_pub: str, ca_pub: str, names: List[str]) -> bool:
    """The certificate at ``cert`` is a host certificate of ``key_pub``, by the CA, for exactly ``names``."""
    if not os.path.exists(cert):
        return False
    try:
        text = _run(["ssh-keygen", "-L", "-f", cert])
    except HostCertError:
        return False
    lines = [line.strip() for line in text.splitlines()]
    want_key, want_ca = fingerprint(key_pub), fingerprint(ca_pub)
    got: List[str] = []
    in_principals = False
    ok_type = ok_key = ok_ca = False
    for line in lines:
        if line.startswith("Type:"):
            ok_type = line.endswith("host certificate")
        elif line.startswith("Public key:"):
            ok_key = line.split()[-1] == want_key
        elif line.startswith("Signing CA:"):
            ok_ca = want_ca in line.split()
        if line.startswith("Principals:"):
            in_principals = True
            continue
        if in_principals:
            if line.endswith(":") or line.startswith(("Critical Options", "Extensions")):
                in_principals = False
            elif line:
                got.append(line)
    return ok_type and ok_key and ok_ca and sorted(got) == sorted(names)


def sign(ca_key: str, key_pub: str, key_id: str, names: List[str]) -> bytes:
    """The host certificate of ``key_pub`` (signed in a scratch directory; nothing written next to the key)."""
    tmp = tempfile.mkdtemp(prefix="hpq-hostcert-")
    try:
        pub = os.path.join(tmp, "host.pub")
        shutil.copyfile(key_pub, pub)
        _run(["ssh-keygen", "-q", "-s", ca_key, "-h", "-I", key_id, "-n", ",".join(names), pub])
        with open(os.path.join(tmp, "host-cert.pub"), "rb") as fh:
            return fh.read()
    finally:
        shutil.rmtree(tmp)


def _includes(config_path: str, dirs: List[str]) -> bool:
    """Whether the config has an ``Include`` of a file pattern inside one of ``dirs`` (relative patterns are
    relative to /etc/ssh, as ssh_config(5) and sshd_config(5) say)."""
    for line in (files.read_text(config_path) or "").splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0].lower() != "include":
            continue
        for pattern in parts[1:]:
            full = pattern if pattern.startswith("/") else "/etc/ssh/" + pattern
            if any(full.startswith(d.rstrip("/") + "/") for d in dirs):
                return True
    return False


def configure(ctx, path_node: str, dropin_node: str, lines: List[str], block: str) -> bool:
    """Write ``lines`` as a drop-in when the main config includes its directory, else as a top block."""
    main, dropin = ctx.path(path_node), ctx.path(dropin_node)
    for line in lines:
        files.check_line(line, "ssh configuration line")
    if _includes(main, [os.path.dirname(dropin), os.path.dirname(dropin_node)]):
        return files.write_file(dropin, HEADER + "\n".join(lines) + "\n", 0o644)
    return files.set_block(main, block, lines, at_top=True)  # global options come before any Host/Match


def record_names(known_hosts: str, node_ip: str, line: str) -> bool:
    """Put this node's ``@cert-authority`` line into the shared known_hosts, replacing the line of the same
    address (a replaced node keeps its address), under a lock; the file is replaced, never rewritten in place."""
    files.check_line(line, "known_hosts line")
    with open(known_hosts + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = []
        for existing in (files.read_text(known_hosts) or "").splitlines():
            parts = existing.split()
            if len(parts) > 1 and parts[0] == "@cert-authority" and parts[1].split(",")[0] == node_ip:
                continue
            if existing.strip():
                kept.append(existing)
        return files.write_file(known_hosts, "\n".join(sorted(kept + [line])) + "\n", 0o644)


def sshd_unit(ctx) -> Optional[str]:
    mgr = ctx.services
    return next((u for u in SSHD_UNITS if mgr.unit_path(u) or mgr.is_active(u)), None)


def run(ctx) -> str:
    node = identity.load_node(ctx)
    shared = fsx.shared_dir(ctx)
    if not shared:
        ctx.log.warning("no shared filesystem: no cluster host CA; a replaced node's new host key will not be "
                        "trusted by clients that knew the old one")
        return Degraded("skipped (no shared filesystem for the host CA)")
    keys = [ctx.path("/etc/ssh/ssh_host_%s_key" % t) for t in KEY_TYPES]
    keys = [k for k in keys if os.path.exists(k) and os.path.exists(k + ".pub")]
    if not keys:
        ctx.log.warning("no SSH host keys under %s: nothing to certify", ctx.path("/etc/ssh"))
        return Degraded("skipped (no host keys)")
    ca_key, ca_line, created = ensure_ca(shared, node.cluster_name or "?")
    ca_pub = os.path.join(shared, CA_DIR, "ca.pub")
    names = principals(node)
    key_id = "hpq %s %s %s" % (node.cluster_name or "?", node.slurm_node_name or node.instance_name, node.instance_id)
    signed = 0
    for key in keys:
        cert = key + "-cert.pub"
        if not cert_matches(cert, key + ".pub", ca_pub, names):
            files.write_file(cert, sign(ca_key, key + ".pub", key_id, names), 0o644)
            signed += 1
    changed = configure(ctx, SSHD_CONFIG, SSHD_DROPIN, ["HostCertificate %s-cert.pub" % k for k in keys],
                        "host-certificates")
    known_hosts = os.path.join(shared, CA_DIR, KNOWN_HOSTS)
    changed_client = configure(ctx, SSH_CONFIG, SSH_DROPIN, ["GlobalKnownHostsFile %s %s %s" % (
        ctx.path("/etc/ssh/ssh_known_hosts"), ctx.path("/etc/ssh/ssh_known_hosts2"), known_hosts)], "cluster-ca")
    recorded = record_names(known_hosts, names[0], "@cert-authority %s %s" % (",".join(names), ca_line))
    reload = "sshd unchanged"
    if signed or changed:
        unit = sshd_unit(ctx)
        reload = "sshd %s" % (ctx.services.reload_config(unit) if unit else "not found (no ssh/sshd unit)")
    return "%s CA; %d of %d host key(s) signed for %s; sshd config %s, client config %s, known_hosts %s; %s" % (
        "created the" if created else "used the", signed, len(keys), ",".join(names),
        "written" if changed else "unchanged", "written" if changed_client else "unchanged",
        "updated" if recorded else "unchanged", reload)
