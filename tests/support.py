"""Small helpers the tests share: free ports and readiness waits for local servers, hpq's CLI in-process."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from hpq.standins.http_server import serve


def serve_http(handler_cls: type, ssl_ctx: ssl.SSLContext | None = None) -> http.server.ThreadingHTTPServer:
    """A local HTTP(S) server on a free port of 127.0.0.1, serving ``handler_cls`` from a daemon thread (the
    stand-ins' one way to listen, hpq.standins.http_server; ``server.server_address[1]`` is the port,
    ``shutdown()`` stops it)."""
    return serve(handler_cls, "127.0.0.1", 0, ssl_ctx)


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that were free a moment ago (all bound at once, then released)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [int(s.getsockname()[1]) for s in socks]
    for s in socks:
        s.close()
    return ports


def free_port() -> int:
    return free_ports(1)[0]


def wait_until_ready(ready: Callable[[], bool], proc: subprocess.Popen, what: str, timeout: float = 30.0,
                     poll: float = 0.1) -> None:
    """Poll ``ready`` until it is true; fail fast, naming ``what``, if the process exits or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early with {proc.returncode}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(poll)
    raise RuntimeError(f"{what} did not answer within {timeout}s")


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``; always reaps it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """``hpq ARGS`` in this process through its real entry point: (exit code, stdout, stderr)."""
    import pytest

    from hpq.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


# The checkout, for a process that runs one of the test modules (``python -m tests.X``): the tests are not
# installed with hpq, so such a process gets ``PYTHONPATH=CHECKOUT`` (and nothing else does).
CHECKOUT = str(Path(__file__).resolve().parent.parent)


def module_command(module: str, *args: str) -> str:
    """A shell-free command line (ProxyCommand style) running ``python -m tests.MODULE ARGS``."""
    import shlex
    import sys

    return " ".join(["env", shlex.quote(f"PYTHONPATH={CHECKOUT}"), shlex.quote(sys.executable), "-m",
                     f"tests.{module}", *args])


def patch_aws_client(monkeypatch, replacement) -> None:  # type: ignore[no-untyped-def]
    """Replace ``hpq.aws.session.client`` everywhere it is used: in the session module and in every hpq module that
    imported the function by name (``from hpq.aws.session import client``), whenever it was imported, so a test's
    answer does not depend on which modules earlier tests happened to load."""
    import importlib
    import sys

    session = importlib.import_module("hpq.aws.session")
    original = session.client
    # Every command module (and the libraries they import) is loaded now, before the patch: one first loaded
    # while a patch is in place would keep that test's function after the test (monkeypatch restores only what
    # it set), and the next test's patch would miss it.
    commands = importlib.import_module("hpq.cli.main").COMMANDS
    for module_name, _, _ in commands.values():
        importlib.import_module(module_name)
    for name, module in list(sys.modules.items()):
        if name.startswith("hpq") and getattr(module, "client", None) is original:
            monkeypatch.setattr(module, "client", replacement)
