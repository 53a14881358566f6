"""Real Open MPI (Debian's openmpi-bin) and a real OpenSSH sshd playing the MPIJob's worker pods.

What an MPIJob worker is: a container whose image carries Open MPI under a prefix (AWS's images:
/opt/amazon/openmpi) and runs ``sshd -De``; the launcher's mpirun reaches it over ssh with the job's
key. sshd runs the remote command with sshd's own PATH, not the image's ENV PATH, so ``orted`` is
only found when mpirun passes its prefix along (absolute path or ``--prefix``).

The stand-in keeps exactly that property. Open MPI is "installed" under a prefix in a temporary tree
(its binaries copied to ``<prefix>/bin``; lib/share/etc linked to the system's, so a relocated orted
finds its components). The worker sshd runs in its own mount namespace in which /usr/bin shows
every program except Open MPI's, so a session there has sshd's default PATH and no orted on it,
like the worker pod. Two loopback addresses (127.0.0.2, 127.0.0.3) are the two workers: Open MPI
treats them as remote hosts and starts its daemons there with ssh. The launcher side resolves the
workers' service names (``<job>-worker-<i>.<job>.<ns>.svc``, mpi-operator's hostfile) through an
/etc/hosts bound in its own mount namespace, as the cluster DNS would in the pod. Needs root (mount namespace),
``unshare``, Open MPI and sshd; a machine without them fails the test with how to install them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port, stop_process, wait_until_ready

WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")

# Runs inside the worker's new mount namespace: hide Open MPI's programs from /usr/bin, then exec sshd.
_WORKER_NS = r"""
import os, subprocess, sys
real, mask, sshd, cfg = sys.argv[1:5]
def mount(*args):
    subprocess.run(["mount", *args], check=True)
mount("--make-rprivate", "/")
mount("--bind", "/usr/bin", real)
mount("-t", "tmpfs", "tmpfs", mask)
for name in os.listdir(real):
    if name in ("orted", "orterun") or name.startswith(("mpi", "ompi", "opal", "orte", "osh", "shmem")):
        continue
    os.symlink(os.path.join(real, name), os.path.join(mask, name))
mount("--bind", mask, "/usr/bin")
os.execv(sshd, [sshd, "-D", "-e", "-f", cfg])
"""


@dataclass
class MpiWorld:
    prefix: Path  # Open MPI's prefix in the "image" (bin/mpirun, bin/orted)
    hosts: tuple[str, ...]
    port: int
    key: str
    log: Path

    def worker_names(self, job: str, namespace: str = "default") -> list[str]:
        """The hostfile names mpi-operator gives the workers: <job>-worker-<i>.<job>.<namespace>.svc."""
        return [f"{job}-worker-{i}.{job}.{namespace}.svc" for i in range(len(self.hosts))]

    def launcher_command(self, cmd: list[str], job: str, tmp: Path) -> list[str]:
        """``cmd`` run the way the launcher pod would see the workers: in a mount namespace whose /etc/hosts
        resolves the workers' service names to the sshd addresses (the cluster DNS does it in a pod)."""
        hosts = tmp / "hosts"
        hosts.write_text("127.0.0.1 localhost\n" + "".join(
            f"{addr} {name}\n" for addr, name in zip(self.hosts, self.worker_names(job), strict=True)))
        return ["unshare", "-m", "/bin/sh", "-c", 'mount --make-rprivate / && mount --bind "$0" /etc/hosts && '
                'exec "$@"', str(hosts), *cmd]

    def rsh_args(self) -> str:
        """ssh options for Open MPI (OMPI_MCA_plm_rsh_args): the job's key and the workers' sshd port."""
        return (f"-p {self.port} -i {self.key} -o BatchMode=yes -o StrictHostKeyChecking=no "
                "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")


def _banner(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=1) as s:
        return s.recv(4).startswith(b"SSH-")


def _missing() -> list[str]:
    need = {"orterun": "openmpi-bin", "orted": "openmpi-bin", "unshare": "util-linux", "mount": "mount",
            "ssh": "openssh-client", "ssh-keygen": "openssh-client"}
    out = [f"{exe} ({pkg})" for exe, pkg in need.items() if not shutil.which(exe)]
    if not os.path.exists("/usr/sbin/sshd"):
        out.append("/usr/sbin/sshd (openssh-server)")
    return out


def start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MpiWorld]:
    """The two worker "pods" (sshd in a mount namespace without Open MPI on its PATH); stopped after."""
    missing = _missing()
    if missing or os.geteuid() != 0:
        pytest.fail("the MPI launch test needs root and " + (", ".join(missing) or "nothing else")
                    + " (dev/test.sh installs openmpi-bin and openssh-server)")
    d = tmp_path_factory.mktemp("mpi")
    prefix = d / "opt/amazon/openmpi"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("orterun"), prefix / "bin/mpirun")
    shutil.copy2(shutil.which("orted"), prefix / "bin/orted")
    for sub, target in (("lib", "/usr/lib"), ("share", "/usr/share"), ("etc", "/etc")):
        (prefix / sub).symlink_to(target)
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = free_port()
    (d / "sshd_config").write_text("\n".join(
        [f"Port {port}"] + [f"ListenAddress {h}" for h in WORKER_HOSTS] + [
            f"HostKey {d / 'host_key'}", f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", "LogLevel ERROR", ""]))
    for sub in ("realbin", "maskbin"):
        (d / sub).mkdir()
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log = d / "sshd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["unshare", "-m", sys.executable, "-c", _WORKER_NS, str(d / "realbin"),
                                 str(d / "maskbin"), "/usr/sbin/sshd", str(d / "sshd_config")],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_ready(lambda: all(_banner(h, port) for h in WORKER_HOSTS), proc, "worker sshd", timeout=30.0,
                         poll=0.1)
        yield MpiWorld(prefix, WORKER_HOSTS, port, str(d / "user_key"), log)
    finally:
        stop_process(proc)
