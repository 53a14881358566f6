"""hpq.validation without a cluster: the request checks itself once, the node command a backend runs, the
judges' rules on raw outcomes (the same for every backend), and the test family's registry."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpq.cli.commands import test as test_command
from hpq.cli.main import COMMANDS
from hpq.errors import UsageError
from hpq.scripts import outcome as oc
from hpq.scripts import sweep
from hpq.validation import judges, slurm
from hpq.validation.request import NANOGPT, NCCL, SWEEP, TESTS, TestRequest
from hpq.validation.result import TIMED_OUT, RawOutcome
from tests.aws.test_aws_remote import NCCL_OK

# The nccl-tests table run-nccl-test prints (tests/test_aws_remote.NCCL_OK is a shell here-document of it).
TABLE = NCCL_OK.split("<<'EOF'\n", 1)[1].rsplit("EOF", 1)[0]
G5 = "ml.g5.16xlarge"


def test_every_test_has_a_command_and_a_slurm_program_or_a_clear_refusal():
    # `hpq test TEST` for each, and the doctor as its own command (`hpq doctor CLUSTER`, with --fix)
    assert set(test_command.test.commands) | {"doctor"} == set(TESTS) and "doctor" in COMMANDS
    for name in TESTS:
        req = TestRequest(name, nodes=2) if name != SWEEP else TestRequest(name)
        if name in slurm.PROGRAM:
            assert slurm.node_command(req)[:len(slurm.PROGRAM[name])] == slurm.PROGRAM[name]
        else:
            with pytest.raises(UsageError):
                slurm.node_command(req)


def test_node_command_spells_the_request_as_a_user_would():
    assert slurm.node_command(TestRequest(NCCL, 4, 8, expect="350")) == ["run-nccl-test", "4", "8", "--expect",
                                                                         "350"]
    assert slurm.node_command(TestRequest(SWEEP)) == ["run-nccl-test", "--sweep", "--output", "json"]
    assert slurm.node_command(TestRequest(NANOGPT, extra=("--iters", "5"))) == ["run-nanogpt", "2", "--iters", "5"]


@pytest.mark.parametrize("kw, words", [
    ({"test": "bogus"}, "unknown test"), ({"test": SWEEP, "nodes": 1}, "at least 2"),
    ({"test": NANOGPT, "expect": "none"}, "--expect"), ({"test": NCCL, "expect": "fast"}, "expect"),
    ({"test": NCCL, "gpus": 9, "instance_type": G5}, "GPUS 9"), ({"test": NCCL, "timeout_s": 0}, "--timeout"),
    ({"test": NCCL, "nodes": 0}, "NODES 0")])
def test_a_bad_request_is_refused_on_creation(kw, words):
    with pytest.raises(UsageError, match=words):
        TestRequest(**kw)


@given(st.integers(-5, 5000), st.one_of(st.none(), st.integers(-2, 80)), st.sampled_from(TESTS))
def test_a_request_is_either_refused_or_spells_a_command_the_bounds_allow(nodes, gpus, name):
    try:
        req = TestRequest(name, nodes, gpus)
    except UsageError:
        return
    assert 1 <= req.nodes <= 4096 and (gpus is None or 1 <= gpus <= 64)
    if name in slurm.PROGRAM:
        args = slurm.node_command(req)
        assert str(nodes) in args


def _nccl(code: int, log: str = TABLE) -> RawOutcome:
    return RawOutcome(code, log, command="run-nccl-test 2 1")


@pytest.mark.parametrize("code, outcome", [(0, oc.PASS), (1, oc.FAIL), (3, oc.INCONCLUSIVE), (5, oc.FAIL),
                                           (TIMED_OUT, oc.FAIL)])
def test_the_node_programs_status_can_only_lower_a_pass(code, outcome):
    req = TestRequest(NCCL, 2, 1)
    result = judges.judge_bandwidth(req, _nccl(code), G5, "slurm", "c")
    assert result.outcome == outcome and result.exit_code == oc.exit_code(outcome)
    assert result.message.startswith(outcome + ": ")
    json.dumps(result.to_dict(), allow_nan=False)  # strict JSON, outcome first
    assert next(iter(result.to_dict())) == "outcome"


def test_no_table_is_never_a_pass():
    req = TestRequest(NCCL, 2)
    assert judges.judge_bandwidth(req, _nccl(0, "srun: done\n"), G5, "slurm", "c").outcome == oc.INCONCLUSIVE
    assert judges.judge_bandwidth(req, _nccl(1, "srun: error\n"), G5, "slurm", "c").outcome == oc.FAIL


def test_the_sweep_judge_keeps_the_reports_outcome_and_refuses_a_pass_from_a_failed_program():
    nodes = ["a", "b", "c"]
    pairs = [sweep.PairResult(i + 1, pair, sweep.OK, 40.0, 1.0, 0, transport="Socket")
             for i, pair in enumerate([("a", "b"), ("b", "c"), ("a", "c")])]
    doc = sweep.build_report(nodes, pairs, 3, 1 << 20)  # the node program's own report
    assert doc["outcome"] == oc.PASS
    req = TestRequest(SWEEP)
    good = judges.judge_sweep(req, RawOutcome(0, json.dumps(doc), command="run-nccl-test --sweep"), G5, "slurm", "c")
    assert good.outcome == oc.PASS and good.exit_code == 0
    assert good.message.splitlines()[0] == doc["message"] and doc["message"].startswith("PASS: ")  # headline first
    bad = judges.judge_sweep(req, RawOutcome(1, json.dumps(doc), command="run-nccl-test --sweep"), G5, "slurm", "c")
    assert bad.outcome == oc.FAIL and bad.exit_code == 1
    assert bad.message.startswith("FAIL: exit status 1 vs 0: run-nccl-test failed after its report passed\nPASS: ")
    assert (bad.data["ok"], bad.data["exit_code"]) == (False, 1)
    assert bad.data["verdict"]["outcome"] == oc.FAIL and bad.data["verdict"]["message"].startswith("FAIL: ")
    none = judges.judge_sweep(req, RawOutcome(0, "no json\n", command="run-nccl-test --sweep"), G5, "slurm", "c")
    assert none.outcome == oc.FAIL and none.message.startswith("FAIL: no sweep result")
    refused = judges.judge_sweep(req, RawOutcome(2, "", command="run-nccl-test --sweep"), G5, "slurm", "c")
    assert refused.exit_code == 2 and "no sweep result came back" in refused.message
