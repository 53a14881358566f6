"""`hpq doctor` on an EKS cluster: node_doctor as one Job per node, judged by the same judge as on Slurm, and the
fix loop with cordon/uncordon and HyperPod's Batch APIs.

The Kubernetes API is the local HTTPS stand-in of tests/kube_standins.FakeKube (no real API server runs here):
it plays each Job out (a pod pinned with ``nodeName`` prints the log given for that node, the Job ends as the
node's scenario says, or never), and serves ``PATCH /api/v1/nodes/NAME`` as the API server does (patch media
types only, 404 for an unknown node). HyperPod's node API is standins/hyperpod_api.EmulatedHyperPodApi, which
validates against botocore's SageMaker model. Node names are HyperPod's on EKS, ``hyperpod-<instance id>``
(``kubectl get nodes`` in aws-solutions-library-samples/guidance-for-protein-language-esm-model-training-with-
nvidia-bionemo-framework, source/hyperpod_eks/README.md). The node reports are node_doctor's real checks over the
real H200 captures (tests/validation/test_doctor_judge._report).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpq.kube.kube import KubeError
from hpq.lifecycle import bundle
from hpq.scripts import outcome
from hpq.standins.hyperpod_api import EmulatedHyperPodApi, EmulatedNode
from hpq.validation import doctor_fix, eks_doctor
from hpq.validation.backend import ClusterFacts, run_test
from hpq.validation.eks import EksBackend, EksOptions
from hpq.validation.request import DOCTOR, TestRequest
from tests.kube_standins import create_eks_cluster, kube_client
from tests.validation.test_doctor_judge import XID_79, _real, _report
from tests.validation.test_validation_eks import REGION, api_to, described, run_cli, stub_describe

CLUSTER = "hp-eks"
IDS = ["i-0123456789abcdef0", "i-0123456789abcdef1", "i-0123456789abcdef2"]
NODES = [doctor_fix.eks_node_name(i) for i in IDS]
P5 = "ml.p5.48xlarge"


def _backend(kube) -> EksBackend:
    return EksBackend(CLUSTER, EksOptions(), lambda: kube_client(kube), ClusterFacts(CLUSTER, "eks", P5), poll_s=0.05)


def _log(report: dict) -> list[str]:
    return ["node_doctor: progress", json.dumps(report)]


@pytest.fixture
def reports(tmp_path, monkeypatch):
    """node -> (healthy report, report with an Xid 79 in the kernel log)."""
    return {n: (_report(tmp_path, monkeypatch, n), _report(tmp_path, monkeypatch, n + "-sick", kernel=XID_79))
            for n in NODES}


def _cluster(fake_kube, reports, sick: set[str] = frozenset()):
    fake_kube.add_nodes(P5, 3, names=NODES)
    fake_kube.add_nodes("m5.xlarge", 1, names=["ip-10-0-0-9.ec2.internal"])  # not HyperPod's: not checked
    fake_kube.scenario["node_logs"] = {n: _log(reports[n][1] if n in sick else reports[n][0]) for n in NODES}
    # node_doctor exits 1 on a critical finding: with backoffLimit 0 the Job is Failed, its log still the report
    fake_kube.scenario["node_final"] = {n: "Failed" for n in sick}
    return fake_kube


def test_node_doctor_travels_with_every_module_it_imports(tmp_path):
    """The ConfigMap's files alone run node_doctor (python3 -S: no site, so no installed hpq to fall back on);
    the broken twin, one module left out, does not."""
    src = bundle.node_bundle_files()

    def stage(keys, where):
        for key in keys:
            (where / key).parent.mkdir(parents=True, exist_ok=True)
            (where / key).write_text(open(src[key], encoding="utf-8").read())
        return subprocess.run([sys.executable, "-S", "-m", "hpq.scripts.node_doctor", "--help"], cwd=where,
                              env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)

    assert stage(eks_doctor.import_closure(), tmp_path / "all").returncode == 0
    broken = stage([k for k in eks_doctor.import_closure() if not k.endswith("node_checks.py")], tmp_path / "short")
    assert broken.returncode != 0 and "node_checks" in broken.stderr
    assert set(eks_doctor.modules()) == {k.replace("/", ".") for k in eks_doctor.import_closure()}


def test_a_job_per_node_pinned_privileged_and_cleaned_up(fake_kube, reports):
    kube = _cluster(fake_kube, reports)
    result = run_test(_backend(kube), TestRequest(DOCTOR, timeout_s=30), lambda line: None)
    assert result.outcome == outcome.PASS and result.exit_code == 0, result.message
    assert [n["node"] for n in result.data["nodes"]] == NODES
    jobs = [o for o in kube.created if o["kind"] == "Job"]
    pods = [j["spec"]["template"]["spec"] for j in jobs]
    assert sorted(p["nodeName"] for p in pods) == NODES  # one per HyperPod node, the m5 node left alone
    assert all(p["hostPID"] and p["containers"][0]["securityContext"] == {"privileged": True} for p in pods)
    assert all(j["spec"]["backoffLimit"] == 0 and j["spec"]["activeDeadlineSeconds"] > 0 for j in jobs)
    assert f"--instance-type {P5}" in pods[0]["containers"][0]["command"][-1]
    assert not kube.objects  # the Jobs and the ConfigMap are gone


def test_the_sick_node_is_named_with_its_action_the_same_judge_as_slurm(fake_kube, reports):
    kube = _cluster(fake_kube, reports, sick={NODES[1]})
    result = run_test(_backend(kube), TestRequest(DOCTOR, timeout_s=30), lambda line: None)
    assert result.outcome == outcome.FAIL and result.exit_code == 1
    assert {(f["node"], f["kind"], f["action"]) for f in result.data["findings"]
            if f["severity"] == "critical"} == {(NODES[1], "xid", "reboot")}


def test_a_node_that_does_not_answer_is_inconclusive_never_pass(fake_kube, reports):
    kube = _cluster(fake_kube, reports)
    kube.scenario["hang"] = [NODES[2]]
    result = run_test(_backend(kube), TestRequest(DOCTOR, timeout_s=2), lambda line: None)
    assert result.outcome == outcome.INCONCLUSIVE and result.exit_code == 3
    silent = {n["node"]: n for n in result.data["nodes"]}[NODES[2]]
    assert silent["verdict"] == outcome.INCONCLUSIVE and "no answer" in silent["error"]
    assert not kube.objects  # the hung Job is deleted too


def test_a_job_without_a_report_is_inconclusive(fake_kube, reports):
    kube = _cluster(fake_kube, reports)
    kube.scenario["node_logs"][NODES[0]] = ["nsenter: can't execute 'python3': No such file or directory"]
    kube.scenario["node_final"] = {NODES[0]: "Failed"}
    result = run_test(_backend(kube), TestRequest(DOCTOR, timeout_s=30), lambda line: None)
    assert result.outcome == outcome.INCONCLUSIVE
    entry = {n["node"]: n for n in result.data["nodes"]}[NODES[0]]
    assert "no report" in entry["error"] and "python3" in entry["error"]


def test_cordon_is_refused_as_the_api_server_refuses_it(fake_kube):
    kube = fake_kube
    kube.add_nodes(P5, 1, names=NODES[:1])
    client = kube_client(kube)
    with pytest.raises(KubeError) as exc:
        client.cordon("hyperpod-i-0000000000000dead")
    assert exc.value.status == 404
    with pytest.raises(KubeError) as exc:  # a plain JSON body is not a patch
        client.request("PATCH", f"/api/v1/nodes/{NODES[0]}", body={"spec": {"unschedulable": True}})
    assert exc.value.status == 415
    client.cordon(NODES[0])
    assert kube.nodes[0]["spec"] == {"unschedulable": True}
    assert "not found" in _backend(kube).drain("hyperpod-i-0000000000000dead", "x")
    client.cordon(NODES[0], False)
    assert kube.nodes[0]["spec"] == {}


def test_plan_on_eks_cordons_and_names_the_instance(fake_kube, reports):
    kube = _cluster(fake_kube, reports, sick={NODES[1]})
    backend = _backend(kube)
    api = _api()
    first = run_test(backend, TestRequest(DOCTOR, timeout_s=30), lambda line: None)
    view = doctor_fix.hyperpod_view(api, CLUSTER, "eks")
    assert set(view) == set(NODES) and view[NODES[1]].instance_id == IDS[1]
    steps = doctor_fix.plan(first.data["nodes"], view, CLUSTER, doctor_fix.actions_for(backend))
    assert [(s.node, s.action, s.command) for s in steps] == [
        (NODES[1], "drain", f"kubectl cordon {NODES[1]}"),
        (NODES[1], "reboot", f"aws sagemaker batch-reboot-cluster-nodes --cluster-name {CLUSTER} --node-ids {IDS[1]}")]


def _api(**kw) -> EmulatedHyperPodApi:
    nodes = [EmulatedNode(i, "workers", P5, f"ip-10-1-0-{k}.us-west-2.compute.internal") for k, i in enumerate(IDS)]
    return EmulatedHyperPodApi(CLUSTER, "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdefabcdef", nodes,
                               settle_s=0.2, **kw)


@pytest.mark.parametrize("reboot_heals", [True, False])
def test_fix_cordons_reboots_waits_uncordons_and_rechecks(fake_kube, reports, reboot_heals):
    """--fix on EKS passes only when the rebooted node passes again; the twin (a reboot that does not clear
    the fault) is a FAIL."""
    kube = _cluster(fake_kube, reports, sick={NODES[1]})

    def rebooted(node: EmulatedNode) -> None:
        if reboot_heals:
            name = doctor_fix.eks_node_name(node.instance_id)
            kube.scenario["node_logs"][name] = _log(reports[name][0])
            kube.scenario["node_final"] = {}

    api = _api(on_reboot=rebooted)
    backend = _backend(kube)
    first = run_test(backend, TestRequest(DOCTOR, timeout_s=30), lambda line: None)
    steps = doctor_fix.plan(first.data["nodes"], doctor_fix.hyperpod_view(api, CLUSTER, "eks"), CLUSTER,
                            doctor_fix.actions_for(backend))
    report = doctor_fix.fix(CLUSTER, steps, backend, api, TestRequest(DOCTOR, timeout_s=30), 30, lambda line: None,
                            poll_s=0.1)
    assert ("BatchRebootClusterNodes", {"ClusterName": CLUSTER, "NodeIds": [IDS[1]]}) in api.calls
    assert [p for p in kube.patches if p[0] == NODES[1]] == [(NODES[1], {"spec": {"unschedulable": True}}),
                                                              (NODES[1], {"spec": {"unschedulable": False}})]
    if reboot_heals:
        assert (report["exit_code"], report["outcome"]) == (0, "PASS"), report["message"]
    else:
        assert (report["exit_code"], report["outcome"]) == (1, "FAIL")


def test_hpq_doctor_on_an_eks_described_cluster(moto_aws, fake_kube, reports, monkeypatch, capsys):
    """`hpq doctor my-hp --output json`: DescribeCluster says EKS, the Jobs run on its API, the sick node is
    named and the plan cordons it (HyperPod's node list comes from moto, which does not know this cluster:
    the view is reported missing and the reboot step says why it cannot act)."""
    eks = create_eks_cluster("hp-eks-for-doctor")
    stub_describe(monkeypatch, described("my-hp", {"Eks": {"ClusterArn": eks["arn"]}}, P5))
    api_to(monkeypatch, fake_kube)
    _cluster(fake_kube, reports, sick={NODES[0]})
    code, out, err = run_cli(capsys, "doctor", "my-hp", "--region", REGION, "--output", "json", "--timeout", "30")
    doc = json.loads(out)
    assert (code, doc["backend"], doc["outcome"]) == (1, "eks", "FAIL"), err
    assert doc["plan"][0]["command"] == f"kubectl cordon {NODES[0]}"
    assert [o["kind"] for o in fake_kube.created].count("Job") == 3 and fake_kube.objects == {}
    # The verdict is saved for `hpq status` (hpq.validation.saved; XDG_STATE_HOME: the test's own, tests/conftest.py).
    from hpq.validation import saved

    kept = json.loads((saved.folder(REGION, "my-hp") / "doctor.json").read_text())
    assert (kept["outcome"], kept["exit_code"], kept["backend"]) == ("FAIL", 1, "eks")
    assert [r["outcome"] for r in saved.latest(REGION, "my-hp")] == ["FAIL"]


def _row_remap_failure(tmp_path, monkeypatch, node: str) -> dict:
    """A report whose first GPU is out of spare rows (the real H200 capture, ``remapped_row_failure`` Yes): replace."""
    smi = _real("nvidia-smi-q-x").replace("<remapped_row_failure>No<", "<remapped_row_failure>Yes<", 1)
    return _report(tmp_path, monkeypatch, node + "-remap", smi=smi)


@pytest.mark.parametrize("case", ["heals", "never_ready", "other_group"])
def test_fix_follows_a_replaced_node_to_its_new_kubernetes_node(fake_kube, reports, tmp_path, monkeypatch, case):
    """After BatchReplaceClusterNodes the node comes back as a new instance of its group, registered as a new
    Kubernetes node ``hyperpod-<new id>`` (the old Node object goes with the old instance). --fix finds the new
    instance in ListClusterNodes (same InstanceGroupName, an id not listed before), waits for it Running and its
    Kubernetes node Ready, re-checks that node (no uncordon: a new Node is registered schedulable) and names the
    old and the new id. Twins: the new node never Ready is INCONCLUSIVE within the bound; a stand-in that puts the
    new instance in another group is not taken for the replacement (INCONCLUSIVE, the other node not named)."""
    kube = _cluster(fake_kube, reports)
    sick = _row_remap_failure(tmp_path, monkeypatch, NODES[1])
    kube.scenario["node_logs"][NODES[1]] = _log(sick)
    kube.scenario["node_final"] = {NODES[1]: "Failed"}

    def replaced(node: EmulatedNode) -> None:
        if case == "other_group":
            node.group = "spares"
        name = doctor_fix.eks_node_name(node.instance_id)
        kube.nodes[:] = [n for n in kube.nodes if n["metadata"]["name"] != NODES[1]]
        kube.add_nodes(P5, 1, ready=case != "never_ready", names=[name])
        kube.scenario["node_logs"][name] = _log(reports[NODES[1]][0])
        kube.scenario["node_final"] = {}

    api = _api(on_replace=replaced)
    backend = _backend(kube)
    first = run_test(backend, TestRequest(DOCTOR, timeout_s=30), lambda line: None)
    steps = doctor_fix.plan(first.data["nodes"], doctor_fix.hyperpod_view(api, CLUSTER, "eks"), CLUSTER,
                            doctor_fix.actions_for(backend))
    assert [(s.node, s.action) for s in steps] == [(NODES[1], "drain"), (NODES[1], "replace")]
    lines: list[str] = []
    report = doctor_fix.fix(CLUSTER, steps, backend, api, TestRequest(DOCTOR, timeout_s=30), 3, lines.append,
                            poll_s=0.1)
    assert ("BatchReplaceClusterNodes", {"ClusterName": CLUSTER, "NodeIds": [IDS[1]]}) in api.calls
    new_id = next(i for i in api.nodes if i not in IDS)
    new_name = doctor_fix.eks_node_name(new_id)
    assert [p for p in kube.patches if p[1] == {"spec": {"unschedulable": False}}] == []  # nothing uncordoned
    followed = report["followed"][0]
    if case == "heals":
        assert (report["exit_code"], report["outcome"]) == (0, "PASS"), report["message"]
        assert f"{new_name} PASS (replaced {NODES[1]} {IDS[1]} by {new_id})" in report["message"]
        assert (followed["instance_id"], followed["ready"], followed["back"]) == (new_id, "Ready", True)
        assert any("no uncordon" in line for line in lines)
        # No pinned pair on EKS: said plainly, INCONCLUSIVE, and no MPIJob created for it.
        assert [(p["node"], p["ran"], p["outcome"]) for p in report["pairs"]] == [(new_name, False, "INCONCLUSIVE")]
        assert "cannot be pinned to two named nodes" in report["message"]
        assert "MPIJob" not in [o["kind"] for o in kube.created]
    elif case == "never_ready":
        assert (report["exit_code"], report["outcome"]) == (3, "INCONCLUSIVE"), report["message"]
        assert (followed["instance_id"], followed["status"], followed["ready"]) == (new_id, "Running", "NotReady")
        assert "not back (HyperPod Running, Kubernetes NotReady)" in report["message"]
    else:
        assert (report["exit_code"], report["outcome"]) == (3, "INCONCLUSIVE"), report["message"]
        assert followed["instance_id"] == "" and new_id not in report["message"]
        assert "no new instance in group workers" in report["message"]
