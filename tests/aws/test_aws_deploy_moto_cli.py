"""`hpq deploy` run as a user would, as a subprocess, against a bare moto server over HTTP.

No monkeypatching. The moto rendition (standins/rendition.py: moto's CloudFormation cannot create
FSx/EKS/SageMaker::Cluster or resolve nested outputs) is used only when asked for with
``--emulate moto``, and announced; a plain deploy against moto sends the real templates and only
says why moto is likely to fail them. moto is the stand-in for AWS here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest

from hpq.lifecycle import names
from hpq.standins import rendition

pytestmark = pytest.mark.slow


def hpq(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", *args], capture_output=True, text=True, timeout=240,
                          env=env or dict(os.environ), stdin=subprocess.DEVNULL)


def test_moto_endpoint_detection(aws_env):
    assert rendition.endpoint_is_moto(aws_env)
    assert not rendition.endpoint_is_moto("http://127.0.0.1:9")  # nothing listens on the discard port


def test_emulated_deploy_against_moto_succeeds_and_prints_outputs(aws_env):
    boto3.client("s3").create_bucket(Bucket="hpq-cli-moto-deploy")
    res = hpq("deploy", "slurm-gpu", "hpq-cli-moto-deploy", "--stack-name", "cli-moto-demo", "--poll-seconds", "0.5",
              "--emulate", "moto", "--no-quota-check", "--yes")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rendition.RENDITION_NOTE in res.stderr
    assert "stack cli-moto-demo: CREATE_COMPLETE" in res.stdout
    for output in ("ClusterName", "VpcId", "FsxFileSystemId", "LifecycleS3Uri"):
        assert output in res.stdout
    stack = boto3.client("cloudformation").describe_stacks(StackName="cli-moto-demo")["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    # Nested stacks were really created by moto from the uploaded templates.
    resources = boto3.client("cloudformation").list_stack_resources(StackName="cli-moto-demo")
    nested = [r for r in resources["StackResourceSummaries"] if r["ResourceType"] == "AWS::CloudFormation::Stack"]
    assert len(nested) >= 6 and all(r["ResourceStatus"] == "CREATE_COMPLETE" for r in nested)


def test_plain_deploy_against_moto_never_switches_to_the_rendition(aws_env):
    """Without --emulate the real templates go up (the old silent switch is gone); the note says why moto may fail."""
    boto3.client("s3").create_bucket(Bucket="hpq-cli-moto-plain")
    # --no-quota-check: this test is about which templates go up; the shared moto account holds the VPCs of the
    # tests before it, and the VPC quota's pre-flight would stop the deploy before the note (order-dependent).
    res = hpq("deploy", "slurm-gpu", "hpq-cli-moto-plain", "--stack-name", "cli-moto-plain", "--no-wait",
              "--output", "json", "--yes", "--no-quota-check")
    assert rendition.RENDITION_NOTE not in res.stderr
    assert "--emulate moto" in res.stderr and "answers as a moto server" in res.stderr
    version = json.loads(res.stdout)["version"] if res.returncode == 0 else None
    s3 = boto3.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="hpq-cli-moto-plain").get("Contents", [])]
    hp_key = next(k for k in keys if k.endswith("/templates/slurm-gpu/HyperPod.json"))
    assert version is None or version in hp_key
    body = json.loads(s3.get_object(Bucket="hpq-cli-moto-plain", Key=hp_key)["Body"].read())
    assert any(r["Type"] == "AWS::SageMaker::Cluster" for r in body["Resources"].values())  # the real template
    assert any(k.endswith("/node/" + names.ON_CREATE_SCRIPT) for k in keys)


def test_emulate_refuses_an_endpoint_that_is_not_moto(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x",
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=str(tmp_path / "none"))
    res = hpq("deploy", "slurm-gpu", "some-bucket", "--emulate", "moto", env=env)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "hpq: error: --emulate moto needs AWS_ENDPOINT_URL pointing at a running moto server "
        "(it deploys stand-ins that only make sense there)"]
