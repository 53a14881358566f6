"""The quota step of ``hpq deploy``'s pre-flight: what a deploy needs (an update: only what it adds), a clear fail
refused before anything is created, unknowns as warnings.

Service Quotas answers come from botocore's Stubber with the request order and codes of tests/aws/test_aws_quotas.py
(moto implements Service Quotas for the vpc service only); current usage (VPCs, gateways, EIPs) is read from moto
over HTTP. The codes and quota names are those aws/quotas.py documents.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from hpq.aws import preflight, quotas
from hpq.aws import session as aws_session
from hpq.errors import UsageError
from tests.aws.test_aws_quotas import GOOD, plan_responses, quota, sq_client
from tests.support import patch_aws_client, run_cli

REGION = "us-east-1"
G5, M5 = "ml.g5.16xlarge", "ml.m5.xlarge"
# Room for every VPC the session's moto account holds: these tests are about the instance quotas.
ROOMY = dict(GOOD, vpcs=1000, igws=1000, nat=1000, eips=1000)
STACK = {"WorkerInstanceType": G5, "WorkerCount": "2", "ControllerInstanceType": M5, "EnableLoginGroup": "false",
         "LoginInstanceType": M5, "EbsVolumeSizeGB": "500", "FsxStorageCapacityGiB": "1200", "TrainingPlanArn": ""}


def needs(values, previous=None, orchestrator="slurm"):  # type: ignore[no-untyped-def]
    return {s.key: s.needed_new for s in quotas.deploy_needs(values, previous, orchestrator)}


def test_a_new_stack_needs_everything():
    got = needs(STACK)
    assert got["instance:" + G5] == 2 and got["instance:" + M5] == 1
    assert got["total-instances"] == 3 and got["instances-per-cluster"] == 3 and got["ebs-per-instance"] == 500
    assert got["fsx-lustre-storage"] == 1200 and {"vpcs", "internet-gateways", "nat-per-az"} <= set(got)
    eks = needs(dict(STACK, WorkerCount="4"), orchestrator="eks")
    assert "instance:" + M5 not in eks and eks["total-instances"] == 4 and "eks-clusters" in eks


def test_an_update_counts_only_the_increase():
    assert needs(STACK, STACK) == {}  # broken twin of every case below: nothing added, nothing checked
    more = needs(dict(STACK, WorkerCount="12"), STACK)
    assert more == {"instance:" + G5: 10, "total-instances": 10, "instances-per-cluster": 13}
    assert needs(dict(STACK, WorkerCount="1"), STACK) == {}  # fewer nodes need nothing
    retyped = needs(dict(STACK, WorkerInstanceType="ml.p5.48xlarge"), STACK)
    assert retyped == {"instance:ml.p5.48xlarge": 2}  # a new type needs all its nodes; the total is the same
    bigger = needs(dict(STACK, FsxStorageCapacityGiB="4800", EbsVolumeSizeGB="1000"), STACK)
    assert bigger == {"fsx-lustre-storage": 3600, "ebs-per-instance": 1000}
    login = needs(dict(STACK, EnableLoginGroup="true"), STACK)
    assert login == {"instance:" + M5: 1, "total-instances": 1, "instances-per-cluster": 4}
    plan = needs(dict(STACK, TrainingPlanArn="arn:aws:sagemaker:us-east-1:1:training-plan/p"))
    assert "instance:" + G5 not in plan and plan["total-instances"] == 3  # reserved capacity, still nodes


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_fail_is_one_line_and_unknown_is_a_warning():
    session = aws_session.make_session(REGION)
    sq = sq_client()
    with Stubber(sq) as stub:
        plan_responses(stub, dict(ROOMY, instance=1), deny={"nat"})
        notes: list[str] = []
        with pytest.raises(UsageError) as exc:
            preflight.check_quotas(session, "slurm-gpu", STACK, None, notes.append, sq=sq)
        stub.assert_no_pending_responses()
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and "\n" not in msg
    assert msg.startswith("pre-flight: quota sagemaker/L-86822EDB (ml.g5.16xlarge for cluster usage) is 1, this "
                          "deploy needs 2")
    assert "--quota-code L-86822EDB --desired-value 2" in msg
    assert [n for n in notes if n.startswith("warning: quota vpc/L-FE5A380F (NAT gateways per Availability Zone) "
                                             "not checked: access denied")]
    assert notes[-1] == "quotas (new stack): 9 pass, 1 fail, 1 unknown"
    with Stubber(sq) as stub:  # broken twin: the same deploy with room in every quota passes
        plan_responses(stub, ROOMY)
        results = preflight.check_quotas(session, "slurm-gpu", STACK, None, sq=sq)
    assert [r.status for r in results] == ["pass"] * 11


def test_an_unreachable_quota_api_is_unknown_not_a_crash():
    """EndpointConnectionError (no network to service-quotas): every quota unknown, said why; the deploy goes on."""
    import botocore.exceptions as bex

    class Down:
        def get_service_quota(self, **kw):  # type: ignore[no-untyped-def]
            raise bex.EndpointConnectionError(endpoint_url="https://servicequotas.us-east-1.amazonaws.com/")

        get_aws_default_service_quota = get_service_quota

        def get_paginator(self, name):  # type: ignore[no-untyped-def]
            raise bex.EndpointConnectionError(endpoint_url="https://servicequotas.us-east-1.amazonaws.com/")

    results = quotas.check_specs(None, quotas.deploy_needs(dict(STACK, WorkerCount="3"), STACK, "slurm"),
                                     sq=Down())
    assert [r.status for r in results] == ["unknown"] * 3
    assert all("cannot reach AWS" in r.note for r in results)


@pytest.fixture
def stubbed_quotas(monkeypatch):
    """deploy's Service Quotas client is a Stubber-wrapped one; every other client is moto's."""
    sq = sq_client()
    stub = Stubber(sq)
    real = aws_session.client
    patch_aws_client(monkeypatch, lambda s, svc, region=None: sq if svc == "service-quotas"
                        else real(s, svc, region))
    return stub


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_deploy_refuses_before_anything_is_created(stubbed_quotas, capsys):
    bucket = "hpq-quota-refusal"
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
    plan_responses(stubbed_quotas, dict(ROOMY, instance=1))
    with stubbed_quotas:
        code, _, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", "hpq-quota-refused", "--param",
                                "AvailabilityZoneId=use1-az4", "--emulate", "moto"], capsys)
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("hpq: error: pre-flight: quota sagemaker/L-86822EDB (ml.g5.16xlarge for cluster usage) "
                           "is 1, this deploy needs 2")
    assert "plan:" not in err  # refused before the plan, the upload and the stack
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    stacks = boto3.client("cloudformation", region_name=REGION).list_stacks()["StackSummaries"]
    assert not [s for s in stacks if s["StackName"] == "hpq-quota-refused"]
    plan_responses(stubbed_quotas, ROOMY)  # broken twin: enough quota, the (dry) deploy goes on to its plan
    with stubbed_quotas:
        code, _, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", "hpq-quota-refused", "--param",
                                "AvailabilityZoneId=use1-az4", "--emulate", "moto", "--dry-run"], capsys)
    assert code == 0 and "quotas (new stack): 11 pass, 0 fail, 0 unknown" in err and "plan: create" in err, err


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_an_update_checks_only_what_it_adds(stubbed_quotas, capsys):
    """2 workers running, quota 10: 12 workers fit (10 more), 13 do not; the VPC and FSx quotas are not asked."""
    bucket = "hpq-quota-update"
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
    stack = ["--stack-name", "hpq-quota-upd", "--emulate", "moto", "--poll-seconds", "0.05"]
    code, _, err = run_cli(["deploy", "slurm-gpu", bucket, *stack, "--no-quota-check", "--yes"], capsys)
    assert code == 0, err

    def answers(workers: float) -> None:
        for code_, name, value in (("L-86822EDB", "ml.g5.16xlarge for cluster usage", workers),
                                   ("L-3308CCC7", "Total number of instances allowed across SageMaker HyperPod "
                                                  "clusters", 100),
                                   ("L-2CE978FC", "Maximum number instances allowed per SageMaker HyperPod cluster",
                                    100)):
            stubbed_quotas.add_response("get_service_quota", quota("sagemaker", code_, name, value),
                                        {"ServiceCode": "sagemaker", "QuotaCode": code_})

    answers(10)
    with stubbed_quotas:
        code, _, err = run_cli(["deploy", "slurm-gpu", bucket, *stack, "--param", "WorkerCount=12", "--dry-run"],
                               capsys)
        stubbed_quotas.assert_no_pending_responses()
    assert code == 0 and "quotas (what this update adds): 3 pass, 0 fail, 0 unknown" in err, err
    answers(10)
    with stubbed_quotas:
        code, _, err = run_cli(["deploy", "slurm-gpu", bucket, *stack, "--param", "WorkerCount=13"], capsys)
    assert code == 2, err
    assert "quota sagemaker/L-86822EDB (ml.g5.16xlarge for cluster usage) is 10, this deploy needs 11" in err


def test_a_failing_quota_api_is_one_short_line_per_quota_after_one_round_of_retries(monkeypatch):
    """Service Quotas answering HTTP 500 with an HTML page (werkzeug's own 500 page, as moto's server sends it),
    parsed and retried by botocore itself: each warning is one line with the status and the page's title, no
    HTML; the first failure (after botocore's retries) stops the reading, so the wait is one round of retries,
    not one per quota; a progress line comes before the wait. Issue 25: 29 s of silence, then 7 warnings each
    holding a whole HTML page."""
    import boto3
    import werkzeug.exceptions
    from botocore.awsrequest import AWSResponse
    from botocore.config import Config
    from moto import mock_aws

    page = werkzeug.exceptions.InternalServerError().get_body().encode()
    sent: list[str] = []

    class Raw:
        def stream(self, **kw):  # type: ignore[no-untyped-def]
            yield page

    def answer_500(request, **kw):  # type: ignore[no-untyped-def]
        sent.append(request.headers.get("X-Amz-Target", b"").decode() if request.headers.get("X-Amz-Target") else "")
        return AWSResponse(request.url, 500, {"Content-Type": "text/html; charset=utf-8"}, Raw())

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        sq = session.client("service-quotas", config=Config(retries={"mode": "standard", "max_attempts": 3}))
        sq.meta.events.register("before-send.service-quotas", answer_500)
        notes: list[str] = []
        results = preflight.check_quotas(session, "slurm-gpu", STACK, None, notes.append, sq=sq)
    assert results and all(r.status == quotas.UNKNOWN for r in results)
    assert len(sent) == 4, sent  # one call and botocore's 3 retries; every later quota fails at once
    assert notes[0].startswith("pre-flight: reading ") and "service quota" in notes[0]
    warnings = [n for n in notes if n.startswith("warning: quota ")]
    assert len(warnings) == len(results)
    for line in warnings:
        assert "\n" not in line and "<" not in line and "HTTP 500: 500 Internal Server Error" in line, line
        assert len(line) < 250, line


def test_an_aws_error_message_that_is_html_is_its_title():
    """hpq.aws.session.error_message on a real parser's answer (botocore's JSON protocol keeps the page whole);
    an ordinary message is kept as it was (broken twin)."""
    import botocore.parsers
    import botocore.session
    import werkzeug.exceptions
    from botocore.exceptions import ClientError

    model = botocore.session.get_session().get_service_model("service-quotas")
    op = model.operation_model("GetServiceQuota")
    untitled = {"Error": {"Code": "502", "Message": "<html><body>" + "x" * 5000 + "</body></html>"},
                "ResponseMetadata": {"HTTPStatusCode": 502}}
    assert aws_session.error_message(ClientError(untitled, "GetServiceQuota")) == (
        "HTTP 502: an HTML page, not an AWS answer")
    parsed = botocore.parsers.create_parser(model.metadata["protocol"]).parse(
        {"status_code": 500, "headers": {}, "body": werkzeug.exceptions.InternalServerError().get_body().encode()},
        op.output_shape)
    assert aws_session.error_message(ClientError(parsed, "GetServiceQuota")) == "HTTP 500: 500 Internal Server Error"
    plain = {"Error": {"Code": "NoSuchResourceException", "Message": "The request failed because the quota\n  "
                       "does not exist."}, "ResponseMetadata": {"HTTPStatusCode": 400}}
    assert aws_session.error_message(ClientError(plain, "GetServiceQuota")) == (
        "The request failed because the quota does not exist.")
