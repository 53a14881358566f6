"""A real OpenSSH sshd on 127.0.0.1 for ``hpq remote``, plus a ProxyCommand stand-in for SSM.

``sshd`` runs in the foreground (-D) from a temporary config with a temporary host key and a
temporary AuthorizedKeysFile holding a temporary user key; it is stopped by PID. The SSM
ProxyCommand (``aws ssm start-session ... AWS-StartSSHSession``) cannot run here, so the
stand-in is this module's byte relay, which does the same job: stdin/stdout <-> TCP to sshd.
Run as ``python -m tests.sshd HOST PORT``. The ``sshd`` fixture (tests/conftest.py) is ``start``.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import free_port, module_command, stop_process, wait_until_ready

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


@dataclass
class Sshd:
    host: str
    port: int
    user: str
    key: str
    known_hosts: str
    relay: str  # ProxyCommand with %h/%p placeholders

    def proxy_command(self) -> str:
        return self.relay.replace("%h", self.host).replace("%p", str(self.port))


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   stdout=subprocess.DEVNULL)


def _banner(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        return s.recv(4).startswith(b"SSH-")


def start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A running sshd on 127.0.0.1 and a free port, the relay as its ProxyCommand; stopped by PID after."""
    exe = next((p for p in SSHD_CANDIDATES if os.path.exists(p)), None) or shutil.which("sshd")
    if not exe or not shutil.which("ssh-keygen"):
        pytest.fail("OpenSSH server not installed (dev/test.sh installs openssh-server)")
    d = tmp_path_factory.mktemp("sshd")
    _keygen(d / "host_key")
    _keygen(d / "user_key")
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = free_port()
    user = getpass.getuser()
    (d / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host_key'}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password",
        f"AllowUsers {user}", "LogLevel ERROR", "",
    ]))
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory sshd requires
    log = open(d / "sshd.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([exe, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_until_ready(lambda: _banner(port), proc, "sshd", timeout=15.0, poll=0.05)
        relay = module_command("sshd", "%h", "%p")
        yield Sshd("127.0.0.1", port, user, str(d / "user_key"), str(d / "known_hosts"), relay)
    finally:
        stop_process(proc)
        log.close()


def relay(host: str, port: int) -> None:
    """stdin -> socket, socket -> stdout, until either side closes (what the SSM plugin does for SSH)."""
    sock = socket.create_connection((host, port))

    def upstream() -> None:
        fd = sys.stdin.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            sock.sendall(data)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.fileno()
    while True:
        data = sock.recv(65536)
        if not data:
            break
        os.write(out, data)


if __name__ == "__main__":
    relay(sys.argv[1], int(sys.argv[2]))
