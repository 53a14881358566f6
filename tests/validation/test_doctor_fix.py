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
    """The controller's shell: run-node-doctor answers with each node's report for its machine's state now."""

    def __init__(self, reports: dict[str, tuple[dict, dict]], sick: set[str]):
        self.reports, self.sick = reports, sick  # node -> (healthy report, sick report)
        self.commands: list[str] = []
        self.drained: set[str] = set()

    def run(self, command, echo=None, timeout=None, on_stderr_line=None):
        self.commands.append(command)
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
