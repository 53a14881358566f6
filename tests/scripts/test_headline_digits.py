# ruff: noqa: UP031  (log lines are written with the producers' own printf formats)
"""Issue 25 item 4: a verdict's first line reads at a glance, so its numbers are short. Hypothesis feeds every
node judge that writes a headline (run-nanogpt's, the collective benchmarks' nccl_report.evaluate, the sweep's
build_report) any float, including ones a float's repr prints with 17 digits (8.203554153442383), huge ones
"%.2f" prints with 300 digits, tiny ones, nan and inf; no number in the first line may carry more than 4 decimals
or 12 whole digits."""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpq.scripts import nccl_report, outcome, run_nanogpt, sweep
from hpq.scripts.sweep import OK, PairResult

SETTINGS = settings(max_examples=80, deadline=3000, suppress_health_check=[HealthCheck.too_slow])
FLOAT = st.floats(allow_nan=True, allow_infinity=True)
POSITIVE = st.floats(min_value=0.0, max_value=1e308, allow_nan=False, allow_infinity=False)
NUMBER_RE = re.compile(r"\d+(?:\.(\d+))?")
MAX_DECIMALS, MAX_WHOLE = 4, 12


def long_numbers(line: str) -> list[str]:
    """The numbers in ``line`` with more than MAX_DECIMALS decimals or MAX_WHOLE whole digits."""
    found = []
    for m in NUMBER_RE.finditer(line):
        whole = m.group(0).split(".")[0]
        if len(m.group(1) or "") > MAX_DECIMALS or len(whole) > MAX_WHOLE:
            found.append(m.group(0))
    return found


def first_line(message: str) -> str:
    line = message.split("\n", 1)[0]
    assert line.split(": ", 1)[0] in (outcome.PASS, outcome.FAIL, outcome.INCONCLUSIVE), line
    return line


def test_the_reviewers_nanogpt_run_reads_rounded():
    """The review's run: metrics 8.203554153442383 -> 0.30833837389945984 gave an unrounded PASS line."""
    metrics = {"first_loss": 8.203554153442383, "final_loss": 0.30833837389945984, "loss_fell": True,
               "ranks_agree": True, "world_size": 2, "checksum": 1.5, "checksum_spread": 0.0}
    result, message = run_nanogpt.assess_text(0, "", metrics, 2)
    assert result == outcome.PASS
    assert first_line(message) == ("PASS: loss 8.2036 -> 0.3083 vs a falling loss on 2 rank(s): the loss fell "
                                   "and all 2 rank(s) agree")


@SETTINGS
@given(FLOAT, FLOAT, st.one_of(st.integers(-5, 10**30), FLOAT, st.text(max_size=200)), FLOAT,
       st.sampled_from([0, 1]), st.sampled_from([None, 2]))
@example(8.203554153442383, 0.30833837389945984, 2, 0.0, 0, 2)
@example(1e300, 1e-300, 2.0000000001, 1e-9, 0, 2)
def test_nanogpt_headlines_from_metrics(first, final, world, spread, rc, ranks):
    metrics = {"first_loss": first, "final_loss": final, "loss_fell": True, "ranks_agree": spread == 0.0,
               "world_size": world, "checksum": 1.0, "checksum_spread": spread}
    _, message = run_nanogpt.assess_text(rc, "", metrics, ranks)
    assert long_numbers(first_line(message)) == [], message


@SETTINGS
@given(FLOAT, FLOAT)
@example(8.203554153442383, 0.30833837389945984)
def test_nanogpt_headlines_from_the_log(first, final):
    """The same numbers read from the training's own log line (EKS: no metrics file comes back)."""
    text = "ranks on: a,b\nloss %r -> %r: falls; ranks agree\nRESULT: PASS\n" % (first, final)
    _, message = run_nanogpt.assess_text(0, text, None, None)
    assert long_numbers(first_line(message)) == [], message


@SETTINGS
@given(POSITIVE, st.sampled_from([None, "ml.p5.48xlarge", "ml.g5.16xlarge"]),
       st.one_of(st.sampled_from(["catalog", "none"]), st.floats(0.001, 1e12).map(repr)))
@example(366.3212345678, None, "300")
@example(1e300, "ml.p5.48xlarge", "catalog")
@example(1e-300, None, "0.001")
def test_collective_benchmark_headlines(busbw, itype, expect):
    """nccl-tests rows (the producer's own columns) whose busbw is anything a log could hold, incl. impossible."""
    row = "%12d %12d %8s %6s %6d %10.2f %8.2f %s %6d %10.2f %8.2f %s %6d" % (
        1 << 30, 1 << 28, "float", "sum", -1, 100.0, 10.0, repr(busbw), 0, 100.0, 10.0, repr(busbw), 0)
    text = ("#  Rank  0 Group  0 Pid 1 on ip-10-1-0-7 device  0 [0000:53:00] NVIDIA H100\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n%s\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : %r\n" % (row, busbw))
    report = nccl_report.parse_text(text)
    verdict = nccl_report.evaluate(report, itype, 1, expect)
    assert long_numbers(first_line(verdict.message)) == [], verdict.message


@SETTINGS
@given(st.lists(POSITIVE, min_size=3, max_size=3))
@example([1e300, 1e300, 1e-300])
@example([48.123456789, 6.000000001, 47.5])
def test_sweep_headlines(speeds):
    nodes = ["ip-10-1-0-5", "ip-10-1-0-6", "ip-10-1-0-7"]
    pairs = [PairResult(i + 1, pair, OK, busbw_gbps=speed, transport="efa")
             for i, (pair, speed) in enumerate(zip([(nodes[0], nodes[1]), (nodes[1], nodes[2]), (nodes[0], nodes[2])],
                                                    speeds, strict=True))]
    doc = sweep.build_report(nodes, pairs, 3, 1 << 28, expect_efa=True)
    text = sweep.format_report(doc)
    assert first_line(text) == doc["message"]
    assert long_numbers(doc["message"]) == [], doc["message"]


@given(FLOAT, st.integers(0, MAX_DECIMALS))
def test_fmt_number_is_short_and_keeps_its_value(value, decimals):
    """The formatter every headline uses: bounded length, and the value it shows is the value (to its places)."""
    shown = outcome.fmt_number(value, decimals)
    assert len(shown) <= 24 and long_numbers(shown) == [], shown
    if math.isfinite(value):
        back = float(shown)  # 2 significant digits of 1.75e308 round past the largest float: inf
        assert abs(back - value) <= max(0.5 * 10 ** -decimals, abs(value) * 0.05) or abs(value) > 1e308, shown
