"""hpq.observability.dashboards: which metrics a panel selects, and which panels owe data where.

The scanner (``selector_names``) is held equal to a real PromQL parser (promql-parser, GreptimeDB's Rust parser,
as tests/observability/test_observability_assets.py uses it) on every query the dashboards ship and on
expressions built to trip a scanner (strings holding braces and metric-like words, ``by`` lists, ``offset``,
subqueries). ``check`` is run with a workspace answering from a table: a panel owed data that draws none is
named (the broken twin), a problem-only panel's empty answer is healthy, an excused one is reported as such.
"""

from __future__ import annotations

import promql_parser
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpq.observability import dashboards
from tests.observability.test_observability_assets import selected_metrics

TRICKY = [
    'sum by (instance, job) (rate(node_cpu_seconds_total{mode="idle"}[5m]))',
    'up{job="a{b}", instance=~"node_memory_x"} == 1',
    "count(up offset 10m) unless count(up)",
    "max_over_time(rate(node_network_receive_bytes_total[1m])[10m:1m])",
    "histogram_quantile(0.9, sum without (le) (rate(x_bucket[5m])))",
    "a / on (instance) group_left (node) b",
    "time() - hpq_result_timestamp_seconds > bool 3600",
    '-node_load1 + 2 * sum(node_load5{cluster=~"$cluster"})',
]


def test_the_scanner_agrees_with_a_promql_parser_on_every_shipped_panel():
    queries = dashboards.panel_queries()
    assert len(queries) >= 60  # the five dashboards' targets
    for board, title, expr in queries:
        assert dashboards.selector_names(expr) == selected_metrics(expr), (board, title, expr)


@pytest.mark.parametrize("expr", TRICKY)
def test_the_scanner_agrees_on_expressions_built_to_trip_it(expr):
    promql_parser.parse(expr.replace("$cluster", "c"))  # each is valid PromQL
    assert dashboards.selector_names(expr) == selected_metrics(expr)


METRIC = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True).filter(
    lambda s: (
        s
        not in {
            "by",
            "without",
            "on",
            "ignoring",
            "bool",
            "offset",
            "and",
            "or",
            "unless",
            "inf",
            "nan",
            "group_left",
            "group_right",
            "atan2",
            "start",
            "end",
        }
    )
)
LABEL_VALUE = st.text(st.sampled_from('abc{}[]()" _:=~'), max_size=8).map(lambda s: s.replace('"', ""))


@st.composite
def expressions(draw, depth: int = 0):
    name = draw(METRIC)
    label = draw(LABEL_VALUE)
    selector = name + ('{job="' + label + '"}' if draw(st.booleans()) else "")
    kind = draw(st.sampled_from(["plain", "rate", "sum_by", "binary", "offset"] if depth < 2 else ["plain"]))
    if kind == "rate":
        return f"rate({selector}[5m])"
    if kind == "sum_by":
        return f"sum by (instance) ({draw(expressions(depth + 1))})"
    if kind == "binary":
        return f"{draw(expressions(depth + 1))} / {draw(expressions(depth + 1))}"
    if kind == "offset":
        return f"{selector} offset 5m"
    return selector


@given(expressions())
def test_the_scanner_agrees_on_generated_expressions(expr):
    assert dashboards.selector_names(expr) == selected_metrics(expr)


def fake_workspace(with_data: set[str]):
    def query(promql: str) -> list:
        return [{"metric": {}, "value": [0, "1"]}] if any(m in promql for m in with_data) else []

    return query


def test_a_panel_owed_data_that_draws_none_is_named_and_healthy_empties_are_not():
    present = {
        "up",
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "hpq_nccl_wrong_elements",
    }
    healthy = dashboards.check(fake_workspace({"up", "node_cpu", "node_memory"}), present, "c1")
    assert healthy["without_data"] == [] and healthy["with_data"] >= 3
    assert "hpq-results: Collectives with wrong elements" in healthy["empty_healthy"]
    assert (
        healthy["metrics_not_here"] > 40
    )  # GPU, EFA, Neuron, Slurm panels: their metrics are not in `present`
    # The broken twin: memory series exist but the query draws nothing.
    broken = dashboards.check(fake_workspace({"up", "node_cpu"}), present, "c1")
    assert broken["without_data"] == ["cluster: Memory available"]
    excused = dashboards.check(fake_workspace({"up", "node_cpu"}), present, "c1", {"Memory available": "why"})
    assert excused["without_data"] == [] and excused["excused"] == {"cluster: Memory available": "why"}


def test_grafana_variables_are_filled_as_a_user_would():
    out = dashboards.fill('rate(x{cluster=~"$cluster", instance=~"$node"}[$__rate_interval])', "my-cluster")
    promql_parser.parse(out)
    assert out == 'rate(x{cluster=~"my\\\\-cluster", instance=~".*"}[2m])'
