"""moto in server mode over HTTP for the AWS-side tests.

``moto_server`` starts the real ``moto_server`` binary on 127.0.0.1 and a free port, waits until
it answers, and stops it by PID. ``aws_env`` points boto3 at it through AWS_ENDPOINT_URL with
dummy credentials and no config files, exactly as a user's environment would.

``moto_server_paging`` is the same server with two fixes applied before it starts: moto 5.2's
ListClusterNodes builds its NextToken from a ``ClusterNode.arn`` attribute that does not exist,
so any cluster with more than one page of nodes answers HTTP 500. The fix makes moto build the
token from the instance id; the HTTP API and its pagination (MaxResults 100, NextToken) stay moto's.
And moto names HyperPod nodes ``<group>-<n>``, which the real API never returns and refuses as a
NodeId (sagemaker ``ClusterNodeId``: ``i-[a-f0-9]{8}(?:[a-f0-9]{9})?`` in botocore's service model):
the fix gives each node a real-looking instance id (``i-`` and 17 hex digits, stable per cluster/node).
Likewise a real cluster ARN ends in a 12-character cluster id (sagemaker ``ClusterArn``:
``...:cluster/[a-z0-9]{12}``), which SSM targets use, where moto puts the name: the fix gives each
cluster such an id and resolves ARNs by it.
Run as ``python -m hpq.tests.fixtures_aws -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest

# The moto rendition lives in the library (hpq deploy --emulate moto, hpq rehearse).
from hpq.aws.emulator import moto_compatible  # noqa: F401
from hpq.tests.support import free_port, stop_process, wait_until_ready


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


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a plain ``moto_server`` (session-wide; tests use unique resource names)."""
    proc, url = _start(_moto_cmd(), str(tmp_path_factory.mktemp("moto") / "moto.log"))
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def moto_server_paging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of moto with the ListClusterNodes pagination fix (see module docstring)."""
    cmd = [sys.executable, "-m", "hpq.tests.fixtures_aws"]
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


@pytest.fixture
def aws_env(moto_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    set_aws_env(monkeypatch, moto_server, tmp_path)
    return moto_server


@pytest.fixture
def aws_env_paging(moto_server_paging: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    set_aws_env(monkeypatch, moto_server_paging, tmp_path)
    return moto_server_paging


def _real_instance_ids(create_cluster):  # type: ignore[no-untyped-def]
    """Wrap moto's create_cluster so its nodes carry instance ids of the real shape."""
    import functools
    import hashlib

    @functools.wraps(create_cluster)
    def wrapper(self, cluster_name, *args, **kwargs):  # type: ignore[no-untyped-def]
        create_cluster(self, cluster_name, *args, **kwargs)
        cluster = self.clusters[cluster_name]
        cluster_id = hashlib.sha256(cluster_name.encode()).hexdigest()[:12]
        cluster.arn = cluster.arn.rsplit("/", 1)[0] + "/" + cluster_id
        arn = cluster.arn
        renamed = {}
        for old_id, node in cluster.nodes.items():
            node.instance_id = "i-" + hashlib.sha256(f"{cluster_name}/{old_id}".encode()).hexdigest()[:17]
            renamed[node.instance_id] = node
        cluster.nodes = renamed
        return arn

    return wrapper


def _by_real_arn(method):  # type: ignore[no-untyped-def]
    """Wrap a moto method whose first argument is ClusterName (a name or an ARN) to resolve ARNs by id."""
    import functools

    @functools.wraps(method)
    def wrapper(self, cluster_name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if cluster_name.startswith("arn:"):
            named = [c.cluster_name for c in self.clusters.values() if c.arn == cluster_name]
            cluster_name = named[0] if named else cluster_name.rsplit("/", 1)[-1]
        return method(self, cluster_name, *args, **kwargs)

    return wrapper


def _patched_main() -> None:
    from moto.sagemaker import models

    models.PAGINATION_MODEL["list_cluster_nodes"]["unique_attribute"] = "instance_id"
    backend = models.SageMakerModelBackend
    backend.create_cluster = _real_instance_ids(backend.create_cluster)
    for name in ("describe_cluster", "delete_cluster", "describe_cluster_node", "list_cluster_nodes"):
        setattr(backend, name, _by_real_arn(getattr(backend, name)))
    from moto.server import main

    main(sys.argv[1:])


if __name__ == "__main__":
    _patched_main()
