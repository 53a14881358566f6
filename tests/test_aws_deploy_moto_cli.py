"""`hpq deploy` run as a user would, as a subprocess, against a bare moto server over HTTP.

No monkeypatching: the command itself notices the moto endpoint and sends moto the moto rendition
(cli/aws/emulator.py) because moto's CloudFormation cannot create FSx/EKS/SageMaker::Cluster or
resolve nested outputs. moto is the stand-in for AWS here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import boto3
import pytest

from hpq.cli.aws import emulator as aws_emulator
from hpq.tests.fixtures_aws import aws_env, moto_server  # noqa: F401

pytestmark = pytest.mark.slow


def test_moto_endpoint_detection(aws_env):  # noqa: F811
    assert aws_emulator.endpoint_is_moto(aws_env)
    assert not aws_emulator.endpoint_is_moto("http://127.0.0.1:9")  # nothing listens on the discard port


def test_plain_deploy_against_moto_succeeds_and_prints_outputs(aws_env):  # noqa: F811
    boto3.client("s3").create_bucket(Bucket="hpq-cli-moto-deploy")
    res = subprocess.run([sys.executable, "-m", "hpq", "deploy", "slurm-gpu", "hpq-cli-moto-deploy",
                          "--stack-name", "cli-moto-demo", "--poll-seconds", "0.5"],
                         capture_output=True, text=True, timeout=240, env=dict(os.environ), stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "moto rendition" in res.stderr
    assert "stack cli-moto-demo: CREATE_COMPLETE" in res.stdout
    for output in ("ClusterName", "VpcId", "FsxFileSystemId", "LifecycleS3Uri"):
        assert output in res.stdout
    stack = boto3.client("cloudformation").describe_stacks(StackName="cli-moto-demo")["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    # Nested stacks were really created by moto from the uploaded templates.
    resources = boto3.client("cloudformation").list_stack_resources(StackName="cli-moto-demo")
    nested = [r for r in resources["StackResourceSummaries"] if r["ResourceType"] == "AWS::CloudFormation::Stack"]
    assert len(nested) >= 6 and all(r["ResourceStatus"] == "CREATE_COMPLETE" for r in nested)
