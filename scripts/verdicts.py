"""The ending of run-nccl-test and run-nccom-test: judge the run's own log, print it, write the JSON.

One place for both commands (and for nothing else to drift from): the log is parsed by the same
bounded parser as ``hpq nccl-report`` and judged by the same checks; a program that exited non-zero
is a FAIL whatever its rows say; a log that cannot be read or judged is INCONCLUSIVE or FAIL as
stated in each branch. Exit codes: hpq.scripts.outcome (PASS 0, FAIL 1, INCONCLUSIVE 3).
"""

from __future__ import annotations

import os
from typing import Dict, Optional

from hpq.scripts import nccl_report, result_metrics
from hpq.scripts.outcome import EXIT_FAIL, FAIL, INCONCLUSIVE, dumps, exit_code, headline


def _write_json(path: str, data: Dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def judge_log(what: str, log_path: str, rc: int, result: Dict, instance_type: Optional[str],
              nodes: Optional[int] = None, expect: Optional[object] = None, env: Optional[object] = None) -> int:
    """Parse a benchmark log, print the summary and verdict, write ``<log>.json``; the exit code.

    No result rows from a program that failed: FAIL. No result rows from one that exited 0 (or a log
    too large to read): INCONCLUSIVE, the log is no evidence either way. Otherwise the checks of
    ``nccl_report.evaluate`` decide, and a non-zero exit status turns any outcome into FAIL. So does a
    job whose ranks' transport environment (``env``, an env_check.EnvCheck) differs from the worker
    type's; an ``env`` with no opinion (no block in the log) changes nothing.
    """
    base = log_path[:-len(".log")] if log_path.endswith(".log") else log_path
    try:
        report = nccl_report.parse_file(log_path)
    except nccl_report.ReportError as exc:
        outcome = FAIL if rc != 0 else INCONCLUSIVE
        message = headline(outcome, "no result rows", "a complete benchmark table",
                              "%s exited with status %d and its log holds no result (%s); see %s" % (
                                  what, rc, exc, log_path))
        result["outcome"] = outcome
        result["verdict"] = {"outcome": outcome, "ok": False, "exit_code": exit_code(outcome), "message": message}
        code = exit_code(outcome)
    else:
        try:
            verdict = nccl_report.evaluate(report, instance_type, nodes, expect)  # type: ignore[arg-type]
        except nccl_report.ReportError as exc:  # a type the catalog does not know: judge without expectation
            verdict = nccl_report.evaluate(report, None, nodes, expect)  # type: ignore[arg-type]
            verdict.message += "\n  note: %s" % exc
        result.update(nccl_report.report_to_dict(report, verdict))
        message, code = verdict.message, verdict.exit_code
        if rc != 0:
            head, _, rest = message.partition("\n")
            reason = head.split(": ", 1)[1] if ": " in head else head
            message = "%s\n  exit: FAIL: %s exited with status %d (see the log); without it: %s%s" % (
                headline(FAIL, "exit status %d" % rc, "0", "%s did not finish cleanly" % what),
                what, rc, reason, ("\n" + rest) if rest else "")
            code = EXIT_FAIL
            result["outcome"] = FAIL
            result["verdict"].update(outcome=FAIL, ok=False, exit_code=code, message=message)  # type: ignore[union-attr]
        print("\n# summary: %s, %d sizes, peak busbw %.2f GB/s at %d B, avg busbw %.2f GB/s, #wrong %d" % (
            what, len(report.rows), report.peak_busbw_gbps, report.peak_size_bytes, report.avg_busbw_gbps,
            report.wrong_total))
    if env is not None:  # the ranks' own transport environment (env_check), FAIL when not the worker's (docs/design.md)
        result["environment_check"] = env.to_dict()  # type: ignore[attr-defined]
        problems = list(getattr(env, "problems", []) or [])
        if problems:
            code = EXIT_FAIL
            head = headline(FAIL, "%d environment difference(s)" % len(problems), "the worker type's "
                               "transport environment", "the job's transport environment is not the worker "
                               "type's: %s" % "; ".join(problems))
            message = head + "\n" + message
            result["outcome"] = FAIL
            verdict_doc = result.setdefault("verdict", {})
            verdict_doc.update(outcome=FAIL, ok=False, exit_code=code, message=message)  # type: ignore[union-attr]
    print(message)
    _write_json(base + ".json", result)
    # node_exporter's textfile directory when observability is on; a failure there is a stderr note only.
    result_metrics.publish(result, str(result.get("command") or what).split()[0])
    print("# log: %s\n# result: %s.json" % (log_path, base))
    return code
