"""connect: cluster and node resolution against SageMaker in moto (server mode, HTTP).

A cluster with one controller and 150 workers: more than one page of ListClusterNodes (100 per
page), so the last workers are only reachable by following NextToken. Plain moto 5.2 answers
HTTP 500 to any second page (see tests/moto_server.py), so index lookups run against ``moto_server_paging``;
lookups by instance id use DescribeClusterNode and run against the plain server too.
moto wants ThreadsPerCore and an ``s3://sagemaker...`` SourceS3Uri in create_cluster.
"""

from __future__ import annotations

import json

import boto3
import pytest

from hpq.aws import hyperpod
from hpq.lifecycle import names
from tests.support import run_cli

REGION = "us-east-1"
WORKERS = 150


def group(name: str, itype: str, count: int) -> dict:
    return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count, "ThreadsPerCore": 1,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hpq-lifecycle/lifecycle", "OnCreate": "on_create.sh"},
            "ExecutionRole": "arn:aws:iam::123456789012:role/hpq-exec"}


def make_cluster(name: str) -> str:
    sm = boto3.client("sagemaker", region_name=REGION)
    existing = [c["ClusterArn"] for c in sm.list_clusters()["ClusterSummaries"] if c["ClusterName"] == name]
    if existing:
        return existing[0]
    arn = sm.create_cluster(ClusterName=name, InstanceGroups=[
        group(names.CONTROLLER_GROUP, "ml.m5.xlarge", 1), group(names.WORKER_GROUP, "ml.g5.16xlarge", WORKERS)])
    return arn["ClusterArn"]


def all_worker_ids() -> list[str]:
    sm = boto3.client("sagemaker", region_name=REGION)
    pages = list(sm.get_paginator("list_cluster_nodes").paginate(ClusterName="hpq-big",
                                                                 InstanceGroupNameContains=names.WORKER_GROUP))
    assert len(pages) >= 2  # really more than one page
    return [n["InstanceId"] for p in pages for n in p["ClusterNodeSummaries"]]


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env_paging")
def test_last_node_by_index_follows_pages(capsys):
    arn = make_cluster("hpq-big")
    cluster_id = arn.rsplit("/", 1)[-1]
    sm = boto3.client("sagemaker", region_name=REGION)
    calls = []
    sm.meta.events.register("before-call.sagemaker.ListClusterNodes", lambda **kw: calls.append(1))
    cl = hyperpod.describe_cluster(sm, "hpq-big")
    nodes = hyperpod.list_nodes(sm, cl, names.WORKER_GROUP)
    assert len(nodes) == WORKERS and len(calls) >= 2
    last = nodes[-1]["InstanceId"]
    assert last in all_worker_ids()
    code, out, err = run_cli(["connect", "hpq-big", "--group", names.WORKER_GROUP, "--node", str(WORKERS - 1),
                              "--print"], capsys)
    assert code == 0, err
    target = f"sagemaker-cluster:{cluster_id}_{names.WORKER_GROUP}-{last}"
    assert out.splitlines()[0] == target
    assert out.splitlines()[1] == f"aws ssm start-session --target {target} --region {REGION}"
    code, _, err = run_cli(["connect", "hpq-big", "--group", names.WORKER_GROUP, "--node", str(WORKERS)], capsys)
    assert code == 2 and "150 node(s)" in err


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env_paging")
def test_node_by_instance_id_and_default_controller(capsys):
    """The check as the issue states it: 150 workers, --node <last instance> --print (moto with real-shaped
    instance ids: HyperPod refuses any other NodeId, and so does hpq, before calling AWS)."""
    arn = make_cluster("hpq-big")
    cluster_id = arn.rsplit("/", 1)[-1]
    sm = boto3.client("sagemaker", region_name=REGION)
    first_page = sm.list_cluster_nodes(ClusterName="hpq-big", InstanceGroupNameContains=names.CONTROLLER_GROUP)
    controller = first_page["ClusterNodeSummaries"][0]["InstanceId"]
    last = all_worker_ids()[-1]
    sm.describe_cluster_node(ClusterName="hpq-big", NodeId=last)  # exists
    code, out, err = run_cli(["connect", "hpq-big", "--group", names.WORKER_GROUP, "--node", last, "--print",
                              "--output", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["target"] == f"sagemaker-cluster:{cluster_id}_{names.WORKER_GROUP}-{last}"
    assert data["command"][:5] == ["aws", "ssm", "start-session", "--target", data["target"]]
    # default group on a Slurm cluster: the controller
    code, out, err = run_cli(["connect", arn, "--print"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"sagemaker-cluster:{cluster_id}_{names.CONTROLLER_GROUP}-{controller}"
    # wrong group for the node, unknown group, unknown cluster: one-line exit 2
    for args, needle in ((["--group", names.CONTROLLER_GROUP, "--node", last], "is in group"),
                         (["--group", "nope"], "no group"),
                         (["--node", "i-0123456789abcdef0"], "is not in cluster"),
                         (["--node", "i-0hpqdoesnotexist"], "nor an instance id")):
        code, _, err = run_cli(["connect", "hpq-big", *args, "--print"], capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["connect", "hpq-bi", "--print"], capsys)
    assert code == 2 and "did you mean hpq-big" in err


def test_target_format():
    assert hyperpod.ssm_target("abc123", "worker", "i-0ad12c4e86af71ce0") == \
        "sagemaker-cluster:abc123_worker-i-0ad12c4e86af71ce0"
    cl = hyperpod.Cluster("c", "arn:aws:sagemaker:us-west-2:1:cluster/q7x2", "InService", "slurm", [
        {"InstanceGroupName": "gpu", "InstanceType": "ml.p5.48xlarge", "CurrentCount": 4},
        {"InstanceGroupName": "head", "InstanceType": "ml.m5.xlarge", "CurrentCount": 1}])
    assert cl.cluster_id == "q7x2" and hyperpod.default_group(cl) == "head"
    cl.groups[1]["InstanceGroupName"] = "mgmt"
    assert hyperpod.default_group(cl) == "mgmt"  # the lone CPU node
    proxy = hyperpod.ssh_proxy_command("sagemaker-cluster:q7x2_head-i-1", "us-west-2", "dev")
    assert proxy == ("aws ssm start-session --target sagemaker-cluster:q7x2_head-i-1 --document-name "
                     "AWS-StartSSHSession --parameters portNumber=22 --region us-west-2 --profile dev")


def test_ctrl_c_goes_to_the_session_not_hpq():
    """In an SSM shell Ctrl-C is for the remote command: hpq must neither die nor kill the session.

    The child stands in for `aws ssm start-session`: it sends SIGINT to hpq, then exits 3.
    """
    import sys

    from hpq.cli.commands.connect import run_session

    child = ("import os, signal, time; time.sleep(0.3); os.kill(os.getppid(), signal.SIGINT); "
             "time.sleep(0.3); raise SystemExit(3)")
    assert run_session([sys.executable, "-c", child]) == 3
