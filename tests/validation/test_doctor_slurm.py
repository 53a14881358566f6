"""run-node-doctor through real Slurm: node_doctor on every node at once, each report tagged with its node.

Real: slurmctld + two slurmd + munged set up by the lifecycle (tests/slurm_cluster.py), run-node-doctor as
the lifecycle installed it on the controller, sinfo/srun/scontrol, the system python3 on the nodes.
The fixture's type is ml.g5.16xlarge and this host has no nvidia-smi: each node's report says the GPUs
could not be read, so the verdict is INCONCLUSIVE, never PASS. A drained node is not waited for: it is
reported as not answering.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from hpq.scripts import outcome
from hpq.validation import doctor
from hpq.validation.request import DOCTOR, TestRequest
from hpq.validation.result import RawOutcome
from tests.scripts.test_scripts_slurm import command

pytestmark = pytest.mark.slow


def test_every_node_answers_tagged_and_a_drained_node_is_inconclusive(slurm_cluster):
    exe, env = command(slurm_cluster, "run-node-doctor")
    args = [exe, "--output", "json", "--fsx", "", "--efa-window", "0", "--node-timeout", "60"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads(done.stdout)
    assert [e["node"] for e in doc["nodes"]] == ["node-1", "node-2"], done.stderr
    for entry in doc["nodes"]:
        assert entry["report"] is not None, entry
        assert entry["report"]["node"] == entry["node"]  # the report says which node wrote it (SLURMD_NODENAME)
        assert entry["report"]["instance_type"] == "ml.g5.16xlarge"
        assert any(u.startswith("gpus:") for u in entry["report"]["unchecked"])
    assert done.returncode == outcome.EXIT_INCONCLUSIVE
    result = doctor.judge(TestRequest(DOCTOR), RawOutcome(done.returncode, done.stdout), None, "slurm", "t")
    assert result.outcome == outcome.INCONCLUSIVE

    drain = slurm_cluster.run(["scontrol", "update", "nodename=node-2", "state=drain", "reason=hpq-test"])
    assert drain.returncode == 0, drain.stderr
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        doc = json.loads(done.stdout)
        node2 = next(e for e in doc["nodes"] if e["node"] == "node-2")
        assert node2["report"] is None and "drain" in node2["error"]
        result = doctor.judge(TestRequest(DOCTOR), RawOutcome(done.returncode, done.stdout), None, "slurm", "t")
        assert result.data["nodes"][1]["verdict"] == outcome.INCONCLUSIVE
    finally:
        slurm_cluster.run(["scontrol", "update", "nodename=node-2", "state=resume"])
    bad = subprocess.run([exe, "--nodelist", "node-9"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "node-9" in bad.stderr and "Traceback" not in bad.stderr
