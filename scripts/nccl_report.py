"""Parse collective-benchmark output into rows and judge it against the instance catalog.

One parser for every producer hpq meets: nccl-tests (``all_reduce_perf`` and friends, old
``error`` and new ``#wrong`` columns, with or without ``root``, ``N/A`` when checking was
off, ``cputime`` and ``timestamp`` columns), hpq's built-in torch.distributed benchmark (same
columns) and Neuron's ``nccom-test`` (``size(B) count(elems) type time:avg(us) algbw(GB/s)
busbw(GB/s)``). NCCL_DEBUG chatter, MPI warnings, CRLF line ends, srun ``--label`` and
mpirun ``--tag-output`` prefixes (when several ranks printed tables, the lowest rank's is
kept) and a cut-off last line are tolerated.

Standard library only: it runs on cluster nodes (``run-nccl-test``) and on laptops
(``hpq nccl-report``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from hpq.errors import UsageError

# A result passes when its peak bus bandwidth reaches this fraction of the catalog's
# expected value. The catalog figures are round "about" numbers (seed 004: ~3, ~12, ~300,
# ~400 GB/s) and a healthy cluster lands within a few percent of them; 0.8 leaves room for
# run-to-run spread while still failing every real misconfiguration we know of, which
# costs a factor of 3 or more (TCP instead of EFA, SENDRECV instead of RDMA).
PASS_FRACTION = 0.80

# Old nccl-tests print the largest numeric error instead of a count; a float sum of a few
# ranks is never exact, so only an error above this counts as a wrong result.
OLD_ERROR_TOLERANCE = 1e-3

# Below this message size a collective is latency-bound and cannot show peak bandwidth.
PEAK_MIN_BYTES = 128 * 1024 * 1024

NOT_CHECKED = "results were not checked (#wrong N/A): run with -c 1 to verify data"

_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "mulsum", "premulsum"}
# The value may be glued to its unit (nccom-test: "43.6901GB/s") or be "-nan" (nccl-tests' %g).
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*([-+]?(?:nan|inf|\d*\.?\d+(?:e[-+]?\d+)?))", re.IGNORECASE)
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)", re.IGNORECASE)
# srun --label "0: ", mpirun --tag-output "[1,0]<stdout>:" (job, rank)
_LABEL_RE = re.compile(r"^\s*(?:(\d+):\s|\[\d+,(\d+)\]<std(?:out|err)>:\s?)")


class ReportError(UsageError):
    """The input holds no benchmark result we can read (exit 2)."""


@dataclass
class Measurement:
    """One timing of one message size (out-of-place or in-place)."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: Optional[int] = None  # None: not checked (N/A) or the producer has no such column

    def to_dict(self) -> Dict[str, object]:
        return {"time_us": self.time_us, "algbw_gbps": self.algbw_gbps,
                "busbw_gbps": self.busbw_gbps, "wrong": self.wrong}


@dataclass
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: Optional[str]
    root: Optional[int]
    out_of_place: Measurement
    in_place: Optional[Measurement] = None

    @property
    def measurements(self) -> List[Measurement]:
        return [m for m in (self.out_of_place, self.in_place) if m is not None]

    @property
    def busbw_gbps(self) -> float:
        return max(m.busbw_gbps for m in self.measurements)

    @property
    def wrong(self) -> int:
        return sum(m.wrong or 0 for m in self.measurements)

    def to_dict(self) -> Dict[str, object]:
        return {
            "size_bytes": self.size_bytes, "count": self.count, "type": self.dtype, "redop": self.redop,
            "root": self.root, "out_of_place": self.out_of_place.to_dict(),
            "in_place": self.in_place.to_dict() if self.in_place else None,
        }


@dataclass
class NcclReport:
    rows: List[Row]
    avg_busbw_gbps: float
    avg_busbw_reported: bool  # True when taken from the producer's "Avg bus bandwidth" line
    peak_busbw_gbps: float
    peak_size_bytes: int
    wrong_total: int
    checked: bool  # False when every #wrong was N/A
    producer: str  # "nccl-tests" (also the built-in benchmark) or "nccom-test"
    truncated: bool  # no summary line at the end: the run probably died or was cut off
    out_of_bounds: Optional[int] = None
    notes: List[str] = field(default_factory=list)

    @property
    def max_size_bytes(self) -> int:
        return max(r.size_bytes for r in self.rows)


@dataclass
class Verdict:
    ok: bool
    exit_code: int
    message: str
    expected_busbw_gbps: Optional[float] = None
    instance_type: Optional[str] = None
    fraction: Optional[float] = None


# ----------------------------------------------------------------------------- parsing


def _num(tok: str) -> Optional[float]:
    try:
        return float(tok)
    except ValueError:
        return None


def _int(tok: str) -> Optional[int]:
    try:
        return int(tok)
    except ValueError:
        return None


def _norm_col(tok: str) -> str:
    """``size(B)`` -> ``size``; ``time:avg(us)`` -> ``time``; ``#wrong`` stays."""
    tok = tok.lower().split("(")[0]
    return tok.split(":")[0]


def _header_columns(line: str) -> Optional[List[str]]:
    """Column names when ``line`` is a table header (nccl-tests, nccom-test), else None."""
    body = line.strip()
    while body.startswith("#") and not body.startswith("#wrong"):
        body = body[1:].lstrip()
    toks = [_norm_col(t) for t in body.split()]
    if len(toks) >= 4 and toks[0] == "size" and "busbw" in toks:
        return toks
    return None


def _wrong(tok: str, old_style: bool) -> Optional[int]:
    """``#wrong`` is a count, printed with %g (``1.23457e+06`` from a million on); old ``error`` a magnitude."""
    if tok.upper() == "N/A":
        return None
    f = _num(tok)
    if f is None or math.isnan(f):
        raise ValueError(tok)
    if old_style:
        return 1 if abs(f) > OLD_ERROR_TOLERANCE else 0
    return int(round(f)) if not math.isinf(f) else 1


def _measurements(vals: Sequence[str], width: int, old_style: bool) -> List[Measurement]:
    out = []
    for i in range(0, len(vals), width):
        chunk = vals[i:i + width]
        t, a, b = (_num(x) for x in chunk[:3])
        if t is None or a is None or b is None:
            raise ValueError(chunk)
        out.append(Measurement(t, a, b, _wrong(chunk[3], old_style) if width == 4 else None))
    return out


def _parse_row(toks: List[str], header: Optional[List[str]]) -> Optional[Row]:
    """A data row, or None when the tokens are not one (log chatter, a cut-off line)."""
    if len(toks) < 6:
        return None
    size, count = _int(toks[0]), _int(toks[1])
    if size is None or count is None or size < 0 or count < 0 or not re.match(r"^[A-Za-z]\w*$", toks[2]):
        return None
    dtype, rest = toks[2], toks[3:]
    redop = None
    # With a header the redop column is taken by position (any op name); without one, by name.
    if rest and (rest[0].lower() in _REDOPS if header is None else "redop" in header):
        redop, rest = rest[0].lower(), rest[1:]
    old_style = bool(header) and "error" in header and "#wrong" not in header
    has_wrong = bool(header) and ("#wrong" in header or "error" in header)
    has_root = bool(header) and "root" in header
    if header is None:
        # No header seen: infer from the count (nccl-tests: groups of 4, optional root first).
        has_root = len(rest) % 2 == 1 and len(rest) >= 5
        n = len(rest) - (1 if has_root else 0)
        has_wrong = n % 4 == 0
        if not has_wrong and n % 3 != 0:
            return None
    root = None
    if has_root:
        if not rest:
            return None
        root = _int(rest[0])
        if root is None:
            return None
        rest = rest[1:]
    width = 4 if has_wrong else 3
    if not rest or (header is None and len(rest) % width):
        return None
    if header is not None:
        want = header.count("busbw") * width
        if "timestamp" in header and len(rest) > want:
            rest = rest[:want]  # date and time after the in-place columns (timestamp option)
        if len(rest) != want:
            return None  # a row cut short (truncated output)
    try:
        meas = _measurements(rest, width, old_style)
    except ValueError:
        return None
    if len(meas) > 2:
        return None
    return Row(size, count, dtype, redop, root, meas[0], meas[1] if len(meas) > 1 else None)


def parse_text(text: str) -> NcclReport:
    """Parse benchmark output; raise ReportError when nothing in it is a result row."""
    if not isinstance(text, str):
        raise ReportError("benchmark output must be text")
    header: Optional[List[str]] = None
    rows: List[Row] = []
    row_ranks: List[int] = []  # the label's rank per row; -1 without a label
    avg: Optional[float] = None
    summary = False
    oob: Optional[int] = None
    producer = "nccl-tests"
    lines = text.splitlines()
    complete_last = text.endswith(("\n", "\r"))
    skipped_partial = False
    for idx, raw in enumerate(lines):
        label = _LABEL_RE.match(raw)
        line = raw[label.end():] if label else raw
        cols = _header_columns(line)
        if cols is not None:
            header = cols
            if not line.lstrip().startswith("#"):
                producer = "nccom-test"
            continue
        m = _AVG_RE.search(line)
        if m:
            summary = True
            value = _num(m.group(1))
            avg = value if value is not None and math.isfinite(value) else None
            continue
        m = _OOB_RE.search(line)
        if m:
            oob = int(m.group(1))
            continue
        if line.lstrip().startswith("#"):
            continue
        toks = line.split()
        row = _parse_row(toks, header)
        if row is None:
            if idx == len(lines) - 1 and toks and _int(toks[0]) is not None:
                skipped_partial = True
            continue
        if idx == len(lines) - 1 and not complete_last and not summary:
            # The very last line had no newline: it may be cut mid-number; keep it only if whole.
            if header is not None and len(toks) < len(header):
                skipped_partial = True
                continue
        rows.append(row)
        row_ranks.append(int(label.group(1) or label.group(2)) if label else -1)
    if not rows:
        raise ReportError("no benchmark result rows found (expected nccl-tests, hpq built-in or "
                          "nccom-test output with size/count/type/time/algbw/busbw columns)")
    notes = []
    ranks = sorted(set(row_ranks))
    if len(ranks) > 1:
        # Several ranks each printed a table (e.g. a non-MPI nccl-tests started by srun --label):
        # keep one rank's, as nccl-tests itself prints only rank 0's.
        rows = [rows[i] for i, k in enumerate(row_ranks) if k == ranks[0]]
        notes.append("result rows came from %d ranks (%s); only rank %d's are used"
                     % (len(ranks), ",".join(str(k) for k in ranks), ranks[0]))
    all_bw = [m.busbw_gbps for r in rows for m in r.measurements]
    peak_row = max(rows, key=lambda r: r.busbw_gbps)
    checked = any(m.wrong is not None for r in rows for m in r.measurements)
    truncated = not summary
    if truncated:
        notes.append("no 'Avg bus bandwidth' summary: the run was cut off or died before the end")
    if skipped_partial:
        notes.append("the last line was incomplete and was ignored")
    if not checked and producer == "nccl-tests":
        notes.append(NOT_CHECKED)
    if summary and avg is None:
        notes.append("the 'Avg bus bandwidth' summary holds no number; the average is computed from the rows")
    report = NcclReport(
        rows=rows,
        avg_busbw_gbps=avg if avg is not None else sum(all_bw) / len(all_bw),
        avg_busbw_reported=avg is not None,
        peak_busbw_gbps=peak_row.busbw_gbps,
        peak_size_bytes=peak_row.size_bytes,
        wrong_total=sum(r.wrong for r in rows),
        checked=checked,
        producer=producer,
        truncated=truncated,
        out_of_bounds=oob,
        notes=notes,
    )
    return report


def parse_file(path: str) -> NcclReport:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ReportError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    return parse_text(data.decode("utf-8", errors="replace"))


# ----------------------------------------------------------------------------- verdict


def _fmt_size(n: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div:
            return "%g %s" % (round(n / div, 2), unit)
    return "%d B" % n


def _shortfall_advice(entry, peak: float, expected: float) -> str:
    """Plain-words reason for a shortfall, from the bandwidth level it landed at."""
    tcp_level = max(entry.network_gbps / 8.0 * 1.3, 4.0) if not entry.has_efa else 4.0
    checks_efa = ("Check: `FI_PROVIDER=efa` is in the job's environment; `NCCL_NET_PLUGIN` is not "
                  "'none' (NCCL_DEBUG=INFO should say 'NET/OFI Selected Provider is efa', not "
                  "'NET/Socket'); the instance group was created with EFA and `fi_info -p efa` lists "
                  "devices; the security group has self-referencing ingress AND egress rules; compare the "
                  "job's variables with `hpq nccl-env %s`." % entry.name)
    if entry.has_efa and peak <= tcp_level:
        return ("%.2f GB/s is TCP-socket speed: the traffic went over TCP sockets and EFA was not used. "
                % peak) + checks_efa
    if entry.efa_device_rdma and peak < expected * 0.25:
        return ("%.2f GB/s is far below the GPUDirect RDMA level: EFA may be running without device RDMA "
                "(FI_EFA_USE_DEVICE_RDMA should be 1 on %s) or only part of the EFA interfaces are in use. "
                % (peak, entry.name)) + checks_efa
    if not entry.has_efa:
        return ("%s has no EFA: NCCL uses TCP sockets, so the limit is the %g Gbps link. Check that "
                "NCCL_SOCKET_IFNAME picks the real interface (not docker/lo/veth) and that no other job "
                "shares the link; compare with `hpq nccl-env %s`." % (entry.name, entry.network_gbps,
                                                                      entry.name))
    return ("Check that every GPU of every node took part (NODES x GPUS_PER_NODE), no other job shares the "
            "nodes, and that NCCL_ALGO/NCCL_PROTO/NCCL_TREE_THRESHOLD are not set; then look at "
            "NCCL_DEBUG=INFO for the transport chosen. " + checks_efa)


def evaluate(report: NcclReport, instance_type: Optional[str]) -> Verdict:
    """Judge a result: exit 1 on any wrong element or a peak under PASS_FRACTION of the catalog."""
    from hpq.lifecycle import catalog  # local: keeps parse_text importable with no catalog

    entry = None
    if instance_type:
        try:
            entry = catalog.lookup(instance_type)
        except catalog.UnknownInstanceType as exc:
            raise ReportError(str(exc)) from None
    expected = entry.expected_busbw_gbps if entry else None
    parts: List[str] = []
    ok = True
    if report.wrong_total:
        ok = False
        parts.append(
            "%d wrong element(s) in the results: the collective returned corrupted data. Do not train on "
            "this cluster: look for Xid errors in `dmesg` on each node, run a DCGM diagnostic, and replace "
            "the node that fails (rerun with fewer nodes to find it)." % report.wrong_total)
    if report.out_of_bounds and not report.wrong_total:
        ok = False
        parts.append("%d out-of-bounds value(s) reported by the benchmark." % report.out_of_bounds)
    fraction = None
    peak_txt = "peak bus bandwidth %.2f GB/s at %s" % (report.peak_busbw_gbps, _fmt_size(report.peak_size_bytes))
    if expected is None:
        why = ("no instance type given" if entry is None
               else "the catalog has no expected bus bandwidth for %s" % entry.name)
        parts.insert(0, "%s; %s, so no bandwidth expectation to compare with." % (peak_txt, why))
    else:
        fraction = report.peak_busbw_gbps / expected
        if fraction >= PASS_FRACTION:
            parts.insert(0, "%s: %.0f%% of the %g GB/s expected for %s (pass at %.0f%%)." % (
                peak_txt, fraction * 100, expected, entry.name, PASS_FRACTION * 100))
        else:
            ok = False
            msg = "%s is only %.0f%% of the %g GB/s expected for %s (pass at %.0f%%). " % (
                peak_txt, fraction * 100, expected, entry.name, PASS_FRACTION * 100)
            if report.max_size_bytes < PEAK_MIN_BYTES:
                msg += ("The largest message was %s; bandwidth peaks only at 128 MB and above: rerun with "
                        "-e 16G. " % _fmt_size(report.max_size_bytes))
            parts.insert(0, msg + _shortfall_advice(entry, report.peak_busbw_gbps, expected))
    if report.truncated:  # an incomplete log is never a pass, whatever its rows show
        ok = False
        parts.append("No 'Avg bus bandwidth' summary line: the run was cut off or crashed before the end, so "
                     "it is not a pass; look at the end of the log.")
    if NOT_CHECKED in report.notes:
        parts.append("Note: %s." % NOT_CHECKED)
    verdict = "PASS" if ok else "FAIL"
    return Verdict(ok=ok, exit_code=0 if ok else 1, message="%s: %s" % (verdict, " ".join(parts)),
                   expected_busbw_gbps=expected, instance_type=entry.name if entry else None,
                   fraction=fraction)


def report_to_dict(report: NcclReport, verdict: Optional[Verdict] = None) -> Dict[str, object]:
    out: Dict[str, object] = {
        "producer": report.producer,
        "rows": [r.to_dict() for r in report.rows],
        "row_count": len(report.rows),
        "peak_busbw_gbps": report.peak_busbw_gbps,
        "peak_size_bytes": report.peak_size_bytes,
        "avg_busbw_gbps": report.avg_busbw_gbps,
        "avg_busbw_reported": report.avg_busbw_reported,
        "wrong_total": report.wrong_total,
        "checked": report.checked,
        "truncated": report.truncated,
        "out_of_bounds": report.out_of_bounds,
        "notes": list(report.notes),
    }
    if verdict is not None:
        out["verdict"] = {
            "ok": verdict.ok, "exit_code": verdict.exit_code, "message": verdict.message,
            "instance_type": verdict.instance_type, "expected_busbw_gbps": verdict.expected_busbw_gbps,
            "fraction_of_expected": verdict.fraction, "pass_fraction": PASS_FRACTION,
        }
    return out


def format_table(report: NcclReport) -> str:
    """A compact human table: one line per size, best of out-of-place/in-place."""
    lines = ["%14s %14s %8s %12s %10s %10s %8s" % ("size(B)", "count", "type", "time(us)", "algbw", "busbw",
                                                  "#wrong")]
    for r in report.rows:
        best = max(r.measurements, key=lambda m: m.busbw_gbps)
        wrong = "N/A" if all(m.wrong is None for m in r.measurements) else str(r.wrong)
        lines.append("%14d %14d %8s %12.2f %10.2f %10.2f %8s" % (
            r.size_bytes, r.count, r.dtype, best.time_us, best.algbw_gbps, best.busbw_gbps, wrong))
    lines.append("rows %d | peak busbw %.2f GB/s at %s | avg busbw %.2f GB/s%s | #wrong %d" % (
        len(report.rows), report.peak_busbw_gbps, _fmt_size(report.peak_size_bytes), report.avg_busbw_gbps,
        "" if report.avg_busbw_reported else " (computed)", report.wrong_total))
    for n in report.notes:
        lines.append("note: " + n)
    return "\n".join(lines)
