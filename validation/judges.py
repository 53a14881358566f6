"""The judges: one per test, the same for every backend, each next to the parser it reads with.

A judge takes a :class:`RawOutcome` (whatever backend produced it) and the request's facts, and returns a
:class:`TestResult`. The parsing and the checks themselves live with the node programs (``hpq.scripts``:
nccl_report, sweep, run_nanogpt), so a verdict judged on the laptop and the one printed on the node are the
same code; a judge here only adds what the laptop knows and the node does not (the node program's exit
status as the backend saw it, a run the backend stopped, the stand-in network of a rehearsal).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from hpq.errors import HpqError
from hpq.kube.jobs import EFA_RESOURCE, HEALTH_CHECKING, HEALTH_LABEL
from hpq.scripts import nccl_report, sweep
from hpq.scripts.outcome import (
    EXIT_BAD_INPUT,
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_INTERRUPTED,
    EXIT_PASS,
    FAIL,
    INCONCLUSIVE,
    PASS,
    exit_code,
    headline,
)
from hpq.validation.request import NANOGPT, NCCL, NCCOM, SWEEP, TestRequest
from hpq.validation.result import RawOutcome, TestResult

# The program each test runs on the cluster, named in messages.
PROGRAMS = {NCCL: "run-nccl-test", NCCOM: "run-nccom-test", NANOGPT: "run-nanogpt", SWEEP: "run-nccl-test --sweep"}
BENCHMARKS = {NCCL: "nccl-tests", NCCOM: "nccom-test"}


def bandwidth(text: str, instance_type: str | None, remote_code: int, nodes: int | None = None,
              expect: str | float | None = None, stand_in_network: bool = False,
              program: str = "run-nccl-test", benchmark: str = "nccl-tests") -> tuple[dict[str, Any], int, str]:
    """(data, exit code, message) of a captured nccl-tests/nccom-test log, judged like `hpq nccl-report`
    (node count from the output's rank lines, else ``nodes``; ``expect`` as `hpq nccl-report --expect`),
    combined with the node program's exit status ``remote_code``."""
    try:
        report = nccl_report.parse_text(text)
    except HpqError as exc:
        judged = FAIL if remote_code not in (0, EXIT_INCONCLUSIVE) else INCONCLUSIVE
        msg = headline(judged, "no result rows", "a complete benchmark table",
                          f"no {benchmark} results in the output ({exc}); {program} exited {remote_code}")
        code = remote_code if remote_code in (EXIT_BAD_INPUT, EXIT_INTERRUPTED) else exit_code(judged)
        return ({"ok": False, "outcome": judged, "remote_exit_code": remote_code, "message": msg,
                 "verdict": {"outcome": judged, "ok": False, "exit_code": code, "message": msg}}, code, msg)
    verdict = nccl_report.evaluate(report, instance_type, nodes, expect, stand_in_network)
    data = nccl_report.report_to_dict(report, verdict)
    data["remote_exit_code"] = remote_code
    # The remote ran the same checks: its INCONCLUSIVE (3) can only lower a local PASS; any other non-zero
    # status (the run failed, bad arguments, Ctrl-C) is a FAIL of the run whatever its rows say.
    code, message = verdict.exit_code, verdict.message
    if stand_in_network and remote_code == EXIT_FAIL and _failed_only_on_transport(report, instance_type, nodes,
                                                                                      expect, text):
        remote_code = 0  # the remote judged the stand-in network as the type's own: that FAIL is not the run's
    if remote_code == EXIT_INCONCLUSIVE and verdict.outcome == PASS:
        code = EXIT_INCONCLUSIVE
        message = headline(INCONCLUSIVE, verdict.number,
                              "the remote's own verdict", f"{program} on the cluster judged it INCONCLUSIVE "
                              "(its output above says why)") + "\n" + message
    elif remote_code not in (0, EXIT_INCONCLUSIVE) and verdict.outcome != FAIL:
        code = EXIT_FAIL
        message = headline(FAIL, f"exit status {remote_code}", "0",
                              f"{program} failed on the cluster (its output above says why)") + "\n" + message
    if code != verdict.exit_code:
        judged = INCONCLUSIVE if code == EXIT_INCONCLUSIVE else FAIL
        data["outcome"] = judged
        data["verdict"].update(outcome=judged, ok=False, exit_code=code, message=message)  # type: ignore[union-attr]
    return data, code, message


def _failed_only_on_transport(report: Any, instance_type: str | None, nodes: int | None, expect: Any,
                              text: str) -> bool:
    """Whether the node's own FAIL (exit 1) can only have come from the transport check: the same log judged
    as the node judged it fails that check alone, the benchmark itself did not exit non-zero, and the ranks'
    environment check (scripts/env_check) did not fail."""
    real = nccl_report.evaluate(report, instance_type, nodes, expect)
    failed = {k for k, c in real.checks.items() if c.outcome == FAIL}
    return (failed == {"transport"} and "exited with status" not in text
            and "transport environment is not the worker type's" not in text)  # the env check stays a FAIL


def _outcome_of(code: int) -> str:
    return {EXIT_PASS: PASS, EXIT_INCONCLUSIVE: INCONCLUSIVE}.get(code, FAIL)


def judge_bandwidth(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str, cluster: str,
                    stand_in_network: bool = False) -> TestResult:
    """nccl and nccom: the benchmark table in the log, against the catalog (or ``--expect``)."""
    program = PROGRAMS[req.test]
    data, code, message = bandwidth(raw.log, instance_type, raw.exit_code, req.node_count, req.expect,
                                    stand_in_network, raw.command.split(" ")[0] or program, BENCHMARKS[req.test])
    if raw.timed_out:
        code = EXIT_FAIL
        message = headline(FAIL, "stopped", f"within {req.timeout_s}s",
                              f"{raw.command or program} did not finish in time") + "\n" + message
    data["command"] = raw.command
    if code and raw.stderr.strip():
        data["stderr_tail"] = raw.stderr_tail()
    outcome = _outcome_of(code) if code not in (EXIT_BAD_INPUT, EXIT_INTERRUPTED) else FAIL
    data["outcome"] = outcome
    return TestResult(req.test, backend, cluster, outcome, code, message, instance_type, req.node_count, data)


def judge_sweep(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str,
                cluster: str) -> TestResult:
    """The sweep's own JSON report (``run-nccl-test --sweep --output json``): its outcome and its node table.
    No report back is a FAIL of the run (2 and 130 keep their meaning: the node refused the arguments, or
    was interrupted)."""
    doc = sweep.extract_json(raw.log)
    if doc is None:
        program = raw.command.split(" ")[0] or "run-nccl-test"
        if raw.exit_code in (EXIT_BAD_INPUT, EXIT_INTERRUPTED):  # refused its arguments, or interrupted
            code, message = raw.exit_code, f"no sweep result came back: {program} exited {raw.exit_code} (its " \
                                           "message is above)"
        else:
            code = EXIT_FAIL
            message = headline(FAIL, "no sweep result", "a sweep report",
                                  f"{program} exited {raw.exit_code} (its messages are above)")
        data = {"outcome": FAIL, "remote_exit_code": raw.exit_code, "stderr_tail": raw.stderr_tail()}
        return TestResult(req.test, backend, cluster, FAIL, code, message, instance_type, req.nodes, data)
    doc["remote_exit_code"] = raw.exit_code
    code = int(doc.get("exit_code", EXIT_FAIL))
    outcome = str(doc.get("outcome") or _outcome_of(code))
    if outcome == PASS and raw.exit_code != 0:  # a report that passes from a program that failed: no pass
        outcome, code = FAIL, EXIT_FAIL
    doc["outcome"] = outcome
    nodes = len(doc.get("nodes") or []) or req.nodes
    return TestResult(req.test, backend, cluster, outcome, code, sweep.format_report(doc), instance_type,
                      nodes, doc)


def judge_nanogpt_result(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str,
                         cluster: str) -> TestResult:
    """run-nanogpt judged itself on the node (scripts/run_nanogpt.assess: losses, ranks, environment) and
    wrote its result JSON; that JSON, read back, is the evidence. No JSON back: INCONCLUSIVE if the program
    exited 0 (nothing to judge), FAIL otherwise."""
    text = raw.files.get("result.json")
    doc: dict[str, Any] = {}
    if text:
        try:
            loaded = json.loads(text)
            doc = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            doc = {}
    tail = (raw.log.strip().splitlines() or [""])[-1]
    if raw.timed_out:
        outcome, message = FAIL, headline(FAIL, "stopped", f"within {req.timeout_s}s",
                                                f"{raw.command or 'run-nanogpt'} did not finish in time")
    elif not doc.get("outcome"):
        outcome = INCONCLUSIVE if raw.exit_code in (0, EXIT_INCONCLUSIVE) else FAIL
        message = headline(outcome, "no result", "run-nanogpt's result JSON",
                              f"run-nanogpt exited {raw.exit_code} and no result came back: "
                              f"{tail or raw.stderr.strip()[-300:]}")
    else:
        outcome = str(doc["outcome"])
        message = str(doc.get("message") or headline(outcome, "run-nanogpt", "a falling loss", tail))
        if outcome != FAIL and raw.exit_code not in (0, EXIT_INCONCLUSIVE):  # its JSON is no pass then
            outcome = FAIL
            message = headline(FAIL, f"exit status {raw.exit_code}", "0",
                                  "run-nanogpt failed on the cluster (its output above says why)") + "\n" + message
    data = {**doc, "command": raw.command, "exit_status": raw.exit_code, "outcome": outcome}
    if outcome != PASS and raw.stderr.strip():
        data["stderr_tail"] = raw.stderr_tail()
    code = raw.exit_code if raw.exit_code in (EXIT_BAD_INPUT, EXIT_INTERRUPTED) else exit_code(outcome)
    return TestResult(req.test, backend, cluster, outcome, code, message, instance_type, req.node_count, data)


# ---------------------------------------------------------------------- judged from a job's log (EKS)
# The EKS jobs run the training program and the device check straight from their manifests (no node program
# writes a result file there): these judges read the result pod's log, the job's end state (RawOutcome.state,
# exit_code 0 only when the job Succeeded) and, for validate, what the API server says of the nodes
# (RawOutcome.facts: hpq.kube.jobs.NodeFacts.to_dict()).

# Numbers as Python prints them, nan and inf included: a loss of nan is evidence of a broken run, never skipped.
_NUM = r"([-+]?(?:nan|inf(?:inity)?|[0-9]{1,40}(?:\.[0-9]{0,40})?(?:[eE][-+]?[0-9]{1,4})?))"
# "iter 100: loss 3.4629 | ..." (hpq's nanoGPT, like nanoGPT itself); a bare "loss X" as a fallback.
_ITER_LOSS_RE = re.compile(r"\biter\s+\d+\s*:?\s*(?:train\s+)?loss[\s:=]+" + _NUM, re.IGNORECASE)
_LOSS_RE = re.compile(r"\bloss\b[\s:=]+" + _NUM, re.IGNORECASE)
_INCONCLUSIVE_RE = re.compile(r"^RESULT: (INCONCLUSIVE:.*)$", re.MULTILINE)
_RESULT_FAIL_RE = re.compile(r"^RESULT: (FAIL.{0,500})$", re.MULTILINE)
_DISAGREE_RE = re.compile(r"^loss \S+ -> \S+: .{0,40}; ranks DISAGREE", re.MULTILINE)


def _job(raw: RawOutcome) -> dict[str, Any]:
    return {"state": raw.state, "message": raw.detail}


def _ended(raw: RawOutcome) -> str:
    """How the run ended, in words: the job's state and message (or the program's exit status)."""
    state = raw.state or f"exit status {raw.exit_code}"
    return f"{state}: {raw.detail}" if raw.detail else state


def judge_nanogpt_log(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str,
                      cluster: str) -> TestResult:
    """PASS only when the run succeeded, printed two or more finite losses, and the last is below the first;
    FAIL on a run that failed, a loss that is nan/inf or did not fall, ranks that disagree, or the program's
    own "RESULT: FAIL"; INCONCLUSIVE (exit 3) when hpq's nanoGPT says it left Trainium devices idle."""
    losses = [float(x) for x in (_ITER_LOSS_RE.findall(raw.log) or _LOSS_RE.findall(raw.log))]
    data: dict[str, Any] = {"job": _job(raw), "command": raw.command, "losses": losses}
    number = f"loss {losses[0]:g} -> {losses[-1]:g}" if losses else "no loss printed"

    def verdict(outcome: str, reason: str) -> TestResult:
        data["outcome"] = outcome
        return TestResult(req.test, backend, cluster, outcome, exit_code(outcome),
                          headline(outcome, number, "a falling, finite loss", reason), instance_type,
                          req.node_count, data)

    if raw.exit_code != 0:
        return verdict(FAIL, f"training ended {_ended(raw)}")
    if len(losses) < 2:
        return verdict(INCONCLUSIVE if not losses else FAIL,
                       "training finished but printed fewer than two loss values (iter N: loss X)")
    bad = [x for x in losses if not math.isfinite(x)]
    if bad:
        return verdict(FAIL, f"{len(bad)} loss value(s) are not finite (nan/inf): the training diverged")
    if not losses[-1] < losses[0]:
        return verdict(FAIL, "the loss did not go down")
    failed = _RESULT_FAIL_RE.search(raw.log)
    if failed:
        return verdict(FAIL, "the program's own RESULT line says " + failed.group(1).strip())
    if _DISAGREE_RE.search(raw.log):
        return verdict(FAIL, "the ranks hold different weights at the end")
    inconclusive = _INCONCLUSIVE_RE.search(raw.log)
    if inconclusive:
        data["neuron_devices_unused"] = True
        return verdict(INCONCLUSIVE, inconclusive.group(1).strip().split(": ", 1)[-1])
    return verdict(PASS, f"loss fell over {len(losses)} reports")


def judge_validate(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str,
                   cluster: str) -> TestResult:
    """PASS when the run succeeded, every node checked reported every accelerator and EFA device
    (``HPQ-VALIDATE ... OK``), and (``raw.facts``, when the backend saw the nodes) no node of the type exposes
    fewer EFA devices than the catalog gives it and none failed HyperPod's health checks; a node still in
    HyperPod's deep health checks makes it INCONCLUSIVE (rerun when they end)."""
    nodes = req.node_count or 0
    facts: dict[str, Any] | None = raw.facts or None
    seen = facts or {}
    lines = [ln for ln in raw.log.splitlines() if ln.startswith("HPQ-VALIDATE ")]
    good = [ln for ln in lines if ln.rstrip().endswith(" OK")]
    data: dict[str, Any] = {"job": _job(raw), "command": raw.command, "node_reports": lines}
    if facts is not None:
        data["node_facts"] = facts
    number = f"{len(good)}/{nodes} nodes passed"
    problems: list[str] = []
    if not (raw.exit_code == 0 and len(good) >= nodes):
        bad = [ln for ln in lines if ln not in good]
        problems.append(f"{raw.state or f'exit status {raw.exit_code}'}: "
                        + ("; ".join(bad) or raw.detail or "no per-node report"))
    efa_short = list(seen.get("efa_short") or [])
    unhealthy = list(seen.get("unhealthy") or [])
    checking = list(seen.get("health_checking") or [])
    if efa_short:
        problems.append(f"{len(efa_short)} node(s) expose fewer EFA devices ({EFA_RESOURCE} allocatable) than "
                        f"{seen.get('instance_type')} has: " + "; ".join(efa_short) + ". Check the EFA device "
                        "plugin's pod on the node and that the instance group was created with EFA")
    if unhealthy:
        problems.append("HyperPod's health checks failed on " + ", ".join(unhealthy))
    if problems:
        outcome, reason = FAIL, "; ".join(problems)
    elif checking:
        outcome, reason = INCONCLUSIVE, ("HyperPod is running deep health checks on " + ", ".join(checking)
                                            + f" ({HEALTH_LABEL}={HEALTH_CHECKING}): rerun when they end")
    else:
        outcome, reason = PASS, "every accelerator and EFA device visible" + (
            f"; {len(seen.get('usable') or [])} {seen.get('instance_type')} node(s) Ready and Schedulable"
            if facts else "")
    data["outcome"] = outcome
    message = headline(outcome, number, f"{nodes} node(s) seeing every device", reason)
    return TestResult(req.test, backend, cluster, outcome, exit_code(outcome), message, instance_type, nodes, data)
