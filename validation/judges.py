"""The judges: one per test, the same for every backend, each next to the parser it reads with.

A judge takes a :class:`RawOutcome` (whatever backend produced it) and the request's facts, and returns a
:class:`TestResult`. The parsing and the checks themselves live with the node programs (``hpq.scripts``:
nccl_report, sweep, run_nanogpt), so a verdict judged on the laptop and the one printed on the node are the
same code; a judge here only adds what the laptop knows and the node does not (the node program's exit
status as the backend saw it, a run the backend stopped, the stand-in network of a rehearsal).
"""

from __future__ import annotations

import json
from typing import Any

from hpq.errors import HpqError
from hpq.kube.jobs import EFA_RESOURCE, HEALTH_CHECKING, HEALTH_LABEL
from hpq.scripts import nccl_report, run_nanogpt, sweep
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
        program = raw.command.split(" ")[0] or "run-nccl-test"  # the headline leads the text: it says FAIL too
        doc["message"] = headline(FAIL, f"exit status {raw.exit_code}", "0",
                                  f"{program} failed after its report passed") + "\n" + str(doc.get("message", ""))
        doc.update(ok=False, exit_code=code)  # the report's own keys say the same (they overlay the result's)
        if isinstance(doc.get("verdict"), dict):  # the report's own verdict object says the same
            doc["verdict"] = {**doc["verdict"], "outcome": FAIL, "ok": False, "exit_code": code,
                              "message": doc["message"]}
    doc["outcome"] = outcome
    nodes = len(doc.get("nodes") or []) or req.nodes
    return TestResult(req.test, backend, cluster, outcome, code, sweep.format_report(doc), instance_type,
                      nodes, doc)


def judge_nanogpt(req: TestRequest, raw: RawOutcome, instance_type: str | None, backend: str,
                  cluster: str) -> TestResult:
    """nanogpt on every backend, from the same evidence: the training's own lines in the log (rank 0's
    ``ranks on``, ``loss A -> B: falls; ranks agree``, ``RESULT``), read by run-nanogpt's own reader
    (scripts/run_nanogpt.assess_text: a finite falling loss, every rank trained, ranks agree). Where the
    backend also brought back run-nanogpt's result JSON (Slurm), its metrics, rank count and the ranks'
    environment check are added; on EKS the log is the master pod's.

    The backend's exit status is the program's: a report that passes from a run that failed is a FAIL
    (2 and 130 keep their meaning); the node program's own INCONCLUSIVE (3) lowers a PASS. A run that
    printed no training result is INCONCLUSIVE when it exited 0, a FAIL when it failed."""
    doc: dict[str, Any] = {}
    text = raw.files.get("result.json")
    if text:
        try:
            loaded = json.loads(text)
            doc = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            doc = {}
    metrics = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else None
    ranks = None
    if isinstance(doc.get("nodes"), int) and isinstance(doc.get("processes_per_node"), int):
        ranks = doc["nodes"] * doc["processes_per_node"]
    status = doc["exit_status"] if isinstance(doc.get("exit_status"), int) else raw.exit_code
    training_rc = 0 if status == EXIT_INCONCLUSIVE else status
    outcome, message = run_nanogpt.assess_text(training_rc, raw.log, metrics, ranks)
    env = doc.get("environment_check") if isinstance(doc.get("environment_check"), dict) else {}
    if env.get("ok") is False and outcome != FAIL:
        outcome = FAIL
        message = headline(FAIL, "transport", "the worker type's environment",
                              "; ".join(str(p) for p in env.get("problems") or []) or "environment check failed") \
            + "\n" + message
    program = raw.command or PROGRAMS[NANOGPT]
    if raw.timed_out:
        outcome, message = FAIL, headline(FAIL, "stopped", f"within {req.timeout_s}s",
                                                f"{program} did not finish in time") + "\n" + message
    elif outcome == PASS and raw.exit_code == EXIT_INCONCLUSIVE:
        outcome = INCONCLUSIVE
        message = headline(INCONCLUSIVE, "exit status 3", "0", f"{program} judged it INCONCLUSIVE on the "
                              "cluster (its output above says why)") + "\n" + message
    elif outcome != FAIL and raw.exit_code not in (0, EXIT_INCONCLUSIVE):
        outcome = FAIL
        message = headline(FAIL, f"exit status {raw.exit_code}", "0",
                              f"{program} failed on the cluster ({_ended(raw)})") + "\n" + message
    facts = run_nanogpt.from_text(raw.log)
    data = {**doc, **{k: v for k, v in facts.items() if k not in doc}, "command": raw.command,
            "exit_status": raw.exit_code, "outcome": outcome}
    if raw.state:
        data["job"] = _job(raw)
    if outcome != PASS and raw.stderr.strip():
        data["stderr_tail"] = raw.stderr_tail()
    code = raw.exit_code if raw.exit_code in (EXIT_BAD_INPUT, EXIT_INTERRUPTED) else exit_code(outcome)
    return TestResult(req.test, backend, cluster, outcome, code, message, instance_type, req.node_count, data)


# ---------------------------------------------------------------------- validate on EKS
# EKS's validate job checks devices straight from its manifest: its judge reads the pods' HPQ-VALIDATE lines,
# the job's end state (RawOutcome.state, exit_code 0 only when the job Succeeded) and what the API server says
# of the nodes (RawOutcome.facts: hpq.kube.jobs.NodeFacts.to_dict()).

def _job(raw: RawOutcome) -> dict[str, Any]:
    return {"state": raw.state, "message": raw.detail}


def _ended(raw: RawOutcome) -> str:
    """How the run ended, in words: the job's state and message (or the program's exit status)."""
    state = raw.state or f"exit status {raw.exit_code}"
    return f"{state}: {raw.detail}" if raw.detail else state


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
