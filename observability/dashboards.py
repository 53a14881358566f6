"""The shipped dashboards' queries, run against a workspace the way Grafana would run them.

``hpq rehearse --observability`` (and anyone with a workspace) asks: does every panel whose metrics exist there
draw something? Each panel target's PromQL is taken from the dashboard JSON, Grafana's variables filled as a
user's choice fills them (this cluster, every node, a 1-minute rate window), and run as an instant query.
A query is only owed data when every metric it selects is in the workspace; panels that show only problems
(:data:`PROBLEM_ONLY_PANELS`: an empty answer is the healthy one) are owed none.

The metric names a query selects are read with a small scanner (:func:`selector_names`), not a full PromQL
parser, so the rehearsal needs no extra package; the tests hold it equal to promql-parser's answer for every
query shipped (tests/observability/test_dashboards_check.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from hpq import observability

# Panels that draw only what is wrong: empty is their healthy answer (a filter like ``> 0`` or ``== 1`` on a
# problem, or ``unless`` of the nodes that report).
PROBLEM_ONLY_PANELS = {
    "Nodes that stopped reporting (10 min)",
    "hpq results failing",
    "Collectives with wrong elements",
    "Doctor findings",
    "Nodes the sweep named slow",
    "Last Xid per GPU (non-zero)",
    "Uncorrectable ECC and row remapping",
    "Nodes not in service",
}
GRAFANA_INTERVALS = ("$__rate_interval", "$__interval", "$__range")
# PromQL words that are not metric names (operators, modifiers, aggregation clauses).
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
             "unless", "atan2", "inf", "nan", "start", "end"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def selector_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (label matchers, strings, durations and function names left out)."""
    text = _STRING.sub('""', expr)
    for var in GRAFANA_INTERVALS:
        text = text.replace(var, "5m")
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = _CLAUSE.sub("", text)
    text = re.sub(r"\boffset\s+\d+[smhdwy]", "", text)
    names = set()
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


# Grafana's $__rate_interval with the data source's scrape interval set to the agent's 30 s (hpq observe prints
# that data source: observability/endpoints.py): max($__interval + 30 s, 4 x 30 s) = 2 minutes for a panel
# whose $__interval is under 90 s.
RATE_INTERVAL = "2m"


def fill(expr: str, cluster: str) -> str:
    """Grafana's variables as a user's choice fills them: this cluster, every node, the rate window Grafana
    computes for hpq's data source (:data:`RATE_INTERVAL`)."""
    escaped = re.escape(cluster).replace("\\", "\\\\")
    out = expr.replace("$cluster", escaped).replace("$node", ".*")
    for var in GRAFANA_INTERVALS:
        out = out.replace(var, RATE_INTERVAL)
    return out


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard file stem, panel title, PromQL) for every panel target of every shipped dashboard."""
    out = []
    for path in observability.dashboard_files():
        with open(path) as fh:
            board = json.load(fh)
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((stem, str(panel.get("title", "")), target["expr"]))
    return out


def check(query: Callable[[str], list[dict[str, Any]]], present: set[str], cluster: str,
          excused: dict[str, str] | None = None) -> dict[str, Any]:
    """Run every panel whose metrics are all in ``present``; which drew data, which owed data and drew none.

    ``excused``: panel title -> why this place cannot show it (reported, never counted as drawn). ``query`` raises
    on a failed request (the caller's verdict is then INCONCLUSIVE, never a pass)."""
    excused = excused or {}
    drew, empty_ok, without, skipped = [], [], [], 0
    excused_seen: dict[str, str] = {}
    for board, title, expr in panel_queries():
        names = selector_names(expr)
        if not names or not names <= present:
            skipped += 1
            continue
        where = f"{board}: {title}"
        if query(fill(expr, cluster)):
            drew.append(where)
        elif title in excused:
            excused_seen[where] = excused[title]
        elif title in PROBLEM_ONLY_PANELS:
            empty_ok.append(where)
        else:
            without.append(where)
    return {"checked": len(drew) + len(empty_ok) + len(without) + len(excused_seen), "with_data": len(drew),
            "drew": sorted(set(drew)),
            "empty_healthy": sorted(set(empty_ok)), "without_data": sorted(set(without)),
            "excused": excused_seen, "metrics_not_here": skipped}
