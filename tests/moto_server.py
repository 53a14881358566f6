"""moto in server mode over HTTP for the AWS-side tests (the fixtures of tests/conftest.py and tests/aws/conftest.py).

``moto_server`` starts the real ``moto_server`` binary on 127.0.0.1 and a free port, waits until
it answers, and stops it by PID. ``aws_env`` points boto3 at it through AWS_ENDPOINT_URL with
dummy credentials and no config files, exactly as a user's environment would.

``moto_server_paging`` is the same server with the fixes every moto of hpq's gets
(hpq.standins.moto: HyperPod's ListClusterNodes pagination, node ids and cluster ARNs of the real
shape, FSx's Lifecycle and MountName), run as ``python -m hpq.standins.moto -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support import free_port, stop_process, wait_until_ready


def _moto_answers(url: str) -> bool:
    with urllib.request.urlopen(url + "/moto-api/", timeout=1):
        return True


def _start(cmd: list[str], log_path: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(log_path, "wb")  # noqa: SIM115 - closed in _stop
    proc = subprocess.Popen(cmd + ["-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc._hpq_log = log  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(lambda: _moto_answers(url), proc, "moto server")
    except BaseException:
        _stop(proc)  # a server that never answered must not outlive the test session
        raise
    return proc, url


def _stop(proc: subprocess.Popen) -> None:
    stop_process(proc)
    proc._hpq_log.close()  # type: ignore[attr-defined]


def _moto_cmd() -> list[str]:
    exe = shutil.which("moto_server")
    if exe:
        return [exe]
    return [sys.executable, "-m", "moto.server"]


def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a plain ``moto_server`` (session-wide; tests use unique resource names)."""
    proc, url = _start(_moto_cmd(), str(tmp_path_factory.mktemp("moto") / "moto.log"))
    try:
        yield url
    finally:
        _stop(proc)


def moto_server_paging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of moto with the ListClusterNodes pagination fix (see module docstring)."""
    cmd = [sys.executable, "-m", "hpq.standins.moto"]
    proc, url = _start(cmd, str(tmp_path_factory.mktemp("moto-paging") / "moto.log"))
    try:
        yield url
    finally:
        _stop(proc)


def set_aws_env(monkeypatch: pytest.MonkeyPatch, url: str, tmp_path, region: str = "us-east-1") -> None:
    for var in list(os.environ):
        if var.startswith("AWS_") and var != "AWS_CA_BUNDLE":
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")

