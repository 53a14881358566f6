"""Running the pairwise sweep: rounds of concurrent two-node all-reduces, bounded in time.

``run-nccl-test --sweep`` builds the command for one pair (mpirun with a two-host hostfile
for nccl-tests, ``srun -N 2 -w A,B`` for the built-in benchmark) and hands it here. Each round
starts all its pairs at once (no node is in two pairs of a round; ``--pairs-at-once`` caps how
many run together), each in its own process group writing its own log, and waits for them; a
pair past its timeout is stopped (SIGTERM to its group: srun and mpirun pass it to their ranks;
SIGKILL 10 s later) and recorded as evidence. A round after the first starts only while the
budget has a pair timeout (or 30 s) left, and its pairs get no more than what is left. Each log
is read by the same parser as ``hpq nccl-report``. Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Dict, List, Optional, Sequence, TextIO, Tuple

from hpq.scripts import nccl_report
from hpq.scripts.sweep import FAILED, OK, SKIPPED, TIMEOUT, WRONG, Pair, PairResult, fmt_gbps

# (pair, index of the pair in the whole sweep, log path) -> (command, environment)
PairCommand = Callable[[Pair, int, str], Tuple[List[str], Dict[str, str]]]
KILL_GRACE_S = 10.0
MIN_ROUND_S = 30.0  # a later round starts only with this much budget left (or a whole pair timeout)
POLL_S = 0.2
PRINTED_PRECISION_GBPS = 0.1  # below this a busbw printed with two decimals has under two significant digits


def pair_log_name(round_no: int, pair: Pair) -> str:
    return "round%02d-%s-%s.log" % (round_no, pair[0], pair[1])


def _busbw_from_time(report: nccl_report.NcclReport) -> Optional[float]:
    """The pair's all-reduce bus bandwidth from the time column, for a busbw too small for two decimals.

    nccl-tests and the built-in benchmark print busbw as %.2f, so a badly throttled pair reads 0.00;
    the time (us) keeps the figure: algbw = bytes / time, busbw = algbw x 2(n-1)/n for n ranks (the
    log's rank lines; nccl-tests' PERFORMANCE.md definition).
    """
    n = report.ranks
    if n < 2:
        return None
    best = max((r.size_bytes / m.time_us / 1e3 for r in report.rows for m in r.measurements if m.time_us > 0),
               default=None)
    return None if best is None else round(best * 2.0 * (n - 1) / n, 6)


def judge_pair(result: PairResult, log_path: str) -> PairResult:
    """Status and bus bandwidth of a finished pair from its exit status and its log.

    The log is read by the bounded parser of ``hpq nccl-report``; a log with impossible values, cut off
    before its summary, or holding more than one run is a failed pair (it delivered no usable figure),
    never a measurement. The network the log names is kept for the sweep's transport check.
    """
    try:
        report: Optional[nccl_report.NcclReport] = nccl_report.parse_file(log_path)
    except nccl_report.ReportError:  # unreadable, too large, or no result rows
        report = None
    if report is not None:
        result.transport = nccl_report.transport_seen(report)
        if not report.invalid:
            result.busbw_gbps = report.peak_busbw_gbps
            if result.busbw_gbps < PRINTED_PRECISION_GBPS:
                result.busbw_gbps = _busbw_from_time(report) or result.busbw_gbps
    if result.status == TIMEOUT:
        return result
    if result.exit_status != 0:
        result.status = FAILED
        result.note = "exit %s%s" % (result.exit_status, "" if report else ", no result rows")
    elif report is None:
        result.status = FAILED
        result.note = "no result rows"
    elif report.invalid:
        result.status = FAILED
        result.busbw_gbps = None
        result.note = "impossible values in the log: %s" % report.invalid[0]
    elif report.wrong_total:
        result.status = WRONG
        result.note = "%d wrong element(s)" % report.wrong_total
    elif report.truncated:
        result.status = FAILED
        result.note = "the log ends before its summary line"
    elif report.runs > 1:
        result.status = FAILED
        result.note = "the log holds %d runs" % report.runs
    else:
        result.status = OK
    return result


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the pair's process group, SIGKILL what is left after the grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_rounds(rounds: Sequence[Sequence[Pair]], command: PairCommand, log_dir: str, pair_timeout: float,
               budget: float, progress: TextIO, cwd: Optional[str] = None,
               clock: Callable[[], float] = time.monotonic, at_once: Optional[int] = None) -> List[PairResult]:
    """Run every round; return one PairResult per scheduled pair (SKIPPED where the budget ran out).

    ``at_once`` caps how many pairs of a round run at the same time (None: all of them); the next
    pair of the round starts as soon as one ends. A pair gets ``pair_timeout`` or what is left of
    the budget, whichever is less; one that would start (after the first round) with less than a
    pair timeout or ``MIN_ROUND_S`` of the budget left is not run.
    """
    os.makedirs(log_dir, exist_ok=True)
    start = clock()
    results: List[PairResult] = []
    index = 0
    total = len(rounds)
    slots = max(1, at_once) if at_once else None
    for rno, pairs in enumerate(rounds, 1):
        left = budget - (clock() - start)
        if rno > 1 and left < min(pair_timeout, MIN_ROUND_S):
            for pair in pairs:
                results.append(PairResult(rno, pair, SKIPPED, note="time budget spent"))
            continue
        print("# round %d/%d: %s" % (rno, total, ", ".join("%s + %s" % p for p in pairs)), file=progress,
              flush=True)
        waiting = list(pairs)
        running: List[Tuple[Pair, subprocess.Popen, TextIO, str, float, float]] = []
        first_wave = True  # the pairs that start with the round (all of them without ``at_once``)
        try:
            while waiting or running:
                while waiting and (slots is None or len(running) < slots):
                    pair = waiting.pop(0)
                    left = budget - (clock() - start)
                    if left <= 0 or (rno > 1 or not first_wave) and left < min(pair_timeout, MIN_ROUND_S):
                        results.append(PairResult(rno, pair, SKIPPED, note="time budget spent"))
                        continue
                    log_path = os.path.join(log_dir, pair_log_name(rno, pair))
                    cmd, env = command(pair, index, log_path)
                    index += 1
                    log = open(log_path, "w")
                    log.write("+ " + " ".join(cmd) + "\n")
                    log.flush()
                    try:
                        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                                start_new_session=True)
                    except OSError as exc:
                        log.write("cannot start %s: %s\n" % (cmd[0], exc))
                        log.close()
                        results.append(PairResult(rno, pair, FAILED, seconds=0.0, exit_status=127, log=log_path,
                                                  note="cannot start %s" % os.path.basename(cmd[0])))
                        continue
                    running.append((pair, proc, log, log_path, clock(), min(pair_timeout, left)))
                still = []
                for item in running:
                    pair, proc, log, log_path, t0, timeout = item
                    rc = proc.poll()
                    elapsed = clock() - t0
                    if rc is None and elapsed < timeout:
                        still.append(item)
                        continue
                    status = OK
                    if rc is None:
                        _stop(proc)
                        status = TIMEOUT
                        log.write("\n# hpq sweep: stopped after %.0f s (pair timeout)\n" % elapsed)
                    log.close()
                    res = judge_pair(PairResult(rno, pair, status, seconds=round(elapsed, 2),
                                                exit_status=proc.returncode, log=log_path), log_path)
                    if status == TIMEOUT:
                        res.note = "no result within %.0f s" % timeout
                    results.append(res)
                    print("#   %s + %s: %s (%.1f s)" % (pair[0], pair[1], _summary(res), elapsed), file=progress,
                          flush=True)
                first_wave = False
                running = still
                if running:
                    time.sleep(POLL_S)
        except BaseException:  # Ctrl-C or a bug: no pair may outlive the sweep
            for _pair, proc, log, _path, _t0, _timeout in running:
                _stop(proc)
                log.close()
            raise
    position = {(rno, pair): i for rno, pairs in enumerate(rounds, 1) for i, pair in enumerate(pairs)}
    results.sort(key=lambda r: (r.round, position[(r.round, r.nodes)]))
    return results


def _summary(res: PairResult) -> str:
    if res.status == OK:
        return "%s GB/s" % fmt_gbps(res.busbw_gbps or 0.0)
    return "%s: %s" % (res.status.upper(), res.note)

