"""Operations paths the other AWS tests do not reach: refused updates, --no-wait, status --follow,
partial DeleteObjects failures, hpq remote's default SSM tunnel and a changed host key.

Real: moto over HTTP for CloudFormation/S3/SageMaker, OpenSSH sshd for SSH. Stand-ins, said per
test: botocore's Stubber where moto cannot produce the answer (a stack stuck mid-operation,
DeleteObjects' per-key Errors), and an ``aws`` executable on PATH in place of the AWS CLI's
``ssm start-session`` (moto has no Session Manager): it checks its arguments are exactly the
SSM-for-SSH invocation, then relays bytes to the local sshd as the Session Manager plugin would.
"""

from __future__ import annotations

import json
import os
import shlex
import stat

import boto3
import pytest
from botocore.stub import Stubber

from hpq.aws import s3 as aws_s3
from hpq.aws import session as aws_session
from hpq.aws import stacks
from hpq.cli.main import main
from hpq.errors import OperationFailed
from hpq.lifecycle import names
from tests.support import module_command, patch_aws_client, run_cli

REGION = "us-east-1"


def _no_calls_cfn():
    """A CloudFormation client that fails the test on any call (a Stubber with nothing queued)."""
    cfn = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(cfn)
    stub.activate()
    return cfn, stub


@pytest.mark.parametrize(("status", "needle"), [
    ("ROLLBACK_COMPLETE", "cannot be updated"), ("ROLLBACK_FAILED", "cannot be updated"),
    ("CREATE_IN_PROGRESS", "wait for it"), ("UPDATE_IN_PROGRESS", "wait for it"),
    ("UPDATE_ROLLBACK_IN_PROGRESS", "wait for it"), ("DELETE_IN_PROGRESS", "wait for it"),
])
def test_update_is_refused_before_any_call(status, needle):
    """A stack whose creation failed cannot be updated (CloudFormation answers ValidationError); one mid-operation
    must be waited for. hpq says so and what to run, without creating a change set."""
    cfn, stub = _no_calls_cfn()
    info = stacks.StackInfo("hpq-t", "arn:aws:cloudformation:us-east-1:123456789012:stack/hpq-t/1", status)
    with pytest.raises(OperationFailed, match=needle) as exc:
        stacks.update_via_change_set(cfn, info, "https://b.s3.us-east-1.amazonaws.com/root.json", {}, {})
    assert exc.value.exit_code == 1 and "hpq-t" in str(exc.value)
    stub.assert_no_pending_responses()


def test_partial_delete_objects_failure_is_reported():
    """DeleteObjects answers 200 with per-key Errors (S3 API reference, DeleteObjects 'Errors'): not a success."""
    s3 = boto3.client("s3", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(s3)
    versions = [{"Key": f"k{i}", "VersionId": f"v{i}"} for i in range(3)]
    stub.add_response("list_object_versions", {"Versions": versions, "IsTruncated": False}, {"Bucket": "b"})
    stub.add_response("delete_objects", {
        "Deleted": [{"Key": "k0", "VersionId": "v0"}, {"Key": "k2", "VersionId": "v2"}],
        "Errors": [{"Key": "k1", "VersionId": "v1", "Code": "AccessDenied", "Message": "Access Denied"}]},
        {"Bucket": "b", "Delete": {"Objects": versions, "Quiet": True}})
    with stub, pytest.raises(OperationFailed) as exc:
        aws_s3.empty_bucket(s3, "b")
    assert "could not delete 1 object version(s) in s3://b" in str(exc.value) and "k1: AccessDenied" in str(exc.value)


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_no_wait_returns_then_status_follow_follows(capsys, monkeypatch):
    """deploy --no-wait starts the stack and says how to follow; status --follow follows an operation in progress
    to its end. moto finishes stacks at once, so the first DescribeStacks answers (a before-call hook) say
    CREATE_IN_PROGRESS, as CloudFormation would while the nested stacks run."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="hpq-t-nowait")
    stack = "hpq-t-nowait"
    code, out, err = run_cli(["deploy", "slurm-gpu", "hpq-t-nowait", "--stack-name", stack, "--no-wait", "--emulate",
                              "moto", "--no-quota-check", "--output", "json", "--yes"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["action"] == "create" and data["stack"] == stack
    assert f"create started; follow with: hpq status {stack} --follow --region {REGION}" in err

    real_client = aws_session.client
    answers = {"in_progress": 3, "describes": 0}

    def client(session, service, region=None):
        c = real_client(session, service, region)
        if service == "cloudformation":
            real = c.describe_stacks

            def describe_stacks(**kw):
                data = real(**kw)
                answers["describes"] += 1
                for st in data["Stacks"]:
                    if st["StackName"] == stack and answers["in_progress"] > 0:
                        answers["in_progress"] -= 1
                        st["StackStatus"] = "CREATE_IN_PROGRESS"
                return data

            c.describe_stacks = describe_stacks
        return c

    patch_aws_client(monkeypatch, client)
    code, out, err = run_cli(["status", stack, "--follow", "--poll-seconds", "0.05"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"{stack}: CREATE_COMPLETE"
    assert answers["in_progress"] == 0 and answers["describes"] >= 4  # it polled until the operation ended


def _fake_aws_cli(tmp_path, sshd_port: int, log) -> str:
    """``aws`` for ``ssm start-session --document-name AWS-StartSSHSession``: checks, logs, relays to sshd."""
    path = tmp_path / "bin" / "aws"
    path.parent.mkdir()
    relay = module_command("sshd", "127.0.0.1", str(sshd_port))
    path.write_text("#!/bin/sh\n"
                    f"printf '%s\\n' \"$*\" >> {shlex.quote(str(log))}\n"
                    '[ "$1 $2 $3" = "ssm start-session --target" ] || { echo "not an SSM session: $*" >&2; exit 9; }\n'
                    '[ "$5 $6 $7 $8" = "--document-name AWS-StartSSHSession --parameters portNumber='
                    f'{sshd_port}" ] || {{ echo "wrong document: $*" >&2; exit 9; }}\n'
                    f"exec {relay}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path.parent)


def _cluster(name: str) -> tuple[str, str]:
    sm = boto3.client("sagemaker", region_name=REGION)
    group = {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "ExecutionRole": "arn:aws:iam::123456789012:role/r",
             "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/hpq/", "OnCreate": "on_create.sh"},
             "ThreadsPerCore": 1}
    arn = sm.create_cluster(ClusterName=name, InstanceGroups=[{**group, "InstanceGroupName": names.CONTROLLER_GROUP}])
    node = sm.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"][0]["InstanceId"]
    return arn["ClusterArn"], node


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env_paging")
def test_remote_default_path_is_ssh_through_ssm_and_pins_the_host_key(sshd, tmp_path, monkeypatch, capfd):
    """No --proxy-command: hpq finds the controller in the HyperPod API and tunnels SSH through
    `aws ssm start-session --target sagemaker-cluster:<id>_<group>-<instance> --document-name
    AWS-StartSSHSession`; the host key is pinned under that target name; a changed key is refused."""
    arn, instance = _cluster("hpq-t-ssm")
    target = f"sagemaker-cluster:{arn.rsplit('/', 1)[-1]}_{names.CONTROLLER_GROUP}-{instance}"
    log = tmp_path / "aws-calls.log"
    monkeypatch.setenv("PATH", _fake_aws_cli(tmp_path, sshd.port, log) + os.pathsep + os.environ["PATH"])
    known = tmp_path / "known_hosts"
    args = ["remote", "hpq-t-ssm", "--port", str(sshd.port), "--key", sshd.key, "--user", sshd.user,
            "--known-hosts", str(known), "--region", REGION, "--", "echo", "through-ssm"]
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capfd.readouterr()
    assert exc.value.code == 0, err
    assert "through-ssm" in out
    assert log.read_text().split()[:4] == ["ssm", "start-session", "--target", target]
    pinned = known.read_text().split()
    assert pinned[0] == f"[{target}]:{sshd.port}"  # pinned on first use, under the SSM target name and port

    # The node was replaced (new host key) but the name is the same: refuse, say which file to fix.
    other = tmp_path / "other_host_key"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other} >/dev/null")
    algo, key = (tmp_path / "other_host_key.pub").read_text().split()[:2]
    known.write_text(f"[{target}]:{sshd.port} {algo} {key}\n")
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capfd.readouterr().err.strip().splitlines()
    assert exc.value.code == 1 and len(err) == 1
    assert f"host key for {target} changed" in err[0] and str(known) in err[0]
