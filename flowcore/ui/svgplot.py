"""A small chart drawn on the server as SVG: lines, step lines, points and their names, two axes, a legend.

A page's first view draws it with its own markdown: no chart library reaches the browser. The Evolve page's score
curve as a Vega-Lite chart cost its first paint 0.68 s (1.92 s against 1.24 s without it, medians of 4 alternated
loads), History's two charts 0.28 s: Vega's 756 KB bundle compiled and run on the page's own
thread. What these charts need from a library is little: each point's values on hover (an SVG ``<title>``, the
browser's own tooltip), nothing clipped, readable axes. The charts a user opens later (lineage, sampling,
Pareto) stay Vega-Lite.

The page draws it as an HTML block of its markdown (``st.html`` keeps no SVG: its sanitiser allows HTML only).
So what is made here is the whole of what is trusted: a fixed set of elements and attributes, every number
formatted by this module, every text escaped (an edit's name can come from a model) and on one line, and the
drawing a :class:`Drawn` string, which ``pages/widgets.plot`` refuses to draw any other text as. The opening tag
stands on a line of its own and no line inside is blank, so markdown reads all of it as one raw HTML block: no
emphasis, math, directive or link is looked for in its texts. Each mark carries ``data-series``, ``data-x``,
``data-y`` (and ``data-label``): what the tests read back.

What a team member can store is drawn as stored or not at all: a point whose value is NaN or ±inf is left out
(no ``nan`` coordinate), an axis widens to hold every other value (a score of 150% is drawn at 150%, not clipped
out of the picture), and a drawing's size is bounded by its pixels, not by the rounds (``MARKS``) or a name's
length (``MAX_TEXT``).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any

COLOR = re.compile("#[0-9a-fA-F]{6}")
FONT = 'font-family="Source Sans Pro, sans-serif"'  # Streamlit's own face
CHAR_W = 0.56  # an average character's width per font pixel (a legend entry's width, estimated)
MARKS = 300  # a series with more points draws them as one path (``_dots``), without a hover text each


class Drawn(str):
    """SVG made by :func:`svg` (and nothing else): the only text a page draws as raw HTML."""


MAX_TEXT = 500  # a longer text is cut: no hover text needs more, and a 1 MB edit name was sent once per point
# what XML 1.0 has no place for (NUL and the other C0 controls, lone surrogates): each shown as U+FFFD
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def text(value: object) -> str:
    """``value`` escaped for SVG text or an attribute, on one line. ``:`` and ``$`` are written as character
    references: Streamlit's frontend runs over the whole markdown source, raw HTML included, before parsing it:
    it rewrites ``:material/`` to ``:material_`` (an edit named ``a :material/star:`` was shown otherwise) and
    loads KaTeX for a ``$…$`` anywhere (and the emoji plugin for a ``:word:``)."""
    s = " ".join(str(value).split())
    s = NOT_XML.sub("\ufffd", s[:MAX_TEXT - 1] + "…" if len(s) > MAX_TEXT else s)
    return escape(s, quote=True).replace(":", "&#58;").replace("$", "&#36;")


@dataclass
class Axis:
    title: str
    lo: float
    hi: float
    fmt: Callable[[float], str] = str
    integer: bool = False  # ticks on whole numbers only (rounds)
    ticks: Sequence[float] | None = None  # fixed ticks; else about ``count`` nice ones
    count: int = 6


@dataclass
class Series:
    name: str
    color: str
    xs: Sequence[float]
    ys: Sequence[float]
    line: str | None = "solid"  # "solid", "dashed", "step" (dashed, horizontal then vertical), or None
    shape: str | None = None  # "circle" or "cross" (a ✖) at each point, or None
    tips: Sequence[str] | None = None  # each point's hover text
    labels: Sequence[str] | None = None  # a name written above each point ("" for none)
    in_legend: bool = True
    compact: bool = False  # the points as one path, no hover text each (as every series of more than MARKS)


@dataclass
class Plot:
    title: str
    x: Axis
    y: Axis
    series: list[Series] = field(default_factory=list)
    width: int = 640
    height: int = 340


def nice_ticks(lo: float, hi: float, count: int = 6, integer: bool = False) -> list[float]:
    """About ``count`` round numbers in [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = hi / max(count, 2) - lo / max(count, 2)  # (hi - lo) / count without overflowing at ±1e308
    mag = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 0.0
    if not mag:  # a span of a few denormals: no round step of its own
        return [lo, hi]
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9)
    ticks = (round(i * step, 12) for i in range(first, math.floor(hi / step + 1e-9) + 1))
    return [t for t in ticks if lo <= t <= hi]


def num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _ticks(a: Axis) -> list[float]:
    """The axis's own ticks, or nice ones, keeping only those within its range."""
    chosen = a.ticks if a.ticks is not None else nice_ticks(a.lo, a.hi, a.count, a.integer)
    return [t for t in chosen if a.lo <= t <= a.hi]


def svg(p: Plot) -> Drawn:
    """``p`` as one ``<svg>`` element that scales down with its column (never up: its text stays its size)."""
    for s in p.series:
        if not COLOR.fullmatch(s.color):
            raise ValueError(f"series {s.name!r}: colour {s.color!r} is not #rrggbb")
    series = [_finite(s) for s in p.series]
    p = replace(p, series=series, x=_fit(p.x, [v for s in series for v in s.xs]),
                y=_fit(p.y, [v for s in series for v in s.ys]))
    left, right, top = 62, 16, 34
    legend = [s for s in p.series if s.in_legend]
    rows = _legend_rows(legend, p.width - left - right)
    bottom = 50 + 20 * max(1, len(rows))  # a legend row kept: charts side by side keep one plot height
    w, h = p.width - left - right, p.height - top - bottom
    # half spans: (v - lo) / (hi - lo) overflows when the axis runs from -1e308 to 1e308
    half_x, half_y = (p.x.hi / 2 - p.x.lo / 2) or 0.5, (p.y.hi / 2 - p.y.lo / 2) or 0.5

    def px(v: float) -> float:
        return left + (v / 2 - p.x.lo / 2) / half_x * w

    def py(v: float) -> float:
        return top + h - (v / 2 - p.y.lo / 2) / half_y * h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {p.width} {p.height}" width="100%" '
           f'style="max-width:{p.width}px;height:auto;display:block" role="img" aria-label="{text(p.title)}" '
           f'class="mf-plot" {FONT} font-size="12">',
           f'<text x="{left}" y="18" font-size="14" font-weight="600" fill="#31333f">{text(p.title)}</text>']
    for t in _ticks(p.y):
        y = num(py(t))
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y}" y2="{y}" stroke="#e6e9ef"/>'
                   f'<text class="mf-ytick" x="{left - 6}" y="{y}" dy="0.32em" text-anchor="end" '
                   f'fill="#555">{text(p.y.fmt(t))}</text>')
    for t in _ticks(p.x):
        x = num(px(t))
        out.append(f'<line x1="{x}" x2="{x}" y1="{top + h}" y2="{top + h + 4}" stroke="#888"/>'
                   f'<text class="mf-xtick" x="{x}" y="{top + h + 16}" text-anchor="middle" '
                   f'fill="#555">{text(p.x.fmt(t))}</text>')
    out.append(f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="#888"/>'
               f'<text x="{left + w / 2:.1f}" y="{top + h + 34}" text-anchor="middle" fill="#31333f">'
               f'{text(p.x.title)}</text>'
               f'<text transform="translate(14 {top + h / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="#31333f">{text(p.y.title)}</text>')
    # lines first, then points, then names: a point is never hidden by a line, a name never by a point
    for s in p.series:
        if s.line and len(s.xs):
            out.append(_line(s, px, py, w))
    for s in p.series:
        if s.shape and (s.compact or len(s.xs) > MARKS):
            out.append(_dots(s, px, py))
        elif s.shape:
            out += [_point(s, i, px(x), py(y)) for i, (x, y) in enumerate(zip(s.xs, s.ys, strict=True))]
    for s in p.series:
        for x, y, name in zip(s.xs, s.ys, s.labels or (), strict=False):
            if name:
                out.append(f'<text class="mf-name" data-series="{text(s.name)}" data-label="{text(name)}" '
                           f'x="{num(px(x))}" y="{num(py(y) - 9)}" text-anchor="middle" fill="#31333f">'
                           f'{text(name)}</text>')
    y0 = top + h + 52
    for r, row in enumerate(rows):
        x = left
        for s, width in row:
            yy = y0 + 20 * r
            out.append(f'<g class="mf-legend" data-series="{text(s.name)}">{_swatch(s, x, yy)}'
                       f'<text x="{x + 26}" y="{yy}" dy="0.32em" fill="#31333f">{text(s.name)}</text></g>')
            x += width
    out.append("</svg>")
    return Drawn("\n".join(out))  # the opening tag alone on its first line: a raw HTML block to markdown


def _finite(s: Series) -> Series:
    """``s`` with its values as floats (text that is no number raises), without the points that have no place
    on a chart (NaN, ±inf: a coordinate ``nan`` breaks the drawing), their hover texts and names with them."""
    xs, ys = [float(v) for v in s.xs], [float(v) for v in s.ys]
    if len(xs) != len(ys):
        raise ValueError(f"series {s.name!r}: {len(xs)} x values, {len(ys)} y values")
    keep = [i for i, (x, y) in enumerate(zip(xs, ys)) if math.isfinite(x) and math.isfinite(y)]

    def pick(seq: Sequence[Any] | None) -> list[Any] | None:
        return None if seq is None else [seq[i] for i in keep if i < len(seq)]

    return replace(s, xs=[xs[i] for i in keep], ys=[ys[i] for i in keep], tips=pick(s.tips), labels=pick(s.labels))


def _fit(a: Axis, values: list[float]) -> Axis:
    """``a`` widened to hold every value, with ticks of its own then: a stored score of 150% or -40%, a negative
    cost or a round numbered -3 is drawn where it is, on the axis, never clipped away outside the picture."""
    lo, hi = (a.lo, a.hi) if math.isfinite(a.lo) and math.isfinite(a.hi) else (math.inf, -math.inf)
    if not values or min(values) >= lo and max(values) <= hi:
        return a if lo <= hi else replace(a, lo=0.0, hi=1.0, ticks=None)
    lo, hi = min(lo, *values), max(hi, *values)
    pad = (hi / 2 - lo / 2) / 10  # a twentieth of the span each side: a mark at the edge is drawn whole
    return replace(a, lo=max(lo - pad, -sys.float_info.max), hi=min(hi + pad, sys.float_info.max), ticks=None)


def _legend_rows(series: list[Series], room: float) -> list[list[tuple[Series, float]]]:
    rows: list[list[tuple[Series, float]]] = [[]]
    used = 0.0
    for s in series:
        width = 26 + len(s.name) * 12 * CHAR_W + 18
        if rows[-1] and used + width > room:
            rows.append([])
            used = 0.0
        rows[-1].append((s, width))
        used += width
    return rows if rows[0] else []


def _thin(pts: list[tuple[float, float]], width: float) -> list[tuple[float, float]]:
    """A line of more than 4 corners a pixel column (100,000 rounds were a 1.1 MB polyline) keeps, of each run of
    corners in one column, the first, the lowest, the highest and the last: the same line at the picture's
    resolution, whatever the number of rounds."""
    if len(pts) <= 4 * width:
        return pts
    out: list[tuple[float, float]] = []
    i = 0
    while i < len(pts):
        j, col = i, round(pts[i][0])
        while j < len(pts) and round(pts[j][0]) == col:
            j += 1
        run = range(i, j)
        keep = {i, min(run, key=lambda k: pts[k][1]), max(run, key=lambda k: pts[k][1]), j - 1}
        out += [pts[k] for k in sorted(keep)]
        i = j
    return out


def _dash(s: Series) -> str:
    return ' stroke-dasharray="6 4"' if s.line in ("dashed", "step") else ""


def _line(s: Series, px: Callable[[float], float], py: Callable[[float], float], width: float) -> str:
    pts: list[tuple[float, float]] = []
    for x, y in zip(s.xs, s.ys, strict=True):
        if s.line == "step" and pts:
            pts.append((px(x), pts[-1][1]))
        pts.append((px(x), py(y)))
    coords = " ".join(f"{num(a)},{num(b)}" for a, b in _thin(pts, width))
    return (f'<polyline class="mf-line" data-series="{text(s.name)}" points="{coords}" fill="none" '
            f'stroke="{s.color}" stroke-width="2"{_dash(s)}/>')


def _dots(s: Series, px: Callable[[float], float], py: Callable[[float], float]) -> str:
    """A ``compact`` series, or one of more than ``MARKS`` points, as one path: a dot or ✖ on each 2-pixel spot it
    covers (at most 1 px off, under a 7 px mark), without a hover text each. 10,000 failed rounds drawn one ``<g>``
    each were 3.2 MB; a spot drawn once, a drawing is bounded by its pixels, not by the rounds."""
    spots = dict.fromkeys((2 * round(px(x) / 2), 2 * round(py(y) / 2)) for x, y in zip(s.xs, s.ys, strict=True))
    if s.shape == "cross":
        d = "".join(f"M{x - 5},{y - 5}l10,10m-10,0l10,-10" for x, y in spots)
        paint = 'fill="none" stroke-width="2.5"'
    else:
        d = "".join(f"M{x},{y}h0" for x, y in spots)  # a round cap on a line of no length: a dot
        paint = 'stroke-width="7" stroke-linecap="round" opacity="0.8"'
    return f'<path class="mf-dots" data-series="{text(s.name)}" d="{d}" stroke="{s.color}" {paint}/>'


def _point(s: Series, i: int, x: float, y: float) -> str:
    tip = f"<title>{text(s.tips[i])}</title>" if s.tips else ""
    data = f'class="mf-point" data-series="{text(s.name)}" data-x="{float(s.xs[i])!r}" data-y="{float(s.ys[i])!r}"'
    if s.shape == "cross":
        d = f"M{num(x - 5)},{num(y - 5)}L{num(x + 5)},{num(y + 5)}M{num(x - 5)},{num(y + 5)}L{num(x + 5)},{num(y - 5)}"
        return f'<g {data}><path d="{d}" stroke="{s.color}" stroke-width="2.5"/>' \
               f'<circle cx="{num(x)}" cy="{num(y)}" r="7" fill="transparent"/>{tip}</g>'
    return f'<g {data}><circle cx="{num(x)}" cy="{num(y)}" r="4.5" fill="{s.color}"/>{tip}</g>'


def _swatch(s: Series, x: float, y: float) -> str:
    if s.shape == "cross":
        return f'<path d="M{x + 6},{y - 5}L{x + 16},{y + 5}M{x + 6},{y + 5}L{x + 16},{y - 5}" ' \
               f'stroke="{s.color}" stroke-width="2.5"/>'
    line = f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{s.color}" stroke-width="2"{_dash(s)}/>' \
        if s.line else ""
    dot = f'<circle cx="{x + 11}" cy="{y}" r="4.5" fill="{s.color}"/>' if s.shape == "circle" else ""
    return line + dot
