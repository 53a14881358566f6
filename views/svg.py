"""Charts as plain SVG text: a line chart (linear or log-2 x axis, horizontal reference lines) and a heat map.

Why our own: the report must open offline from one file, with no script and no font or CDN fetch, and the
charts are simple. Every string that reaches the SVG goes through :func:`esc` (text and attribute values
alike), so a node name or a label taken from a result file cannot add markup. Elements carry classes and
``data-`` attributes (``class="expected"``, ``data-node``...) that the page's CSS colours and that tests read
back from the DOM a browser built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

MAX_POINTS = 5000  # per series; the loader bounds its input well below this, a chart never grows past it


def esc(value: object) -> str:
    """Text safe in element content and in double-quoted attribute values."""
    return escape(str(value), quote=True)


def fmt_number(value: float) -> str:
    """A tick label: at most three significant digits, thousands as k/M (tokens/s reach millions)."""
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.3g}M"
    if a >= 1e4:
        return f"{value / 1e3:.3g}k"
    if a >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3g}"


def fmt_bytes(value: float) -> str:
    """A message size as nccl-tests users read it: 8 B, 64 KiB, 256 MiB, 16 GiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


@dataclass
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    css: str = "s0"  # colour class (.s0 .. .s3 in the page's CSS)


@dataclass
class HLine:
    """A horizontal reference line: the expected figure, a pass threshold."""

    y: float
    label: str
    css: str = "expected"


@dataclass
class Axis:
    label: str
    log2: bool = False
    fmt: Callable[[float], str] = fmt_number


def finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(t, 12))
        t += step
    return ticks


def log2_ticks(lo: float, hi: float, count: int = 10) -> list[float]:
    """Powers of two in [lo, hi], every 1, 2, 5 or 10 exponents (multiples of the step: 1 KiB, 1 MiB, 1 GiB
    appear whenever the step is 10)."""
    e0, e1 = math.ceil(math.log2(lo) - 1e-9), math.floor(math.log2(hi) + 1e-9)
    step = next((s for s in (1, 2, 5, 10, 20) if (e1 - e0) / s <= count), 50)
    return [2.0 ** e for e in range(e0, e1 + 1) if e % step == 0]


@dataclass
class _Frame:
    width: int
    height: int
    left: int = 72
    right: int = 24
    top: int = 44
    bottom: int = 52
    x_lo: float = 0.0
    x_hi: float = 1.0
    y_lo: float = 0.0
    y_hi: float = 1.0
    log2: bool = False

    def x(self, v: float) -> float:
        lo, hi, v = (math.log2(self.x_lo), math.log2(self.x_hi), math.log2(v)) if self.log2 else (self.x_lo,
                                                                                                 self.x_hi, v)
        span = (hi - lo) or 1.0
        return self.left + (v - lo) / span * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        span = (self.y_hi - self.y_lo) or 1.0
        return self.height - self.bottom - (v - self.y_lo) / span * (self.height - self.top - self.bottom)


def line_chart(chart_id: str, title: str, series: Sequence[Series], x_axis: Axis, y_axis: Axis,
               hlines: Sequence[HLine] = (), width: int = 760, height: int = 340) -> str:
    """An SVG line chart; points with a non-finite coordinate (or x <= 0 on a log axis) are left out."""
    clean = []
    for s in series:
        pts = [(float(x), float(y)) for x, y in list(s.points)[:MAX_POINTS]
               if finite(x) and finite(y) and (x > 0 or not x_axis.log2)]
        clean.append(Series(s.name, sorted(pts), s.css))
    refs = [h for h in hlines if finite(h.y)]
    xs = [p[0] for s in clean for p in s.points]
    ys = [p[1] for s in clean for p in s.points] + [h.y for h in refs]
    f = _Frame(width, height, log2=x_axis.log2)
    if xs:
        f.x_lo, f.x_hi = min(xs), max(xs)
    elif x_axis.log2:
        f.x_lo, f.x_hi = 1.0, 2.0
    if f.x_lo == f.x_hi:
        f.x_lo, f.x_hi = (f.x_lo / 2, f.x_hi * 2) if x_axis.log2 else (f.x_lo - 1, f.x_hi + 1)
    y_lo = min([0.0] + ys)
    y_hi = max(ys) * 1.08 if ys and max(ys) > 0 else 1.0
    y_ticks = nice_ticks(y_lo, y_hi)
    f.y_lo, f.y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])
    x_ticks = log2_ticks(f.x_lo, f.x_hi) if x_axis.log2 else nice_ticks(f.x_lo, f.x_hi, 6)
    x_ticks = [t for t in x_ticks if f.x_lo * (1 - 1e-9) <= t <= f.x_hi * (1 + 1e-9) or not x_axis.log2
               and f.x_lo - 1e-9 <= t <= f.x_hi + 1e-9]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{esc(chart_id)}" data-chart="{esc(chart_id)}" '
           f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{esc(title)}">', f'<title>{esc(title)}</title>',
           f'<text class="chart-title" x="{f.left}" y="18">{esc(title)}</text>']
    plot_bottom, plot_right = height - f.bottom, width - f.right
    out.append(f'<rect class="plot" x="{f.left}" y="{f.top}" width="{plot_right - f.left}" '
               f'height="{plot_bottom - f.top}"/>')
    for t in y_ticks:
        yy = f.y(t)
        out.append(f'<line class="grid" x1="{f.left}" x2="{plot_right}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
        out.append(f'<text class="tick y" x="{f.left - 6}" y="{yy + 4:.1f}" text-anchor="end">{esc(y_axis.fmt(t))}</text>')
    for t in x_ticks:
        xx = f.x(t)
        out.append(f'<line class="grid" x1="{xx:.1f}" x2="{xx:.1f}" y1="{f.top}" y2="{plot_bottom}"/>')
        out.append(f'<text class="tick x" x="{xx:.1f}" y="{plot_bottom + 16}" text-anchor="middle">'
                   f'{esc(x_axis.fmt(t))}</text>')
    out.append(f'<text class="axis-label x" x="{(f.left + plot_right) / 2:.0f}" y="{height - 10}" '
               f'text-anchor="middle">{esc(x_axis.label)}</text>')
    out.append(f'<text class="axis-label y" transform="translate(16 {(f.top + plot_bottom) / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{esc(y_axis.label)}</text>')
    for h in refs:
        yy = f.y(h.y)
        out.append(f'<g class="ref {esc(h.css)}" data-value="{h.y:g}"><line class="{esc(h.css)}" x1="{f.left}" '
                   f'x2="{plot_right}" y1="{yy:.1f}" y2="{yy:.1f}"/><text class="ref-label" x="{f.left + 6}" '
                   f'y="{yy - 5:.1f}">{esc(h.label)}</text></g>')
    for s in clean:
        if not s.points:
            continue
        coords = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in s.points)
        out.append(f'<g class="series {esc(s.css)}" data-series="{esc(s.name)}" data-points="{len(s.points)}">'
                   f'<polyline class="line" points="{coords}"/>')
        if len(s.points) <= 200:
            for x, y in s.points:
                out.append(f'<circle class="point" cx="{f.x(x):.1f}" cy="{f.y(y):.1f}" r="2.5"><title>'
                           f'{esc(x_axis.fmt(x))}: {esc(y_axis.fmt(y))}</title></circle>')
        out.append("</g>")
    legend_x = f.left
    for s in clean:  # reference lines are labelled where they are drawn
        if s.points:
            out.append(f'<g class="legend-item"><line class="{esc(s.css)} legend-line" x1="{legend_x}" '
                       f'x2="{legend_x + 18}" y1="32" y2="32"/><text class="legend" x="{legend_x + 22}" y="36">'
                       f'{esc(s.name)}</text></g>')
            legend_x += 30 + 7 * min(len(s.name), 60)
    if not xs:
        out.append(f'<text class="empty" x="{(f.left + plot_right) / 2:.0f}" y="{(f.top + plot_bottom) / 2:.0f}" '
                   f'text-anchor="middle">no data points</text>')
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class Cell:
    """One pair of the heat map: its value (None: nothing measured) and its status word."""

    value: float | None
    status: str = "ok"
    note: str = ""


@dataclass
class HeatMap:
    names: Sequence[str]
    cells: Mapping[tuple[str, str], Cell]  # keyed both ways round is not needed: (a, b) or (b, a) is found
    marked: Iterable[str] = field(default_factory=tuple)
    unit: str = "GB/s"


def _cell_colour(frac: float) -> str:
    """Low bandwidth red, high green (through amber), as people read health."""
    frac = min(1.0, max(0.0, frac))
    hue = 120 * frac
    return f"hsl({hue:.0f}, 70%, {62 - 12 * frac:.0f}%)"


def heat_map(chart_id: str, title: str, hm: HeatMap, max_label: int = 28) -> str:
    """Node-by-node matrix: cell (row, column) is the pair's bus bandwidth; a marked node's row and column are
    outlined and its label says SLOW."""
    names = list(hm.names)
    n = len(names)
    marked = set(hm.marked)
    label_w = 12 + 7 * min(max_label, max((len(x) for x in names), default=4)) + (48 if marked else 0)
    cell = max(14, min(56, 640 // max(1, n)))
    top = 40 + label_w // 2
    width, height = max(label_w + n * cell + 40, label_w + 600), top + n * cell + 60

    def lookup(a: str, b: str) -> Cell | None:
        return hm.cells.get((a, b)) or hm.cells.get((b, a))

    values = [c.value for c in hm.cells.values() if c.value is not None and finite(c.value)]
    vmax = max(values) if values else 1.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart heatmap" id="{esc(chart_id)}" '
           f'data-chart="{esc(chart_id)}" data-nodes="{n}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{esc(title)}">', f'<title>{esc(title)}</title>',
           f'<text class="chart-title" x="4" y="18">{esc(title)}</text>']

    def short(name: str) -> str:
        return name if len(name) <= max_label else name[: max_label - 1] + "\u2026"

    for i, name in enumerate(names):
        slow = name in marked
        cls = "node-label slow" if slow else "node-label"
        mark = " \u25b2 SLOW" if slow else ""
        y = top + i * cell + cell / 2 + 4
        out.append(f'<text class="{cls} row" data-node="{esc(name)}" x="{label_w - 6}" y="{y:.1f}" '
                   f'text-anchor="end">{esc(short(name))}{mark}<title>{esc(name)}</title></text>')
        x = label_w + i * cell + cell / 2
        out.append(f'<text class="{cls} col" data-node="{esc(name)}" transform="translate({x:.1f} {top - 6}) '
                   f'rotate(-45)">{esc(short(name))}<title>{esc(name)}</title></text>')
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            x, y = label_w + j * cell, top + i * cell
            if i == j:
                out.append(f'<rect class="cell self" x="{x}" y="{y}" width="{cell}" height="{cell}"/>')
                continue
            c = lookup(a, b)
            if c is None:
                out.append(f'<rect class="cell none" data-a="{esc(a)}" data-b="{esc(b)}" x="{x}" y="{y}" '
                           f'width="{cell}" height="{cell}"><title>{esc(a)} + {esc(b)}: not paired</title></rect>')
                continue
            if c.status == "ok" and c.value is not None and finite(c.value):
                fill, text = _cell_colour(c.value / vmax if vmax > 0 else 0.0), fmt_number(c.value)
                tip = f"{a} + {b}: {c.value:.2f} {hm.unit}"
            else:
                fill, text = "#7a1f1f", "\u00d7"
                tip = f"{a} + {b}: {c.status}" + (f" ({c.note})" if c.note else "")
            out.append(f'<rect class="cell {esc(c.status)}" data-a="{esc(a)}" data-b="{esc(b)}" '
                       f'data-value="{"" if c.value is None else f"{c.value:g}"}" x="{x}" y="{y}" width="{cell}" '
                       f'height="{cell}" style="fill:{fill}"><title>{esc(tip)}</title></rect>')
            if cell >= 30:
                out.append(f'<text class="cell-value" x="{x + cell / 2:.1f}" y="{y + cell / 2 + 4:.1f}" '
                           f'text-anchor="middle">{esc(text)}</text>')
    for i, name in enumerate(names):
        if name in marked:
            out.append(f'<g class="slow-node" data-node="{esc(name)}">'
                       f'<rect class="slow-outline" x="{label_w}" y="{top + i * cell}" width="{n * cell}" '
                       f'height="{cell}"/><rect class="slow-outline" x="{label_w + i * cell}" y="{top}" '
                       f'width="{cell}" height="{n * cell}"/></g>')
    ly = top + n * cell + 18
    for k in range(6):
        frac = k / 5
        out.append(f'<rect class="scale" x="{label_w + k * 40}" y="{ly}" width="40" height="10" '
                   f'style="fill:{_cell_colour(frac)}"/>')
    out.append(f'<text class="tick" x="{label_w}" y="{ly + 24}">0</text><text class="tick" x="{label_w + 240}" '
               f'y="{ly + 24}" text-anchor="end">{esc(fmt_number(vmax))} {esc(hm.unit)}</text>'
               f'<text class="tick" x="{label_w + 252}" y="{ly + 9}">pair bus bandwidth; \u00d7 failed, hung or '
               f'wrong data</text>')
    out.append("</svg>")
    return "\n".join(out)
