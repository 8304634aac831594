"""The charts drawn on the server (flowcore/ui/svgplot.py): well-formed SVG made of a fixed set of elements, every
outside text escaped and kept on one line, the opening tag alone on its line so markdown reads the whole drawing
as one raw HTML block, and nothing but svgplot's output drawn as raw HTML by the page."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from flowcore.ui import svgplot
from flowcore.ui.history import curve_frame, score_figure
from flowcore.ui.words import edit_name
from tests.helpers.plots import NS, read

HOSTILE = ("</title></g><script>alert(1)</script><img src=http://evil.example/x.png>\n\n"
           "**bold** $x^2$ :red[red] :smile: [link](http://evil.example) &lt;b&gt; \"q' <foreignObject>")
TAGS = {"svg", "text", "line", "polyline", "g", "circle", "path", "title"}


def _hostile_curve() -> pd.DataFrame:
    ops = [HOSTILE, "insert:" + HOSTILE, "prompt", HOSTILE]
    return curve_frame(pd.DataFrame({"round": range(4), "status": ["ok", "ok", "failed", "ok"], "operator": ops,
                                     "score": [0.5, 0.75, None, 1.0], "judge_total": [None] * 4,
                                     "cost": [0.01] * 4}))


def test_an_edit_name_from_a_model_is_text_in_a_tooltip_and_nothing_else():
    drawn = score_figure(_hostile_curve(), offline=False)
    root = ET.fromstring(drawn)  # well-formed: no tag was closed or opened by the text
    assert {e.tag.removeprefix(NS) for e in root.iter()} <= TAGS  # no script, img or foreignObject element
    attrs = {a for e in root.iter() for a in e.attrib}
    assert not any(a.lower().startswith("on") or a in ("href", "src") for a in attrs)  # no handler, no link
    tips = read(drawn).tips["score per round"]
    assert tips[0] == f"round 0 · score 50.0% · {' '.join(edit_name(HOSTILE).split())}"  # as written, one line
    assert "<script" not in drawn and "<img" not in drawn and "<foreignObject" not in drawn


def test_markdown_reads_the_drawing_as_one_raw_block():
    drawn = score_figure(_hostile_curve(), offline=False)
    first, *rest = drawn.split("\n")
    assert first.startswith("<svg ") and first.endswith(">") and first.count("<") == 1  # the open tag alone
    assert all(line.strip() for line in rest) and rest[-1] == "</svg>"  # no blank line ends the block early
    assert "\n\n" not in drawn


def test_the_page_draws_only_svgplot_output_as_html():
    from pages import widgets

    with pytest.raises(TypeError):
        widgets.plot("<svg><script>alert(1)</script></svg>")  # a plain string is refused
    with pytest.raises(ValueError, match="colour"):
        svgplot.svg(svgplot.Plot("t", svgplot.Axis("x", 0, 1), svgplot.Axis("y", 0, 1),
                                 [svgplot.Series("s", 'red" onload="x', [0], [0])]))
    with pytest.raises((TypeError, ValueError)):  # a point is a number, never text
        svgplot.svg(svgplot.Plot("t", svgplot.Axis("x", 0, 1), svgplot.Axis("y", 0, 1),
                                 [svgplot.Series("s", "#000000", ['1" onmouseover="x'], [0], shape="circle")]))


def test_nice_ticks_are_round_evenly_spaced_and_inside_the_range():
    rng = random.Random(3)
    for _ in range(300):
        lo = rng.uniform(-1e4, 1e4) * 10 ** rng.randint(-6, 0)
        hi = lo + rng.uniform(1e-6, 1e4) * 10 ** rng.randint(-4, 0)
        integer = rng.random() < 0.3
        ticks = svgplot.nice_ticks(lo, hi, 6, integer)
        assert all(lo - 1e-9 <= t <= hi + 1e-9 for t in ticks), (lo, hi, ticks)
        if integer:
            assert all(t == int(t) for t in ticks)
        if len(ticks) > 2:
            steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
            assert max(steps) - min(steps) <= 1e-6 * max(steps)
        assert len(ticks) <= 13 and (len(ticks) >= 2 or integer and hi - lo < 2)
    assert svgplot.nice_ticks(0, 100, 5) == [0, 20, 40, 60, 80, 100]
    assert svgplot.nice_ticks(5, 5) == [5] and svgplot.nice_ticks(float("nan"), 1) == []
