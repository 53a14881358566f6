# ruff: noqa: UP031  (the nccl-tests layouts below are written with its own printf formats)
"""The benchmark-output parser and verdict (hpq.scripts.nccl_report) on real and broken outputs.

Real data under tests/data/nccl/: seed 004's published rows (nccl-tests over TCP on 2x
g5.16xlarge; nccom-test on 2x trn1.32xlarge) and outputs produced on 2x/4x H200 by the
NCCL baseline program and by run-nccl-test's built-in benchmark (docs/benchmarks.md).
Expected figures for the H200 files are recomputed here from the raw columns, not copied.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpq.errors import UsageError
from hpq.scripts import nccl_report, outcome

DATA = Path(__file__).parents[1] / "data" / "nccl"
H200_FILES = sorted(DATA.glob("h200x*.txt"))


def _raw_rows(text: str) -> list[list[str]]:
    """Independent reader for the files hpq produced: lines of 13 tokens starting with two integers."""
    out = []
    for line in text.splitlines():
        toks = line.split()
        if len(toks) == 13 and toks[0].isdigit() and toks[1].isdigit():
            out.append(toks)
    return out


def test_seed004_tcp_sample():
    r = nccl_report.parse_file(str(DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"))
    assert len(r.rows) == 2
    assert r.peak_busbw_gbps == pytest.approx(3.02)
    assert r.peak_size_bytes == 134217728
    assert r.avg_busbw_gbps == pytest.approx(1.18) and r.avg_busbw_reported
    assert r.wrong_total == 0 and r.checked and not r.truncated
    assert r.rows[1].out_of_place.time_us == pytest.approx(1427063)
    assert r.rows[0].in_place is None and r.rows[0].redop == "sum"


def test_seed004_nccom_sample():
    r = nccl_report.parse_file(str(DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"))
    assert r.producer == "nccom-test"
    assert [row.size_bytes for row in r.rows] == [1048576, 16777216, 134217728]
    assert r.peak_busbw_gbps == pytest.approx(37.01)
    assert r.rows[0].dtype == "bf16" and r.rows[0].out_of_place.wrong is None
    assert r.avg_busbw_gbps == pytest.approx(13.29)


@pytest.mark.parametrize("path", H200_FILES, ids=[p.name for p in H200_FILES])
def test_h200_outputs_match_an_independent_read(path):
    text = path.read_text()
    raw = _raw_rows(text)
    assert len(raw) == 32  # 8 B .. 16 GB by factor 2
    r = nccl_report.parse_text(text)
    assert len(r.rows) == len(raw)
    peak = max(max(float(t[7]), float(t[11])) for t in raw)
    assert r.peak_busbw_gbps == pytest.approx(peak)
    assert r.wrong_total == sum(int(t[8]) + int(t[12]) for t in raw) == 0
    assert [row.size_bytes for row in r.rows] == [int(t[0]) for t in raw]
    assert all(row.in_place is not None and row.root == -1 for row in r.rows)
    avg_line = [ln for ln in text.splitlines() if "Avg bus bandwidth" in ln][0]
    assert r.avg_busbw_gbps == pytest.approx(float(avg_line.split(":")[1]))
    assert not r.truncated


def test_truncated_output_keeps_whole_rows_and_says_so():
    text = (DATA / "h200x2_nccl_baseline_allreduce.txt").read_text()
    cut = text[: text.index("   16777216 ") + 40]  # mid-row, no summary
    r = nccl_report.parse_text(cut)
    assert r.truncated
    assert r.max_size_bytes == 8388608  # the cut row is dropped, the ones before kept
    assert any("incomplete" in n for n in r.notes)
    assert r.avg_busbw_reported is False
    assert r.avg_busbw_gbps == pytest.approx(
        sum(m.busbw_gbps for row in r.rows for m in row.measurements) / (2 * len(r.rows)))
    v = nccl_report.evaluate(r, None)
    assert "cut off" in v.message


@pytest.mark.parametrize("text", ["", "hello world\n", "# size count type\n# nothing\n", "\x00\xff garbage 12 ab\n",
                                  "NCCL INFO Bootstrap : Using eth0\n8 2\n"])
def test_garbage_raises_usage_error(text):
    with pytest.raises(nccl_report.ReportError) as exc:
        nccl_report.parse_text(text)
    assert isinstance(exc.value, UsageError) and exc.value.exit_code == 2


def test_noise_labels_na_and_old_error_column():
    text = "\n".join([
        "node-1:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
        "0:     1048576        262144     float     sum      -1    100.0   10.49   18.35    N/A    99.00   10.59   18.54    N/A",
        "0:   268435456      67108864     float     sum      -1   2000.0  134.22  234.88    N/A   2001.0  134.15  234.76    N/A",
        "# Avg bus bandwidth    : 126.63",
        "",
    ])
    r = nccl_report.parse_text(text)
    assert len(r.rows) == 2 and not r.checked and r.wrong_total == 0
    assert r.peak_busbw_gbps == pytest.approx(234.88)
    assert any("-c 1" in n for n in r.notes)
    old = "\n".join([
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
        "     1048576        262144   float     sum    100.0   10.49   18.35  2e-07    99.00   10.59   18.54  2e-07",
        "     2097152        524288   float     sum    190.0   11.04   19.31  5e+00    190.0   11.04   19.31  0e+00",
        " Avg bus bandwidth    : 18.8",
    ])
    r = nccl_report.parse_text(old)
    assert len(r.rows) == 2 and r.rows[0].root is None
    assert r.wrong_total == 1  # 5e+00 is a wrong result; 2e-07 is float rounding


def test_nccom_real_format_without_hash():
    # Layout of current nccom-test (no '#', bandwidth glued to its unit); figures made up for the test.
    text = ("     size(B)    count(elems)     type    time(us)    algbw(GB/s)    busbw(GB/s)\n"
            "    33554432        33554432    uint8         768          43.69          43.69\n"
            "Avg bus bandwidth:      43.6901GB/s\n")
    r = nccl_report.parse_text(text)
    assert r.producer == "nccom-test" and r.avg_busbw_gbps == pytest.approx(43.6901)
    assert r.rows[0].out_of_place.time_us == 768


def test_verdict_p4d_at_tcp_speed_explains_efa():
    """Seed 004's TCP rows judged as a 2-node p4d run: 3.02 GB/s is 4% of AWS's 78.33 GB/s and fails with
    the EFA reason; without a node count (no rank lines, no --nodes) there is no figure: INCONCLUSIVE."""
    r = nccl_report.parse_file(str(DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"))
    v = nccl_report.evaluate(r, "ml.p4d.24xlarge", nodes=2)
    assert not v.ok and v.exit_code == 1 and v.outcome == outcome.FAIL
    for needle in ("TCP", "EFA was not used", "FI_PROVIDER", "NCCL_NET_PLUGIN", "self-referencing", "hpq nccl-env"):
        assert needle in v.message
    assert v.expected_busbw_gbps == 78.33 and v.expected_nodes == 2 and v.fraction == pytest.approx(3.02 / 78.33)
    unknown = nccl_report.evaluate(r, "ml.p4d.24xlarge")
    assert unknown.outcome == outcome.INCONCLUSIVE and unknown.exit_code == 3 and "--nodes" in unknown.message


def test_verdict_pass_and_unknowns():
    r = nccl_report.parse_file(str(DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"))
    v = nccl_report.evaluate(r, "g5.16xlarge", nodes=2)  # seed 004's own run: 3.02 of the 3.0 it measured
    assert v.ok and v.exit_code == 0 and v.instance_type == "ml.g5.16xlarge" and v.nodes_from == "argument"
    v = nccl_report.evaluate(r, None)
    assert v.outcome == outcome.INCONCLUSIVE and v.exit_code == 3 and "no instance type" in v.message
    v = nccl_report.evaluate(r, "ml.trn1n.32xlarge", nodes=2)  # nothing published for trn1n: never a pass
    assert v.outcome == outcome.INCONCLUSIVE and "no published figure for ml.trn1n.32xlarge at 2 nodes" in v.message
    assert v.expected_busbw_gbps is None
    assert nccl_report.evaluate(r, None, expect="none").outcome == outcome.PASS  # bandwidth waived: complete and clean
    with pytest.raises(nccl_report.ReportError):
        nccl_report.evaluate(r, "ml.p9.huge")
    with pytest.raises(nccl_report.ReportError):
        nccl_report.evaluate(r, "ml.p4d.24xlarge", nodes=0)


def test_wrong_elements_fail_even_without_expectation():
    text = (DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt").read_text().replace("3.01 3.01 0", "3.01 3.01 7")
    r = nccl_report.parse_text(text)
    assert r.wrong_total == 7
    v = nccl_report.evaluate(r, None)
    assert not v.ok and v.exit_code == 1 and "7 wrong element" in v.message


def test_report_to_dict_has_the_contract_keys():
    r = nccl_report.parse_file(str(DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"))
    d = nccl_report.report_to_dict(r, nccl_report.evaluate(r, "ml.trn1.32xlarge", nodes=2))
    for key in ("rows", "peak_busbw_gbps", "avg_busbw_gbps", "wrong_total", "verdict", "outcome", "runs",
                "invalid_rows", "transport_seen"):
        assert key in d
    assert d["rows"][2]["out_of_place"]["busbw_gbps"] == pytest.approx(37.01)
    assert d["outcome"] == d["verdict"]["outcome"] == "PASS" and d["verdict"]["exit_code"] == 0
    assert set(d["verdict"]["checks"]) == {"complete", "values", "data", "transport", "bandwidth"}
    none = nccl_report.report_to_dict(r, nccl_report.evaluate(r, None))
    assert none["outcome"] == "INCONCLUSIVE" and none["verdict"]["exit_code"] == 3


# ---- nccl-tests 2.x layouts, written with the printf formats of nccl-tests' util.cu (figures made up) ----

def _row(size, count, dtype, redop, root, *meas, stamp=""):
    """One result line as nccl-tests prints it: preamble, then (time, algbw, busbw, #wrong) per mode."""
    line = "%12i  %12i  %8s  %6s  %6s" % (size, count, dtype, redop, "%6i" % root)
    for t, a, b, w in meas:
        line += "  %7s  %6s  %6s  %6s" % (t, a, b, w)
    return line + ("%21s" % stamp if stamp else "")


def _header(time="time", stamp=False):
    cols = ("size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw",
            "#wrong")
    return ["#",
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
            % ("", "", "", "", ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
                cols + (19 if stamp else 0, "timestamp" if stamp else "")),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s" % (
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
                19 if stamp else 0, "%Y-%m-%d %H:%M:%S" if stamp else "")]


PREAMBLE = [
    "# nccl-tests version 2.17.6 nccl-headers=22809 nccl-library=22809",
    "# Collective test starting: all_gather_perf",
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 16(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 0 graph: 0",
    "#",
    "# Using devices",
    "#  Rank  0 Group  0 Pid  41817 on ip-10-1-0-7 device  0 [0000:53:00] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  0 Pid  41818 on ip-10-1-0-7 device  1 [0000:64:00] NVIDIA H100 80GB HBM3",
]
TRAILER = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 139.8 ", "#",
           "# Collective test concluded: all_gather_perf", "#"]


def test_all_gather_unchecked_crlf_with_rank_banners():
    lines = PREAMBLE + _header() + [
        "ip-10-1-0-7:41817:41817 [0] NCCL INFO NET/OFI Selected Provider is efa",
        _row(1048576, 131072, "float", "none", -1, ("21.50", "48.77", "36.58", "N/A"),
             ("20.90", "50.17", "37.63", "N/A")),
        _row(16777216, 2097152, "float", "none", -1, ("98.10", "171.0", "128.3", "N/A"),
             ("97.20", "172.6", "129.5", "N/A")),
        _row(268435456, 33554432, "float", "none", -1, ("1068.4", "251.3", "188.4", "N/A"),
             ("1065.0", "252.1", "189.0", "N/A")),
    ] + TRAILER
    r = nccl_report.parse_text("\r\n".join(lines) + "\r\n")
    assert [row.size_bytes for row in r.rows] == [1048576, 16777216, 268435456]
    assert all(row.redop == "none" and row.root == -1 and row.in_place is not None for row in r.rows)
    assert r.peak_busbw_gbps == pytest.approx(189.0) and r.avg_busbw_gbps == pytest.approx(139.8)
    assert not r.truncated and r.out_of_bounds == 0 and r.wrong_total == 0 and not r.checked
    v = nccl_report.evaluate(r, None, expect="none")
    # unchecked data (-c 0) is no evidence the data was right: INCONCLUSIVE, never PASS (issue 19), and says why
    assert not v.ok and v.exit_code == 3 and v.outcome == "INCONCLUSIVE" and "-c 1" in v.message
    assert r.ofi_providers == ["efa"] and nccl_report.transport_seen(r) == nccl_report.NET_EFA


def test_wrong_count_in_g_format_and_timestamps_and_cputime():
    lines = _header(time="cputime", stamp=True) + [
        _row(8, 2, "float", "sum", -1, ("19.50", "0.00", "0.00", "0"), ("18.88", "0.00", "0.00", "3"),
             stamp="2026-11-21 13:40:01"),
        _row(268435456, 67108864, "float", "sum", -1, ("1500.2", "178.9", "335.5", "1.23457e+06"),
             ("1498.0", "179.2", "336.0", "0"), stamp="2026-11-21 13:40:02"),
    ] + TRAILER[:2]
    r = nccl_report.parse_text("\n".join(lines) + "\n")
    assert len(r.rows) == 2 and r.rows[1].out_of_place.time_us == pytest.approx(1500.2)
    assert r.rows[1].out_of_place.wrong == 1234570 and r.wrong_total == 1234573
    v = nccl_report.evaluate(r, None)
    assert not v.ok and v.exit_code == 1 and "1234573 wrong element" in v.message


def test_rooted_collectives_and_op_names_by_position():
    lines = _header() + [
        _row(1048576, 262144, "float", "none", 0, ("30.1", "34.84", "34.84", "0"), ("29.8", "35.19", "35.19", "0")),
        _row(2097152, 524288, "bfloat16", "mulsum", 3, ("40.0", "52.43", "52.43", "0"),
             ("41.0", "51.15", "51.15", "0")),
    ] + TRAILER[:2]
    r = nccl_report.parse_text("\n".join(lines) + "\n")
    assert [(row.redop, row.root, row.dtype) for row in r.rows] == [("none", 0, "float"), ("mulsum", 3, "bfloat16")]


def test_tables_from_several_ranks_keep_rank_0():
    """A non-MPI nccl-tests started by srun --label (every rank its own table), and mpirun --tag-output."""
    table = _header() + [_row(1048576, 262144, "float", "sum", -1, ("100.0", "10.49", "18.35", "0"),
                              ("99.00", "10.59", "18.54", "0"))] + TRAILER[:2]
    other = [ln.replace("18.54", "99.99") for ln in table]
    labelled = ["1: " + ln for ln in other] + ["0: " + ln for ln in table]
    r = nccl_report.parse_text("\n".join(labelled) + "\n")
    assert len(r.rows) == 1 and r.peak_busbw_gbps == pytest.approx(18.54)
    assert any("2 ranks" in n for n in r.notes)
    tagged = ["[1,0]<stdout>:" + ln for ln in table] + ["[1,1]<stderr>:host:12:12 [1] NCCL WARN oops"]
    r = nccl_report.parse_text("\n".join(tagged) + "\n")
    assert len(r.rows) == 1 and r.avg_busbw_gbps == pytest.approx(139.8) and not r.truncated


def test_nan_average_is_a_summary_but_not_a_number():
    lines = _header() + [_row(8, 2, "float", "sum", -1, ("19.5", "0.00", "0.00", "0"), ("18.9", "0.00", "0.00", "0")),
                         "# Avg bus bandwidth    : -nan "]
    r = nccl_report.parse_text("\n".join(lines) + "\n")
    assert not r.truncated and not r.avg_busbw_reported and r.avg_busbw_gbps == 0.0
