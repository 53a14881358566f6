"""``hpq rehearse --fault NODE:KIND``: the doctor names the injected fault on its node with its action, and a
clean rehearsal with ``--doctor`` reports nothing.

Real: the whole rehearsal (namespaced nodes, the lifecycle, Slurm, SSH into the controller), run-node-doctor as
the lifecycle installed it, one ``srun`` per worker running node_doctor, the judge and the drift across
workers; the faults change what the worker's own paths show (rehearsal/faults.py: its kernel log, its
/opt/sagemaker volume, its NCCL library), not node code. Needs root, like every rehearsal test.
"""

from __future__ import annotations

import json

import pytest

from tests.rehearsal.test_rehearse import leftovers, rehearse

pytestmark = [pytest.mark.slow, pytest.mark.daemons, pytest.mark.root]


def _findings(r: dict) -> set[tuple[str, str, str]]:
    return {(f["node"], f["kind"], f["action"]) for f in r["doctor"]["findings"]}


def test_injected_faults_are_named_on_their_nodes_with_their_actions(env):
    res = rehearse(env, "slurm-gpu", "--nodes", "3", "--no-validate", "--fault", "worker-2:xid79",
                   "--fault", "worker-3:disk-full", "--fault", "worker-1:nccl-drift", "--output", "json")
    r = json.loads(res.stdout)
    assert res.returncode == 0 and r["result"] == "pass", res.stderr[-4000:]
    found = _findings(r)
    assert ("worker-2", "xid", "reboot") in found
    assert ("worker-3", "disk_full", "drain") in found
    assert ("worker-1", "drift", "replace") in found
    assert len(found) == 3, found  # nothing else, on no other node
    doc = r["doctor"]
    assert doc["outcome"] == "FAIL" and doc["exit_code"] == 1 and doc["missed"] == []
    by_node = {n["node"]: n for n in doc["nodes"]}
    assert by_node["worker-2"]["action"] == "reboot" and by_node["worker-3"]["action"] == "drain"
    assert "Xid" in next(f["evidence"] for f in doc["findings"] if f["node"] == "worker-2")
    # HyperPod's view beside it, and the plan as exact commands with the node's instance id.
    assert doc["hyperpod"]["worker-2"]["status"] == "Running"
    reboot = next(s for s in doc["plan"] if s["node"] == by_node["worker-2"]["host"] and s["action"] == "reboot")
    assert reboot["command"].endswith(doc["hyperpod"]["worker-2"]["instance_id"])
    assert leftovers(r["run_id"], res) == []


def test_gpu_and_efa_faults_on_an_efa_type_and_a_clean_worker_beside_them(env):
    """ml.g5.8xlarge has one EFA: the stand-in fi_info answers for it, so its EFA checks are judged (a healthy
    worker-4 PASSes with nothing unchecked) and fi_info failing is named; several faults share one rehearsal."""
    res = rehearse(env, "slurm-gpu", "--nodes", "4", "--instance-type", "ml.g5.8xlarge", "--no-validate",
                   "--fault", "worker-1:fi-info-fail", "--fault", "worker-1:xid48",
                   "--fault", "worker-2:throttle", "--fault", "worker-2:ecc",
                   "--fault", "worker-3:pcie-degraded", "--fault", "worker-3:fsx-gone",
                   "--fault", "worker-4:gpu-missing", "--output", "json")
    r = json.loads(res.stdout)
    assert res.returncode == 0 and r["result"] == "pass", res.stderr[-4000:]
    assert _findings(r) == {("worker-1", "efa_provider", "reboot"), ("worker-1", "xid", "reboot"),
                            ("worker-2", "clock_slowdown", "drain"), ("worker-2", "ecc_uncorrectable", "reboot"),
                            ("worker-3", "pcie_degraded", "reboot"), ("worker-3", "fsx_missing", "reboot"),
                            ("worker-4", "gpu_count", "reboot")}
    doc = r["doctor"]
    assert doc["missed"] == [] and doc["outcome"] == "FAIL"
    assert all(n["unchecked"] == [] for n in doc["nodes"]), doc["nodes"]  # EFA read on every node
    assert "Xid 48" in next(f["evidence"] for f in doc["findings"] if f["kind"] == "xid")
    assert leftovers(r["run_id"], res) == []


def test_nvlink_row_remap_app_xids_inodes_and_readonly_fsx_beside_a_clean_worker(env):
    """ml.p5.48xlarge (H100s with 18 NVLinks each, so nvlink -s is read): one link of worker-1's first GPU
    <inactive>, a row remap pending and an Xid 94; on worker-2 an Xid 13, /opt/sagemaker out of inodes and /fsx
    remounted read-only; worker-3 clean. The application Xids are named as information with no node action."""
    res = rehearse(env, "slurm-gpu", "--nodes", "3", "--instance-type", "ml.p5.48xlarge", "--no-validate",
                   "--fault", "worker-1:nvlink-down", "--fault", "worker-1:row-remap-pending",
                   "--fault", "worker-1:xid94", "--fault", "worker-2:xid13", "--fault", "worker-2:inodes-full",
                   "--fault", "worker-2:fsx-readonly", "--output", "json")
    r = json.loads(res.stdout)
    assert res.returncode == 0 and r["result"] == "pass", res.stderr[-4000:]
    doc = r["doctor"]
    assert {(f["node"], f["kind"], f["severity"], f["action"]) for f in doc["findings"]} == {
        ("worker-1", "nvlink_down", "critical", "reboot"), ("worker-1", "row_remap_pending", "warning", "reboot"),
        ("worker-1", "xid", "info", "none"), ("worker-2", "xid", "info", "none"),
        ("worker-2", "disk_full", "critical", "drain"), ("worker-2", "fsx_unwritable", "critical", "drain")}
    assert doc["missed"] == [] and doc["outcome"] == "FAIL"
    evidence = {(f["node"], f["kind"]): f["evidence"] for f in doc["findings"]}
    assert "Xid 94 ROBUST_CHANNEL_CONTAINED_ERROR" in evidence[("worker-1", "xid")]
    assert "Xid 13 ROBUST_CHANNEL_GR_EXCEPTION" in evidence[("worker-2", "xid")]
    assert "of inodes used" in evidence[("worker-2", "disk_full")]
    assert "17 of 18 NVLinks" in evidence[("worker-1", "nvlink_down")]
    by_node = {n["node"]: n for n in doc["nodes"]}
    assert by_node["worker-3"]["verdict"] == "PASS" and by_node["worker-3"]["findings"] == []
    assert by_node["worker-3"]["unchecked"] == []  # every check read on the clean worker: a PASS on evidence
    assert leftovers(r["run_id"], res) == []


def test_a_clean_rehearsal_reports_nothing(env):
    res = rehearse(env, "slurm-gpu", "--nodes", "2", "--no-validate", "--doctor", "--output", "json")
    r = json.loads(res.stdout)
    assert res.returncode == 0 and r["result"] == "pass", res.stderr[-4000:]
    doc = r["doctor"]
    assert doc["findings"] == [] and doc["outcome"] == "PASS" and doc["exit_code"] == 0, doc["message"]
    assert [n["verdict"] for n in doc["nodes"]] == ["PASS", "PASS"]
    assert all(n["unchecked"] == [] for n in doc["nodes"])  # every check read: a PASS on evidence
    assert leftovers(r["run_id"], res) == []


def test_the_prolog_under_a_real_slurmd_drains_the_sick_worker_and_lets_the_others_run(env):
    """Issue 23 item 3 under Debian's slurmd 22.05 (not a stand-in): EnableNodeProlog=true puts hpq's Prolog in the
    controller's slurm.conf, every slurmd fetches it (configless), and a user's `srun -w <worker> hostname` runs the
    quick node checks first. worker-1 (Xid 79, critical) refuses the step and is drained with hpq's own reason, which
    Slurm keeps; worker-2 (a thermal slowdown, a warning only) and the clean worker-3 run it and stay in service.
    /fsx is checked on every worker in the mount table the lifecycle read (its record, /etc/hpq/fsx.json), so the
    FSx stand-in drains no one."""
    res = rehearse(env, "slurm-gpu", "--nodes", "3", "--no-validate", "--prolog", "--fault", "worker-1:xid79",
                   "--fault", "worker-2:throttle", "--output", "json")
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout)
    rows = {w["node"]: w for w in r["prolog"]["workers"]}
    assert r["prolog"]["ok"] is True and sorted(rows) == ["worker-1", "worker-2", "worker-3"]
    sick = rows["worker-1"]
    assert sick["job_ran"] is False and sick["srun_exit"] != 0 and "DRAIN" in sick["state"]
    assert sick["reason"].startswith("hpq prolog: xid: Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"), sick
    for name in ("worker-2", "worker-3"):
        assert rows[name]["job_ran"] is True and "DRAIN" not in rows[name]["state"], rows[name]
    assert r.get("doctor") is None  # the prolog stage replaces the doctor's (its own job steps would meet the prolog)
    assert leftovers(r["run_id"], res) == []
