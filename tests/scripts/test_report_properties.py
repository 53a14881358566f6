# ruff: noqa: UP031  (log lines are written with the producers' own printf formats)
"""Property tests (Hypothesis) of the nccl-tests and nccom-test log parsers: let the suite find the next case.

For any text: ``parse_text`` returns a report or raises ReportError (hpq's exit 2), nothing else; a report
judged for any type gives PASS, FAIL or INCONCLUSIVE with exit 0, 1 or 3 and a first line that says so;
``--output json`` is strict JSON (no NaN/Infinity); and the time stays bounded. The generated logs mix
the real layouts' pieces (nccl-tests and nccom-test headers, result rows with numbers that may be nan,
inf, negative, huge or cut short, summary lines, NCCL network lines, srun/mpirun labels) with arbitrary
text, so both the plausible and the hostile are covered. Examples found are kept as regression cases
with ``@example``. A small ``max_examples`` and a deadline keep the run to seconds.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpq.scripts import nccl_report, outcome

TYPES = [None, "ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.g5.48xlarge", "ml.g5.16xlarge", "ml.trn1.32xlarge",
         "ml.trn2.48xlarge"]
SETTINGS = settings(max_examples=100, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

NUMBER = st.one_of(
    st.integers(min_value=-10, max_value=1 << 40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "-nan", "inf", "-inf", "N/A", "1e300", "1.23457e+06", "0.00", "-0", "", "1e", "."]),
)
NCCL_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
               "   busbw #wrong")
NCCOM_HEADER = "    size(B)    count(elems)    type    time:avg(us)    algbw(GB/s)    busbw(GB/s)"


@st.composite
def nccl_row(draw) -> str:
    nums = draw(st.lists(NUMBER, min_size=8, max_size=8))
    size = draw(st.integers(min_value=-5, max_value=1 << 34))
    return "%12s  %12s  %8s  %6s  %6s  %s" % (size, size // 4, draw(st.sampled_from(["float", "bf16", "x"])),
                                               draw(st.sampled_from(["sum", "none", "max"])), "-1", "  ".join(nums))


@st.composite
def nccom_row(draw) -> str:
    nums = draw(st.lists(NUMBER, min_size=3, max_size=3))
    size = draw(st.integers(min_value=0, max_value=1 << 34))
    return "%12d %12d %8s %s" % (size, size, "fp32", "  ".join(nums))


LINE = st.one_of(
    st.just(NCCL_HEADER), st.just(NCCOM_HEADER), nccl_row(), nccom_row(),
    NUMBER.map(lambda n: "# Avg bus bandwidth    : %s " % n), NUMBER.map(lambda n: "Avg bus bandwidth:      %sGB/s" % n),
    st.just("# Out of bounds values : 0 OK"),
    st.sampled_from(["h:1:2 [0] NCCL INFO Using network Socket", "h:1:2 [0] NCCL INFO Using network AWS Libfabric",
                     "h:1:2 [0] NCCL INFO NET/OFI Selected provider is efa",
                     "h:1:2 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA",
                     "#  Rank  0 Group  0 Pid  41817 on ip-10-1-0-7 device  0 [0000:53:00] NVIDIA H100 80GB HBM3",
                     "# hpq built-in benchmark: all_reduce, torch.distributed backend gloo, torch 2",
                     "#" * 300, "NCCL INFO Using network" + " " * 300]),
    st.text(max_size=120),
)
PREFIX = st.sampled_from(["", "0: ", "1: ", "[1,0]<stdout>:", "[1,3]<stderr>: ", "  "])


@st.composite
def log_text(draw) -> str:
    lines = draw(st.lists(st.tuples(PREFIX, LINE), max_size=40))
    end = draw(st.sampled_from(["\n", "\r\n", ""]))
    return end.join(p + ln for p, ln in lines) + draw(st.sampled_from(["", "\n"]))


def check(text: str, itype: str | None, nodes: int | None, expect: str) -> None:
    try:
        report = nccl_report.parse_text(text)
    except nccl_report.ReportError:
        return
    assert report.rows and report.runs >= 1
    verdict = nccl_report.evaluate(report, itype, nodes, expect)
    assert verdict.outcome in (outcome.PASS, outcome.FAIL, outcome.INCONCLUSIVE)
    assert verdict.exit_code == outcome.exit_code(verdict.outcome)
    assert verdict.message.startswith(verdict.outcome + ": ")
    if verdict.outcome == outcome.PASS:  # a pass rests on positive evidence only
        assert not report.truncated and not report.invalid and report.wrong_total == 0 and report.runs == 1
    doc = json.loads(outcome.dumps(nccl_report.report_to_dict(report, verdict)), parse_constant=_refuse)
    assert doc["outcome"] == verdict.outcome
    nccl_report.format_table(report)


def _refuse(token: str) -> None:
    raise AssertionError("non-standard JSON token %s" % token)


@SETTINGS
@given(log_text(), st.sampled_from(TYPES), st.sampled_from([None, 1, 2, 4]), st.sampled_from(["catalog", "none", "80"]))
@example("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
         "1048576 262144 float sum -1 10.0 1.0 nan 0 10.0 1.0 1.0 -5\n", "ml.p5.48xlarge", 2, "catalog")
@example("    size(B)    count(elems)    type    time:avg(us)    algbw(GB/s)    busbw(GB/s)\n"
         "    33554432        33554432    uint8         768          inf          inf\nAvg bus bandwidth: nanGB/s\n",
         "ml.trn1.32xlarge", 2, "catalog")
def test_any_log_gives_a_verdict_or_a_usage_error(text, itype, nodes, expect):
    check(text, itype, nodes, expect)


@SETTINGS
@given(st.text(max_size=2000), st.sampled_from(TYPES))
@example("²", None)  # found by Hypothesis: str.isdigit() accepts it, int() does not
@example("²  ² float sum -1 1 1 1 0 1 1 1 0\n# Avg bus bandwidth : 1\n", "ml.p5.48xlarge")
@example("1_000 2 float sum -1 1 1 1 0 1 1 1 0\n# Avg bus bandwidth : ٣\n", None)
def test_any_text_at_all(text, itype):
    check(text, itype, 2, "catalog")


@settings(max_examples=40, deadline=3000)
@given(st.binary(max_size=4000))
def test_any_bytes_through_the_stream_reader(data):
    import io

    try:
        report = nccl_report.read_stream(io.BytesIO(data))
    except nccl_report.ReportError:
        return
    assert report.rows
