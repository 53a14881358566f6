"""The report page: one HTML document with inline CSS and SVG, readable offline and without JavaScript.

Layout: the cluster(s) and when, one line per verdict (outcome, number, expectation, reason: the headline's
parts), then per result its evidence (bus bandwidth against message size with the expected figure, the sweep's
node-by-node heat map with the slow node marked, nanoGPT's loss and tokens/s per iteration) and the transport
environment each node's ranks had. Every value from a result passes through ``esc``; numbers through ``num``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from hpq import __version__
from hpq.scripts.outcome import INCONCLUSIVE, combine
from hpq.views import svg
from hpq.views.load import (
    NANOGPT,
    NCCL,
    NCCOM,
    SWEEP,
    Item,
    items_of,
    mapping,
    num,
    text,
    whole,
)
from hpq.views.svg import esc

GENERATOR = "hpq report"  # <meta name="generator">: how a later run knows a file is a report it may replace

CSS = """
:root { --pass:#1a7f37; --fail:#c62828; --inc:#9a6700; --ink:#1f2328; --muted:#59636e; --line:#d1d9e0; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink);
       margin: 24px auto; max-width: 1100px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: var(--muted); margin: 0 0 16px; } .meta b { color: var(--ink); font-weight: 600; }
table { border-collapse: collapse; margin: 6px 0 12px; } th, td { border: 1px solid var(--line); padding: 3px 8px;
  text-align: left; vertical-align: top; } th { background: #f6f8fa; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; min-width: 104px; text-align: center; font-weight: 700; color: #fff; border-radius: 4px;
         padding: 1px 6px; } .badge.PASS { background: var(--pass); } .badge.FAIL { background: var(--fail); }
.badge.INCONCLUSIVE { background: var(--inc); }
.verdicts td { border-left: 0; border-right: 0; } .verdicts .vs { color: var(--muted); }
.overall { font-size: 16px; margin: 8px 0; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; white-space: pre-wrap; word-break: break-word; font-size: 12px; }
.note { color: var(--muted); } .problem { color: var(--fail); } .diff { background: #ffebe9; }
svg.chart { display: block; max-width: 100%; height: auto; margin: 6px 0 14px; font-size: 11px; }
svg .plot { fill: #fff; stroke: var(--line); } svg .grid { stroke: #eef1f4; } svg .tick { fill: var(--muted); }
svg .axis-label { fill: var(--ink); font-size: 12px; } svg .chart-title { font-weight: 600; font-size: 13px; fill: var(--ink); }
svg .line { fill: none; stroke-width: 2; } svg .point { stroke: none; }
svg .s0 .line, svg line.s0 { stroke: #0969da; } svg .s0 .point { fill: #0969da; }
svg .s1 .line, svg line.s1 { stroke: #8250df; } svg .s1 .point { fill: #8250df; }
svg .s2 .line, svg line.s2 { stroke: #bc4c00; } svg .s2 .point { fill: #bc4c00; }
svg line.expected { stroke: var(--pass); stroke-width: 2; stroke-dasharray: 6 4; }
svg line.threshold { stroke: var(--fail); stroke-width: 1.5; stroke-dasharray: 3 3; }
svg .ref-label { fill: var(--ink); font-size: 11px; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
svg .legend { fill: var(--ink); } svg .legend-line { stroke-width: 3; }
svg .cell { stroke: #fff; } svg .cell.self { fill: #eef1f4; } svg .cell.none { fill: #f6f8fa; }
svg .cell-value { fill: #111; font-size: 10px; pointer-events: none; }
svg .node-label { fill: var(--ink); } svg .node-label.slow { fill: var(--fail); font-weight: 700; }
svg .slow-outline { fill: none; stroke: var(--fail); stroke-width: 2.5; }
.pair { display: flex; flex-wrap: wrap; gap: 8px; }
footer { margin-top: 32px; color: var(--muted); font-size: 12px; }
"""

KIND_NAMES = {NCCL: "NCCL bus bandwidth", NCCOM: "Neuron collectives (nccom-test)", SWEEP: "Pairwise sweep",
              NANOGPT: "nanoGPT training"}


def badge(outcome: str) -> str:
    return f'<span class="badge {esc(outcome)}">{esc(outcome)}</span>'


def _overall(items: list[Item]) -> str:
    return combine(i.outcome for i in items) if items else INCONCLUSIVE


def _title_of(item: Item) -> str:
    return KIND_NAMES.get(item.kind, f"{item.kind} test")


def _distinct(values: Iterable[str | None]) -> list[str]:
    seen: list[str] = []
    for v in values:
        if v and v not in seen:
            seen.append(v)
    return seen


def render(items: list[Item], title: str | None = None, now: datetime.datetime | None = None) -> str:
    """The whole page as one string."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    clusters = _distinct(i.cluster for i in items)
    title = title or ("hpq validation report: " + ", ".join(clusters) if clusters else "hpq validation report")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta name="generator" content="{GENERATOR} {esc(__version__)}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
             f'<h1 id="report-title">{esc(title)}</h1>', _meta(items, clusters, now), _verdicts(items)]
    for n, item in enumerate(items, 1):
        parts.append(_section(n, item))
    parts.append(f'<footer>Made by hpq {esc(__version__)} (<code>hpq report</code>) on '
                 f'{esc(now.strftime("%Y-%m-%d %H:%M UTC"))} from: '
                 f'{esc(", ".join(_distinct(i.source for i in items)))}. Self-contained: no script, no network.'
                 "</footer></body></html>")
    return "\n".join(parts) + "\n"


def _meta(items: list[Item], clusters: list[str], now: datetime.datetime) -> str:
    types = _distinct(i.instance_type for i in items)
    backends = _distinct(i.backend for i in items)
    whens = _distinct(i.when for i in items)
    rows = [("Cluster", ", ".join(clusters) or "not recorded in these results (node program result files)"),
            ("Instance type", ", ".join(types) or "not recorded"),
            ("Ran on", ", ".join(backends) or "the cluster's nodes (node program result files)"),
            ("When", "; ".join(whens) or "not recorded")]
    cells = " &middot; ".join(f'<span class="{esc(k.lower().replace(" ", "-"))}">{esc(k)}: <b>{esc(v)}</b></span>'
                              for k, v in rows)
    return f'<p class="meta">{cells}</p>'


def _verdicts(items: list[Item]) -> str:
    out = ['<h2 id="verdicts">Verdicts</h2>',
           f'<p class="overall">Overall: {badge(_overall(items))} <span class="note">({len(items)} result(s): FAIL '
           'if any failed, else INCONCLUSIVE if any lacked evidence, else PASS)</span></p>',
           '<table class="verdicts"><tr><th>Outcome</th><th>Test</th><th>Measured</th><th></th><th>Expected</th>'
           "<th>Reason</th></tr>"]
    for n, item in enumerate(items, 1):
        h = item.headline
        out.append(f'<tr class="verdict {esc(item.outcome)}" data-test="{esc(item.kind)}">'
                   f"<td>{badge(item.outcome)}</td>"
                   f'<td><a href="#result-{n}">{esc(_title_of(item))}</a></td>'
                   f'<td class="number">{esc(text(h.number, 300))}</td><td class="vs">{"vs" if h.expectation else ""}'
                   f'</td><td class="expectation">{esc(text(h.expectation, 300))}</td>'
                   f'<td class="reason">{esc(text(h.reason, 600))}</td></tr>')
    out.append("</table>")
    return "\n".join(out)


def _section(n: int, item: Item) -> str:
    where = ", ".join(x for x in (item.cluster and f"cluster {item.cluster}", item.backend,
                                  item.instance_type, item.nodes is not None and f"{item.nodes} node(s)",
                                  item.when) if x)
    out = [f'<section class="result {esc(item.kind)}" id="result-{n}">',
           f"<h2>{badge(item.outcome)} {esc(_title_of(item))}</h2>",
           f'<p class="meta">{esc(where)} &middot; from <code>{esc(item.source)}</code></p>',
           f'<details class="message"><summary>Verdict message</summary><pre>{esc(text(item.message))}</pre></details>']
    doc = item.doc
    if item.kind in (NCCL, NCCOM):
        out.append(_bandwidth(n, doc))
    elif item.kind == SWEEP:
        out.append(_sweep(n, doc))
    elif item.kind == NANOGPT:
        out.append(_nanogpt(n, doc))
    out.append(_environment(item))
    out.append("</section>")
    return "\n".join(out)


# ----------------------------------------------------------------------------- bandwidth

def _best(row: dict[str, Any], key: str) -> float | None:
    vals = [num(mapping(row.get(m)).get(key)) for m in ("out_of_place", "in_place")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def _bandwidth(n: int, doc: dict[str, Any]) -> str:
    rows = [mapping(r) for r in items_of(doc.get("rows"))]
    points = [(num(r.get("size_bytes")), _best(r, "busbw_gbps")) for r in rows]
    pts = [(x, y) for x, y in points if x is not None and y is not None]
    verdict = mapping(doc.get("verdict"))
    expected = num(verdict.get("expected_busbw_gbps"))
    fraction = num(verdict.get("pass_fraction"))
    refs = []
    if expected is not None:
        kind = text(verdict.get("expected_kind"), 40)
        nodes = whole(verdict.get("expected_for_nodes"))
        refs.append(svg.HLine(expected, f"expected {expected:g} GB/s" + (f" ({kind}" if kind else "") +
                              (f", {nodes} node(s))" if nodes else ")" if kind else ""), "expected"))
        if fraction is not None:
            refs.append(svg.HLine(expected * fraction, f"pass at {fraction:.0%}: {expected * fraction:.3g} GB/s",
                                  "threshold"))
    out = [svg.line_chart(f"busbw-{n}", "Bus bandwidth against message size",
                          [svg.Series("busbw (best of out-of-place, in-place)", pts, "s0")],
                          svg.Axis("Message size (bytes, log scale)", log2=True, fmt=svg.fmt_bytes),
                          svg.Axis("Bus bandwidth (GB/s)"), refs)]
    if expected is None:
        out.append('<p class="note no-expectation">No expected figure drawn: '
                   f'{esc(text(mapping(mapping(verdict.get("checks")).get("bandwidth")).get("detail"), 400)) or "the result names none"}'
                   "</p>")
    facts = [("Peak bus bandwidth", _gbps(doc.get("peak_busbw_gbps")) + (
                 f" at {svg.fmt_bytes(num(doc.get('peak_size_bytes')) or 0)}" if num(doc.get("peak_size_bytes")) else "")),
             ("Average bus bandwidth", _gbps(doc.get("avg_busbw_gbps"))),
             ("Network", text(doc.get("network") or "not named in the log", 200)),
             ("Ranks / hosts", f"{whole(doc.get('ranks'))} on "
                               f"{', '.join(_host(h, doc) for h in items_of(doc.get('rank_hosts'), 64))}"
              if whole(doc.get("ranks")) and items_of(doc.get("rank_hosts")) else ""),
             ("#wrong", text(whole(doc.get("wrong_total")))), ("Expected from", text(verdict.get("expected_source"), 600))]
    out.append(_facts(facts))
    checks = mapping(verdict.get("checks"))
    if checks:
        out.append(f'<details class="checks"><summary>Checks ({len(checks)})</summary><table class="checks"><tr>'
                   "<th>Check</th><th>Outcome</th><th>Detail</th></tr>")
        for name, check in list(checks.items())[:20]:
            c = mapping(check)
            out.append(f"<tr><td>{esc(text(name, 40))}</td><td>{esc(text(c.get('outcome'), 40))}</td>"
                       f"<td>{esc(text(c.get('detail'), 1000))}</td></tr>")
        out.append("</table></details>")
    if rows:
        out.append(f"<details><summary>{len(rows)} result row(s)</summary><table class=\"rows\"><tr><th>size</th>"
                   "<th>busbw GB/s</th><th>algbw GB/s</th><th>time us</th><th>#wrong</th></tr>")
        for r in rows:
            size = num(r.get("size_bytes"))
            oop = mapping(r.get("out_of_place"))
            out.append(f'<tr><td class="n">{esc(svg.fmt_bytes(size) if size is not None else "?")}</td>'
                       f'<td class="n">{_fmt(_best(r, "busbw_gbps"))}</td><td class="n">{_fmt(_best(r, "algbw_gbps"))}'
                       f'</td><td class="n">{_fmt(num(oop.get("time_us")))}</td>'
                       f'<td class="n">{esc(text(oop.get("wrong"), 20))}</td></tr>')
        out.append("</table></details>")
    return "\n".join(out)


def _fmt(v: float | None) -> str:
    return "" if v is None else esc(f"{v:.2f}")


def _host(host: Any, doc: dict[str, Any]) -> str:
    """A rank's host as printed, with the node it ran on where the result maps it (EKS: the pod's node)."""
    node = text(mapping(doc.get("host_nodes")).get(str(host)), 100)
    name = text(host, 100)
    return f"{name} (node {node})" if node and node != name else name


def _gbps(v: Any) -> str:
    f = num(v)
    return "not reported" if f is None else f"{f:.2f} GB/s"


def _facts(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows if v)
    return f'<table class="facts">{cells}</table>'


# ----------------------------------------------------------------------------- sweep

def _sweep(n: int, doc: dict[str, Any]) -> str:
    hosts = [text(h, 200) for h in items_of(doc.get("hosts"), 256)]
    pairs = [mapping(p) for p in items_of(doc.get("pairs"))]
    cells: dict[tuple[str, str], svg.Cell] = {}
    for p in pairs:
        nodes = items_of(p.get("nodes"), 2)
        if len(nodes) != 2:
            continue
        a, b = text(nodes[0], 200), text(nodes[1], 200)
        for h in (a, b):
            if h not in hosts and len(hosts) < 256:
                hosts.append(h)
        cells[(a, b)] = svg.Cell(num(p.get("busbw_gbps")), text(p.get("status"), 20) or "unknown",
                                 text(p.get("note"), 200))
    slow = [text(s, 200) for s in items_of(doc.get("slow_nodes"), 256)]
    out = [svg.heat_map(f"sweep-{n}", "Pairwise all-reduce: bus bandwidth of each pair of nodes",
                        svg.HeatMap(hosts, cells, slow))]
    median, threshold = num(doc.get("median_gbps")), num(doc.get("threshold_gbps"))
    out.append(_facts([("Slow node(s)", ", ".join(slow) or "none"),
                       ("Cluster median score", _gbps(median)), ("Slow below", _gbps(threshold)),
                       ("Message size", svg.fmt_bytes(num(doc.get("size_bytes")) or 0) if num(doc.get("size_bytes"))
                        else ""),
                       ("Pairs", f"{len(pairs)} in {whole(doc.get('rounds')) or '?'} round(s)")]))
    scores = mapping(doc.get("scores"))
    partners = mapping(doc.get("partners"))
    if hosts:
        out.append('<table class="scores"><tr><th>Node</th><th>Score (median of its pairs)</th><th>Partners</th>'
                   "<th>Verdict</th></tr>")
        for h in hosts:
            s = num(scores.get(h))
            verdict = "unmeasured" if s is None else ("SLOW" if h in slow else "ok")
            cls = ' class="problem"' if verdict == "SLOW" else ""
            out.append(f'<tr{cls} data-node="{esc(h)}"><td>{esc(h)}</td><td class="n">{_gbps(s)}</td>'
                       f'<td class="n">{len(items_of(partners.get(h)))}</td><td>{esc(verdict)}</td></tr>')
        out.append("</table>")
    actions = mapping(doc.get("actions"))
    if actions:
        lines = [text(a, 400) for v in list(actions.values())[:32] for a in items_of(v, 4)]
        out.append(f"<h3>What to do with the slow node(s)</h3><pre>{esc(chr(10).join(lines))}</pre>")
    return "\n".join(out)


# ----------------------------------------------------------------------------- nanoGPT

def _nanogpt(n: int, doc: dict[str, Any]) -> str:
    metrics = mapping(doc.get("metrics"))
    history = [mapping(h) for h in items_of(metrics.get("history"))]
    loss = [(num(h.get("iter")), num(h.get("loss"))) for h in history]
    tps = [(num(h.get("iter")), num(h.get("tokens_per_s"))) for h in history]
    out = []
    if history:
        out.append('<div class="pair">')
        out.append(svg.line_chart(f"loss-{n}", "Training loss", [svg.Series("loss (mean over the interval)", loss, "s1")],
                                  svg.Axis("Iteration"), svg.Axis("Loss"), width=530, height=300))
        out.append(svg.line_chart(f"tokens-{n}", "Throughput", [svg.Series("tokens/s, all ranks", tps, "s2")],
                                  svg.Axis("Iteration"), svg.Axis("Tokens per second"), width=530, height=300))
        out.append("</div>")
    else:
        out.append('<p class="note no-history">No per-iteration history in this result (run-nanogpt writes it in '
                   "its metrics from hpq 0.1.0 on; the log it names has the same numbers): first and final loss "
                   "only.</p>")
    first, final = num(metrics.get("first_loss")), num(metrics.get("final_loss"))
    out.append(_facts([
        ("Model", f"{text(metrics.get('model'), 60)} ({(num(metrics.get('params')) or 0) / 1e6:.1f}M parameters)"
         if metrics.get("model") else ""),
        ("Loss", f"{first:.4f} \u2192 {final:.4f}" if first is not None and final is not None else "not reported"),
        ("Tokens/s (steady)", f"{num(metrics.get('tokens_per_s')):,.0f}" if num(metrics.get("tokens_per_s")) else
         "not reported"),
        ("Ranks", text(whole(metrics.get("world_size")))), ("Device", text(metrics.get("device"), 100)),
        ("Backend", text(metrics.get("backend"), 40)), ("Ranks agree", {True: "yes", False: "NO"}.get(metrics.get("ranks_agree"), "not reported")),
        ("Log", text(doc.get("log"), 400))]))
    return "\n".join(out)


# ----------------------------------------------------------------------------- environment

def _environment(item: Item) -> str:
    env = item.environment_check
    launch_env = mapping(item.doc.get("environment"))
    if env is None and not launch_env:
        return ('<h3>Environment</h3><p class="note no-environment">Not recorded in this result (the ranks\' '
                "hpq-env blocks are judged in run-nccl-test's and run-nanogpt's result files).</p>")
    out = ["<h3>Environment</h3>"]
    if env is not None:
        effective = {text(h, 200): mapping(v) for h, v in list(mapping(env.get("effective")).items())[:256]}
        expected = {text(k, 200): text(v, 400) for k, v in list(mapping(env.get("expected")).items())[:200]}
        ok = env.get("ok")
        state = ("matches the worker type's" if ok is True else "differs from the worker type's" if ok is False
                 else "not judged (the log had no hpq-env block)")
        out.append(f'<p class="env-state">The ranks\' transport environment {esc(state)}.</p>')
        problems = [text(p, 600) for p in items_of(env.get("problems"), 50)]
        if problems:
            out.append('<ul class="problems">' + "".join(f'<li class="problem">{esc(p)}</li>' for p in problems)
                       + "</ul>")
        keys = sorted(set(expected) | {text(k, 200) for v in effective.values() for k in v})[:200]
        if effective and keys:
            hosts = list(effective)
            out.append('<table class="environment"><tr><th>Variable</th><th>Expected</th>' +
                       "".join(f'<th class="host">{esc(h)}</th>' for h in hosts) + "</tr>")
            for k in keys:
                cells = []
                for h in hosts:
                    v = effective[h].get(k)
                    shown = "(unset)" if v is None else text(v, 400)
                    differs = (k in expected and shown != expected[k]) or (k not in expected and v is not None)
                    cells.append(f'<td{" class=diff" if differs else ""}>{esc(shown)}</td>')
                out.append(f"<tr><td><code>{esc(k)}</code></td><td>{esc(expected.get(k, '(unset)'))}</td>"
                           + "".join(cells) + "</tr>")
            out.append("</table>")
        elif effective:
            out.append(f'<p class="note">hpq-env blocks from {esc(", ".join(effective))}: no transport variable set '
                       "(none expected).</p>")
    elif launch_env:
        out.append(f'<details class="launch-environment"><summary>The {len(launch_env)} variable(s) the launch gave '
                   "every rank (the ranks' own hpq-env blocks are not in this result)</summary>")
        out.append('<table class="environment"><tr><th>Variable</th><th>Value</th></tr>' + "".join(
            f"<tr><td><code>{esc(text(k, 200))}</code></td><td>{esc(text(v, 400))}</td></tr>"
            for k, v in sorted(launch_env.items())[:200]) + "</table></details>")
    return "\n".join(out)
