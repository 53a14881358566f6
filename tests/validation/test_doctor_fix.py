"""``hpq doctor --fix`` against the emulated HyperPod node API (standins/hyperpod_api.py).

The emulation validates each request against botocore's own SageMaker model and the API reference's extra
constraints, so these tests first prove it refuses what the real API refuses (with the documented error codes),
then drive the fix loop: plan -> drain -> BatchRebootClusterNodes / BatchReplaceClusterNodes -> wait for Running
-> resume -> the doctor again. The node reports come from node_doctor's real checks over the real H200 captures
(tests/test_doctor_judge._report); the controller's shell answers run-node-doctor with the report of the node's
current machine state (sick until HyperPod rebooted or replaced it) and records the scontrol commands.
"""

from __future__ import annotations

import json

import botocore.session
import pytest
from botocore.exceptions import ClientError, ParamValidationError

from hpq.scripts import outcome
from hpq.standins.hyperpod_api import EmulatedHyperPodApi, EmulatedNode
from hpq.validation import doctor_fix
from hpq.validation.backend import ClusterFacts
from hpq.validation.request import DOCTOR, TestRequest
from hpq.validation.slurm import SlurmBackend
from tests.nccl_logs import allreduce_log, efa_info
from tests.validation.test_doctor_judge import XID_79, _report

CLUSTER = "c1"
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdefabcdef"
IDS = ["i-0123456789abcdef0", "i-0123456789abcdef1", "i-0123456789abcdef2"]
HOSTS = ["ip-10-1-0-1", "ip-10-1-0-2", "ip-10-1-0-3"]


def _api(**kw) -> EmulatedHyperPodApi:
    nodes = [EmulatedNode(i, "workers", "ml.p5.48xlarge", f"{h}.us-west-2.compute.internal")
             for i, h in zip(IDS, HOSTS, strict=True)]
    return EmulatedHyperPodApi(CLUSTER, ARN, nodes, settle_s=0.2, **kw)


def _code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def test_the_emulation_refuses_what_the_api_refuses():
    api = _api()
    with pytest.raises(ParamValidationError):  # ClusterName is required (botocore's model)
        api.batch_reboot_cluster_nodes(NodeIds=IDS[:1])
    with pytest.raises(ParamValidationError):  # NodeIds is a list of strings
        api.batch_reboot_cluster_nodes(ClusterName=CLUSTER, NodeIds=IDS[0])
    with pytest.raises(ClientError) as exc:
        api.batch_reboot_cluster_nodes(ClusterName="other", NodeIds=IDS[:1])
    assert _code(exc) == "ResourceNotFound"
    with pytest.raises(ClientError) as exc:
        api.batch_replace_cluster_nodes(ClusterName=CLUSTER, NodeIds=["i-0123456789abcdef%x" % (i % 16)
                                                                      for i in range(26)])
    assert _code(exc) == "ValidationException"
    with pytest.raises(ClientError) as exc:
        api.batch_reboot_cluster_nodes(ClusterName=CLUSTER, NodeIds=["ip-10-1-0-1"])  # a host name, not an id
    assert _code(exc) == "ValidationException"
    with pytest.raises(ClientError) as exc:
        api.batch_reboot_cluster_nodes(ClusterName=CLUSTER)
    assert _code(exc) == "ValidationException"
    answer = api.batch_reboot_cluster_nodes(ClusterName=ARN, NodeIds=[IDS[0], "i-00000000"])
    assert answer["Successful"] == [IDS[0]]
    assert answer["Failed"] == [{"NodeId": "i-00000000", "ErrorCode": "InstanceIdNotFound",
                                 "Message": "Instance i-00000000 does not exist in the cluster."}]
    again = api.batch_replace_cluster_nodes(ClusterName=CLUSTER, NodeIds=[IDS[0]])  # still rebooting
    assert again["Failed"][0]["ErrorCode"] == "InvalidInstanceStatus"


def test_the_emulation_answers_in_the_api_shapes():
    model = botocore.session.get_session().get_service_model("sagemaker")
    api = _api()
    for op, answer in (("ListClusterNodes", api.list_cluster_nodes(ClusterName=CLUSTER)),
                       ("DescribeClusterNode", api.describe_cluster_node(ClusterName=CLUSTER, NodeId=IDS[1])),
                       ("BatchRebootClusterNodes", api.batch_reboot_cluster_nodes(ClusterName=CLUSTER,
                                                                                  NodeIds=IDS[:1]))):
        shape = model.operation_model(op).output_shape
        assert set(answer) <= set(shape.members), op
    summary = api.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"][1]
    member = model.shape_for("ClusterNodeSummary")
    assert set(summary) <= set(member.members)
    assert summary["InstanceStatus"]["Status"] in model.shape_for("ClusterInstanceStatus").enum


def test_hyperpod_view_and_plan_name_the_instance_and_the_exact_commands():
    view = doctor_fix.hyperpod_view(_api(), CLUSTER)
    assert sorted(view) == HOSTS and view["ip-10-1-0-2"].instance_id == IDS[1]
    nodes = [{"node": "ip-10-1-0-2", "action": "reboot", "findings": [
                 {"kind": "xid", "severity": "critical", "action": "reboot", "evidence": "Xid 79 on 0000:00:07"}]},
             {"node": "ip-10-1-0-3", "action": "none", "findings": []},
             {"node": "ip-10-9-9-9", "action": "replace", "findings": [
                 {"kind": "row_remap_failure", "severity": "critical", "action": "replace", "evidence": "x"}]}]
    steps = doctor_fix.plan(nodes, view, CLUSTER)
    assert [(s.node, s.action) for s in steps] == [("ip-10-1-0-2", "drain"), ("ip-10-1-0-2", "reboot"),
                                                    ("ip-10-9-9-9", "drain"), ("ip-10-9-9-9", "replace")]
    assert steps[0].command.startswith("sudo scontrol update NodeName=ip-10-1-0-2 State=DRAIN Reason='hpq doctor: xid")
    assert steps[1].command == f"aws sagemaker batch-reboot-cluster-nodes --cluster-name c1 --node-ids {IDS[1]}"
    assert steps[3].error and not steps[3].command  # HyperPod does not list it: no id to act on


class Controller:
    """The controller's shell: run-node-doctor answers with each node's report for its machine's state now;
    ``run-nccl-test 2 --nodelist A,B`` with nccl-tests' all_reduce_perf table of those two hosts over EFA
    (tests/nccl_logs.py), at 480 GB/s (p5's two-node figure passes) or at 30 GB/s where a node is in ``slow``
    (exit 0 all the same: the nccl judge here must see it)."""

    def __init__(self, reports: dict[str, tuple[dict, dict]], sick: set[str], slow: set[str] = frozenset()):
        self.reports, self.sick, self.slow = reports, sick, slow  # node -> (healthy report, sick report)
        self.commands: list[str] = []
        self.drained: set[str] = set()

    def run(self, command, echo=None, timeout=None, on_stderr_line=None):
        self.commands.append(command)
        if command.startswith("run-nccl-test"):
            hosts = command.split("--nodelist ")[1].split()[0].split(",")
            busbw = 30.0 if self.slow & set(hosts) else 480.0
            log = allreduce_log(hosts, 8, busbw, nccl_info=efa_info(hosts[0]))
            if echo:
                echo(log.encode())
            return 0, log, ""
        if command.startswith("sudo scontrol update"):
            node = command.split("NodeName=")[1].split()[0]
            (self.drained.add if "DRAIN" in command else self.drained.discard)(node)
            return 0, "", ""
        entries = []
        for node, (healthy, sick) in self.reports.items():
            if node in self.drained:
                entries.append({"node": node, "state": "drained", "report": None, "error": "drained: not checked"})
            else:
                entries.append({"node": node, "state": "idle", "report": sick if node in self.sick else healthy})
        return 0, json.dumps({"nodes": entries, "seconds": 0.1}), ""


@pytest.fixture
def reports(tmp_path, monkeypatch):
    return {h: (_report(tmp_path, monkeypatch, h), _report(tmp_path, monkeypatch, h + "-sick", kernel=XID_79))
            for h in HOSTS}


def _fix(controller: Controller, api: EmulatedHyperPodApi):
    backend = SlurmBackend(controller, ClusterFacts(CLUSTER, "slurm", "ml.p5.48xlarge"))
    first = doctor_fix.run_test(backend, TestRequest(DOCTOR), lambda line: None)
    steps = doctor_fix.plan(first.data["nodes"], doctor_fix.hyperpod_view(api, CLUSTER), CLUSTER)
    return first, steps, doctor_fix.fix(CLUSTER, steps, backend, api, TestRequest(DOCTOR), 30, lambda line: None,
                                        poll_s=0.1)


def test_fix_reboots_the_sick_node_and_passes_only_when_it_passes_again(reports):
    for healthy, sick in reports.values():
        sick["node"] = healthy["node"]
    controller = Controller(reports, {"ip-10-1-0-2"})
    api = _api(on_reboot=lambda n: controller.sick.discard(n.hostname.split(".")[0]))
    first, steps, report = _fix(controller, api)
    assert first.outcome == outcome.FAIL
    assert report["exit_code"] == 0 and report["outcome"] == "PASS", report["message"]
    assert ("BatchRebootClusterNodes", {"ClusterName": CLUSTER, "NodeIds": [IDS[1]]}) in api.calls
    assert controller.commands[1].startswith("sudo scontrol update NodeName=ip-10-1-0-2 State=DRAIN")
    assert "sudo scontrol update NodeName=ip-10-1-0-2 State=RESUME" in controller.commands
    # The twin: a reboot that does not clear the fault is not a fix.
    controller = Controller(reports, {"ip-10-1-0-2"})
    first, steps, report = _fix(controller, _api())
    assert report["exit_code"] == 1 and "ip-10-1-0-2 FAIL" in report["message"]


def test_fix_reports_what_the_api_refused(reports):
    for healthy, sick in reports.values():
        sick["node"] = healthy["node"]
    controller = Controller(reports, {"ip-10-1-0-3"})
    api = _api()
    api.nodes[IDS[2]].status = "SystemUpdating"  # HyperPod is busy with it: the API refuses to reboot it
    first, steps, report = _fix(controller, api)
    assert report["exit_code"] == 1
    assert "InvalidInstanceStatus" in report["message"]


def test_cluster_events_in_the_api_shape_newest_first_and_refused_where_the_api_refuses():
    """ListClusterEvents (botocore's model: ClusterEventSummary; the API answers only in Continuous provisioning
    mode): a reboot and a replacement are recorded, read back newest first across pages by cluster_events."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    api = _api()
    assert doctor_fix.cluster_events(api, CLUSTER) == []  # nothing happened yet: nothing shown, not an error
    api.batch_reboot_cluster_nodes(ClusterName=CLUSTER, NodeIds=[IDS[0]])
    api.batch_replace_cluster_nodes(ClusterName=CLUSTER, NodeIds=[IDS[1]])
    page = api.list_cluster_events(ClusterName=CLUSTER, MaxResults=1)
    assert set(page) <= set(model.operation_model("ListClusterEvents").output_shape.members)
    summary = model.shape_for("ClusterEventSummary")
    for e in api.events:
        assert set(summary.required_members) <= set(e) <= set(summary.members)
        assert e["ResourceType"] in summary.members["ResourceType"].enum
        assert e["EventLevel"] in summary.members["EventLevel"].enum
    assert len(page["Events"]) == 1 and page["NextToken"]
    events = doctor_fix.cluster_events(api, CLUSTER)
    assert [e["instance_id"] for e in events][1] == IDS[0]  # the reboot came first: second, newest first
    assert "replaced" in events[0]["description"] and events[0]["instance_id"] != IDS[1]
    only = api.list_cluster_events(ClusterName=CLUSTER, NodeId=IDS[0])["Events"]
    assert [e["InstanceId"] for e in only] == [IDS[0]]
    with pytest.raises(ParamValidationError):  # ClusterName is required
        api.list_cluster_events(NodeId=IDS[0])
    with pytest.raises(ClientError) as exc:
        doctor_fix.cluster_events(_api(continuous=False), CLUSTER)
    assert _code(exc) == "ValidationException"


def _sweep_doc(slow: str | None) -> dict:
    """scripts/sweep.build_report over the pairs of the three hosts, each pair as fast as its slower node
    (``slow`` at a third of the others' speed): the document `hpq test sweep --output json` carries."""
    from hpq.scripts import sweep

    speed = {h: (30.0 if h == slow else 90.0) for h in HOSTS}
    pairs = [sweep.PairResult(r, (a, b), sweep.OK, busbw_gbps=min(speed[a], speed[b]))
             for r, rnd in enumerate(sweep.schedule(HOSTS), 1) for a, b in rnd]
    return json.loads(json.dumps(sweep.build_report(HOSTS, pairs, 1, 1 << 28)))


def test_the_sweeps_slow_node_feeds_the_plan_and_fix(reports):
    """A node the doctor finds healthy but the sweep finds slow: a slow_node finding (reboot) on it, the same plan
    (drain, then BatchRebootClusterNodes with its instance id) and --fix; a sweep with no slow node adds nothing
    (the twin), and what is not a sweep's document is refused in one line."""
    healthy = _sweep_doc(None)
    slow = _sweep_doc(HOSTS[2])
    assert healthy["slow_nodes"] == [] and slow["slow_nodes"] == [HOSTS[2]]
    controller = Controller(reports, sick=set())
    backend = SlurmBackend(controller, ClusterFacts(CLUSTER, "slurm", "ml.p5.48xlarge"))
    first = doctor_fix.run_test(backend, TestRequest(DOCTOR), lambda line: None)
    assert all(n["action"] == "none" for n in first.data["nodes"])
    assert doctor_fix.merge_sweep(first.data["nodes"], healthy) == first.data["nodes"]
    merged = doctor_fix.merge_sweep(first.data["nodes"], slow)
    node = next(n for n in merged if n["node"] == HOSTS[2])
    assert (node["verdict"], node["action"], [f["kind"] for f in node["findings"]]) == ("FAIL", "reboot", ["slow_node"])
    assert "30.00 GB/s against the cluster median" in node["findings"][0]["evidence"]
    api = _api()
    steps = doctor_fix.plan(merged, doctor_fix.hyperpod_view(api, CLUSTER), CLUSTER)
    assert [(s.node, s.action) for s in steps] == [(HOSTS[2], "drain"), (HOSTS[2], "reboot")]
    assert steps[1].command.endswith(IDS[2])
    report = doctor_fix.fix(CLUSTER, steps, backend, api, TestRequest(DOCTOR), 30, lambda line: None, poll_s=0.1)
    assert report["exit_code"] == 0, report["message"]  # rebooted, Running again, resumed, re-checked: PASS
    assert ("BatchRebootClusterNodes", {"ClusterName": CLUSTER, "NodeIds": [IDS[2]]}) in api.calls
    from hpq.errors import UsageError

    for bad in ({}, {"slow_nodes": "ip-10-1-0-3"}, []):
        with pytest.raises(UsageError):
            doctor_fix.merge_sweep(first.data["nodes"], bad)


def test_hpq_doctor_refuses_a_sweep_result_that_is_not_one_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    not_sweep = tmp_path / "report.json"
    not_sweep.write_text(json.dumps({"outcome": "PASS", "nodes": 2}))  # an nccl result, not a sweep's
    env = {**os.environ, "HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    for path in (str(tmp_path / "missing.json"), str(not_sweep)):
        res = subprocess.run([sys.executable, "-m", "hpq", "doctor", "my-cluster", "--sweep-result", path,
                              "--region", "us-west-2"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "--sweep-result" in res.stderr
        assert "Traceback" not in res.stderr


def test_fix_replaces_on_slurm_names_old_and_new_id_and_states_the_name_assumption(reports):
    """A replacement on Slurm: the new instance is found in ListClusterNodes (the group's instance not listed
    before), its Slurm name read from its PrivateDnsHostname (the emulation keeps the host name), RESUMEd and
    re-checked; the report names both ids and says the Slurm name is an assumption."""
    for healthy, sick in reports.values():
        sick["node"] = healthy["node"]
    controller = Controller(reports, {"ip-10-1-0-2"})
    api = _api(on_replace=lambda n: controller.sick.discard(n.hostname.split(".")[0]))
    backend = SlurmBackend(controller, ClusterFacts(CLUSTER, "slurm", "ml.p5.48xlarge"))
    first = doctor_fix.run_test(backend, TestRequest(DOCTOR), lambda line: None)
    nodes = [dict(n, action="replace") if n["node"] == "ip-10-1-0-2" else n for n in first.data["nodes"]]
    steps = doctor_fix.plan(nodes, doctor_fix.hyperpod_view(api, CLUSTER), CLUSTER)
    report = doctor_fix.fix(CLUSTER, steps, backend, api, TestRequest(DOCTOR), 30, lambda line: None, poll_s=0.1)
    new_id = next(i for i in api.nodes if i not in IDS)
    assert report["exit_code"] == 0, report["message"]
    assert f"ip-10-1-0-2 PASS (replaced ip-10-1-0-2 {IDS[1]} by {new_id}; assumed:" in report["message"]
    assert "sudo scontrol update NodeName=ip-10-1-0-2 State=RESUME" in controller.commands


@pytest.mark.parametrize("slow", [False, True])
def test_fix_pairs_the_fixed_node_with_a_healthy_one_in_a_pinned_nccl_test(reports, slow):
    """After the re-check passes, the fixed node and a healthy one (the first the re-check passed, not acted
    on) run `run-nccl-test 2 --nodelist FIXED,HEALTHY` through the controller, judged by the nccl judge: a
    healthy pair keeps the PASS; the twin, the same fix with the pair at 30 GB/s, is a FAIL (exit 1)."""
    for healthy, sick in reports.values():
        sick["node"] = healthy["node"]
    controller = Controller(reports, {"ip-10-1-0-2"}, slow={"ip-10-1-0-2"} if slow else set())
    api = _api(on_reboot=lambda n: controller.sick.discard(n.hostname.split(".")[0]))
    first, steps, report = _fix(controller, api)
    pair = [c for c in controller.commands if c.startswith("run-nccl-test")]
    assert pair == ["run-nccl-test 2 --nodelist ip-10-1-0-2,ip-10-1-0-1"]
    assert [(p["node"], p["partner"], p["ran"]) for p in report["pairs"]] == [("ip-10-1-0-2", "ip-10-1-0-1", True)]
    if slow:
        assert (report["exit_code"], report["outcome"], report["pairs"][0]["outcome"]) == (1, "FAIL", "FAIL")
        assert "ip-10-1-0-2 PASS (rebooted" in report["message"]  # the node's own re-check passed
        assert "sweep pair: ip-10-1-0-2+ip-10-1-0-1 FAIL" in report["message"]
    else:
        assert (report["exit_code"], report["pairs"][0]["outcome"]) == (0, "PASS"), report["message"]
        assert "sweep pair: ip-10-1-0-2+ip-10-1-0-1 PASS" in report["message"]


def test_no_pair_without_a_healthy_partner_is_said_not_passed(reports):
    """Every node sick and rebooted: no node the re-check passed was left alone to pair with, so no pair runs
    and the report says why (INCONCLUSIVE part, never a PASS of the pair)."""
    for healthy, sick in reports.values():
        sick["node"] = healthy["node"]
    controller = Controller(reports, set(HOSTS))
    api = _api(on_reboot=lambda n: controller.sick.discard(n.hostname.split(".")[0]))
    first, steps, report = _fix(controller, api)
    assert not [c for c in controller.commands if c.startswith("run-nccl-test")]
    assert {p["outcome"] for p in report["pairs"]} == {"INCONCLUSIVE"} and len(report["pairs"]) == 3
    assert "no healthy node the re-check passed to pair it with" in report["message"]
