"""check-quotas: Service Quotas through botocore's Stubber (moto knows only the vpc service's quotas).

The Stubber checks every request's ServiceCode/QuotaCode, so the codes the command asks for are
part of what is tested. Current usage (VPCs, internet gateways, NAT gateways, EIPs, EKS clusters)
is read from moto over HTTP, which starts with a default VPC.
"""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from hpq.aws import quotas as aws_quotas
from hpq.aws import session
from hpq.cli.main import main
from tests.support import patch_aws_client

REGION = "us-east-1"
M5_CODE = "L-M5XLARGE"  # any code: the command must take whatever the listing says
EBS_CODE = "L-EBS00001"
FSX_CODE = "L-FSX00001"


def quota(service: str, code: str, name: str, value: float) -> dict:
    return {"Quota": {"ServiceCode": service, "QuotaCode": code, "QuotaName": name, "Value": value}}


def sq_client():
    return boto3.client("service-quotas", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")


def plan_responses(stub: Stubber, values: dict[str, float], deny: set[str] = frozenset(), fsx_listing: bool = True):
    """Queue the responses for a slurm deploy of ml.g5.16xlarge in the order the command asks."""
    def get(service, code, name, key):
        params = {"ServiceCode": service, "QuotaCode": code}
        if key in deny:
            stub.add_client_error("get_service_quota", "AccessDeniedException", "not allowed", 400, expected_params=params)
        else:
            stub.add_response("get_service_quota", quota(service, code, name, values[key]), params)

    get("sagemaker", "L-86822EDB", "ml.g5.16xlarge for cluster usage", "instance")
    stub.add_response("list_service_quotas", {"Quotas": [
        {"QuotaCode": M5_CODE, "QuotaName": "ml.m5.xlarge for cluster usage", "Value": 1.0},
        {"QuotaCode": EBS_CODE, "QuotaName": "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance",
         "Value": 2000.0},
    ]}, {"ServiceCode": "sagemaker"})
    get("sagemaker", M5_CODE, "ml.m5.xlarge for cluster usage", "controller")
    get("sagemaker", "L-3308CCC7", "Total number of instances allowed across SageMaker HyperPod clusters", "total")
    get("sagemaker", "L-2CE978FC", "Maximum number instances allowed per SageMaker HyperPod cluster", "per-cluster")
    get("sagemaker", EBS_CODE, "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance", "ebs")
    get("vpc", "L-F678F1CE", "VPCs per Region", "vpcs")
    get("vpc", "L-A4707A72", "Internet gateways per Region", "igws")
    get("vpc", "L-FE5A380F", "NAT gateways per Availability Zone", "nat")
    get("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs", "eips")
    get("vpc", "L-29B6F2EB", "Interface VPC endpoints per VPC", "endpoints")
    quotas = [{"QuotaCode": "L-OTHER", "QuotaName": "Lustre file systems", "Value": 100.0}]
    if fsx_listing:
        quotas.append({"QuotaCode": FSX_CODE, "QuotaName": "Lustre Persistent_2 SSD storage capacity (GiB)",
                       "Value": 100800.0})
    stub.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "fsx"})
    if fsx_listing:
        get("fsx", FSX_CODE, "Lustre Persistent_2 SSD storage capacity (GiB)", "fsx")


GOOD = {"instance": 4, "controller": 1, "total": 10, "per-cluster": 10, "ebs": 2000, "vpcs": 5, "igws": 5,
        "nat": 5, "eips": 5, "endpoints": 50, "fsx": 100800}


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_all_pass():
    sq = sq_client()
    with Stubber(sq) as stub:
        plan_responses(stub, GOOD)
        report = aws_quotas.check_quotas(session.make_session(REGION), "ml.g5.16xlarge", 2, sq=sq)
        stub.assert_no_pending_responses()
    assert len(report.results) >= 9
    assert report.ok, [r.as_dict() for r in report.results if r.status != "pass"]
    by = {r.spec.key: r for r in report.results}
    assert by["instance"].needed == 2 and by["total-instances"].needed == 3  # workers + controller
    assert by["vpcs"].in_use == len(boto3.client("ec2", region_name=REGION).describe_vpcs()["Vpcs"])
    assert by["controller"].code == M5_CODE and by["fsx-lustre-storage"].code == FSX_CODE


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_fail_and_unknown_are_not_pass():
    """Too low -> fail with the increase command; unreadable -> unknown; a missing quota -> unknown."""
    sq = sq_client()
    values = dict(GOOD, instance=1, vpcs=1)  # 1 < 2 workers; the default VPC already uses the only one
    with Stubber(sq) as stub:
        plan_responses(stub, values, deny={"nat"}, fsx_listing=False)
        report = aws_quotas.check_quotas(session.make_session(REGION), "ml.g5.16xlarge", 2, sq=sq)
    by = {r.spec.key: r for r in report.results}
    assert by["instance"].status == "fail" and "request-service-quota-increase" in by["instance"].note
    assert by["vpcs"].status == "fail"
    assert by["nat-per-az"].status == "unknown" and by["nat-per-az"].applied is None
    assert "access denied" in by["nat-per-az"].note.lower()
    assert by["fsx-lustre-storage"].status == "unknown"
    assert by["elastic-ips"].status == "pass"
    assert not report.ok


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_cli_json_and_exit_code(monkeypatch, capsys):
    sq = sq_client()
    stub = Stubber(sq)
    plan_responses(stub, dict(GOOD, total=2))
    stub.activate()
    real = session.client
    patch_aws_client(monkeypatch, lambda s, svc, region=None: sq if svc == "service-quotas"
                        else real(s, svc, region))
    with pytest.raises(SystemExit) as exc:
        main(["check-quotas", "g5.16xlarge", "2", "--output", "json"])
    assert exc.value.code == 1
    data = json.loads(capsys.readouterr().out)
    assert data["instance_type"] == "ml.g5.16xlarge" and not data["ok"]
    failed = [q["quota"] for q in data["quotas"] if q["status"] == "fail"]
    assert failed == ["Total number of instances allowed across SageMaker HyperPod clusters"]


def test_eks_plan_adds_eks_and_drops_controller():
    keys = [s.key for s in aws_quotas.plan("ml.p5.48xlarge", 4, "eks")]
    assert "eks-clusters" in keys and "controller" not in keys and len(keys) >= 9
    spec = aws_quotas.plan("ml.p5.48xlarge", 4, "eks")[0]
    assert spec.code == "L-8762A75F" and spec.name == "ml.p5.48xlarge for cluster usage"


def test_wrong_code_name_falls_back_to_listing():
    """A table code whose name does not match is not trusted: the quota is found by its name."""
    sq = sq_client()
    spec = aws_quotas.QuotaSpec("instance", "sagemaker", "x", 2, "L-WRONG", "ml.p5.48xlarge for cluster usage")
    with Stubber(sq) as stub:
        stub.add_response("get_service_quota", quota("sagemaker", "L-WRONG", "something else", 99),
                          {"ServiceCode": "sagemaker", "QuotaCode": "L-WRONG"})
        stub.add_response("list_service_quotas", {"Quotas": [
            {"QuotaCode": "L-RIGHT", "QuotaName": "ml.p5.48xlarge for cluster usage", "Value": 3.0}]},
            {"ServiceCode": "sagemaker"})
        stub.add_response("get_service_quota", quota("sagemaker", "L-RIGHT", "ml.p5.48xlarge for cluster usage", 3),
                          {"ServiceCode": "sagemaker", "QuotaCode": "L-RIGHT"})
        q, source, problem = aws_quotas.read_quota(aws_quotas.QuotaReader(sq), spec)
    assert q["QuotaCode"] == "L-RIGHT" and source == "applied" and not problem
    result = aws_quotas.evaluate(spec, q, source, problem)
    assert result.status == "pass" and result.applied == 3


def test_unknown_instance_type_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check-quotas", "ml.p9.huge", "2"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_cli_table_says_pass_fail_unknown(monkeypatch, capsys):
    """The table a user reads: one row per quota with its code, needed and applied values, and a count line."""
    sq = sq_client()
    stub = Stubber(sq)
    plan_responses(stub, dict(GOOD, instance=1), deny={"nat"})
    stub.activate()
    real = session.client
    patch_aws_client(monkeypatch, lambda s, svc, region=None: sq if svc == "service-quotas"
                        else real(s, svc, region))
    with pytest.raises(SystemExit) as exc:
        main(["check-quotas", "g5.16xlarge", "2"])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "Quotas for 2 x ml.g5.16xlarge (slurm) in us-east-1" in out
    assert "sagemaker/L-86822EDB" in out and "FAIL" in out and "UNKNOWN" in out
    assert out.strip().splitlines()[-1].endswith("1 fail, 1 unknown")
    stub.deactivate()
    # Everything passing: exit 0, and 2400.5 GiB style values keep their fraction.
    stub = Stubber(sq)
    plan_responses(stub, dict(GOOD, ebs=2000.5))
    stub.activate()
    with pytest.raises(SystemExit) as exc:
        main(["check-quotas", "g5.16xlarge", "2"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and "0 fail, 0 unknown" in out and "2000.5" in out
