"""``hpq rehearse --sweep --throttle INDEX=RATE``: a slow link made on purpose, and whether the sweep found it.

INDEX counts the rehearsal's workers from 0 in the order of the result's ``nodes`` list (the
controller and a login node are not workers): 0 is ``worker-1``, 2 is ``worker-3``. RATE is a
rate as ``tc`` reads it (iproute2 ``tc/tc_util.c`` ``get_rate64``: a decimal number and one of
its suffixes, matched without regard to case: ``bit kbit mbit gbit tbit``, the IEC ``kibit``..,
and bytes per second ``bps kbps mbps gbps tbps`` with ``kibps``..; a bare number is bits per
second). Note that tc's ``mbps`` is megaBYTES per second. Percentages are refused: they are of
the device's speed, which a veth does not have.

Pure functions: the command (``cli/commands/rehearse.py``) validates with them before anything
is created, the rehearsal (``run.py``) judges the sweep's JSON with ``judge``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hpq.errors import UsageError
from hpq.scripts import sweep

# tc's suffixes and what each multiplies the number by, in bits per second (tc/tc_util.c, suffixes[]).
RATE_SUFFIXES = {
    "bit": 1.0, "kibit": 1024.0, "kbit": 1e3, "mibit": 1024.0 ** 2, "mbit": 1e6, "gibit": 1024.0 ** 3,
    "gbit": 1e9, "tibit": 1024.0 ** 4, "tbit": 1e12,
    "bps": 8.0, "kibps": 8 * 1024.0, "kbps": 8e3, "mibps": 8 * 1024.0 ** 2, "mbps": 8e6,
    "gibps": 8 * 1024.0 ** 3, "gbps": 8e9, "tibps": 8 * 1024.0 ** 4, "tbps": 8e12,
}
_RATE_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([A-Za-z]*)$")  # ASCII digits: \d takes any script's
# Below this Slurm's own traffic to the node (step launch, heartbeats) stalls: the sweep would
# measure timeouts, not bandwidth.
MIN_RATE_BITS = 1e6
# Above this a "throttle" slows no link there is; a typo (99999999999tbit) should not pass for one.
MAX_RATE_BITS = 1e12


def rate_bits(rate: str) -> float:
    """Bits per second of a tc rate; UsageError (naming the option) when tc would refuse it or it is too low."""
    m = _RATE_RE.match(rate.strip())
    if not m or (m.group(2) and m.group(2).lower() not in RATE_SUFFIXES):
        raise UsageError(f"--throttle RATE {rate!r}: not a tc rate; write it as tc does, e.g. 30mbit, 500kbit, "
                         f"1gbit (units: {', '.join(sorted(RATE_SUFFIXES))}; mbps is megabytes per second)")
    bits = float(m.group(1)) * (RATE_SUFFIXES[m.group(2).lower()] if m.group(2) else 1.0)
    if bits > MAX_RATE_BITS:
        raise UsageError(f"--throttle RATE {rate!r} is {bits:g} bit/s: above 1tbit, which slows no link at all")
    if bits < MIN_RATE_BITS:
        raise UsageError(f"--throttle RATE {rate!r} is {bits:g} bit/s (a bare number is bits per second), below "
                         "1mbit: Slurm's own traffic to the node would stall and the sweep would measure timeouts, "
                         "not bandwidth")
    return bits


def parse(values: tuple[str, ...] | list[str], workers: int) -> dict[int, str]:
    """``INDEX=RATE`` options -> {worker index: rate}; one UsageError for the first bad one."""
    out: dict[int, str] = {}
    for v in values:
        index, sep, rate = v.partition("=")
        if not sep or not re.fullmatch(r"[0-9]{1,3}", index.strip()) or not rate.strip():
            raise UsageError(f"--throttle {v!r}: expected INDEX=RATE, e.g. 2=30mbit (INDEX counts the workers "
                             "from 0)")
        i = int(index)
        if i >= workers:
            raise UsageError(f"--throttle {v!r}: no worker {i}; with --nodes {workers} INDEX is 0 to "
                             f"{workers - 1} (0 is worker-1)")
        if i in out:
            raise UsageError(f"--throttle {v!r}: worker {i} is already throttled ({i}={out[i]})")
        rate_bits(rate)
        out[i] = rate.strip()
    if out:
        if workers < 3:
            raise UsageError(f"--throttle needs at least 3 workers (--nodes {workers}): with two, each node meets "
                             "only the other, so no sweep can tell which of them is slow")
        most = (workers - 1) // 2
        if len(out) > most:
            raise UsageError(f"--throttle: {len(out)} of {workers} workers throttled; the sweep can name at most "
                             f"{most} slow node(s) among {workers} (a healthy node's score holds only while at most "
                             "half its partners are slow)")
    return out


@dataclass
class Check:
    ok: bool
    message: str
    node: str | None = None  # the rehearsal node the failure is about (worker-N), if one


def gbps(value: Any) -> str:
    """A score as the sweep prints it (scripts/sweep.fmt_gbps); "-" for a node none of whose pairs ran."""
    return "-" if value is None else sweep.fmt_gbps(float(value))


def judge(doc: dict[str, Any] | None, remote_code: int, expected: dict[str, str], names: dict[str, str]) -> Check:
    """Did the sweep name exactly the throttled nodes?

    ``expected``: Slurm node name -> the rate it was throttled to (empty: nothing injected, so the
    sweep must name none). ``names``: Slurm node name -> rehearsal node name. Pairs that failed
    count against the check unless a throttled node was in them (a throttled pair may time out:
    that is the evidence it should be).
    """
    def who(n: str) -> str:
        return f"{names.get(n, n)} ({n})"

    if doc is None:
        return Check(False, f"FAIL: no sweep result came back; run-nccl-test --sweep exited {remote_code}")
    if remote_code not in (0, 1, 3):  # PASS, FAIL, INCONCLUSIVE (e.g. 2 nodes: nothing to compare)
        return Check(False, f"FAIL: run-nccl-test --sweep exited {remote_code}: {doc.get('message', '')}")
    named = list(doc.get("slow_nodes") or [])
    scores = doc.get("scores") or {}
    median, threshold = doc.get("median_gbps"), doc.get("threshold_gbps")
    versus = f"median {gbps(median)} GB/s, slow below {gbps(threshold)} GB/s"
    missed = [n for n in expected if n not in named]
    extra = [n for n in named if n not in expected]
    bad = [p for p in doc.get("pairs") or [] if p.get("status") in ("failed", "timeout", "wrong")
           and not set(p.get("nodes") or []) & set(expected)]
    unmeasured = [n for n in doc.get("unmeasured_nodes") or [] if n not in expected]
    problems: list[str] = []
    node = None
    if missed:
        node = names.get(missed[0])
        txt = "; ".join(f"{who(n)} throttled to {expected[n]} scored {gbps(scores.get(n))} GB/s" for n in missed)
        problems.append(f"the sweep missed the throttled node(s): {txt} ({versus})")
        slowest = min(rate_bits(expected[n]) for n in missed) / 8e9
        if median and slowest >= 0.5 * float(median):
            problems.append(f"the throttle ({gbps(slowest)} GB/s) is not below what unthrottled pairs measure "
                            f"here ({gbps(median)} GB/s), so it slowed nothing the sweep could see")
    if extra:
        node = node or names.get(extra[0])
        txt = "; ".join(f"{who(n)} at {gbps(scores.get(n))} GB/s" for n in extra)
        injected = "nothing was throttled" if not expected else "it was not throttled"
        problems.append(f"the sweep named {txt} though {injected} ({versus}): a false alarm")
    if bad:
        pairs = ", ".join(f"{p['nodes'][0]} + {p['nodes'][1]} {str(p.get('status', '')).upper()}" for p in bad)
        problems.append(f"{len(bad)} pair(s) of unthrottled nodes failed: {pairs}")
    if unmeasured:
        problems.append(f"no pair of {', '.join(who(n) for n in unmeasured)} ran")
    if problems:
        return Check(False, "FAIL: " + "; ".join(problems) + ".", node)
    if expected:
        txt = ", ".join(f"{who(n)} at {gbps(scores.get(n))} GB/s (throttled to {expected[n]})" for n in expected)
        return Check(True, f"PASS: the sweep named exactly the throttled node(s): {txt}; {versus}.")
    vals = [float(v) for v in scores.values() if v is not None]
    span = f"scores {gbps(min(vals))}..{gbps(max(vals))} GB/s, " if vals else ""
    return Check(True, f"PASS: the sweep named no slow node and none was throttled: {span}{versus}.")
