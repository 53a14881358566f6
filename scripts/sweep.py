"""The pairwise sweep's schedule and statistics: which node drags the cluster's all-reduce down.

A cluster-wide all-reduce is as fast as its slowest link, so a low result says *that* something
is wrong, not *where*. The sweep measures all-reduce between two nodes at a time (all GPUs of
both); a pair runs at the speed of its slower node. A node's score is the median bus bandwidth
of its pairs (the high median when the count is even), so slow partners cannot drag a healthy
node down unless they are more than half of them, while a slow node is slow with every partner. A node is slow when its score is below the cluster median by a robust
margin: ``MAD_Z`` scaled median absolute deviations of ln(score) (the modified z-score of
Iglewicz and Hoaglin, on ratios because bandwidth noise is proportional) AND at least
``MIN_GAP`` of the median, so run-to-run noise never names a node.

Pure: no processes, no Slurm. ``run-nccl-test --sweep`` (hpq.scripts.nccl_sweep) runs the
pairs; ``hpq remote-nccl-test --sweep`` renders the same JSON with ``format_report`` on a
laptop. Standard library only (it ships to the nodes).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from statistics import median, median_high  # median_high: what at least half the values reach
from typing import Dict, List, Optional, Sequence, Tuple

from hpq.lifecycle import transport
from hpq.scripts.outcome import FAIL, INCONCLUSIVE, PASS, exit_code, fmt_number, headline

# Up to this many nodes every pair is measured (n-1 rounds, n with a bye for odd n).
FULL_SCHEDULE_MAX_NODES = 16
# Above it, the first rounds of the round-robin: every node meets 5 partners (4 on the round it
# sits out with an odd count), so one or two slow partners cannot move a healthy node's median.
LARGE_CLUSTER_ROUNDS = 5
# With fewer partners a slow pair cannot be pinned on one of its two nodes.
MIN_PARTNERS = 3
# Modified z-score cut-off (Iglewicz and Hoaglin): |0.6745 (x - median) / MAD| > 3.5 is an outlier.
MAD_Z = 3.5
MAD_SCALE = 0.6745
# ... and at least this far below the median. A healthy fabric measures within a few percent
# run to run; the single-run verdict (nccl_report.PASS_FRACTION) leaves 20% for spread too.
MIN_GAP = 0.20
# gloo on CPUs times the CPUs as much as the link: on a shared 2-core host one pair measured 0.44 to
# 1.39 GB/s run to run (docs/validation.md), so there a node must be under half the median to be named.
MIN_GAP_CPU = 0.50

# Message size per pair, by transport. 256 MB is where AWS's GPU health check measures its
# EFA-only and NVLink-only all-reduce (awslabs/awsome-distributed-ai,
# 4.validation_and_observability/2.gpu-cluster-healthcheck/checks/5-nccl-allreduce.sh:
# all_reduce_perf -b 256M -e 256M) and where busbw is near its plateau
# (tests/data/nccl/h200x2_nccl_baseline_allreduce.txt). TCP sockets (~3 GB/s on g5) and gloo
# on CPUs get smaller messages so a round stays short.
SIZE_EFA = 256 << 20
SIZE_TCP = 64 << 20
SIZE_CPU = 1 << 20

OK, FAILED, TIMEOUT, WRONG, SKIPPED = "ok", "failed", "timeout", "wrong", "skipped"
# A pair whose run ended without leaving a log to read (on EKS: a job that succeeded, its launcher log empty):
# no evidence either way, so its nodes are not measured by it (INCONCLUSIVE, never PASS or FAIL).
NO_LOG = "no-log"
MEASURED = (OK, FAILED, TIMEOUT, WRONG)  # SKIPPED: the time budget ran out before the pair ran; NO_LOG: unread

Pair = Tuple[str, str]


def default_size(transport_name: Optional[str], cpu_only: bool) -> int:
    """The sweep's message size: by transport, smaller over TCP, smallest with gloo on CPUs."""
    if cpu_only:
        return SIZE_CPU
    if transport_name in (transport.EFA_RDMA, transport.EFA_SENDRECV):
        return SIZE_EFA
    return SIZE_TCP


def round_count(n: int) -> int:
    """Rounds the sweep runs for ``n`` nodes: all of the round-robin up to 16 nodes, else 5."""
    full = n - 1 if n % 2 == 0 else n
    if n < 2:
        return 0
    return full if n <= FULL_SCHEDULE_MAX_NODES else min(full, LARGE_CLUSTER_ROUNDS)


def schedule(nodes: Sequence[str], rounds: Optional[int] = None) -> List[List[Pair]]:
    """Round-robin pairs by the circle method: in each round every node is in at most one pair.

    The first node stays put and the others rotate one place per round; with an odd count a
    placeholder joins and whoever meets it sits the round out (a bye). The full rotation meets
    every pair exactly once; ``rounds`` (default ``round_count``) takes its first rounds. Each pair
    is given in the order of ``nodes`` (for Slurm: the allocation's order, which is how srun
    places ranks).
    """
    names = list(nodes)
    if len(set(names)) != len(names):
        raise ValueError("duplicate node names: %s" % ", ".join(sorted(n for n in set(names) if names.count(n) > 1)))
    if len(names) < 2:
        return []
    index = {n: i for i, n in enumerate(names)}
    ring: List[Optional[str]] = list(names) + ([None] if len(names) % 2 else [])
    size = len(ring)
    want = round_count(len(names)) if rounds is None else max(0, min(rounds, size - 1))
    out: List[List[Pair]] = []
    rest = ring[1:]
    for _ in range(want):
        order = [ring[0]] + rest
        pairs = []
        for i in range(size // 2):
            a, b = order[i], order[size - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if index[a] < index[b] else (b, a))
        out.append(pairs)
        rest = rest[-1:] + rest[:-1]
    return out


@dataclass
class PairResult:
    """One pair's measurement. ``busbw_gbps`` is what the log shows (None when it shows nothing)."""

    round: int
    nodes: Pair
    status: str
    busbw_gbps: Optional[float] = None
    seconds: Optional[float] = None
    exit_status: Optional[int] = None
    log: Optional[str] = None
    note: str = ""
    transport: Optional[str] = None  # what the pair's log says carried it (nccl_report.transport_seen)

    @property
    def measured(self) -> bool:
        return self.status in MEASURED

    @property
    def score_gbps(self) -> float:
        """What the pair counts for in its nodes' scores: a pair that failed, hung or returned
        wrong data delivered nothing usable, so it counts as 0 (evidence against its nodes)."""
        return float(self.busbw_gbps or 0.0) if self.status == OK else 0.0

    def partner(self, node: str) -> str:
        return self.nodes[1] if self.nodes[0] == node else self.nodes[0]

    def to_dict(self) -> Dict[str, object]:
        return {"round": self.round, "nodes": list(self.nodes), "status": self.status,
                "busbw_gbps": self.busbw_gbps, "score_gbps": self.score_gbps if self.measured else None,
                "seconds": self.seconds, "exit_status": self.exit_status, "log": self.log, "note": self.note,
                "transport": self.transport}


def node_scores(nodes: Sequence[str], pairs: Sequence[PairResult]) -> Dict[str, Optional[float]]:
    """Per node, the high median of its pairs' scores; None for a node none of whose pairs ran.

    The high median: a healthy node that met two slow partners out of four still scores what its
    healthy pairs measured, while a slow node, slow in every pair, scores low either way.
    """
    out: Dict[str, Optional[float]] = {}
    for n in nodes:
        vals = [p.score_gbps for p in pairs if p.measured and n in p.nodes]
        out[n] = median_high(vals) if vals else None
    return out


def partners(nodes: Sequence[str], pairs: Sequence[PairResult]) -> Dict[str, List[str]]:
    """Whom each node was measured with (pairs that ran, in schedule order)."""
    return {n: [p.partner(n) for p in pairs if p.measured and n in p.nodes] for n in nodes}


@dataclass
class Judgement:
    median_gbps: Optional[float]
    mad_ln: Optional[float]  # median absolute deviation of ln(score): the spread as a ratio
    threshold_gbps: Optional[float]  # a node below this is slow
    slow: List[str]


def judge(scores: Dict[str, Optional[float]], mad_z: float = MAD_Z, min_gap: float = MIN_GAP) -> Judgement:
    """Slow = below the median by more than ``mad_z`` robust deviations AND by ``min_gap`` of it.

    Bandwidth noise is proportional (a pair varies by a percentage, a bad link costs a factor), so
    the deviations are taken on ln(score): the modified z-score 0.6745 (ln s - ln median) / MAD.
    Both margins must be passed: the threshold is ``median x min(exp(-mad_z MAD / 0.6745), 1 -
    min_gap)``. When every node agrees (MAD 0, or a spread within the gap) no node is slow; when
    more than half the nodes are slow the median is slow too and the sweep names none: that
    cluster-wide shortfall is the single run's verdict to give.
    """
    values = [s for s in scores.values() if s is not None]
    if not values:
        return Judgement(None, None, None, [])
    m = median(values)
    if m <= 0:  # most pairs delivered nothing: no healthy level to compare with
        return Judgement(m, None, None, [])
    mad = median(abs(math.log(v) - math.log(m)) if v > 0 else float("inf") for v in values)
    threshold = m * min(math.exp(-mad_z * mad / MAD_SCALE), 1.0 - min_gap)
    slow = [n for n, s in scores.items() if s is not None and s < threshold]
    slow.sort(key=lambda n: (scores[n], n))
    return Judgement(m, mad, threshold, slow)


def evidence(node: str, pairs: Sequence[PairResult], slow: Sequence[str]) -> List[PairResult]:
    """A slow node's measured pairs against partners that are not slow themselves."""
    return [p for p in pairs if p.measured and node in p.nodes and p.partner(node) not in slow]


def fmt_gbps(value: float) -> str:
    """Two decimals, as nccl-tests prints busbw; two significant digits below 0.1 (a throttled link) and in
    e-notation past outcome.FMT_LARGEST (an impossible value stays a few characters long)."""
    return fmt_number(value, 2) if value >= 0.1 or value == 0 else "%.2g" % value


def drain_command(node: str, score: float, median_gbps: float) -> str:
    return 'scontrol update NodeName=%s State=DRAIN Reason="hpq sweep: %s GB/s vs median %s"' % (
        node, fmt_gbps(score), fmt_gbps(median_gbps))


def exclude_command(nodes: Sequence[str]) -> str:
    return "sbatch --exclude=%s" % ",".join(nodes)


def build_report(nodes: Sequence[str], pairs: Sequence[PairResult], rounds: int, size_bytes: int,
                 extra: Optional[Dict[str, object]] = None, min_gap: float = MIN_GAP,
                 expect_efa: bool = False, budget_flag: str = "--budget") -> Dict[str, object]:
    """The sweep's result as one JSON-able dict (what ``--output json`` prints); verdict included.

    FAIL: a slow node, a failed pair, or (``expect_efa``: the workers' type has EFA) a pair whose log
    says TCP sockets. INCONCLUSIVE: a node was not measured, a pair left no log (NO_LOG), fewer than
    three nodes were measured (a slow node cannot be told from its only partner), or on an EFA type a
    pair's log does not name its network. PASS only when every node met two partners or more and none is slow.
    """
    scores = node_scores(nodes, pairs)
    met = partners(nodes, pairs)
    j = judge(scores, min_gap=min_gap)
    measured = [p for p in pairs if p.measured]
    bad = [p for p in measured if p.status != OK]
    skipped = [p for p in pairs if p.status == SKIPPED]
    unread = [p for p in pairs if p.status == NO_LOG]
    notes: List[str] = []
    alone = [n for n in nodes if scores[n] is not None and len(met[n]) < 2]
    if alone:
        notes.append("%s met only one partner: a slow pair cannot be pinned on either of its nodes (a sweep of "
                     "3 nodes can, of %d or more reliably)" % (", ".join(alone), MIN_PARTNERS + 1))
    if skipped:
        notes.append("%d pair(s) not run: the time budget ran out (%s)" % (len(skipped), budget_flag))
    unmeasured = [n for n in nodes if scores[n] is None]
    table = []
    for n in nodes:
        s = scores[n]
        verdict = "unmeasured" if s is None else ("SLOW" if n in j.slow else "ok")
        table.append({"name": n, "score_gbps": s, "partners": len(met[n]), "verdict": verdict})
    ev = {n: [p.to_dict() for p in evidence(n, pairs, j.slow)] for n in j.slow}
    actions = {n: [drain_command(n, scores[n] or 0.0, j.median_gbps or 0.0), exclude_command([n])]
               for n in j.slow}
    parts = []
    if j.slow:
        parts.append("%d slow node(s): %s vs the cluster median %s GB/s" % (
            len(j.slow), ", ".join("%s (%s GB/s)" % (n, fmt_gbps(scores[n] or 0.0)) for n in j.slow),
            fmt_gbps(j.median_gbps or 0.0)))
    if bad and len(bad) == len(measured):
        parts.append("every pair failed (%d): the sweep measured nothing; see the pair logs" % len(bad))
    elif bad:
        parts.append("%d of %d pair(s) failed, hung or returned wrong data (counted as 0 GB/s)" % (
            len(bad), len(measured)))
    if expect_efa:
        tcp = [p for p in measured if p.transport not in (None, "efa")]
        if tcp:
            parts.append("%d pair(s) did not use EFA (%s): the workers' type has EFA, so TCP sockets fail whatever "
                         "the bandwidth; compare the job's variables with `hpq nccl-env TYPE`" % (
                             len(tcp), ", ".join("%s+%s: %s" % (p.nodes[0], p.nodes[1], p.transport) for p in tcp[:3])))
    missing: List[str] = []
    if not parts:
        if not measured:
            missing.append("no pair was measured: %d pair(s) left no log" % len(unread) if unread else
                           "no pair ran: the time budget ran out first (%s)" % budget_flag)
        elif unmeasured:
            missing.append("%d node(s) not measured (%s): %s" % (
                len(unmeasured), ", ".join(unmeasured[:8]),
                "a pair left no log; rerun" if unread else "rerun with a larger %s" % budget_flag))
        if unread and measured:  # a scheduled pair with no evidence either way: no PASS on what was not read
            missing.append("%d pair(s) left no log to read (%s)" % (
                len(unread), ", ".join("%s+%s" % p.nodes for p in unread[:3])))
        judged = [n for n in nodes if scores[n] is not None]
        if 0 < len(judged) < MIN_PARTNERS:
            missing.append("only %d node(s) measured: a slow node cannot be told from its only partner; sweep 3 or "
                           "more nodes (a single run's verdict, run-nccl-test without --sweep, judges 2)" % len(judged))
        if expect_efa and any(p.transport is None for p in measured if p.status == OK):
            missing.append("a pair's log does not say which network NCCL used (NCCL_DEBUG=INFO "
                           "NCCL_DEBUG_SUBSYS=INIT,NET)")
    vals = [s for s in scores.values() if s is not None]
    if parts:
        outcome = FAIL
        if j.slow:  # "N slow node(s): A (x GB/s) vs the cluster median y GB/s; ..." reads as number vs expectation
            message = "FAIL: " + "; ".join(parts) + "."
        else:
            message = headline(outcome, "%d of %d pair(s) failed" % (len(bad), len(measured)),
                                       "every pair measured", "; ".join(parts) + ".")
        if j.slow:
            message += " Drain or exclude the slow node(s) (commands below)."
    elif missing:
        outcome = INCONCLUSIVE
        message = headline(outcome, "%d of %d node(s) measured" % (len(vals), len(nodes)),
                                   "every node, with 2+ partners", "; ".join(missing) + ".")
    else:
        outcome = PASS
        message = headline(outcome, "no slow node among %d: scores %s..%s GB/s" % (
            len(vals), fmt_gbps(min(vals)), fmt_gbps(max(vals))), "slow below %s GB/s (median %s GB/s)" % (
            fmt_gbps(j.threshold_gbps or 0.0), fmt_gbps(j.median_gbps or 0.0)), "every node within the margin of "
            "the median")
    code = exit_code(outcome)
    doc: Dict[str, object] = {
        "hosts": list(nodes), "rounds": rounds, "size_bytes": size_bytes,
        "pairs": [p.to_dict() for p in pairs],
        "scores": scores, "partners": met, "nodes": table,
        "median_gbps": j.median_gbps, "mad_ln": j.mad_ln, "threshold_gbps": j.threshold_gbps,
        "mad_z": MAD_Z, "min_gap": min_gap,
        "slow_nodes": list(j.slow), "unmeasured_nodes": unmeasured, "evidence": ev, "actions": actions,
        "failed_pairs": len(bad), "notes": notes,
        "ok": code == 0, "exit_code": code, "message": message, "outcome": outcome,
        "verdict": {"outcome": outcome, "ok": code == 0, "exit_code": code, "message": message},
    }
    doc.update(extra or {})
    return doc


def _fmt_size(n: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def _fmt_pair(p: Dict) -> str:
    a, b = p["nodes"]
    if p["status"] == OK:
        what = "%s GB/s" % fmt_gbps(p["busbw_gbps"] or 0.0)
    elif p["status"] == TIMEOUT:
        what = "TIMEOUT after %.0f s" % (p.get("seconds") or 0)
    elif p["status"] == WRONG:
        what = "WRONG DATA (%s)" % (p.get("note") or "wrong elements")
    elif p["status"] == SKIPPED:
        what = "not run"
    elif p["status"] == NO_LOG:
        what = "NO LOG"
    else:
        what = "FAILED (%s)" % (p.get("note") or "exit %s" % p.get("exit_status"))
    return "round %-3d %s + %s: %s" % (p["round"], a, b, what)


def format_report(doc: Dict) -> str:
    """The human rendering of ``build_report``'s dict: the verdict's headline first (read at a glance, as every
    hpq verdict; docs/validation.md "Three outcomes"), then the node table, evidence and commands."""
    lines = [str(doc.get("message", ""))]
    hosts = doc.get("hosts") or []
    lines.append("# sweep: %d nodes, %d pairs in %d round(s), all_reduce of %s per pair%s" % (
        len(hosts), len([p for p in doc.get("pairs", []) if p["status"] != SKIPPED]), doc.get("rounds") or 0,
        _fmt_size(int(doc.get("size_bytes") or 0)),
        " (%s)" % ", ".join(str(doc[k]) for k in ("mode", "transport") if doc.get(k)) if doc.get("mode") else ""))
    width = max([len("node")] + [len(h) for h in hosts])
    lines.append("%-*s  %12s  %8s  %s" % (width, "node", "score(GB/s)", "partners", "verdict"))
    for row in doc.get("nodes") or []:
        score = "-" if row["score_gbps"] is None else fmt_gbps(row["score_gbps"])
        lines.append("%-*s  %12s  %8d  %s" % (width, row["name"], score, row["partners"], row["verdict"]))
    if doc.get("threshold_gbps") is not None:
        lines.append("median %s GB/s: slow means below %s GB/s (%d%% under the median and %.1f robust "
                     "deviations; MAD of ln(score) %.3f)" % (fmt_gbps(doc["median_gbps"]), fmt_gbps(doc["threshold_gbps"]),
                                                            round(doc["min_gap"] * 100), doc["mad_z"], doc["mad_ln"]))
    scores = doc.get("scores") or {}
    for n in doc.get("slow_nodes") or []:
        lines.append("")
        lines.append("SLOW %s: %s GB/s vs median %s GB/s" % (n, fmt_gbps(scores.get(n) or 0.0),
                                                              fmt_gbps(doc["median_gbps"])))
        ev = (doc.get("evidence") or {}).get(n) or []
        lines.append("  evidence, its pairs with healthy partners:" if ev else
                     "  evidence: none (every partner was slow too)")
        for p in ev:
            lines.append("    " + _fmt_pair(p))
        lines.append("  to act (drain it, keep jobs off it until it is fixed):")
        for cmd in (doc.get("actions") or {}).get(n) or []:
            lines.append("    " + cmd + (" JOB_SCRIPT" if cmd.startswith("sbatch ") else ""))
    bad = [p for p in doc.get("pairs") or [] if p["status"] in (FAILED, TIMEOUT, WRONG)]
    if bad:
        lines.append("")
        lines.append("pairs that failed (evidence, counted as 0 GB/s):")
        for p in bad:
            lines.append("  " + _fmt_pair(p) + ("  log: %s" % p["log"] if p.get("log") else ""))
    for note in doc.get("notes") or []:
        lines.append("note: " + note)
    return "\n".join(lines)


# A sweep's own JSON is the last object it prints: only this many of the last lines that open an object are
# tried, so a text of many '{' lines that never close costs linear time, not one scan of the rest per line.
EXTRACT_TRIES = 8


def extract_json(text: str) -> Optional[Dict]:
    """The last sweep result object in ``text`` (``--output json`` captured over SSH), else None."""
    decoder = json.JSONDecoder()
    starts: List[int] = []
    offset = 0
    for line in text.splitlines(True):
        if line.startswith("{"):
            starts.append(offset)
        offset += len(line)
    for start in reversed(starts[-EXTRACT_TRIES:]):
        try:
            obj, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(obj, dict) and "slow_nodes" in obj:
            return obj
    return None
