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

from tests.rehearsal.test_rehearse import _root, env, leftovers, rehearse  # noqa: F401

pytestmark = pytest.mark.slow


def _findings(r: dict) -> set[tuple[str, str, str]]:
    return {(f["node"], f["kind"], f["action"]) for f in r["doctor"]["findings"]}


def test_injected_faults_are_named_on_their_nodes_with_their_actions(env):  # noqa: F811
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


def test_a_clean_rehearsal_reports_nothing(env):  # noqa: F811
    res = rehearse(env, "slurm-gpu", "--nodes", "2", "--no-validate", "--doctor", "--output", "json")
    r = json.loads(res.stdout)
    assert res.returncode == 0 and r["result"] == "pass", res.stderr[-4000:]
    doc = r["doctor"]
    assert doc["findings"] == [] and doc["outcome"] == "PASS" and doc["exit_code"] == 0, doc["message"]
    assert [n["verdict"] for n in doc["nodes"]] == ["PASS", "PASS"]
    assert all(n["unchecked"] == [] for n in doc["nodes"])  # every check read: a PASS on evidence
    assert leftovers(r["run_id"], res) == []
