"""EKS results to AMP: hpq/aws/remote_write.py's encoding read by a real Prometheus, and validation/publish.py.

The decoder is Debian's Prometheus itself (its remote-write receiver, the same protocol AMP takes), behind the
SigV4-checking workspace stand-in (hpq/standins/amp.py, written from AWS's signing docs), so a wrong protobuf
field, a bad Snappy block or a bad signature is refused by the real thing, not by our own reading of it. The
stack that names the workspace is in moto's CloudFormation with the tags and the ``PrometheusRemoteWriteUrl``
output `hpq deploy` gives it. The result is judged by hpq's own judge from a real 2x H200 nccl-tests log, as an
EKS job's log reaches it. Broken twins: a wrong secret (403, named as aps:RemoteWrite), no endpoint, a stack
without observability (nothing sent, nothing said), and a payload past Snappy's 64 KiB literal chunk.
"""

from __future__ import annotations

import json
import shutil
import struct
import time
import urllib.parse
import urllib.request
from dataclasses import asdict
from pathlib import Path

import boto3
import pytest

from hpq.aws import remote_write
from hpq.aws.session import make_session
from hpq.lifecycle import names
from hpq.standins import amp as amp_standin
from hpq.validation import judges, publish
from hpq.validation.request import NCCL, TestRequest
from hpq.validation.result import RawOutcome

NCCL_LOG = Path(__file__).parents[1] / "data" / "nccl" / "h200x2_nccl-tests_all_reduce_perf.txt"
REGION = "us-east-1"
TEMPLATE = json.dumps({
    "Parameters": {"ClusterName": {"Type": "String"}, "Url": {"Type": "String"}},
    "Resources": {"P": {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": {"Ref": "Url"},
                                                                 "Name": {"Fn::Sub": "/rw/${AWS::StackName}"}}}},
    "Outputs": {"ClusterName": {"Value": {"Ref": "ClusterName"}}, "PrometheusRemoteWriteUrl": {"Value": {"Ref": "Url"}}},
})


def stack(name: str, cluster: str, url: str | None, region: str = REGION) -> None:
    """hpq's root stack of ``cluster``; ``url`` None: one deployed without observability (no such output)."""
    tags = [{"Key": names.MANAGED_BY_TAG_KEY, "Value": names.MANAGED_BY_TAG_VALUE},
            {"Key": "hpq:variant", "Value": "eks-gpu"}]
    body = json.loads(TEMPLATE)
    params = [{"ParameterKey": "ClusterName", "ParameterValue": cluster}]
    if url is None:
        body["Outputs"].pop("PrometheusRemoteWriteUrl")
        body["Parameters"].pop("Url")
        body["Resources"]["P"]["Properties"]["Value"] = {"Ref": "ClusterName"}
    else:
        params.append({"ParameterKey": "Url", "ParameterValue": url})
    boto3.client("cloudformation", region_name=region).create_stack(
        StackName=name, TemplateBody=json.dumps(body), Tags=tags, Parameters=params)


def query(prom: amp_standin.PrometheusServer, promql: str) -> list[dict]:
    url = prom.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())["data"]["result"]


@pytest.fixture
def workspace(aws_env, tmp_path):
    assert shutil.which("prometheus"), "prometheus not found: dev/test.sh installs Debian's package"
    urllib.request.urlopen(urllib.request.Request(aws_env + "/moto-api/reset", method="POST"), timeout=10).close()
    prom = amp_standin.PrometheusServer(str(tmp_path)).start()
    creds = make_session(REGION).get_credentials().get_frozen_credentials()
    ws = amp_standin.Workspace(prom.url, {creds.access_key: creds.secret_key}, region=REGION)
    try:
        yield prom, ws
    finally:
        ws.close()
        prom.stop()


def eks_nccl_result(cluster: str):
    """hpq's judge on the log an EKS job brings back (its command is the job's name, not run-nccl-test)."""
    raw = RawOutcome(0, NCCL_LOG.read_text(), command="hpq-nccl-7f3a", state="Complete")
    return judges.judge_bandwidth(TestRequest(NCCL, 2, 8, "ml.p5.48xlarge"), raw, "ml.p5.48xlarge", "eks", cluster)


def test_an_eks_result_reaches_the_workspace_signed_with_the_users_credentials(workspace):
    prom, ws = workspace
    stack("eks-c-stack", "eks-c", ws.url + "/api/v1/remote_write")
    result = eks_nccl_result("eks-c")
    note = publish.publish(result, REGION, None)
    assert note is not None and note.startswith("hpq: result metrics: ") and "eks-c-stack" in note, note
    assert ws.accepted and not ws.refused
    rows = query(prom, 'hpq_result_verdict{cluster="eks-c", test="nccl", job="hpq-results"} == 1')
    assert [r["metric"]["verdict"] for r in rows] and {r["metric"]["verdict"] for r in rows} == {result.outcome}
    assert all(r["metric"]["instance"] == r["metric"]["node"] for r in rows)
    assert all(r["metric"]["instance_type"] == "ml.p5.48xlarge" for r in rows)
    peak = query(prom, 'hpq_nccl_busbw_peak_gbps{cluster="eks-c"}')
    assert peak and float(peak[0]["value"][1]) == pytest.approx(result.data["peak_busbw_gbps"])
    # the same series a Slurm node's file gives (result_metrics), so the hpq-results page reads both
    names_sent = {s[0]["__name__"] for s in publish.series_of(result, 0.0)}
    assert names_sent == {"hpq_result_verdict", "hpq_result_timestamp_seconds", "hpq_nccl_busbw_peak_gbps",
                          "hpq_nccl_busbw_avg_gbps", "hpq_nccl_busbw_expected_gbps", "hpq_nccl_wrong_elements"}


def test_refusals_are_one_line_and_never_change_the_result(workspace, tmp_path):
    prom, ws = workspace
    # a stack without observability: nothing sent, nothing said
    stack("quiet-stack", "quiet", None)
    assert publish.publish(eks_nccl_result("quiet"), REGION, None) is None and not ws.accepted
    # a Slurm result with observability on: its nodes published it already (result_metrics), not sent twice
    stack("slurm-stack", "on-slurm", ws.url + "/api/v1/remote_write")
    raw = RawOutcome(0, NCCL_LOG.read_text(), command="run-nccl-test 2 8")
    slurm = judges.judge_bandwidth(TestRequest(NCCL, 2, 8, "ml.p5.48xlarge"), raw, "ml.p5.48xlarge", "slurm",
                                   "on-slurm")
    assert publish.publish(slurm, REGION, None) is None and not ws.accepted
    # a workspace that does not know these credentials: 403, named
    other = amp_standin.Workspace(prom.url, {"AKIDOTHER": "secret"}, region=REGION)
    try:
        stack("denied-stack", "denied", other.url + "/api/v1/remote_write")
        result = eks_nccl_result("denied")
        before = result.to_dict()
        note = publish.publish(result, REGION, None)
        assert note is not None and note.startswith("hpq: note: the result's metrics were not sent")
        assert "HTTP 403" in note and "aps:RemoteWrite" in note and "\n" not in note
        assert result.to_dict() == before and other.refused
    finally:
        other.close()
    stack("gone-stack", "gone", "http://127.0.0.1:9/workspaces/ws-x/api/v1/remote_write")
    note = publish.publish(eks_nccl_result("gone"), REGION, None)
    assert note is not None and "cannot reach the workspace endpoint" in note


def test_a_write_past_one_snappy_literal_chunk_arrives_whole(workspace):
    """2,000 series make a WriteRequest of well over 64 KiB: several literal chunks, all decoded by Prometheus."""
    prom, ws = workspace
    now = int(time.time())
    series = [({"__name__": "hpq_remote_write_probe", "i": str(i), "pad": "x" * 40}, float(i), now * 1000)
              for i in range(2000)]
    assert len(remote_write.encode_write_request(series)) > 3 * 65536
    session = make_session(REGION)
    assert remote_write.write(session, ws.url + "/api/v1/remote_write", REGION, series) == 2000
    assert query_at(prom, "count(hpq_remote_write_probe)", now) == 2000
    assert query_at(prom, "sum(hpq_remote_write_probe)", now) == sum(range(2000))


def test_a_broken_encoding_is_refused_by_the_real_decoder(workspace):
    """The twins the docs name: the same request with the Sample's value under the wrong wire type (protobuf:
    32-bit where a double is 64-bit) or the Snappy block's length prefix off by one: Prometheus's receiver
    refuses both (400), and nothing is stored."""
    prom, ws = workspace
    series = [({"__name__": "hpq_remote_write_twin", "i": "0"}, 1.0, int(time.time()) * 1000)]
    good = remote_write.encode_write_request(series)
    value = bytes([1 << 3 | 1]) + struct.pack("<d", 1.0)  # Sample.value = 1, 64-bit, then the double
    assert good.count(value) == 1
    wrong_field = good.replace(value, bytes([1 << 3 | 5]) + struct.pack("<d", 1.0))  # the same field as 32-bit
    block = remote_write.snappy_literal(good)
    short_length = bytes([block[0] - 1]) + block[1:]  # the block's own varint length, one short
    session = make_session(REGION)
    url = ws.url + "/api/v1/remote_write"
    for body in (remote_write.snappy_literal(wrong_field), short_length):
        with pytest.raises(remote_write.WriteError, match="HTTP 400"):
            remote_write.post(session, url, REGION, body)
    assert query(prom, "hpq_remote_write_twin") == []
    remote_write.post(session, url, REGION, block)  # and the untouched request is taken
    assert len(query(prom, "hpq_remote_write_twin")) == 1


def query_at(prom: amp_standin.PrometheusServer, promql: str, at: int) -> float:
    url = prom.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": str(at)})
    with urllib.request.urlopen(url, timeout=10) as resp:
        return float(json.loads(resp.read())["data"]["result"][0]["value"][1])


def test_an_eks_doctor_sends_each_nodes_findings(workspace):
    """hpq doctor on EKS: each node's report (validation/doctor.py NodeResult) becomes that node's series, as the
    node's own file would on Slurm; the finding is the node checks' own on the driver's Xid 79 line format."""
    from hpq.scripts import node_checks
    from hpq.validation.doctor import NodeResult
    from hpq.validation.result import TestResult

    prom, ws = workspace
    stack("doc-stack", "doc", ws.url + "/api/v1/remote_write")
    xid = node_checks.parse_xids("[ 9.1] NVRM: Xid (PCI:0000:53:00): 79, pid=1, GPU has fallen off the bus.\n")
    sick = NodeResult("hyperpod-i-0a1", "FAIL", [asdict(f) for f in node_checks.judge_xids(xid)],
                      instance_type="ml.p5.48xlarge")
    well = NodeResult("hyperpod-i-0a2", "PASS", instance_type="ml.p5.48xlarge")
    result = TestResult("doctor", "eks", "doc", "FAIL", 1, "FAIL ...",
                        data={"nodes": [sick.to_dict(), well.to_dict()]})
    note = publish.publish(result, REGION, None)
    assert note is not None and note.startswith("hpq: result metrics: "), note
    rows = query(prom, 'hpq_doctor_findings{cluster="doc", severity="critical"}')
    assert [(r["metric"]["node"], r["value"][1]) for r in rows] == [("hyperpod-i-0a1", "1")]
    verdicts = query(prom, 'hpq_result_verdict{cluster="doc", test="doctor"} == 1')
    assert sorted((r["metric"]["node"], r["metric"]["verdict"]) for r in verdicts) == [
        ("hyperpod-i-0a1", "FAIL"), ("hyperpod-i-0a2", "PASS")]


def test_an_eks_sweep_sends_each_nodes_score_and_names_the_slow_one(workspace, tmp_path):
    """The sweep's node table is its evidence (TestResult.to_dict() keeps only a count under ``nodes``): the
    report of 6 nodes where every pair with n6 runs at 30 GB/s, judged by hpq's sweep judge from the log that
    carries it, reaches the workspace with n6 slow and the others not."""
    from tests.observability.test_result_metrics import sweep_result

    prom, ws = workspace
    stack("sweep-stack", "sw", ws.url + "/api/v1/remote_write")
    raw = RawOutcome(1, "pairs ran\n" + sweep_result(tmp_path).read_text() + "\n", command="hpq-sweep-1")
    result = judges.judge_sweep(TestRequest("sweep", 6), raw, "ml.p5.48xlarge", "eks", "sw")
    assert isinstance(result.to_dict()["nodes"], int)  # the trap: the summary's count over the table
    note = publish.publish(result, REGION, None)
    assert note is not None and note.startswith("hpq: result metrics: "), note
    rows = query(prom, 'hpq_sweep_node_slow{cluster="sw"}')
    assert {r["metric"]["node"]: r["value"][1] for r in rows} == {"n1": "0", "n2": "0", "n3": "0", "n4": "0",
                                                                   "n5": "0", "n6": "1"}
