"""Parse collective-benchmark output into rows and judge it against the instance catalog.

One parser for every producer hpq meets: nccl-tests (``all_reduce_perf`` and friends, old
``error`` and new ``#wrong`` columns, with or without ``root``, ``N/A`` when checking was
off, ``cputime`` and ``timestamp`` columns), hpq's built-in torch.distributed benchmark (same
columns) and Neuron's ``nccom-test`` (``size(B) count(elems) type time:avg(us) algbw(GB/s)
busbw(GB/s)``). NCCL_DEBUG chatter, MPI warnings, CRLF line ends, srun ``--label`` and
mpirun ``--tag-output`` prefixes (when several ranks printed tables, the lowest rank's is
kept) and a cut-off last line are tolerated. Two more facts are read from the log when it has
them: the hosts of nccl-tests' ``#  Rank  N Group  0 Pid ... on HOST device ...`` lines (the
run's node count, which decides the expectation) and the network NCCL chose
(``NCCL_DEBUG=INFO``: ``Using network Socket`` / ``via NET/AWS Libfabric/0/GDRDMA``).

Standard library only: it runs on cluster nodes (``run-nccl-test``) and on laptops
(``hpq nccl-report``).
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.scripts.outcome import (
    FAIL,
    INCONCLUSIVE,
    NOT_JUDGED,
    PASS,
    combine,
    exit_code,
    fmt_figure,
    fmt_number,
    headline,
    json_safe,
)

# A result passes when its peak bus bandwidth reaches this fraction of the healthy figure the catalog
# holds for the instance type and the run's node count (hpq.lifecycle.catalog.expected_busbw).
# Inside one node (NVLink/NeuronLink) results repeat within a few percent: 0.8. Across nodes the
# figure depends more on NCCL's algorithm (on 2 nodes the tree reports busbw above the NIC line
# rate, a ring below it: NVIDIA/nccl-tests#22, NVIDIA/nccl#812), so 0.7. A run at half of the
# healthy figure fails either way.
PASS_FRACTION = 0.80
PASS_FRACTION_SEVERAL_NODES = 0.70

# NCCL's socket transport on these instances stays at a few GB/s (the measured runs, docs/design.md: 3.02 GB/s on 2x
# g5.16xlarge); advice only: the transport itself is judged from the log's network line.
TCP_SPEED_GBPS = 4.0

# Old nccl-tests print the largest numeric error instead of a count; a float sum of a few
# ranks is never exact, so only an error above this counts as a wrong result.
OLD_ERROR_TOLERANCE = 1e-3

# Below this message size a collective is latency-bound and cannot show peak bandwidth.
PEAK_MIN_BYTES = 128 * 1024 * 1024

# The largest log read (a file or standard input): 64 MiB holds a 32-node run with NCCL_DEBUG=INFO and
# the INIT,NET subsystems many times over; past it the input is refused (exit 2) before memory grows.
MAX_LOG_BYTES = 64 << 20
READ_CHUNK = 1 << 20
# A network or provider name longer than this is not one (NCCL's are "Socket", "IB", "AWS Libfabric").
MAX_NET_NAME = 64

NOT_CHECKED = "results were not checked (#wrong N/A): run with -c 1 to verify data"
DEBUG_HINT = ("rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET (run-nccl-test sets both) so the log names "
              "the network NCCL used")

# What the bandwidth is judged against (``--expect``): the catalog's figure for the instance type and
# node count (the default), nothing (``none``: bandwidth reported, not judged; the run must still be
# complete, clean and free of wrong elements), or a figure of the user's own (a baseline measured on
# a healthy cluster, GB/s of bus bandwidth), held to the same pass fraction as a catalog figure.
EXPECT_CATALOG = "catalog"
EXPECT_NONE = "none"

# What the log says about the transport, classified (``transport_seen``).
NET_EFA, NET_SOCKET, NET_OTHER, NET_MIXED = "efa", "socket", "other", "mixed"

_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "mulsum", "premulsum"}
# Every pattern below is anchored on a literal and bounded, so a line is matched in linear time whatever
# it holds (no nested or open-ended lazy quantifiers: docs/design.md, "Bounded parsing").
# The value may be glued to its unit (nccom-test: "43.6901GB/s") or be "-nan" (nccl-tests' %g).
_AVG_RE = re.compile(r"Avg bus bandwidth\s{0,64}:\s{0,64}([-+]?(?:nan|inf|\d{1,40}(?:\.\d{0,40})?(?:e[-+]?\d{1,4})?))",
                     re.IGNORECASE | re.ASCII)
_OOB_RE = re.compile(r"Out of bounds values\s{0,64}:\s{0,64}(\d{1,20})", re.IGNORECASE | re.ASCII)
# srun --label "0: ", mpirun --tag-output "[1,0]<stdout>:" (job, rank)
_LABEL_RE = re.compile(r"^[ \t]{0,64}(?:(\d{1,9}):\s|\[\d{1,9},(\d{1,9})\]<std(?:out|err)>:\s?)", re.ASCII)
# nccl-tests' device lines: "#  Rank  0 Group  0 Pid  18892 on node-a device  0 [0x1b] NVIDIA H100"
# (older releases and hpq's built-in benchmark print no "Group").
_RANK_RE = re.compile(r"^#[ \t]{0,64}Rank[ \t]{1,64}(\d{1,9})[ \t]{1,64}(?:Group[ \t]{1,64}\d{1,9}[ \t]{1,64})?"
                      r"Pid[ \t]{1,64}\d{1,12}[ \t]{1,64}on[ \t]{1,64}(\S{1,255})[ \t]{1,64}device\b", re.ASCII)
# NCCL_DEBUG=INFO: "NCCL INFO Using network AWS Libfabric", "... via NET/Socket/0", ".../GDRDMA";
# aws-ofi-nccl: "NET/OFI Selected provider is efa" (older: "Selected Provider is efa").
_USING_NET = "NCCL INFO Using network "
_NET_NAME_RE = re.compile(r"^[A-Za-z][\w ]*$", re.ASCII)
# srun's report of a task that failed: "srun: error: node-1: task 9: Exited with exit code 1" (Slurm's srun).
_SRUN_EXIT_RE = re.compile(r"Exited with exit code (\d{1,3})\b")
_VIA_NET_RE = re.compile(r"\bvia NET/([A-Za-z][\w ]{0,%d}?)/\d{1,6}(/GDRDMA)?" % MAX_NET_NAME, re.ASCII)
_OFI_PROVIDER_RE = re.compile(r"NET/OFI Selected [Pp]rovider is ([\w;-]{1,%d})" % MAX_NET_NAME, re.ASCII)
# hpq's built-in benchmark: "# hpq built-in benchmark: all_reduce, torch.distributed backend gloo, ..."
_BUILTIN_RE = re.compile(r"# hpq built-in benchmark: [\w ]{0,64}, torch\.distributed backend (\w{1,16})", re.ASCII)
_DTYPE_RE = re.compile(r"^[A-Za-z]\w{0,31}$", re.ASCII)


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
    hosts: List[str] = field(default_factory=list)  # from the rank lines, in order of first appearance
    ranks: int = 0
    network: Optional[str] = None  # the NCCL network the log names ("Socket", "AWS Libfabric", ...)
    gdr: bool = False  # some NET channel ran GPUDirect RDMA ("/GDRDMA")
    networks: List[str] = field(default_factory=list)  # every network the log names
    ofi_providers: List[str] = field(default_factory=list)  # aws-ofi-nccl's "Selected provider is X"
    backend: Optional[str] = None  # hpq's built-in benchmark: torch.distributed backend (nccl, gloo)
    runs: int = 1  # result tables in the log (more than one: several runs appended to one file)
    task_failures: List[str] = field(default_factory=list)  # srun lines of tasks that exited non-zero
    invalid: List[str] = field(default_factory=list)  # result rows holding impossible values, with why

    @property
    def max_size_bytes(self) -> int:
        return max(r.size_bytes for r in self.rows)


@dataclass
class Check:
    """One check of a verdict: its outcome (PASS, FAIL, INCONCLUSIVE or not judged) and why."""

    outcome: str
    detail: str
    short: str = ""  # the headline's reason when the detail's first clause would repeat the headline

    def to_dict(self) -> Dict[str, str]:
        return {"outcome": self.outcome, "detail": self.detail}


@dataclass
class Verdict:
    ok: bool
    exit_code: int
    message: str  # the headline (PASS|FAIL|INCONCLUSIVE: number vs expectation: reason), then details
    expected_busbw_gbps: Optional[float] = None
    instance_type: Optional[str] = None
    fraction: Optional[float] = None
    nodes: Optional[int] = None  # the run's node count as judged (None: unknown)
    nodes_from: str = "unknown"  # "log" (rank lines), "argument" (--nodes / the launcher), or "unknown"
    expected_nodes: Optional[int] = None  # the node count the expected figure was published for
    expected_source: Optional[str] = None
    pass_fraction: Optional[float] = None
    expect: str = EXPECT_CATALOG  # what the bandwidth was judged against: catalog, none, or the user's GB/s
    bandwidth_judged: bool = False  # False: no figure (none known, or --expect none); the bandwidth is reported only
    outcome: str = FAIL  # PASS, FAIL or INCONCLUSIVE
    checks: Dict[str, Check] = field(default_factory=dict)  # complete, values, data, transport, bandwidth
    expected_kind: Optional[str] = None  # published, assumed, seed or "your own" (--expect GBPS)
    number: str = ""  # what was measured, as the headline says it

    @property
    def headline(self) -> str:
        return self.message.split("\n", 1)[0]


# ----------------------------------------------------------------------------- parsing


def _num(tok: str) -> Optional[float]:
    """A number as printf prints it: ASCII only (float() also takes '٣' and '1_000', no benchmark prints them)."""
    if not tok.isascii() or "_" in tok:
        return None
    try:
        return float(tok)
    except ValueError:
        return None


_ASCII_DIGITS = frozenset("0123456789")


def _int(tok: str) -> Optional[int]:
    """An ASCII integer (str.isdigit also accepts '²', which int() refuses), at most 20 characters."""
    body = tok[1:] if tok[:1] in "-+" else tok
    if not body or len(tok) > 20 or not set(body) <= _ASCII_DIGITS:
        return None
    return int(tok)


def _norm_col(tok: str) -> str:
    """``size(B)`` -> ``size``; ``time:avg(us)`` -> ``time``; ``#wrong`` stays."""
    tok = tok.lower().split("(")[0]
    return tok.split(":")[0]


def _header_columns(line: str) -> Optional[List[str]]:
    """Column names when ``line`` is a table header (nccl-tests, nccom-test), else None.

    One lstrip of every leading '#' and blank: linear, where stripping one '#' at a time was
    quadratic on a long line of '#' (docs/design.md, "Bounded parsing"). A header's first column is "size", never "#wrong".
    """
    body = line.lstrip("# \t")
    if not body[:4].lower() == "size":
        return None
    toks = [_norm_col(t) for t in body.split()]
    if len(toks) >= 4 and toks[0] == "size" and "busbw" in toks:
        return toks
    return None


class _Invalid(ValueError):
    """A result row whose layout is right but whose values cannot be true (the message says which)."""


def _value(tok: str, what: str) -> float:
    f = _num(tok)
    if f is None:
        raise _Invalid("%s %r is not a number" % (what, tok))
    if not math.isfinite(f):
        raise _Invalid("%s is %s" % (what, tok))
    if f < 0:
        raise _Invalid("%s is negative (%s)" % (what, tok))
    return f


def _wrong(tok: str, old_style: bool) -> Optional[int]:
    """``#wrong`` is a non-negative integer count, printed with %g (``1.23457e+06`` from a million on).

    Old nccl-tests print an ``error`` magnitude instead: above OLD_ERROR_TOLERANCE is a wrong result.
    Anything else (negative, fractional, nan, inf) makes the row invalid: it is never dropped and never
    summed, so -5 and +5 cannot cancel out.
    """
    if tok.upper() == "N/A":
        return None
    f = _value(tok, "the error column" if old_style else "#wrong")
    if old_style:
        return 1 if f > OLD_ERROR_TOLERANCE else 0
    if f != int(f):
        raise _Invalid("#wrong is not a whole number (%s)" % tok)
    return int(f)


def _measurements(vals: Sequence[str], width: int, old_style: bool) -> List[Measurement]:
    out = []
    for i in range(0, len(vals), width):
        chunk = vals[i:i + width]
        t, a, b = _value(chunk[0], "time"), _value(chunk[1], "algbw"), _value(chunk[2], "busbw")
        out.append(Measurement(t, a, b, _wrong(chunk[3], old_style) if width == 4 else None))
    return out


def _parse_row(toks: List[str], header: Optional[List[str]]) -> Optional[Row]:
    """A data row; None when the tokens are not one (log chatter, a cut-off line).

    Raises _Invalid when the tokens have a result row's layout but hold impossible values.
    """
    if len(toks) < 6:
        return None
    size, count = _int(toks[0]), _int(toks[1])
    if size is None or count is None or not _DTYPE_RE.match(toks[2]):
        return None
    if size < 0 or count < 0:
        raise _Invalid("negative size or count (%s %s)" % (toks[0], toks[1]))
    dtype, rest = toks[2], toks[3:]
    redop = None
    # With a header the redop column is taken by position (any op name); without one, by name.
    if rest and (rest[0].lower() in _REDOPS if header is None else "redop" in header):
        redop, rest = rest[0].lower(), rest[1:]
    old_style = bool(header) and "error" in header and "#wrong" not in header
    has_wrong = bool(header) and ("#wrong" in header or "error" in header)
    has_root = bool(header) and "root" in header
    if header is None:
        # No header seen: infer from the count (nccl-tests: groups of 4, optional root first), and
        # only numbers count as a row (without a header, text is chatter).
        if any(_num(t) is None and t.upper() != "N/A" for t in rest):
            return None
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
    meas = _measurements(rest, width, old_style)
    if len(meas) > 2:
        return None
    return Row(size, count, dtype, redop, root, meas[0], meas[1] if len(meas) > 1 else None)


@dataclass
class _Run:
    """One result table: from its header (or first row) to its summary line."""

    header: Optional[List[str]] = None
    rows: List[Row] = field(default_factory=list)
    invalid: List[str] = field(default_factory=list)
    summary: bool = False
    avg: Optional[float] = None
    oob: Optional[int] = None

    @property
    def started(self) -> bool:
        return bool(self.rows or self.invalid or self.summary)


class _Parser:
    """A line-at-a-time reader: memory holds the rows, never the text, and each line costs its length."""

    def __init__(self) -> None:
        self.streams: Dict[int, List[_Run]] = {}  # label rank (-1: unlabelled) -> its tables in order
        self.last_header: Optional[List[str]] = None
        self.last_row_stream = -1
        self.producer = "nccl-tests"
        self.hosts: List[str] = []
        self._hosts_seen: set = set()
        self.rank_ids: set = set()
        self.networks: Dict[str, int] = {}
        self.providers: Dict[str, int] = {}
        self.gdr = False
        self.backend: Optional[str] = None
        self.avg_unreadable = False
        self.skipped_partial = False
        self.lineno = 0
        self.task_failures: List[str] = []  # srun's "error: ... Exited with exit code N" lines (N > 0)

    def _runs(self, key: int) -> List[_Run]:
        runs = self.streams.get(key)
        if runs is None:
            runs = self.streams[key] = [_Run()]
        return runs

    def _net(self, name: str) -> None:
        name = name.strip()
        if name and len(name) <= MAX_NET_NAME and _NET_NAME_RE.match(name):
            self.networks[name] = self.networks.get(name, 0) + 1

    def feed(self, raw: str, unterminated: bool = False) -> None:
        """One line of the log (without its newline); ``unterminated``: the input's last line had none."""
        self.lineno += 1
        if raw.endswith("\r"):
            raw = raw[:-1]
        first = raw[:1]
        label = _LABEL_RE.match(raw) if first.isdigit() or first in " \t[" else None
        key = int(label.group(1) or label.group(2)) if label else -1
        line = raw[label.end():] if label else raw
        stripped = line.lstrip()
        if stripped.startswith("#") and "Rank" in stripped[:80]:
            m = _RANK_RE.match(stripped)
            if m:
                self.rank_ids.add(int(m.group(1)))
                if m.group(2) not in self._hosts_seen:
                    self._hosts_seen.add(m.group(2))
                    self.hosts.append(m.group(2))
                return
        if stripped.startswith("srun: error:") and len(self.task_failures) < 10:
            m = _SRUN_EXIT_RE.search(stripped)
            if m and int(m.group(1)) > 0:
                self.task_failures.append(stripped[:200])
            return
        if "NCCL INFO" in line or "NET/OFI" in line:
            for m in _VIA_NET_RE.finditer(line):
                self._net(m.group(1))
                self.gdr = self.gdr or bool(m.group(2))
            at = line.find(_USING_NET)
            if at >= 0:
                self._net(line[at + len(_USING_NET):])
            m = _OFI_PROVIDER_RE.search(line)
            if m:
                self.providers[m.group(1)] = self.providers.get(m.group(1), 0) + 1
            return
        if stripped.startswith("# hpq built-in benchmark:"):
            m = _BUILTIN_RE.match(stripped)
            if m:
                self.backend = m.group(1)
            return
        cols = _header_columns(line) if "busbw" in line else None
        if cols is not None:
            runs = self._runs(key)
            if runs[-1].started:
                runs.append(_Run(header=cols))
            else:
                runs[-1].header = cols
            self.last_header = cols
            if not stripped.startswith("#"):
                self.producer = "nccom-test"
            return
        if "bandwidth" in line:
            m = _AVG_RE.search(line)
            if m:
                run = self._summary_run(key)
                run.summary = True
                value = _num(m.group(1))
                run.avg = value if value is not None and math.isfinite(value) and value >= 0 else None
                self.avg_unreadable = self.avg_unreadable or run.avg is None
                return
        if "bounds" in line:
            m = _OOB_RE.search(line)
            if m:
                self._summary_run(key).oob = int(m.group(1))
                return
        if stripped.startswith("#") or not stripped[:1].isdigit():
            return
        toks = line.split()
        runs = self._runs(key)
        header = runs[-1].header or self.last_header
        try:
            row = _parse_row(toks, header)
        except _Invalid as exc:
            if unterminated:  # a cut-off last line: "12.3" of "12.34" is no evidence of anything
                self.skipped_partial = True
                return
            if runs[-1].summary:
                runs.append(_Run(header=header))
            runs[-1].invalid.append("line %d: %s" % (self.lineno, exc))
            self.last_row_stream = key
            return
        if row is None:
            if unterminated and _int(toks[0]) is not None:
                self.skipped_partial = True
            return
        if unterminated and header is not None and len(toks) < len(header):
            self.skipped_partial = True  # cut mid-number: keep the last line only if whole
            return
        if runs[-1].summary:  # rows after a summary line: another run appended without its header
            runs.append(_Run(header=header))
        runs[-1].rows.append(row)
        self.last_row_stream = key

    def _summary_run(self, key: int) -> _Run:
        """The table a summary line closes: its own stream's, else the one whose rows came last."""
        runs = self._runs(key)
        if runs[-1].rows or runs[-1].invalid or key == self.last_row_stream:
            return runs[-1]
        return self._runs(self.last_row_stream)[-1]

    def finish(self) -> NcclReport:
        keys = sorted(k for k, runs in self.streams.items() if any(r.rows or r.invalid for r in runs))
        if not keys:
            raise ReportError("no benchmark result rows found (expected nccl-tests, hpq built-in or "
                              "nccom-test output with size/count/type/time/algbw/busbw columns)")
        notes: List[str] = []
        ranks = [k for k in keys if k >= 0]
        key = keys[0]
        other_runs = 0
        other_dead = []
        if len(ranks) > 1:
            # Several ranks each printed a table (e.g. a non-MPI nccl-tests started by srun --label): under MPI
            # nccl-tests prints only rank 0's, so these are separate runs, each of its own processes. The lowest
            # rank's is shown; the others count as runs, and one that did not finish is a dead run.
            notes.append("result rows came from %d ranks (%s), each its own run (a benchmark started without "
                         "MPI?); only rank %d's are shown" % (len(ranks), ",".join(str(k) for k in ranks), key))
            for other in ranks[1:]:
                theirs = [r for r in self.streams[other] if r.rows or r.invalid]
                other_runs += len(theirs)
                if theirs and not theirs[-1].summary:
                    other_dead.append(other)
        runs = [r for r in self.streams[key] if r.started or r.header]
        with_rows = [r for r in runs if r.rows or r.invalid]
        judged = with_rows[-1]
        dead_tail = runs[-1] is not judged  # a table header after the last rows: a run that printed nothing
        invalid = [i for r in with_rows for i in r.invalid]
        if self.skipped_partial:
            notes.append("the last line was incomplete and was ignored")
        if self.avg_unreadable:
            notes.append("the 'Avg bus bandwidth' summary holds no usable number; the average is computed "
                         "from the rows")
        if len(self.networks) > 1:
            notes.append("the log names several NCCL networks: %s" % ", ".join(sorted(self.networks)))
        if len(runs) > 1:
            notes.append("the log holds %d result tables (runs appended to one file); the last one with rows is "
                         "shown" % len(runs))
        if dead_tail:
            notes.append("the last run printed its table header but no result row: it died or was cut off")
        if other_dead:
            dead_tail = True
            notes.append("the table of rank(s) %s ended without its summary: that run died or was cut off"
                         % ",".join(str(k) for k in other_dead))
        seen_rows: set = set()
        repeated = 0
        for row in judged.rows:
            ident = (row.size_bytes, row.dtype, row.redop, row.root)
            repeated += ident in seen_rows
            seen_rows.add(ident)
        if repeated:
            notes.append("%d result row(s) repeat a size already in the table: runs were appended without their "
                         "headers" % repeated)
        if self.task_failures:
            dead_tail = True
            notes.append("srun reports failed tasks: %s" % "; ".join(self.task_failures[:3]))
        if not judged.rows:
            raise ReportError("no valid benchmark result rows found: %s" % "; ".join(invalid[:3]))
        report = report_from_rows(judged.rows, producer=self.producer, avg_busbw_gbps=judged.avg,
                                  summary=judged.summary and not dead_tail, out_of_bounds=judged.oob, notes=notes)
        report.hosts = self.hosts
        report.ranks = len(self.rank_ids)
        report.networks = sorted(self.networks)
        report.network = max(report.networks, key=lambda k: self.networks[k]) if self.networks else None
        report.ofi_providers = sorted(self.providers)
        report.gdr = self.gdr
        report.backend = self.backend
        report.runs = len(runs) + other_runs + (1 if repeated else 0)
        report.task_failures = list(self.task_failures)
        report.invalid = invalid
        return report


def parse_lines(lines: Iterable[str], complete_last: bool = True) -> NcclReport:
    """Parse benchmark output given line by line (without newlines); ``complete_last``: the input ended
    with a newline (else its last line may be cut mid-number)."""
    parser = _Parser()
    pending: Optional[str] = None
    for line in lines:
        if pending is not None:
            parser.feed(pending)
        pending = line
    if pending is not None:
        parser.feed(pending, unterminated=not complete_last)
    return parser.finish()


def parse_text(text: str) -> NcclReport:
    """Parse benchmark output; raise ReportError when nothing in it is a result row or it is too large."""
    if not isinstance(text, str):
        raise ReportError("benchmark output must be text")
    if len(text) > MAX_LOG_BYTES:
        raise ReportError("the benchmark output is larger than %d MiB: give one run's log (e.g. grep -v "
                          "'NCCL INFO' when INFO chatter made it large)" % (MAX_LOG_BYTES >> 20))
    return parse_lines(text.splitlines(), complete_last=text.endswith(("\n", "\r")))


def _stream_lines(fh: BinaryIO, name: str, limit: int) -> Iterator[Tuple[str, bool]]:
    """Lines of a binary stream read in chunks: stops with ReportError past ``limit`` bytes, so /dev/zero or
    an endless pipe costs at most ``limit`` of memory; Ctrl-C (KeyboardInterrupt) passes through between
    chunks. Yields (line, ended by a newline)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    total = 0
    pieces: List[str] = []  # the current line's parts: joined once, never re-copied chunk by chunk
    while True:
        chunk = fh.read(READ_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise ReportError("%s is larger than %d MiB (the limit for a benchmark log): give one run's log "
                              "(e.g. grep -v 'NCCL INFO' when INFO chatter made it large)" % (name, limit >> 20))
        text = decoder.decode(chunk)
        start = 0
        while True:
            nl = text.find("\n", start)
            if nl < 0:
                break
            pieces.append(text[start:nl])
            yield "".join(pieces), True
            pieces = []
            start = nl + 1
        if start < len(text):
            pieces.append(text[start:])
    tail = decoder.decode(b"", final=True)
    if tail:
        pieces.append(tail)
    if pieces:
        yield "".join(pieces), False


def read_stream(fh: BinaryIO, name: str = "standard input", limit: int = MAX_LOG_BYTES) -> NcclReport:
    """Parse a binary stream (a file or stdin) incrementally, within ``limit`` bytes (MAX_LOG_BYTES)."""
    parser = _Parser()
    for line, ended in _stream_lines(fh, name, limit):
        parser.feed(line, unterminated=not ended)
    return parser.finish()


def report_from_rows(rows: Sequence[Row], producer: str = "nccl-tests", avg_busbw_gbps: Optional[float] = None,
                     summary: bool = True, out_of_bounds: Optional[int] = None,
                     notes: Optional[List[str]] = None) -> NcclReport:
    """A report over result rows (e.g. one pair of a sweep): peak, average, #wrong and the notes."""
    if not rows:
        raise ReportError("no result rows to judge")
    rows = list(rows)
    notes = list(notes or [])
    all_bw = [m.busbw_gbps for r in rows for m in r.measurements]
    peak_row = max(rows, key=lambda r: r.busbw_gbps)
    checked = any(m.wrong is not None for r in rows for m in r.measurements)
    if not summary:
        notes.append("no 'Avg bus bandwidth' summary: the run was cut off or died before the end")
    if not checked and producer == "nccl-tests":
        notes.append(NOT_CHECKED)
    return NcclReport(
        rows=rows,
        avg_busbw_gbps=avg_busbw_gbps if avg_busbw_gbps is not None else sum(all_bw) / len(all_bw),
        avg_busbw_reported=avg_busbw_gbps is not None,
        peak_busbw_gbps=peak_row.busbw_gbps,
        peak_size_bytes=peak_row.size_bytes,
        wrong_total=sum(r.wrong for r in rows),
        checked=checked,
        producer=producer,
        truncated=not summary,
        out_of_bounds=out_of_bounds,
        notes=notes,
    )


def parse_file(path: str) -> NcclReport:
    """Parse a log file (at most MAX_LOG_BYTES; a FIFO or device is read the same bounded way)."""
    try:
        with open(path, "rb") as fh:
            return read_stream(fh, path)
    except OSError as exc:
        raise ReportError("cannot read %s: %s" % (path, exc.strerror or exc)) from None


# ----------------------------------------------------------------------------- verdict


def _fmt_size(n: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div:
            return "%g %s" % (round(n / div, 2), unit)
    return "%d B" % n


def _efa_checks(entry) -> str:
    return ("Check: `FI_PROVIDER=efa` is in the job's environment; `NCCL_NET_PLUGIN` is not 'none' "
            "(NCCL_DEBUG=INFO should say 'Using network AWS Libfabric' or 'NET/OFI Selected provider is "
            "efa', not 'Using network Socket'); the image carries AWS's OFI NCCL plugin; the instance group "
            "was created with EFA and `fi_info -p efa` lists devices; the pods request "
            "vpc.amazonaws.com/efa; the security group has self-referencing ingress AND egress rules; "
            "compare the job's variables with `hpq nccl-env %s`." % entry.name)


def _shortfall_advice(entry, peak: float, expected: float, nodes: Optional[int], network: Optional[str]) -> str:
    """Plain-words reason for a shortfall, from the network the log names and the level it landed at."""
    if entry.has_efa and network == "Socket":
        return ("NCCL's log says it used TCP sockets ('Using network Socket' / 'via NET/Socket'): EFA was "
                "not used. " + _efa_checks(entry))
    if entry.has_efa and peak <= TCP_SPEED_GBPS and nodes != 1:
        return ("%.2f GB/s is TCP-socket speed: the traffic went over TCP sockets and EFA was not used. "
                % peak) + _efa_checks(entry)
    if nodes == 1 and entry.accelerator == catalog.GPU:
        return ("Inside one node the all-reduce runs over NVLink/NVSwitch (PCIe without NVLink): check that "
                "every GPU took part (GPUS_PER_NODE), `nvidia-smi topo -m` shows NV links, the "
                "nvidia-fabricmanager service runs (NVSwitch types), no other job shares the node, and "
                "NCCL_P2P_DISABLE / NCCL_NVLS_ENABLE=0 / NCCL_ALGO / NCCL_PROTO are not set.")
    if entry.efa_device_rdma and peak < expected * 0.25:
        return ("%.2f GB/s is far below the EFA level for %s: NCCL fell back to TCP sockets, or EFA runs "
                "without GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA should be 1 on %s; the log should show "
                "'/GDRDMA' channels), or only part of the EFA interfaces are in use. "
                % (peak, entry.name, entry.name)) + _efa_checks(entry)
    if not entry.has_efa:
        return ("%s has no EFA: NCCL uses TCP sockets, so the limit is the %g Gbps link. Check that "
                "NCCL_SOCKET_IFNAME picks the real interface (not docker/lo/veth) and that no other job "
                "shares the link; compare with `hpq nccl-env %s`." % (entry.name, entry.network_gbps,
                                                                      entry.name))
    return ("Check that every GPU of every node took part (NODES x GPUS_PER_NODE), no other job shares the "
            "nodes, and that NCCL_ALGO/NCCL_PROTO/NCCL_TREE_THRESHOLD are not set; then look at "
            "NCCL_DEBUG=INFO for the transport chosen. " + _efa_checks(entry))


Expect = Union[str, float]


def parse_expect(text: Union[str, float, None]) -> Expect:
    """``--expect``'s value: ``catalog`` (also for None), ``none``, or a positive GB/s figure."""
    if text is None:
        return EXPECT_CATALOG
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        word = str(text).strip().lower()
        if word in (EXPECT_CATALOG, EXPECT_NONE):
            return word
        try:
            value = float(word[:-len("gb/s")] if word.endswith("gb/s") else word)
        except ValueError:
            raise ReportError("--expect %r: use 'catalog', 'none' or a bus bandwidth in GB/s (e.g. 350)"
                              % text) from None
    if not math.isfinite(value) or value <= 0:
        raise ReportError("--expect %r: the expected bus bandwidth must be a positive number of GB/s" % text)
    return value


def expect_label(expect: Expect) -> str:
    return expect if isinstance(expect, str) else fmt_figure(expect)


def _run_nodes(report: NcclReport, nodes: Optional[int]) -> Tuple[Optional[int], str, List[str]]:
    """(node count, where it came from, notes): the log's rank lines win over the caller's count."""
    notes: List[str] = []
    if report.hosts:
        if nodes and nodes != len(report.hosts):
            notes.append("the log's rank lines name %d host(s) (%s) though %d node(s) were given; judged as "
                         "%d" % (len(report.hosts), ", ".join(report.hosts[:8]), nodes, len(report.hosts)))
        return len(report.hosts), "log", notes
    if nodes:
        return nodes, "argument", notes
    return None, "unknown", notes


NEURON_EFA_DOC = ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/"
                  "collective-communication.html")


def transport_seen(report: NcclReport) -> Optional[str]:
    """What the log says carried the traffic: NET_EFA, NET_SOCKET, NET_MIXED, NET_OTHER, or None (not said).

    NCCL's own lines name the network ("Using network Socket", "via NET/AWS Libfabric/0"); aws-ofi-nccl
    names its libfabric provider ("Selected provider is efa"; "tcp" or "sockets" there is not EFA);
    hpq's built-in benchmark names its torch.distributed backend (gloo runs over TCP).
    """
    kinds = set()
    for name in report.networks:
        low = name.lower()
        if low == "socket":
            kinds.add(NET_SOCKET)
        elif "libfabric" in low or low == "ofi":
            others = [p for p in report.ofi_providers if p.lower() != "efa"]
            kinds.add(NET_OTHER if others and not any(p.lower() == "efa" for p in report.ofi_providers)
                      else NET_EFA)
        else:
            kinds.add(NET_OTHER)
    if not report.networks and report.ofi_providers:
        kinds.add(NET_EFA if any(p.lower() == "efa" for p in report.ofi_providers) else NET_OTHER)
    if report.backend == "gloo":
        kinds.add(NET_SOCKET)
    if not kinds:
        return None
    if len(kinds) > 1:
        return NET_MIXED
    return kinds.pop()


def _net_words(report: NcclReport) -> str:
    said = ["'Using network %s'" % n for n in report.networks]
    said += ["libfabric provider %s" % p for p in report.ofi_providers]
    if report.backend:
        said.append("torch.distributed backend %s" % report.backend)
    return ", ".join(said)


def _transport_check(report: NcclReport, entry, run_nodes: Optional[int]) -> Check:
    """On a type whose catalog transport is EFA, TCP sockets are a failure whatever the bandwidth."""
    if entry is None:
        return Check(NOT_JUDGED, "no instance type given, so no transport to expect")
    if report.producer == "nccom-test":
        return Check(NOT_JUDGED, "nccom-test does not print its transport; Neuron runs collectives "
                                             "between instances over EFA (%s)" % NEURON_EFA_DOC)
    if run_nodes == 1:
        return Check(NOT_JUDGED, "one node: the collective runs over NVLink/PCIe, not the network")
    seen = transport_seen(report)
    if not entry.has_efa:
        return Check(NOT_JUDGED, "%s has no EFA in the catalog: TCP sockets are its transport%s" % (
            entry.name, " (the log says %s)" % _net_words(report) if seen else ""))
    if seen == NET_EFA:
        return Check(PASS, "EFA: the log says %s%s" % (
            _net_words(report), ", GPUDirect RDMA" if report.gdr else ""))
    if seen is None:
        return Check(INCONCLUSIVE, "the log does not say which network NCCL used; %s" % DEBUG_HINT)
    what = {NET_SOCKET: "TCP sockets, not EFA", NET_MIXED: "a mix of networks: some ranks did not use EFA",
            NET_OTHER: "a network other than EFA"}[seen]
    detail = "the log says %s: %s. %s's transport is EFA (%d interface%s in the catalog)" % (
        _net_words(report), what, entry.name, entry.efa_interfaces, "" if entry.efa_interfaces == 1 else "s")
    if entry.accelerator == catalog.GPU:
        detail += ". " + _efa_checks(entry)
    return Check(FAIL, detail)


def _values_check(report: NcclReport, entry) -> Check:
    """Bandwidths and times finite, non-negative and below what the type's links can carry."""
    ceiling, why = catalog.busbw_ceiling(entry.name if entry else None)
    over = []
    for r in report.rows:
        for m in r.measurements:
            top = max(m.busbw_gbps, m.algbw_gbps)
            if top > ceiling:
                over.append("%s: %s GB/s" % (_fmt_size(r.size_bytes), fmt_number(top, 2)))
    problems = list(report.invalid)
    if over:
        problems.append("bandwidth above the physical limit of %g GB/s (%s) at %s" % (
            ceiling, why, ", ".join(over[:3]) + (" ..." if len(over) > 3 else "")))
    if problems:
        return Check(FAIL, "the log holds impossible values, an error in the log, not a result: %s"
                     % "; ".join(problems[:5]))
    return Check(PASS, "every value finite, non-negative and under %g GB/s" % ceiling)


def _complete_check(report: NcclReport) -> Check:
    if report.task_failures:
        return Check(FAIL, "srun reports a failed task (%s): a rank died, whatever the table shows"
                     % report.task_failures[0])
    if report.truncated:
        return Check(FAIL, "no 'Avg bus bandwidth' summary after the last result rows: the run was "
                                       "cut off or crashed before the end; look at the end of the log")
    if report.runs > 1:
        return Check(INCONCLUSIVE, "the log holds %d runs (tables appended to one file): judge one "
                                               "run per log" % report.runs)
    return Check(PASS, "one run, finished with its summary line")


def _data_check(report: NcclReport) -> Check:
    if report.wrong_total:
        return Check(FAIL, (
            "%d wrong element(s) in the results: the collective returned corrupted data. Do not train on "
            "this cluster: look for Xid errors in `dmesg` on each node, run a DCGM diagnostic, and replace "
            "the node that fails (rerun with fewer nodes to find it)." % report.wrong_total))
    if report.out_of_bounds:
        return Check(FAIL, "%d out-of-bounds value(s) reported by the benchmark" % report.out_of_bounds)
    if report.producer != "nccl-tests" and not report.checked:
        # nccom-test and hpq's built-in benchmark without checking print no such column: nothing to read.
        return Check(NOT_JUDGED, "%s printed no #wrong column" % report.producer)
    unchecked = sum(1 for r in report.rows for m in r.measurements if m.wrong is None)
    if report.producer == "nccl-tests" and unchecked:
        # nccl-tests says N/A where it did not verify (-c 0): no evidence the data was right is no pass.
        return Check(INCONCLUSIVE, NOT_CHECKED if not report.checked else
                     "%d result(s) were not checked (#wrong N/A): run with -c 1 to verify every size" % unchecked)
    return Check(PASS, "no wrong elements")


def evaluate(report: NcclReport, instance_type: Optional[str], nodes: Optional[int] = None,
             expect: Union[str, float, None] = None, stand_in_network: bool = False) -> Verdict:
    """PASS only when every check holds: the run is complete and alone in its log, its values are possible,
    no element is wrong, the transport is the type's (EFA where the catalog says so), and the peak
    reaches the pass fraction of the healthy figure for the type and the run's node count.

    The node count is the distinct hosts of the log's rank lines, else ``nodes`` (``--nodes``, or
    what the launcher started). ``expect`` ``none`` waives the bandwidth check (reported, not
    judged); a number is the user's own figure in GB/s, held to the same pass fraction. A type or
    node count without a figure, an unknown node count, or a log that does not say its transport on
    an EFA type is INCONCLUSIVE: never PASS. ``stand_in_network``: the run crossed a network that stands
    in for the type's (the rehearsal's veth bridge), so the transport is not judged, and says so.
    """
    expect = parse_expect(expect)
    entry = None
    if instance_type:
        try:
            entry = catalog.lookup(instance_type)
        except catalog.UnknownInstanceType as exc:
            raise ReportError(str(exc)) from None
    if nodes is not None and nodes < 1:
        raise ReportError("the node count must be at least 1, got %d" % nodes)
    run_nodes, nodes_from, node_notes = _run_nodes(report, nodes)
    figure = None
    kind = None
    if isinstance(expect, float):
        figure = catalog.Busbw(expect, run_nodes or 0, "--expect %s: your own figure" % fmt_figure(expect))
        kind = "your own"
    elif entry is not None and expect == EXPECT_CATALOG and run_nodes:
        figure = catalog.expected_busbw(entry.name, run_nodes)
        kind = figure.kind if figure else None
    expected = figure.gbps if figure else None
    one_node = run_nodes == 1
    fraction_needed = PASS_FRACTION if one_node else PASS_FRACTION_SEVERAL_NODES
    checks: Dict[str, Check] = {
        "complete": _complete_check(report),
        "values": _values_check(report, entry),
        "data": _data_check(report),
        "transport": (Check(NOT_JUDGED, "a stand-in network (rehearsal): no EFA to use")
                      if stand_in_network else _transport_check(report, entry, run_nodes)),
    }
    where = ("" if run_nodes is None else " on %d node%s" % (run_nodes, "" if run_nodes == 1 else "s"))
    number = "%s GB/s peak busbw at %s%s" % (fmt_number(report.peak_busbw_gbps, 2), _fmt_size(report.peak_size_bytes),
                                            where)
    fraction = None
    if expect == EXPECT_NONE:
        expectation = "no expectation (--expect none)"
        checks["bandwidth"] = Check(NOT_JUDGED, "reported, not judged (--expect none)")
    elif figure is None:
        if entry is None:
            expectation = "no expectation"
            why = "no instance type given: pass --instance-type (or --expect GBPS, your own healthy baseline)"
        elif run_nodes is None:
            expectation = "no expectation"
            why = ("the node count is unknown (no rank lines in the log): pass --nodes, the figure depends on it")
        else:
            expectation = "no published figure for %s at %d node%s" % (entry.name, run_nodes,
                                                                     "" if run_nodes == 1 else "s")
            why = expectation
            level = catalog.derived_level(entry.name)
            table = catalog.busbw_table(entry.name)
            counts = sorted([1] if table.one_node else []) + [b.nodes for b in table.several_nodes]
            if counts:
                why += " (figures exist for %s node(s))" % ", ".join(str(c) for c in counts)
            if level and run_nodes > 1:
                why += ("; for orientation only: half of its %g Gbps line rate is %g GB/s, a level derived from "
                        "a data sheet, not a measurement" % (entry.network_gbps, level))
            why += "; judge against a healthy run of your own with --expect GBPS"
        checks["bandwidth"] = Check(INCONCLUSIVE, why)
    else:
        fraction = report.peak_busbw_gbps / expected if expected else None
        if isinstance(expect, float) or entry is None:
            expectation = "%s GB/s you expect (--expect)" % fmt_figure(expected)
            source = figure.source
        else:
            expectation = "%s GB/s %s for %d x %s" % (fmt_figure(expected), {catalog.SEED: "seed-measured (not published)"}.get(
                kind, kind), figure.nodes, entry.name)
            source = figure.source + (" [software: %s]" % figure.software if figure.software else "")
            if run_nodes is not None and run_nodes < figure.nodes:
                expectation += " (the next published node count above %d)" % run_nodes
        detail = "%s%% of %s; pass at %.0f%%. Source: %s" % (fmt_number((fraction or 0) * 100, 0), expectation,
                                                               fraction_needed * 100, source)
        if fraction is not None and fraction >= fraction_needed:
            checks["bandwidth"] = Check(PASS, detail)
        else:
            advice = ""
            if report.max_size_bytes < PEAK_MIN_BYTES:
                advice += (" The largest message was %s; bandwidth peaks only at 128 MB and above: rerun with "
                           "-e 16G." % _fmt_size(report.max_size_bytes))
            if entry is not None:
                advice += " " + _shortfall_advice(entry, report.peak_busbw_gbps, expected, run_nodes,
                                                  report.network)
            checks["bandwidth"] = Check(FAIL, detail + "." + advice, "only %.0f%% of it; pass at %.0f%%" % (
                (fraction or 0) * 100, fraction_needed * 100))
    outcome = combine(c.outcome for c in checks.values())
    order = ["values", "data", "transport", "bandwidth", "complete"]
    deciding = [k for k in order if checks[k].outcome == outcome] if outcome != PASS else []
    if deciding:
        reason = checks[deciding[0]].short or _short(checks[deciding[0]].detail)
    else:
        reason = "%s%s" % ("%s%% of the figure" % fmt_number(fraction * 100, 0) if fraction is not None
                           else "complete and clean",
                           ", EFA confirmed" if checks["transport"].outcome == PASS else "")
    lines = [headline(outcome, number, expectation, reason)]
    for k in order:
        lines.append("  %s: %s: %s" % (k, checks[k].outcome, checks[k].detail))
    for note in node_notes:
        lines.append("  note: %s." % note)
    code = exit_code(outcome)
    return Verdict(ok=outcome == PASS, exit_code=code, message="\n".join(lines),
                   expected_busbw_gbps=expected, instance_type=entry.name if entry else None,
                   fraction=fraction, nodes=run_nodes, nodes_from=nodes_from,
                   expected_nodes=figure.nodes if figure else None,
                   expected_source=figure.source if figure else None,
                   pass_fraction=fraction_needed if figure else None,
                   expect=expect_label(expect), bandwidth_judged=figure is not None,
                   outcome=outcome, checks=checks, expected_kind=kind, number=number)


def _short(detail: str) -> str:
    """The first clause of a check's detail, for the headline."""
    for stop in (". ", "; "):
        at = detail.find(stop)
        if 0 < at < 200:
            return detail[:at]
    return detail[:200]


def judge_rows(rows: Sequence[Row], instance_type: Optional[str], nodes: Optional[int],
               expect: Union[str, float, None] = None) -> Verdict:
    """Verdict for one run's result rows on ``nodes`` nodes (e.g. one pair of a pairwise sweep)."""
    return evaluate(report_from_rows(rows), instance_type, nodes, expect)


def verdict_to_dict(verdict: Verdict) -> Dict[str, object]:
    return {
        "outcome": verdict.outcome, "ok": verdict.ok, "exit_code": verdict.exit_code, "message": verdict.message,
        "headline": verdict.headline, "instance_type": verdict.instance_type,
        "expected_busbw_gbps": verdict.expected_busbw_gbps, "expected_kind": verdict.expected_kind,
        "fraction_of_expected": verdict.fraction, "pass_fraction": verdict.pass_fraction,
        "nodes": verdict.nodes, "nodes_from": verdict.nodes_from, "expected_for_nodes": verdict.expected_nodes,
        "expected_source": verdict.expected_source, "expect": verdict.expect,
        "bandwidth_judged": verdict.bandwidth_judged,
        "checks": {k: c.to_dict() for k, c in verdict.checks.items()},
    }


def report_to_dict(report: NcclReport, verdict: Optional[Verdict] = None) -> Dict[str, object]:
    """The JSON shape (``--output json``); serialize with ``outcome.dumps`` (no NaN/Infinity)."""
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
        "runs": report.runs,
        "invalid_rows": list(report.invalid),
        "out_of_bounds": report.out_of_bounds,
        "notes": list(report.notes),
        "rank_hosts": list(report.hosts),
        "ranks": report.ranks,
        "network": report.network,
        "networks": list(report.networks),
        "ofi_providers": list(report.ofi_providers),
        "backend": report.backend,
        "transport_seen": transport_seen(report),
        "gdr": report.gdr,
    }
    if verdict is not None:
        out["outcome"] = verdict.outcome
        out["verdict"] = verdict_to_dict(verdict)
    return json_safe(out)


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
    lines.append("nodes %s%s | network %s%s" % (
        len(report.hosts) or "?", (" (%s)" % ", ".join(report.hosts[:8])) if report.hosts else "",
        _net_words(report) or "not in the log (NCCL_DEBUG=INFO shows it)", ", GPUDirect RDMA" if report.gdr else ""))
    for n in report.notes:
        lines.append("note: " + n)
    for i in report.invalid[:10]:
        lines.append("invalid row: " + i)
    return "\n".join(lines)
