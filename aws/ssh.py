"""Run one command over SSH through a ProxyCommand (SSM in production), streaming its output live.

paramiko speaks SSH over the ProxyCommand's stdin/stdout, so nothing listens locally and no
port is opened on the node: SSM's ``AWS-StartSSHSession`` document carries the bytes to the
node's sshd. The remote exit status becomes ours.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hpq import atomic
from hpq.errors import OperationFailed, UsageError

DEFAULT_USER = "ubuntu"
DEFAULT_KNOWN_HOSTS = "~/.ssh/hpq_known_hosts"


@dataclass
class SshTarget:
    host: str  # the name the host key is stored under (the SSM target)
    proxy_command: str | None
    user: str = DEFAULT_USER
    port: int = 22
    key_filename: str | None = None
    known_hosts: str | None = DEFAULT_KNOWN_HOSTS
    connect_timeout: float = 60.0
    via_ssm: bool = False  # the ProxyCommand is hpq's `aws ssm start-session` (failures then hint at the plugin)


def remote_command(args: Sequence[str], login: bool = True) -> str:
    """One argument is a shell string (like ssh); several are quoted word by word.

    ``login`` runs it under ``bash -l`` so /etc/profile.d puts the hpq node commands on PATH.
    """
    if not args:
        raise UsageError("no command given: hpq remote CLUSTER -- COMMAND...")
    cmd = args[0] if len(args) == 1 else shlex.join(args)
    return f"bash -lc {shlex.quote(cmd)}" if login else cmd


def _client(target: SshTarget) -> Any:
    import logging

    import paramiko

    # paramiko logs failures with tracebacks from its transport thread; hpq reports them as one line.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    client = paramiko.SSHClient()
    path = os.path.expanduser(target.known_hosts) if target.known_hosts else None
    if path:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        if atomic.check_target(Path(path)) is None:
            atomic.write_file(path, b"", mode=0o600)
        client.load_host_keys(path)

    class PinFirstKey(paramiko.MissingHostKeyPolicy):
        """paramiko's AutoAddPolicy, saving through hpq's atomic writer: its save_host_keys truncates the
        file in place and follows a symlink; this never leaves half a file and refuses a link (exit 2)."""

        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            keys = client.get_host_keys()
            keys.add(hostname, key.get_name(), key)
            if path:
                lines = [f"{host} {kind} {k.get_base64()}\n" for host, kinds in keys.items() for kind, k in kinds.items()]
                atomic.write_file(path, "".join(lines), mode=0o600)

    # The SSM tunnel authenticates the node through IAM; pin its key on first use, refuse if it changes.
    client.set_missing_host_key_policy(PinFirstKey())
    return client


def _proxy(command: str) -> Any:
    """Start the ProxyCommand; a missing program (no AWS CLI) or bad quoting is one line, not a traceback."""
    import select

    import paramiko

    class Proxy(paramiko.ProxyCommand):
        """paramiko's recv spins until the timeout once the command has exited (e.g. SSM said
        TargetNotConnected); returning what arrived, b"" at EOF, makes that fail at once like a socket."""

        def recv(self, size: int) -> bytes:
            ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
            if not ready:
                raise TimeoutError()
            return os.read(self.process.stdout.fileno(), size)

    try:
        return Proxy(command)
    except ValueError as exc:  # shlex: unbalanced quotes in --proxy-command
        raise UsageError(f"cannot parse ProxyCommand {command!r}: {exc}") from None
    except OSError as exc:
        program = command.split()[0] if command.split() else command
        hint = ": install the AWS CLI v2 and the Session Manager plugin" if program == "aws" else ""
        raise OperationFailed(f"cannot run ProxyCommand {program!r} ({exc.strerror or exc}){hint}") from None


def _proxy_error(sock: Any) -> str:
    """The last line the ProxyCommand wrote to stderr if it has exited (e.g. SSM's TargetNotConnected)."""
    proc = getattr(sock, "process", None)
    if proc is None or proc.poll() is None or proc.stderr is None:
        return ""
    fd = proc.stderr.fileno()
    os.set_blocking(fd, False)  # a child it started may still hold the pipe open: never wait for EOF
    try:
        data = os.read(fd, 65536)
    except OSError:
        data = b""
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return f"ProxyCommand exited {proc.returncode}: {lines[-1].strip()}" if lines else ""


def connect(target: SshTarget) -> Any:
    import paramiko

    if target.key_filename and not os.path.exists(os.path.expanduser(target.key_filename)):
        raise UsageError(f"SSH key {target.key_filename} not found")
    client = _client(target)
    sock = _proxy(target.proxy_command) if target.proxy_command else None
    try:
        client.connect(
            target.host, port=target.port, username=target.user, sock=sock,
            key_filename=os.path.expanduser(target.key_filename) if target.key_filename else None,
            allow_agent=True, look_for_keys=target.key_filename is None,
            timeout=target.connect_timeout, banner_timeout=target.connect_timeout,
            auth_timeout=target.connect_timeout,
        )
    except BaseException as exc:
        # Close the transport and stop the ProxyCommand (an `aws ssm start-session` process) on every failure.
        detail = _proxy_error(sock) if sock is not None else ""  # read before close() stops the process
        client.close()
        if sock is not None:
            with contextlib.suppress(OSError):  # the command may have exited and been reaped already
                sock.close()
        if isinstance(exc, paramiko.BadHostKeyException):
            raise OperationFailed(
                f"host key for {target.host} changed: remove its line from {target.known_hosts} if the node was replaced"
            ) from None
        if isinstance(exc, paramiko.PasswordRequiredException):
            raise OperationFailed(
                f"SSH key {target.key_filename or ''} is encrypted: add it to ssh-agent (`ssh-add KEY`) and retry"
            ) from None
        if isinstance(exc, paramiko.AuthenticationException):
            raise OperationFailed(
                f"SSH authentication as {target.user} failed: pass --key PATH or add the key to ssh-agent; "
                "the public key must be in ~/.ssh/authorized_keys on the node"
            ) from None
        if isinstance(exc, paramiko.SSHException | OSError | EOFError):
            hint = (" (is the SSM session manager plugin installed?)" if target.via_ssm
                    else f" (the ProxyCommand gave no SSH banner within {target.connect_timeout:g} s)"
                    if target.proxy_command and not detail else "")
            raise OperationFailed(f"SSH to {target.host} failed: {detail or (str(exc) or type(exc).__name__) + hint}"
                                  ) from None
        raise
    return client


def run(target: SshTarget, command: str, stdout: IO[bytes] | None = None, stderr: IO[bytes] | None = None,
        on_stdout: Callable[[bytes], None] | None = None) -> int:
    """Run ``command``, copy its output as it arrives, return its exit status (255 if none came)."""
    out = stdout or sys.stdout.buffer
    err = stderr or sys.stderr.buffer
    client = connect(target)
    try:
        transport = client.get_transport()
        transport.set_keepalive(30)
        chan = transport.open_session()
        chan.exec_command(command)
        chan.shutdown_write()  # no stdin: a command that reads it gets EOF instead of hanging
        try:
            while True:
                busy = False
                if chan.recv_ready():
                    data = chan.recv(32768)
                    out.write(data)
                    out.flush()
                    if on_stdout:
                        on_stdout(data)
                    busy = True
                if chan.recv_stderr_ready():
                    err.write(chan.recv_stderr(32768))
                    err.flush()
                    busy = True
                if not busy:
                    if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    if chan.closed and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    time.sleep(0.02)
        except KeyboardInterrupt:
            chan.close()
            raise
        status = chan.recv_exit_status()
        return 255 if status < 0 else status
    finally:
        client.close()
