"""A replaced node keeps being trusted: host certificates from the cluster host CA, with real sshd and ssh.

Real: OpenSSH's sshd (started and reloaded through the lifecycle's ``direct`` service manager from a
unit file, as systemd would), ssh and ssh-keygen; every node on its own loopback address with its own
root, host key and ssh configuration. Stand-in: /fsx is a shared directory (listed as a Lustre mount with
an IP NID in each node's mount table, tests/node_samples.py). The clients run with the configuration the
lifecycle wrote (``ssh -F <node>/etc/ssh/ssh_config``), ``StrictHostKeyChecking yes`` and an empty user
known_hosts: only the CA can make a host trusted.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from hpq.lifecycle import host_certs, identity
from hpq.lifecycle.context import Degraded
from tests import node_samples
from tests.slurm_cluster import make_context
from tests.support import free_port

pytestmark = pytest.mark.slow

CLUSTER_IPS = {"controller": "127.0.0.2", "worker": "127.0.0.3"}
NAMES = {"controller": "controller-machine-1", "worker": "worker-group-1-1"}
SSHD = "/usr/sbin/sshd"


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   stdout=subprocess.DEVNULL)


def make_node(base: Path, name: str, role: str, ip: str, port: int, shared: Path, auth: Path):
    """A node root: host key, Debian-shaped sshd_config/ssh_config (Include of the .d directories), an ssh
    unit, /fsx in the mount table. Returns its lifecycle context with node info set."""
    root = base / name
    ssh = root / "etc/ssh"
    (ssh / "sshd_config.d").mkdir(parents=True)
    (ssh / "ssh_config.d").mkdir()
    keygen(ssh / "ssh_host_ed25519_key")
    (ssh / "sshd_config").write_text("\n".join([
        f"Include {ssh}/sshd_config.d/*.conf", f"Port {port}", f"ListenAddress {ip}",
        f"HostKey {ssh}/ssh_host_ed25519_key", "PidFile none", f"AuthorizedKeysFile {auth}",
        "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "PermitRootLogin prohibit-password", "LogLevel ERROR", ""]))
    (ssh / "ssh_config").write_text(f"Include {ssh}/ssh_config.d/*.conf\n\nHost *\n    SendEnv LANG LC_*\n")
    (root / "lib/systemd/system").mkdir(parents=True)
    (root / "lib/systemd/system/ssh.service").write_text(
        "[Unit]\nDescription=OpenSSH server (test unit: this node's config)\n[Service]\n"
        f"ExecStart={SSHD} -D -e -f {ssh}/sshd_config\nExecReload=/bin/kill -HUP $MAINPID\nType=notify\n")
    (root / "proc").mkdir()
    (root / "proc/mounts").write_text(node_samples.BASE_MOUNTS + node_samples.lustre_mount_line(f"{root}/fsx") + "\n")
    os.symlink(shared, root / "fsx")
    ctx = make_context(root)
    iid = "i-0%016x" % (abs(hash(name)) % (1 << 60))
    ctx.node = identity.NodeInfo(
        node_samples.CLUSTER, iid, NAMES[role], NAMES[role].rsplit("-", 1)[0], role, ip, "ml.m5.xlarge",
        [CLUSTER_IPS["controller"]], slurm_node_name="ip-" + ip.replace(".", "-"),
        cluster_ips=sorted(CLUSTER_IPS.values()))
    return ctx


def listening(ip: str, port: int, timeout: float = 10.0) -> None:
    """Wait until sshd answers on ip:port (it re-executes itself on a reload)."""
    deadline = time.time() + timeout
    while True:
        try:
            with socket.create_connection((ip, port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.time() >= deadline:
            raise AssertionError(f"no sshd on {ip}:{port} after {timeout}s")
        time.sleep(0.05)


def ssh(ctx, ip: str, port: int, user_key: Path, known: Path, *opts: str) -> subprocess.CompletedProcess:
    """ssh with the node's client configuration; a refused connection (sshd re-executing itself after the
    reload the lifecycle asked for) is tried again, anything else is the answer."""
    deadline = time.time() + 10
    while True:
        listening(ip, port)
        res = subprocess.run(
            ["ssh", "-F", ctx.path("/etc/ssh/ssh_config"), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={known}", "-o", "IdentitiesOnly=yes", "-i", str(user_key), "-p", str(port),
             *opts, f"root@{ip}", "echo", "reached"], capture_output=True, text=True, timeout=30)
        if "Connection refused" not in res.stderr or time.time() >= deadline:
            return res
        time.sleep(0.1)


@pytest.fixture
def cluster(tmp_path):
    if os.geteuid() != 0 or not os.path.exists(SSHD):
        pytest.fail("needs root and OpenSSH's sshd (dev/test.sh installs openssh-server)")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    shared = tmp_path / "shared"
    shared.mkdir()
    keygen(tmp_path / "user_key")
    auth = tmp_path / "authorized_keys"
    shutil.copy(tmp_path / "user_key.pub", auth)
    port = free_port()
    started = []

    def node(name: str, role: str):
        ctx = make_node(tmp_path, name, role, CLUSTER_IPS[role], port, shared, auth)
        started.append(ctx)
        return ctx

    known = tmp_path / "user_known_hosts"
    known.write_text("")
    yield node, port, tmp_path / "user_key", known, shared
    for ctx in started:
        ctx.services.stop("ssh.service")


@pytest.mark.daemons
@pytest.mark.root
def test_replaced_node_is_trusted_through_the_cluster_ca(cluster):
    node, port, user_key, known, shared = cluster
    ctl = node("controller", "controller")
    wrk = node("worker", "worker")
    wrk.services.ensure_running("ssh.service")  # sshd runs before the lifecycle, as on a node
    # Before any certificate, the worker's key is unknown: strict checking refuses it.
    res = ssh(ctl, CLUSTER_IPS["worker"], port, user_key, known)
    assert res.returncode == 255 and "Host key verification failed" in res.stderr, res.stderr
    first = host_certs.run(ctl)
    assert first.startswith("created the CA") and "sshd not found" not in first
    result = host_certs.run(wrk)
    assert result.startswith("used the CA; 1 of 1 host key(s) signed for 127.0.0.3,ip-127-0-0-3,worker-group-1-1")
    assert result.endswith("sshd reloaded")
    res = ssh(ctl, CLUSTER_IPS["worker"], port, user_key, known)
    assert res.returncode == 0 and res.stdout.strip() == "reached", res.stderr
    res = ssh(ctl, CLUSTER_IPS["worker"], port, user_key, known, "-o", "HostKeyAlias=ip-127-0-0-3")
    assert res.returncode == 0, res.stderr  # the Slurm node name is a principal too
    assert known.read_text() == ""  # nothing learned: the CA vouched
    ca = shared / host_certs.CA_DIR
    assert (ca / "private").stat().st_mode & 0o777 == 0o700 and (ca / "private/ca").stat().st_mode & 0o777 == 0o600
    assert (ca / "known_hosts").stat().st_mode & 0o777 == 0o644 and (ca.stat().st_mode & 0o755) == 0o755

    # Second run on the same node: nothing re-signed, nothing rewritten, sshd left alone.
    cert = Path(wrk.path("/etc/ssh/ssh_host_ed25519_key-cert.pub"))
    mtime = cert.stat().st_mtime_ns
    again = host_certs.run(wrk)
    assert "0 of 1 host key(s) signed" in again and again.endswith("sshd unchanged")
    assert "known_hosts unchanged" in again and cert.stat().st_mtime_ns == mtime

    # Replacement: same name and address, a fresh root and new host key; the lifecycle runs again there.
    wrk.services.stop("ssh.service")
    new = node("worker-replaced", "worker")
    new.services.ensure_running("ssh.service")
    res = ssh(ctl, CLUSTER_IPS["worker"], port, user_key, known)  # new key, no certificate yet
    assert res.returncode == 255 and "Host key verification failed" in res.stderr, res.stderr
    assert "1 of 1 host key(s) signed" in host_certs.run(new)
    res = ssh(ctl, CLUSTER_IPS["worker"], port, user_key, known)
    assert res.returncode == 0 and res.stdout.strip() == "reached", res.stderr
    lines = (shared / host_certs.CA_DIR / "known_hosts").read_text().splitlines()
    assert len(lines) == 2 and all(line.startswith("@cert-authority 127.0.0.") for line in lines)
    new.services.stop("ssh.service")


@pytest.mark.daemons
@pytest.mark.root
def test_hosts_outside_the_cluster_and_impostors_are_still_checked(cluster, tmp_path):
    node, port, user_key, known, _ = cluster
    ctl = node("controller", "controller")
    host_certs.run(ctl)
    client_config = Path(ctl.path(host_certs.SSH_DROPIN)).read_text()
    assert "StrictHostKeyChecking" not in client_config and "GlobalKnownHostsFile" in client_config
    # An impostor at a cluster address with a key the CA never signed.
    imp = node("impostor", "worker")
    imp.services.ensure_running("ssh.service")
    res = ssh(ctl, CLUSTER_IPS["worker"], port, user_key, known)
    assert res.returncode == 255 and "Host key verification failed" in res.stderr
    imp.services.stop("ssh.service")
    # A host outside the cluster, signed by the same CA: the CA is not trusted for its address.
    outside = node("outside", "worker")
    (Path(outside.path("/etc/ssh/sshd_config"))).write_text(
        Path(outside.path("/etc/ssh/sshd_config")).read_text().replace("ListenAddress 127.0.0.3",
                                                                       "ListenAddress 127.0.0.9"))
    outside.node.ip, outside.node.slurm_node_name = "127.0.0.9", "ip-127-0-0-9"
    outside.services.ensure_running("ssh.service")
    host_certs.run(outside)  # signs it (it can reach the CA) and lists its own names
    lines = (tmp_path / "shared" / host_certs.CA_DIR / "known_hosts").read_text()
    (tmp_path / "shared" / host_certs.CA_DIR / "known_hosts").write_text(
        "\n".join(line for line in lines.splitlines() if not line.split()[1].startswith("127.0.0.9")) + "\n")
    res = ssh(ctl, "127.0.0.9", port, user_key, known)
    assert res.returncode == 255 and "Host key verification failed" in res.stderr
    outside.services.stop("ssh.service")


def test_without_shared_filesystem_nothing_changes(tmp_path):
    ctx = make_context(tmp_path / "node")
    ctx.node = identity.NodeInfo("c", "i-1", "n", "g", "worker", "10.0.0.2", "ml.m5.xlarge", ["10.0.0.1"])
    result = host_certs.run(ctx)
    assert result == "skipped (no shared filesystem for the host CA)" and isinstance(result, Degraded)
    assert not (tmp_path / "node/etc").exists()


def test_ssh_config_without_include_gets_a_block_at_the_top(tmp_path):
    ctx = make_context(tmp_path / "node")
    cfg = Path(ctx.path("/etc/ssh/ssh_config"))
    cfg.parent.mkdir(parents=True)
    cfg.write_text("Host *\n    ForwardAgent no\n")
    assert host_certs.configure(ctx, host_certs.SSH_CONFIG, host_certs.SSH_DROPIN, ["GlobalKnownHostsFile x"],
                                "cluster-ca")
    text = cfg.read_text()
    assert text.index("GlobalKnownHostsFile x") < text.index("Host *")  # global: before any Host block
    assert not host_certs.configure(ctx, host_certs.SSH_CONFIG, host_certs.SSH_DROPIN, ["GlobalKnownHostsFile x"],
                                    "cluster-ca")
