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

import datetime as dt
import json
import socket
import threading
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import boto3
import pytest

from hpq.aws import pricing
from hpq.cli.commands import list_
from hpq.lifecycle import names
from hpq.validation import saved
from hpq.validation.result import TestResult
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


@pytest.fixture(autouse=True)
def results_home(tmp_path, monkeypatch) -> Path:
    """The per-user results folder (hpq.validation.saved) in the test's own folder, never the user's."""
    monkeypatch.setenv(saved.RESULTS_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state" / "hpq" / "results"


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
    assert cluster["validation"] == []  # none saved on this machine (results_home: an empty folder)
    code, out, err = run_cli(["status", "glance-status", "--region", "us-east-1"], capsys)
    assert code == 0, err
    assert "HyperPod cluster glance-slurm: InService" in out and "Nodes" in out and "Slurm controller" in out
    assert f"validation results: {saved.NONE_SAVED}" in out


def test_status_takes_a_cluster_name_from_hpq_list_too(account, capsys):
    """`hpq list` shows clusters; `hpq status CLUSTER` finds the one stack naming it and says so (issue 25 review:
    'stack 'clusterfoo' does not exist'). Twin: a name that is neither is the stack's one-line NotFound."""
    code, out, err = run_cli(["status", "glance-slurm", "--region", "us-east-1", "--output", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["name"] == "glance-slurm-stack" and json.loads(out)["cluster"]["name"] == "glance-slurm"
    assert "glance-slurm is the cluster of stack glance-slurm-stack" in err
    code, _, err = run_cli(["status", "neither-stack-nor-cluster", "--region", "us-east-1"], capsys)
    assert code == 2 and "stack 'neither-stack-nor-cluster' does not exist" in err and len(err.splitlines()) == 1


def test_status_of_a_stack_without_its_cluster_says_so(account, capsys):
    """Broken twin: the stack names a cluster that does not exist."""
    code, out, err = run_cli(["status", "glance-pending", "--region", "us-east-1", "--output", "json"], capsys)
    assert code == 0, err
    cluster = json.loads(out)["cluster"]
    assert cluster["status"] == "not found" and cluster["nodes"] == []


# --- issue 25 review: one row per stack, the cluster from the parameter, both stacks of one cluster -------------


def test_two_emulated_deploys_are_two_rows_named_by_their_clusters(aws_env, capsys):
    """The reviewer's walk: `hpq deploy slurm-gpu BUCKET --emulate moto` twice (the second `--stack-name second`).

    moto's rendition answers the nested HyperPod stack's ClusterName output with a placeholder
    (standins/rendition.py: ``moto-HyperPodStack-Outputs.ClusterName``, not a valid cluster name by CreateCluster's
    pattern, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateCluster.html); the root's
    ClusterName parameter (DescribeStacks Parameters,
    https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeStacks.html) names the cluster.
    Before the fix: one row named after the placeholder, and status looked for that cluster."""
    urllib.request.urlopen(urllib.request.Request(aws_env + "/moto-api/reset", method="POST"), timeout=10).close()
    boto3.client("s3").create_bucket(Bucket="hpq-list-twice")
    for extra in ([], ["--stack-name", "second"]):
        code, out, err = run_cli(["deploy", "slurm-gpu", "hpq-list-twice", "--emulate", "moto", "--yes",
                                  "--no-quota-check", "--poll-seconds", "0.2", "--prices", "file", *extra], capsys)
        assert code == 0, err[-2000:]
        assert "Outputs.ClusterName" not in out.split("next:")[-1]  # the next commands name the real cluster
    outputs = {o["OutputKey"]: o["OutputValue"] for o in boto3.client("cloudformation").describe_stacks(
        StackName="second")["Stacks"][0]["Outputs"]}
    assert not names.valid_hyperpod_name(outputs[names.OUT_CLUSTER_NAME])  # the placeholder is really there
    code, rows, err = _list(capsys, "--region", "us-east-1", "--prices", "file")
    assert code == 0, err
    assert [(r["name"], r["stack"], r["state"]) for r in rows] == [
        ("hpq-slurm-gpu", "hpq-slurm-gpu", "no cluster"), ("second", "second", "no cluster")]
    code, out, err = run_cli(["status", "second", "--region", "us-east-1"], capsys)
    assert code == 0, err
    assert "HyperPod cluster second: not found" in out


PLACEHOLDER_TEMPLATE = json.dumps({**json.loads(TEMPLATE), "Outputs": {
    "ClusterName": {"Value": "moto-HyperPodStack-Outputs.ClusterName"}}})


def test_the_cluster_comes_from_the_parameter_not_a_placeholder_output(account, capsys):
    """Broken twin of a healthy stack: the same stack whose ClusterName output is moto's placeholder still lists
    (and statuses) its existing cluster, by its ClusterName parameter."""
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="glance-placeholder", TemplateBody=PLACEHOLDER_TEMPLATE, Tags=HPQ_TAGS,
        Parameters=[{"ParameterKey": "ClusterName", "ParameterValue": "glance-eks"}])
    code, rows, err = _list(capsys, "--region", "us-east-1")
    assert code == 0, err
    assert not any("Outputs" in r["name"] for r in rows)
    eks = [r for r in rows if r["name"] == "glance-eks"]
    assert [(r["stack"], r["state"]) for r in eks] == [("glance-placeholder", "InService")]
    code, out, err = run_cli(["status", "glance-placeholder", "--region", "us-east-1", "--output", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["cluster"]["name"] == "glance-eks"


def test_two_stacks_naming_one_cluster_are_both_listed_and_say_so(account, capsys, monkeypatch):
    make_stack("us-east-1", "glance-slurm-again", "glance-slurm", "slurm-gpu")
    code, rows, err = _list(capsys, "--region", "us-east-1")
    assert code == 0, err
    slurm = sorted((r["stack"], r["cluster_also_named_by"]) for r in rows if r["name"] == "glance-slurm")
    assert slurm == [("glance-slurm-again", ["glance-slurm-stack"]), ("glance-slurm-stack", ["glance-slurm-again"])]
    assert "stacks glance-slurm-again, glance-slurm-stack all name cluster glance-slurm" in err
    others = [r for r in rows if r["name"] != "glance-slurm"]
    assert all(r["cluster_also_named_by"] == [] for r in others)  # the twin: one stack per cluster says nothing
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run_cli(["list", "--region", "us-east-1"], capsys)
    assert code == 0 and "cluster also named by glance-slurm-stack" in out
    # `hpq status CLUSTER` cannot pick between the two: it names both
    code, _, err = run_cli(["status", "glance-slurm", "--region", "us-east-1"], capsys)
    assert code == 2 and "stacks glance-slurm-again, glance-slurm-stack: give one of them" in err, err


# --- issue 25 review: --all-regions when nothing answers --------------------------------------------------------


class SilentEndpoint:
    """A TCP endpoint that accepts, holds each connection HOLD_S seconds and closes it unanswered (botocore:
    ConnectionClosedError, as an endpoint that never answers), counting how many it held at once."""

    HOLD_S = 1.0

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.open = self.most = self.total = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.total += 1
            self.most = max(self.most, self.open)
        time.sleep(self.HOLD_S)
        with self.lock:
            self.open -= 1
        conn.close()


def test_all_regions_unanswered_is_one_error_and_nothing_on_stdout(monkeypatch, tmp_path, capsys, price_file):
    """Regions are asked at once (bounded) with a progress line, and when none answers only the error is printed:
    before, 19 regions were asked one after another, and stdout said 'no hpq HyperPod clusters' beside the error
    (and --output json printed [])."""
    from tests.moto_server import set_aws_env

    endpoint = SilentEndpoint()
    set_aws_env(monkeypatch, endpoint.url, tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    for fmt in ("table", "json"):
        started = time.monotonic()
        code, out, err = run_cli(["list", "--all-regions", "--prices", "file", "--output", fmt], capsys)
        took = time.monotonic() - started
        lines = err.strip().splitlines()
        assert code == 1 and out == "", (fmt, out, err)
        assert lines[0].startswith("hpq: asking ") and "HyperPod regions" in lines[0]
        assert len(lines) == 2 and lines[1].startswith("hpq: error: no region answered: "), err
        regions_asked = int(lines[0].split()[2])
        assert regions_asked > list_.MAX_PARALLEL_REGIONS
        assert took < regions_asked * SilentEndpoint.HOLD_S / 2, took  # not one after another
    assert 2 <= endpoint.most <= list_.MAX_PARALLEL_REGIONS, endpoint.most


# --- issue 25 review: the last validation results beside the cluster ----------------------------------------------


def _result(test: str, cluster: str, outcome: str, headline: str) -> TestResult:
    return TestResult(test, "slurm", cluster, outcome, {"PASS": 0, "FAIL": 1}.get(outcome, 3),
                      headline + "\nthe explanation follows on its own lines", "ml.g5.8xlarge", 2)


def test_a_saved_result_of_any_bad_kind_is_unreadable_never_a_traceback(results_home):
    """The results folder's files go through the shared reader (hpq.user_files): deep nesting was a RecursionError
    out of `hpq status`; non-UTF-8 and another cluster's result are unreadable too. Twin: a good one reads."""
    saved.save(_result("nccl", "c1", "PASS", "PASS: 3.02 GB/s vs >= 3.0 expected"), "us-east-1")
    where = saved.folder("us-east-1", "c1")
    (where / "nanogpt.json").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    (where / "sweep.json").write_bytes(b'{"test": "sweep", "cluster": "c1", "message": "\xff"}')
    (where / "doctor.json").write_text(json.dumps({"test": "doctor", "cluster": "c2", "outcome": "PASS"}))
    got = {e["test"]: e for e in saved.latest("us-east-1", "c1")}
    assert got["nccl"]["outcome"] == "PASS"
    assert {t: got[t]["outcome"] for t in ("nanogpt", "sweep", "doctor")} == dict.fromkeys(
        ("nanogpt", "sweep", "doctor"), "unreadable")
    assert "nests too deeply" in got["nanogpt"]["headline"] and "not UTF-8" in got["sweep"]["headline"]


def test_status_shows_the_latest_saved_result_of_each_test(account, capsys, results_home, monkeypatch):
    old = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    saved.save(_result("nccl", "glance-slurm", "FAIL", "FAIL: 1.1 GB/s vs >= 3.0 expected: slow network"), "us-east-1",
               old)
    saved.save(_result("nccl", "glance-slurm", "PASS", "PASS: 3.02 GB/s vs >= 3.0 expected"), "us-east-1")
    saved.save(_result("doctor", "glance-slurm", "INCONCLUSIVE", "INCONCLUSIVE: 1 of 3 nodes did not answer"),
               "us-east-1")
    # Broken twins: the same cluster name in another region, another cluster, and a file that is not a result.
    saved.save(_result("sweep", "glance-slurm", "PASS", "PASS: sweep"), "us-west-2")
    saved.save(_result("sweep", "glance-eks", "PASS", "PASS: sweep"), "us-east-1")
    (results_home / "us-east-1" / "glance-slurm" / "nanogpt.json").write_text('{"test": "nanogpt", "clus')
    code, out, err = run_cli(["status", "glance-slurm-stack", "--region", "us-east-1", "--output", "json"], capsys)
    assert code == 0, err
    got = {r["test"]: r for r in json.loads(out)["cluster"]["validation"]}
    assert set(got) == {"nccl", "nanogpt", "doctor"}
    assert (got["nccl"]["outcome"], got["nccl"]["headline"]) == ("PASS", "PASS: 3.02 GB/s vs >= 3.0 expected")
    assert dt.datetime.fromisoformat(got["nccl"]["when"]) > old  # the latest replaced the older one
    assert got["doctor"]["outcome"] == "INCONCLUSIVE"
    assert got["nanogpt"]["outcome"] == "unreadable"  # never a verdict from a file that is not one
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run_cli(["status", "glance-slurm-stack", "--region", "us-east-1"], capsys)
    assert code == 0, err
    assert "Validation results" in out and "PASS: 3.02 GB/s vs >= 3.0 expected" in out
    assert saved.NONE_SAVED not in out and "1.1 GB/s" not in out


def test_saved_results_are_what_hpq_report_reads(results_home, tmp_path):
    """`hpq report ~/.local/state/hpq/results/REGION/CLUSTER/*.json` (docs/report.md): the saved file is a
    TestResult document to views/load.py."""
    from hpq.views import load

    path = saved.save(_result("nccl", "glance-slurm", "PASS", "PASS: 3.02 GB/s vs >= 3.0 expected"), "us-east-1")
    assert path == results_home / "us-east-1" / "glance-slurm" / "nccl.json"
    (item,) = load.load([str(path)])
    assert (item.kind, item.outcome, item.cluster) == ("nccl", "PASS", "glance-slurm")
    assert item.headline.outcome == "PASS"
