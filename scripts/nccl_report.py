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

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from hpq.errors import UsageError

# A result passes when its peak bus bandwidth reaches this fraction of the figure the catalog
# holds for the instance type and the run's node count (hpq.lifecycle.catalog.expected_busbw).
# Inside one node (NVLink/NeuronLink) results repeat within a few percent: 0.8. Across nodes the
# figure depends more on NCCL's algorithm (on 2 nodes the tree reports busbw above the NIC line
# rate, a ring below it: NVIDIA/nccl-tests#22, NVIDIA/nccl#812), so 0.7. Both still fail the
# misconfigurations that matter, which cost a factor of 5 or more (TCP sockets instead of EFA).
PASS_FRACTION = 0.80
PASS_FRACTION_SEVERAL_NODES = 0.70

# NCCL's socket transport on these instances stays at a few GB/s (seed 004: 3.02 GB/s on 2x
# g5.16xlarge); an EFA type at or below this level did not use EFA.
TCP_SPEED_GBPS = 4.0

# Old nccl-tests print the largest numeric error instead of a count; a float sum of a few
# ranks is never exact, so only an error above this counts as a wrong result.
OLD_ERROR_TOLERANCE = 1e-3

# Below this message size a collective is latency-bound and cannot show peak bandwidth.
PEAK_MIN_BYTES = 128 * 1024 * 1024

NOT_CHECKED = "results were not checked (#wrong N/A): run with -c 1 to verify data"

# What the bandwidth is judged against (``--expect``): the catalog's figure for the instance type and
# node count (the default), nothing (``none``: bandwidth reported, not judged; the run must still be
# complete, clean and free of wrong elements), or a figure of the user's own (a baseline measured on
# a healthy cluster, GB/s of bus bandwidth), held to the same pass fraction as a catalog figure.
EXPECT_CATALOG = "catalog"
EXPECT_NONE = "none"

_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "mulsum", "premulsum"}
# The value may be glued to its unit (nccom-test: "43.6901GB/s") or be "-nan" (nccl-tests' %g).
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*([-+]?(?:nan|inf|\d*\.?\d+(?:e[-+]?\d+)?))", re.IGNORECASE)
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)", re.IGNORECASE)
# srun --label "0: ", mpirun --tag-output "[1,0]<stdout>:" (job, rank)
_LABEL_RE = re.compile(r"^\s*(?:(\d+):\s|\[\d+,(\d+)\]<std(?:out|err)>:\s?)")
# nccl-tests' device lines: "#  Rank  0 Group  0 Pid  18892 on node-a device  0 [0x1b] NVIDIA H100"
# (older releases and hpq's built-in benchmark print no "Group").
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\b")
# NCCL_DEBUG=INFO: "NCCL INFO Using network AWS Libfabric", "... via NET/Socket/0", ".../GDRDMA".
_USING_NET_RE = re.compile(r"NCCL INFO Using network ([A-Za-z][\w ]*?)\s*$")
_VIA_NET_RE = re.compile(r"\bvia NET/([A-Za-z][\w ]*?)/\d+(/GDRDMA)?")


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
    nodes: Optional[int] = None  # the run's node count as judged (None: unknown)
    nodes_from: str = "unknown"  # "log" (rank lines), "argument" (--nodes / the launcher), or "unknown"
    expected_nodes: Optional[int] = None  # the node count the expected figure was published for
    expected_source: Optional[str] = None
    pass_fraction: Optional[float] = None
    expect: str = EXPECT_CATALOG  # what the bandwidth was judged against: catalog, none, or the user's GB/s
    bandwidth_judged: bool = False  # False: no figure (none known, or --expect none); the bandwidth is reported only


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
    hosts: List[str] = []
    rank_ids = set()
    networks: Dict[str, int] = {}
    gdr = False
    for idx, raw in enumerate(lines):
        label = _LABEL_RE.match(raw)
        line = raw[label.end():] if label else raw
        m = _RANK_RE.match(line.lstrip())
        if m:
            rank_ids.add(int(m.group(1)))
            if m.group(2) not in hosts:
                hosts.append(m.group(2))
            continue
        if "NCCL INFO" in line:
            for m in _VIA_NET_RE.finditer(line):
                networks[m.group(1)] = networks.get(m.group(1), 0) + 1
                gdr = gdr or bool(m.group(2))
            m = _USING_NET_RE.search(line)
            if m:
                networks[m.group(1)] = networks.get(m.group(1), 0) + 1
            continue
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
    if skipped_partial:
        notes.append("the last line was incomplete and was ignored")
    if summary and avg is None:
        notes.append("the 'Avg bus bandwidth' summary holds no number; the average is computed from the rows")
    if len(networks) > 1:
        notes.append("the log names several NCCL networks: %s" % ", ".join(sorted(networks)))
    report = report_from_rows(rows, producer=producer, avg_busbw_gbps=avg, summary=summary, out_of_bounds=oob,
                              notes=notes)
    report.hosts = hosts
    report.ranks = len(rank_ids)
    report.network = max(sorted(networks), key=lambda k: networks[k]) if networks else None
    report.gdr = gdr
    return report


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
    from hpq.lifecycle import catalog

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
    return expect if isinstance(expect, str) else "%g" % expect


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


def evaluate(report: NcclReport, instance_type: Optional[str], nodes: Optional[int] = None,
             expect: Union[str, float, None] = None) -> Verdict:
    """Judge a result: exit 1 on any wrong element or a peak under the pass fraction of its expectation.

    The expectation (``expect`` ``catalog``, the default) is the catalog's figure for
    ``instance_type`` and the run's node count: the distinct hosts of the log's rank lines, else
    ``nodes`` (``--nodes``, or what the launcher started). With neither, the lowest figure of any
    node count is used, and the message says so. ``expect`` ``none`` reports the bandwidth without
    judging it; a number is the user's own figure in GB/s, held to the same pass fraction. Only
    an explicit ``expect`` changes the judgement: nothing is skipped because of the producer or
    the transport (gloo on a real cluster is judged like anything else).
    """
    from hpq.lifecycle import catalog  # local: keeps parse_text importable with no catalog

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
    if entry is not None and expect == EXPECT_CATALOG:
        figure = (catalog.expected_busbw(entry.name, run_nodes) if run_nodes
                  else catalog.lowest_busbw(entry.name))
    elif isinstance(expect, float):
        figure = catalog.Busbw(expect, run_nodes or 0, "--expect %g: your own figure" % expect)
    expected = figure.gbps if figure else None
    one_node = run_nodes == 1 if isinstance(expect, float) else bool(figure and figure.nodes == 1)
    fraction_needed = PASS_FRACTION if one_node else PASS_FRACTION_SEVERAL_NODES
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
    where = ("" if run_nodes is None else " on %d node%s" % (run_nodes, "" if run_nodes == 1 else "s"))
    peak_txt = "peak bus bandwidth %.2f GB/s at %s%s" % (report.peak_busbw_gbps, _fmt_size(report.peak_size_bytes),
                                                         where)
    if expect == EXPECT_NONE:
        parts.insert(0, "%s, reported, not judged (--expect none): the run is judged on completing cleanly "
                        "with no wrong elements." % peak_txt)
    elif figure is None:
        if entry is None:
            why = "no instance type given"
        else:
            why = catalog.busbw_table(entry.name).why_not or "no figure known for %s" % entry.name
        parts.insert(0, "%s; %s, so no bandwidth expectation to compare with." % (peak_txt, why))
    else:
        fraction = report.peak_busbw_gbps / expected
        if entry is None or isinstance(expect, float):
            basis = "%g GB/s you expect (--expect)" % expected
        else:
            basis = "%g GB/s %s for %d x %s" % (expected, "derived" if figure.derived else "published", figure.nodes,
                                               entry.name)
            if run_nodes is None:
                basis += (" (node count unknown: no rank lines in the log and no --nodes, so the lowest figure "
                          "of any node count is used)")
            elif run_nodes > figure.nodes and figure.nodes > 1:
                basis += " (the largest node count published; this run had %d)" % run_nodes
            basis += " [%s]" % figure.source
        if fraction >= fraction_needed:
            parts.insert(0, "%s: %.0f%% of the %s; pass at %.0f%%." % (
                peak_txt, fraction * 100, basis, fraction_needed * 100))
        else:
            ok = False
            msg = "%s is only %.0f%% of the %s; pass at %.0f%%. " % (
                peak_txt, fraction * 100, basis, fraction_needed * 100)
            if report.max_size_bytes < PEAK_MIN_BYTES:
                msg += ("The largest message was %s; bandwidth peaks only at 128 MB and above: rerun with "
                        "-e 16G. " % _fmt_size(report.max_size_bytes))
            if entry is not None:
                msg += _shortfall_advice(entry, report.peak_busbw_gbps, expected, run_nodes, report.network)
            parts.insert(0, msg.rstrip())
    for note in node_notes:
        parts.append("Note: %s." % note)
    if report.truncated:  # an incomplete log is never a pass, whatever its rows show
        ok = False
        parts.append("No 'Avg bus bandwidth' summary line: the run was cut off or crashed before the end, so "
                     "it is not a pass; look at the end of the log.")
    if NOT_CHECKED in report.notes:
        parts.append("Note: %s." % NOT_CHECKED)
    verdict = "PASS" if ok else "FAIL"
    return Verdict(ok=ok, exit_code=0 if ok else 1, message="%s: %s" % (verdict, " ".join(parts)),
                   expected_busbw_gbps=expected, instance_type=entry.name if entry else None,
                   fraction=fraction, nodes=run_nodes, nodes_from=nodes_from,
                   expected_nodes=figure.nodes if figure else None,
                   expected_source=figure.source if figure else None,
                   pass_fraction=fraction_needed if figure else None,
                   expect=expect_label(expect), bandwidth_judged=figure is not None)


def judge_rows(rows: Sequence[Row], instance_type: Optional[str], nodes: Optional[int],
               expect: Union[str, float, None] = None) -> Verdict:
    """Verdict for one run's result rows on ``nodes`` nodes (e.g. one pair of a pairwise sweep)."""
    return evaluate(report_from_rows(rows), instance_type, nodes, expect)


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
        "rank_hosts": list(report.hosts),
        "ranks": report.ranks,
        "network": report.network,
        "gdr": report.gdr,
    }
    if verdict is not None:
        out["verdict"] = {
            "ok": verdict.ok, "exit_code": verdict.exit_code, "message": verdict.message,
            "instance_type": verdict.instance_type, "expected_busbw_gbps": verdict.expected_busbw_gbps,
            "fraction_of_expected": verdict.fraction, "pass_fraction": verdict.pass_fraction,
            "nodes": verdict.nodes, "nodes_from": verdict.nodes_from, "expected_for_nodes": verdict.expected_nodes,
            "expected_source": verdict.expected_source, "expect": verdict.expect,
            "bandwidth_judged": verdict.bandwidth_judged,
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
    if report.hosts or report.network:
        lines.append("nodes %s%s | network %s%s" % (
            len(report.hosts) or "?", (" (%s)" % ", ".join(report.hosts[:8])) if report.hosts else "",
            report.network or "not in the log (NCCL_DEBUG=INFO shows it)", ", GPUDirect RDMA" if report.gdr else ""))
    for n in report.notes:
        lines.append("note: " + n)
    return "\n".join(lines)
