"""moto in server mode over HTTP for the AWS-side tests.

``moto_server`` starts the real ``moto_server`` binary on 127.0.0.1 and a free port, waits until
it answers, and stops it by PID. ``aws_env`` points boto3 at it through AWS_ENDPOINT_URL with
dummy credentials and no config files, exactly as a user's environment would.

``moto_server_paging`` is the same server with one fix applied before it starts: moto 5.2's
ListClusterNodes builds its NextToken from a ``ClusterNode.arn`` attribute that does not exist,
so any cluster with more than one page of nodes answers HTTP 500. The fix makes moto build the
token from the instance id; the HTTP API and its pagination (MaxResults 100, NextToken) stay moto's.
Run as ``python -m hpq.tests.fixtures_aws -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto server did not answer within {timeout}s")


def _start(cmd: list[str], log_path: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(log_path, "wb")  # noqa: SIM115 - closed in _stop
    proc = subprocess.Popen(cmd + ["-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc._hpq_log = log  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    _wait_http(url, proc)
    return proc, url


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
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


# Resource types moto's CloudFormation only stubs (GetAtt -> HTTP 500) or cannot run (Lambda-backed
# custom resources need Docker). The moto transform swaps them for SSM parameters in a COPY.
MOTO_STUB_ONLY = ("AWS::FSx::", "AWS::SageMaker::Cluster", "AWS::EKS::", "Custom::", "AWS::Lambda::Function",
                  "AWS::APS::", "AWS::Grafana::")


def _is_stub_only(rtype: str) -> bool:
    return any(rtype == t or (t.endswith("::") and rtype.startswith(t)) for t in MOTO_STUB_ONLY)


def _replace_getatts(node, replaced: set[str], nested: set[str]):
    """GetAtt on a swapped resource or a nested stack's Outputs.X -> a literal placeholder."""
    if isinstance(node, dict):
        if set(node) == {"Fn::GetAtt"}:
            target = node["Fn::GetAtt"]
            logical, attr = (target if isinstance(target, list) else target.split(".", 1))
            if logical in replaced or logical in nested:
                return f"moto-{logical}-{attr}"
        return {k: _replace_getatts(v, replaced, nested) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_getatts(v, replaced, nested) for v in node]
    return node


def _expand_cidr(node, defaults: dict[str, str]):
    """moto has no Fn::Cidr: compute it here from the parameter's default (the root's 10.0.0.0/16)."""
    import ipaddress

    if isinstance(node, dict):
        if set(node) == {"Fn::Cidr"}:
            block, count, bits = node["Fn::Cidr"]
            if isinstance(block, dict) and "Ref" in block:
                block = defaults.get(block["Ref"], "10.0.0.0/16")
            net = ipaddress.ip_network(block)
            return [str(n) for n in list(net.subnets(new_prefix=net.max_prefixlen - int(bits)))[: int(count)]]
        return {k: _expand_cidr(v, defaults) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_cidr(v, defaults) for v in node]
    return node


def moto_compatible(variant: str, templates: dict) -> dict:
    """Test-only transform of a COPY of the synthesized templates for moto's CloudFormation gaps.

    Stub-only resource types become AWS::SSM::Parameter placeholders, and GetAtt on them or on a
    nested stack's outputs becomes a literal; Fn::Cidr (unknown to moto) is computed from the
    parameter default; conditional resources (the optional stacks, off by default) are left out
    because moto cannot update a stack that skipped them. Everything else (VPC, subnets, NAT, endpoints, SG
    rules, IAM, S3 bucket + policy, SNS, nested-stack wiring, parameters, conditions) is deployed
    by moto as written. The swapped types are covered elsewhere: cfn-lint on the real templates,
    SageMaker create_cluster directly against moto, handlers as Python.
    """
    out = {}
    for fname, tmpl in templates.items():
        resources = tmpl.get("Resources", {})
        replaced = {k for k, r in resources.items() if _is_stub_only(r["Type"])}
        nested = {k for k, r in resources.items() if r["Type"] == "AWS::CloudFormation::Stack"}
        defaults = {k: p["Default"] for k, p in tmpl.get("Parameters", {}).items() if "Default" in p}
        new = _expand_cidr(_replace_getatts(tmpl, replaced, nested), defaults)
        for logical in replaced:
            old = new["Resources"][logical]
            swapped = {"Type": "AWS::SSM::Parameter",
                       "Properties": {"Type": "String", "Value": f"stand-in for {old['Type']}",
                                      "Name": {"Fn::Sub": f"/moto-stand-in/${{AWS::StackName}}/{logical}"}}}
            for key in ("Condition", "DependsOn"):
                if key in old:
                    swapped[key] = old[key]
            new["Resources"][logical] = swapped
        # moto crashes updating a stack whose conditional (skipped) nested stack it never created, so
        # the optional stacks (Observability, Validation: off by default) are left out of the copy.
        for logical in [k for k, r in new["Resources"].items() if "Condition" in r]:
            del new["Resources"][logical]
        out[fname] = new
    return out


@pytest.fixture
def aws_env_paging(moto_server_paging: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    set_aws_env(monkeypatch, moto_server_paging, tmp_path)
    return moto_server_paging


def _patched_main() -> None:
    from moto.sagemaker import models

    models.PAGINATION_MODEL["list_cluster_nodes"]["unique_attribute"] = "instance_id"
    from moto.server import main

    main(sys.argv[1:])


if __name__ == "__main__":
    _patched_main()
