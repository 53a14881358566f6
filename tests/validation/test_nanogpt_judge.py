"""One nanoGPT judge for Slurm and EKS (validation/judges.judge_nanogpt): the same training lines reach the same
verdict whichever backend brought them back, and each broken twin is judged the same on both.

The evidence is hpq's nanoGPT's own output (rank 0's ``ranks on``, loss and RESULT lines, in the format of
scripts/nanogpt.py; tests/kube/test_eks_manifests runs the real program and judges it with this judge): run-nanogpt
tees it to its stdout on Slurm, and it is the master pod's log on EKS. Slurm also brings back run-nanogpt's
result JSON (its metrics and the ranks' environment check).
"""

from __future__ import annotations

import json

import pytest

from hpq.scripts import outcome
from hpq.validation.backend import ClusterFacts
from hpq.validation.eks import EksBackend, EksOptions
from hpq.validation.request import NANOGPT, TestRequest
from hpq.validation.result import RawOutcome
from hpq.validation.slurm import SlurmBackend
from tests.scripts.test_scripts_units import NANOGPT_PASS_LOG, nanogpt_metrics

G5 = "ml.g5.48xlarge"
REQ = TestRequest(NANOGPT, 2)


def _slurm(log: str, code: int, result: dict | None = None) -> str:
    raw = RawOutcome(code, log, command="run-nanogpt 2", state="exited")
    if result is not None:
        raw.files["result.json"] = json.dumps(result)
    return SlurmBackend(None, ClusterFacts("c", "slurm", G5)).judge(REQ, raw, G5).outcome


def _eks(log: str, code: int) -> str:
    raw = RawOutcome(code, log, command="pytorchjob/hpq-nanogpt", state="Succeeded" if code == 0 else "Failed",
                     detail="" if code == 0 else "job failed")
    return EksBackend("c", EksOptions(), lambda: None, ClusterFacts("c", "eks", G5)).judge(REQ, raw, G5).outcome


FELL_NOT = NANOGPT_PASS_LOG.replace("3.0500: falls", "4.2000: DID NOT FALL").replace("RESULT: PASS", "RESULT: FAIL")


@pytest.mark.parametrize("log, code, expected", [
    (NANOGPT_PASS_LOG, 0, outcome.PASS),
    (NANOGPT_PASS_LOG, 1, outcome.FAIL),  # a passing report from a run that failed
    (FELL_NOT, 0, outcome.FAIL),
    ("", 0, outcome.INCONCLUSIVE),  # no report: nothing to judge
    ("", 1, outcome.FAIL),  # no report, and the run failed
    (NANOGPT_PASS_LOG.replace("ranks agree", "ranks DISAGREE"), 0, outcome.FAIL),
    (NANOGPT_PASS_LOG.replace("ranks on: 0=ip-10-1-0-7, 1=ip-10-1-0-8\n", ""), 0, outcome.INCONCLUSIVE),
])
def test_the_same_evidence_reaches_the_same_verdict_on_both_backends(log, code, expected):
    assert _slurm(log, code) == _eks(log, code) == expected


def test_slurm_adds_run_nanogpts_result_json_and_its_twins():
    result = {"exit_status": 0, "nodes": 1, "processes_per_node": 2, "metrics": nanogpt_metrics(),
              "environment_check": {"ok": True, "problems": []}, "outcome": outcome.PASS}
    assert _slurm(NANOGPT_PASS_LOG, 0, result) == outcome.PASS
    bad_env = {**result, "environment_check": {"ok": False, "problems": ["FI_PROVIDER is tcp, not efa"]}}
    assert _slurm(NANOGPT_PASS_LOG, 0, bad_env) == outcome.FAIL  # the log alone would pass
    assert _slurm(NANOGPT_PASS_LOG, 0, {**result, "processes_per_node": 4}) == outcome.FAIL  # 2 of 4 ranks trained
    assert _slurm(NANOGPT_PASS_LOG, 1, result) == outcome.FAIL  # the JSON passes, run-nanogpt exited 1
    assert _slurm(NANOGPT_PASS_LOG, outcome.EXIT_INCONCLUSIVE, result) == outcome.INCONCLUSIVE


def test_one_judge_and_no_second():
    from hpq.validation import judges

    assert not hasattr(judges, "judge_nanogpt_log") and not hasattr(judges, "judge_nanogpt_result")
