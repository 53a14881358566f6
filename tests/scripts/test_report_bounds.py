# ruff: noqa: UP031  (log lines are written with the producers' own printf formats)
"""Numbers that cannot lie and readers that cannot hang (issues 19 and 21) in hpq.scripts.nccl_report.

Each check is proven on a broken twin of a healthy log: AWS's published 2x p5.48xlarge table
(tests/data/nccl/aws_2x_p5_all_reduce_perf.txt) or a log in nccl-tests' own format (tests/nccl_logs.py)
with one thing made wrong: an impossible bandwidth, a bad #wrong, a second run appended to the file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hpq.scripts import nccl_report, outcome
from tests.nccl_logs import allreduce_log, efa_info

P5 = "ml.p5.48xlarge"
HOSTS = ["p5-a", "p5-b"]


def healthy() -> str:
    return allreduce_log(HOSTS, 8, 480.0, nccl_info=efa_info("p5-a"), gpu="NVIDIA H100 80GB HBM3")


def twin(find: str, replace: str) -> str:
    """The healthy log with its 1 GiB row's out-of-place busbw (or another token) replaced."""
    text = healthy()
    row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("1073741824 "))
    toks = row.split()
    assert find in toks, toks
    return text.replace(row, row.replace(" " + find + " ", " " + replace + " ", 1))


def strict_json(doc: object) -> object:
    def refuse(token: str) -> None:
        raise ValueError("non-standard JSON token %s" % token)

    return json.loads(json.dumps(doc, allow_nan=False), parse_constant=refuse)


def busbw_token(text: str) -> str:
    row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("1073741824 "))
    return row.split()[7]


def test_healthy_p5_pair_passes():
    v = nccl_report.evaluate(nccl_report.parse_text(healthy()), P5)
    assert v.outcome == outcome.PASS, v.message


@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "-3.5", "1400.00"])
def test_impossible_bandwidth_is_an_error_in_the_log(value):
    """Issue 19: inf and 1e300 passed; nan made invalid JSON. Above p5's NVLink + network (1300 GB/s), not finite,
    or negative: FAIL with the values named, in nccl-report and in run-nccl-test's own verdict alike."""
    text = twin(busbw_token(healthy()), value)
    r = nccl_report.parse_text(text)
    v = nccl_report.evaluate(r, P5)
    assert v.outcome == outcome.FAIL and v.checks["values"].outcome == outcome.FAIL, v.message
    assert "impossible values" in v.message.splitlines()[0]
    doc = strict_json(nccl_report.report_to_dict(r, v))
    assert doc["outcome"] == "FAIL"
    if value in ("inf", "nan", "-3.5"):
        assert r.invalid and "line" in r.invalid[0]  # the row is kept as invalid, never dropped
    else:
        assert "physical limit of 1300 GB/s" in v.message


def test_without_a_type_the_universal_ceiling_still_holds():
    r = nccl_report.parse_text(twin(busbw_token(healthy()), "1e300"))
    assert nccl_report.evaluate(r, None, expect="none").outcome == outcome.FAIL


@pytest.mark.parametrize("wrong, why", [("-5", "negative"), ("nan", "#wrong is nan"), ("1.5", "not a whole number"),
                                        ("inf", "#wrong is inf")])
def test_wrong_must_be_a_non_negative_whole_number(wrong, why):
    text = healthy()
    row = next(ln for ln in text.splitlines() if ln.lstrip().startswith("1073741824 "))
    toks = row.split()
    bad = row[:row.rindex(toks[-1])] + wrong  # the in-place #wrong, the last column
    r = nccl_report.parse_text(text.replace(row, bad))
    assert any(why in i for i in r.invalid), r.invalid
    assert nccl_report.evaluate(r, P5).outcome == outcome.FAIL


def test_plus_and_minus_five_do_not_cancel_out():
    text = healthy()
    rows = [ln for ln in text.splitlines() if ln.lstrip()[:1].isdigit()]
    a, b = rows[-2], rows[-1]
    text = text.replace(a, a[:a.rindex(" 0")] + " 5").replace(b, b[:b.rindex(" 0")] + " -5")
    r = nccl_report.parse_text(text)
    assert r.wrong_total == 5 and r.invalid
    assert nccl_report.evaluate(r, P5).outcome == outcome.FAIL


def test_a_run_with_a_dead_run_appended_is_never_a_pass():
    """Issue 19: a complete run followed by one that died halfway was PASS with truncated false."""
    whole = healthy()
    rows = [ln for ln in whole.splitlines() if ln.lstrip()[:1].isdigit()]
    dead = whole[:whole.index(rows[len(rows) // 2])]  # the banner, the header and the first half of the rows
    r = nccl_report.parse_text(whole + dead)
    assert r.runs == 2 and r.truncated
    v = nccl_report.evaluate(r, P5)
    assert v.outcome == outcome.FAIL and v.checks["complete"].outcome == outcome.FAIL
    assert strict_json(nccl_report.report_to_dict(r, v))["truncated"] is True
    header_only = whole + whole[:whole.index(rows[0])]  # died before its first row
    hr = nccl_report.parse_text(header_only)
    assert hr.truncated and nccl_report.evaluate(hr, P5).outcome == outcome.FAIL


def test_two_complete_runs_in_one_log_are_inconclusive():
    r = nccl_report.parse_text(healthy() + healthy())
    assert r.runs == 2 and not r.truncated
    v = nccl_report.evaluate(r, P5)
    assert v.outcome == outcome.INCONCLUSIVE and "2 runs" in v.message


def test_json_is_strict_for_a_nan_summary():
    text = healthy().replace("# Avg bus bandwidth    : ", "# Avg bus bandwidth    : -nan #")
    r = nccl_report.parse_text(text)
    v = nccl_report.evaluate(r, P5)
    doc = strict_json(nccl_report.report_to_dict(r, v))
    assert doc["avg_busbw_reported"] is False
    assert outcome.dumps({"x": float("nan"), "y": [float("inf")]}) == '{"x": null, "y": [null]}'


# ---------------------------------------------------------------------------- linear time, bounded input


@pytest.mark.parametrize("name, text", [
    ("2 MB of '#'", "#" * 2_000_000 + "\n"),
    ("a network line with 100k spaces", "h:1:2 [0] NCCL INFO Using network" + " " * 100_000 + "x\n"),
    ("100k 'via NET/' without a number", "h:1:2 [0] NCCL INFO " + "via NET/a " * 100_000 + "\n"),
    ("a 2 MB number", "1" * 2_000_000 + " 2 float sum -1 1 1 1 0\n"),
    ("a header of 200k columns", "# size count type " + "busbw " * 200_000 + "\n"),
])
def test_pathological_lines_parse_in_well_under_a_second(name, text):
    start = time.monotonic()
    for _ in (1, 2):
        try:
            nccl_report.parse_text(healthy() + text)
        except nccl_report.ReportError:
            pass
    assert (time.monotonic() - start) / 2 < 1.0, name


def test_time_grows_linearly_with_the_number_of_lines():
    def cost(n: int) -> float:
        text = healthy() + "1 2\n" * n + "h:1:2 [0] NCCL INFO Channel 00 : 0 -> 1 via NET/a/0\n" * n
        start = time.monotonic()
        nccl_report.parse_text(text)
        return time.monotonic() - start

    small, big = min(cost(50_000) for _ in (1, 2)), min(cost(200_000) for _ in (1, 2))
    assert big / small < 4 * 2, (small, big)  # 4x the lines: about 4x the time, never 16x


def test_input_past_the_limit_is_refused():
    with pytest.raises(nccl_report.ReportError, match="larger than 64 MiB"):
        nccl_report.parse_text("#" * (nccl_report.MAX_LOG_BYTES + 1))


def _hpq(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hpq", "nccl-report", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def test_stdin_from_dev_zero_stops_at_the_limit_without_growing():
    """Issue 21: `nccl-report - < /dev/zero` grew by 1.5 GB/s. Now: one line, exit 2, in a few seconds, and the
    process never holds much more than the 64 MiB limit (max RSS from wait4)."""
    # A child forked from this (large) pytest process counts the parent's pages in its max RSS until it execs, so
    # hpq is started by a small wrapper process that reports its child's own ru_maxrss (KiB) from wait4.
    wrapper = ("import os, subprocess, sys\n"
               "fd = int(sys.argv.pop(1))\n"
               "p = subprocess.Popen(sys.argv[1:], pass_fds=())\n"
               "_, status, usage = os.wait4(p.pid, 0)\n"
               "os.write(fd, b'%d %d' % (os.waitstatus_to_exitcode(status), usage.ru_maxrss))\n")
    read_fd, write_fd = os.pipe()
    with open("/dev/zero", "rb") as zero:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", wrapper, str(write_fd), sys.executable, "-m", "hpq",
                                 "nccl-report", "-"],
                                stdin=zero, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_fd,))
        os.close(write_fd)
        _out, err_bytes = proc.communicate(timeout=60)
    elapsed = time.monotonic() - start
    with os.fdopen(read_fd) as fh:
        code, maxrss = (int(x) for x in fh.read().split())
    err = err_bytes.decode()
    assert code == 2 and err.strip().splitlines() == [
        "hpq: error: standard input is larger than 64 MiB (the limit for a benchmark log): give one run's log "
        "(e.g. grep -v 'NCCL INFO' when INFO chatter made it large)"]
    assert elapsed < 10 and maxrss < 400 * 1024, (elapsed, maxrss)


def test_ctrl_c_while_reading_stdin_is_one_line_and_130():
    read, write = os.pipe()  # a writer that never writes: the reader waits
    proc = _hpq("-", stdin=read)
    os.close(read)
    time.sleep(3.0)  # past the imports: the command is blocked reading
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=20)
    os.close(write)
    assert proc.returncode == 130 and len(err.decode().strip().splitlines()) == 1, err
