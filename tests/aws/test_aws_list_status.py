"""`hpq list` and `hpq status` against an emulated account with several clusters (moto server over HTTP).

moto's SageMaker implements CreateCluster, ListClusters, DescribeCluster, ListClusterNodes and ListTags in the
API's shapes (ClusterSummaries, InstanceGroups with CurrentCount/TargetCount, ClusterNodeSummaries with
InstanceStatus.Status; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ListClusters.html,
API_DescribeCluster.html, API_ListClusterNodes.html); it keeps no Orchestrator, so an EKS cluster is told by its
tags here. The clusters are created directly (moto's CloudFormation only stubs AWS::SageMaker::Cluster), with the
tags hpq's templates give them (cfn/hyperpod.py: hpq:managed-by, hpq:cluster-name; the stack's hpq:variant
propagates); the stacks are created in moto's CloudFormation with the stack tags `hpq deploy` sets
(aws/deploy.py). Stand-ins: moto for SageMaker, CloudFormation and FSx; the price file is the test's own.
"""

from __future__ import annotations

import json
import urllib.request
from decimal import Decimal

import boto3
import pytest

from hpq.aws import pricing
from hpq.lifecycle import names
from tests.support import run_cli

pytestmark = pytest.mark.slow

PRICES = {("us-east-1", "ml.m5.xlarge"): Decimal("0.23"), ("us-east-1", "ml.g5.8xlarge"): Decimal("3.06"),
          ("us-west-2", "ml.m5.xlarge"): Decimal("0.25"), ("us-west-2", "ml.g5.8xlarge"): Decimal("3.4")}
HPQ_TAGS = [{"Key": names.MANAGED_BY_TAG_KEY, "Value": names.MANAGED_BY_TAG_VALUE}]


def _record(region: str, itype: str, usd: Decimal) -> dict:
    sku = f"{region}-{itype}"
    return {"product": {"sku": sku, "attributes": {"servicecode": "AmazonSageMaker", "regionCode": region,
                                                   "usagetype": f"X-Cluster:{itype}"}},
            "terms": {"OnDemand": {f"{sku}.T": {"priceDimensions": {f"{sku}.T.D": {
                "unit": "Hrs", "beginRange": "0", "pricePerUnit": {"USD": str(usd)}}}}}}}


@pytest.fixture
def price_file(tmp_path, monkeypatch) -> None:
    records = [_record(r, t, usd) for (r, t), usd in PRICES.items()]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(pricing.offer_files(records, {}, "2026-11-01", "test")))
    monkeypatch.setenv(pricing.PRICE_FILE_ENV, str(path))


def _group(name: str, itype: str, count: int) -> dict:
    return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count, "ThreadsPerCore": 1,
            "ExecutionRole": "arn:aws:iam::123456789012:role/hpq-exec",
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hpq-lifecycle/node/", "OnCreate": "on_create.sh"}}


def make_cluster(region: str, name: str, groups: list[dict], tags: list[dict]) -> str:
    sm = boto3.client("sagemaker", region_name=region)
    return sm.create_cluster(ClusterName=name, InstanceGroups=groups, Tags=tags,
                             VpcConfig={"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0a1b2c3d"]},
                             )["ClusterArn"]


TEMPLATE = json.dumps({"Parameters": {"ClusterName": {"Type": "String"}, "FsxId": {"Type": "String", "Default": ""}},
                       "Resources": {"P": {"Type": "AWS::SSM::Parameter",
                                           "Properties": {"Type": "String", "Value": {"Ref": "ClusterName"},
                                                          "Name": {"Fn::Sub": "/glance/${AWS::StackName}"}}}},
                       "Outputs": {"ClusterName": {"Value": {"Ref": "ClusterName"}},
                                   "FsxFileSystemId": {"Value": {"Ref": "FsxId"}}}})


def make_stack(region: str, stack: str, cluster: str, variant: str, fsx_id: str = "", hpq: bool = True) -> None:
    tags = [{"Key": names.MANAGED_BY_TAG_KEY, "Value": names.MANAGED_BY_TAG_VALUE},
            {"Key": "hpq:variant", "Value": variant}] if hpq else []
    params = [{"ParameterKey": "ClusterName", "ParameterValue": cluster}]
    if fsx_id:
        params.append({"ParameterKey": "FsxId", "ParameterValue": fsx_id})
    boto3.client("cloudformation", region_name=region).create_stack(StackName=stack, TemplateBody=TEMPLATE,
                                                                    Parameters=params, Tags=tags)


@pytest.fixture
def account(aws_env, price_file) -> dict:
    """Several clusters in two regions: hpq's (with and without a stack), someone else's, a look-alike.

    The moto server is shared by the session: it is reset first so that the account holds exactly these."""
    urllib.request.urlopen(urllib.request.Request(aws_env + "/moto-api/reset", method="POST"), timeout=10).close()
    ctl, wrk = _group("controller", "ml.m5.xlarge", 1), _group("worker", "ml.g5.8xlarge", 2)
    make_cluster("us-east-1", "glance-slurm", [ctl, wrk],
                 HPQ_TAGS + [{"Key": "hpq:variant", "Value": "slurm-gpu"},
                             {"Key": names.CLUSTER_TAG_KEY, "Value": "glance-slurm"}])
    make_stack("us-east-1", "glance-slurm-stack", "glance-slurm", "slurm-gpu")
    make_cluster("us-east-1", "glance-eks", [_group("worker", "ml.g5.8xlarge", 3)],
                 HPQ_TAGS + [{"Key": "hpq:variant", "Value": "eks-gpu"}])
    make_cluster("us-east-1", "someone-else", [_group("workers", "ml.g5.8xlarge", 1)], [{"Key": "team", "Value": "x"}])
    # Broken twin of hpq's tag: the key without hpq's value is not hpq's.
    make_cluster("us-east-1", "look-alike", [_group("workers", "ml.m5.xlarge", 1)],
                 [{"Key": names.MANAGED_BY_TAG_KEY, "Value": "someone-else"}])
    make_stack("us-east-1", "glance-pending", "glance-pending", "eks-trn")  # no cluster yet
    make_cluster("us-west-2", "glance-west", [ctl, _group("worker", "ml.g5.8xlarge", 4)],
                 HPQ_TAGS + [{"Key": "hpq:variant", "Value": "slurm-gpu"}])
    return {}


def _list(capsys, *args: str) -> tuple[int, list[dict], str]:
    code, out, err = run_cli(["list", "--output", "json", *args], capsys)
    return code, (json.loads(out) if code == 0 else []), err


def test_list_shows_hpqs_clusters_in_the_region(account, capsys):
    code, rows, err = _list(capsys, "--region", "us-east-1")
    assert code == 0, err
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {"glance-slurm", "glance-eks", "glance-pending"}  # not someone-else, not look-alike
    slurm = by_name["glance-slurm"]
    assert (slurm["variant"], slurm["state"], slurm["region"]) == ("slurm-gpu", "InService", "us-east-1")
    assert [(g["name"], g["instance_type"], g["count"]) for g in slurm["groups"]] == [
        ("controller", "ml.m5.xlarge", 1), ("worker", "ml.g5.8xlarge", 2)]
    assert Decimal(slurm["hourly_cost_usd"]) == Decimal("0.23") + 2 * Decimal("3.06") and slurm["cost_complete"]
    assert slurm["stack"] == "glance-slurm-stack" and slurm["stack_status"] == "CREATE_COMPLETE"
    assert slurm["age_seconds"] is not None and 0 <= slurm["age_seconds"] < 3600
    assert by_name["glance-eks"]["variant"] == "eks-gpu"
    assert Decimal(by_name["glance-eks"]["hourly_cost_usd"]) == 3 * Decimal("3.06")
    pending = by_name["glance-pending"]
    assert (pending["state"], pending["variant"], pending["stack"]) == ("no cluster", "eks-trn", "glance-pending")


def test_list_all_adds_the_clusters_hpq_did_not_deploy(account, capsys):
    code, rows, err = _list(capsys, "--region", "us-east-1", "--all")
    assert code == 0, err
    by_name = {r["name"]: r for r in rows}
    assert {"someone-else", "look-alike", "glance-slurm"} <= set(by_name)
    assert by_name["someone-else"]["deployed_by_hpq"] is False and by_name["glance-slurm"]["deployed_by_hpq"]


def test_list_all_regions_and_the_table(account, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # wide enough that rich does not fold a cell
    code, rows, err = _list(capsys, "--all-regions")
    assert code == 0, err
    west = [r for r in rows if r["region"] == "us-west-2"]
    assert [r["name"] for r in west] == ["glance-west"]
    assert Decimal(west[0]["hourly_cost_usd"]) == Decimal("0.25") + 4 * Decimal("3.4")  # us-west-2's prices
    code, out, err = run_cli(["list", "--region", "us-east-1"], capsys)
    assert code == 0, err
    assert "glance-slurm" in out and "worker 2xml.g5.8xlarge" in out and "$6.35/h" in out
    assert "someone-else" not in out


def test_list_refuses_region_and_all_regions_together(capsys):
    code, _, err = run_cli(["list", "--region", "us-east-1", "--all-regions"], capsys)
    assert code == 2 and "give one of them" in err


def test_status_shows_the_cluster_beside_the_stack(account, capsys):
    fsx = boto3.client("fsx", region_name="us-east-1").create_file_system(
        FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=["subnet-0a1b2c3d"],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250})["FileSystem"]
    make_stack("us-east-1", "glance-status", "glance-slurm", "slurm-gpu", fsx["FileSystemId"])
    code, out, err = run_cli(["status", "glance-status", "--region", "us-east-1", "--output", "json"], capsys)
    assert code == 0, err
    cluster = json.loads(out)["cluster"]
    assert cluster["name"] == "glance-slurm" and cluster["status"] == "InService"
    assert [(g["name"], g["count"]) for g in cluster["groups"]] == [("controller", 1), ("worker", 2)]
    assert len(cluster["nodes"]) == 3 and {n["status"] for n in cluster["nodes"]} == {"Running"}
    assert sorted(n["group"] for n in cluster["nodes"]) == ["controller", "worker", "worker"]
    assert all(n["instance_id"] and n["instance_type"] for n in cluster["nodes"])
    assert cluster["slurm_controller"]["group"] == "controller" and len(cluster["slurm_controller"]["nodes"]) == 1
    assert cluster["fsx"]["id"] == fsx["FileSystemId"] and cluster["fsx"]["capacity_gib"] == 1200
    assert "no validation results on this machine" in cluster["validation"]
    code, out, err = run_cli(["status", "glance-status", "--region", "us-east-1"], capsys)
    assert code == 0, err
    assert "HyperPod cluster glance-slurm: InService" in out and "Nodes" in out and "Slurm controller" in out


def test_status_of_a_stack_without_its_cluster_says_so(account, capsys):
    """Broken twin: the stack names a cluster that does not exist."""
    code, out, err = run_cli(["status", "glance-pending", "--region", "us-east-1", "--output", "json"], capsys)
    assert code == 0, err
    cluster = json.loads(out)["cluster"]
    assert cluster["status"] == "not found" and cluster["nodes"] == []
