"""Attacks on the charts drawn on the server (flowcore/ui/svgplot.py, drawn by pages/widgets.plot as a raw HTML
block of markdown), from what reaches them: an edit's name (a model's or a team member's words) and the numbers
a team member with the shared workspace can store (NaN, ±inf, huge, negative, tiny; rounds numbered anything).

A drawing must stay one raw HTML block of svgplot's own elements, never hold a coordinate that is not a number,
draw every point where its stored value says (inside the picture, on the axis its ticks label), stay small
whatever the number of rounds or the length of a name, and never raise."""

from __future__ import annotations

import bisect
import copy
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from flowcore.evolution import session as evs
from flowcore.ui import svgplot
from flowcore.ui.history import FAILED, RunView, cost_figure, curve_frame, score_figure
from flowcore.ui.words import edit_name
from tests.helpers.plots import NS, read

INF, NAN = float("inf"), float("nan")
GEOMETRY = ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "points", "d", "transform", "data-x", "data-y")


def _curve(scores, costs, *, rounds=None, status=None, judge=None, ops=None) -> pd.DataFrame:
    n = len(scores)
    return curve_frame(pd.DataFrame({"round": rounds or list(range(n)), "status": status or ["ok"] * n,
                                     "operator": ops or ["x"] * n, "score": scores,
                                     "judge_total": judge or [None] * n, "cost": costs}))


def _view_curve(scores, costs, judge=None) -> pd.DataFrame:
    """History's own path: the columns as the workspace returns them, through RunView."""
    n = len(scores)
    cols = {"round": list(range(n)), "status": ["ok"] * n, "operator": ["x"] * n, "score": scores, "cost": costs,
            "judge_total": judge or [None] * n, "parents": [[]] * n, "pinned": [False] * n}
    return RunView(None, None, cols).curve


def _evolve_curve(scores, costs) -> pd.DataFrame:
    """Evolve's path: session.curve_frame over the stored rounds."""
    return evs.curve_frame([{"round": i, "status": "ok", "operator": "x", "score": s, "cost": c, "candidates": [],
                             "chosen": None} for i, (s, c) in enumerate(zip(scores, costs, strict=True))])


def _geometry_is_numbers(drawn: str) -> None:
    root = ET.fromstring(drawn)
    for e in root.iter():
        for a in GEOMETRY:
            v = e.get(a)
            assert v is None or not re.search("nan|inf", v, re.I), (e.tag, a, v)


def _ticks(p, axis: str) -> list[tuple[float, float]]:
    """(value, pixel) of each labelled tick of ``axis`` ("x" or "y")."""
    out = []
    for t in p.root.iter(f"{NS}text"):
        if t.get("class") == f"mf-{axis}tick":
            out.append((float(t.text.strip("$%").replace(",", "")), float(t.get(axis))))
    return out


def _on_the_axes(drawn: str) -> None:
    """Every point inside the picture and where the axes' own tick labels put its stored value (within 1 px)."""
    p = read(drawn)
    _, _, width, height = map(float, p.root.get("viewBox").split())
    maps = {}
    for axis in ("x", "y"):
        ticks = _ticks(p, axis)
        assert len(ticks) >= 2, (axis, ticks)
        (v0, p0), (v1, p1) = ticks[0], ticks[-1]
        maps[axis] = lambda v, v0=v0, p0=p0, v1=v1, p1=p1: p0 + (v / 2 - v0 / 2) / (v1 / 2 - v0 / 2) * (p1 - p0)
    for g in p.root.iter(f"{NS}g"):
        if g.get("class") != "mf-point":
            continue
        mark = g.find(f"{NS}circle")
        cx, cy = float(mark.get("cx")), float(mark.get("cy"))
        assert 0 <= cx <= width and 0 <= cy <= height, (g.get("data-x"), g.get("data-y"), cx, cy)
        assert abs(maps["x"](float(g.get("data-x"))) - cx) <= 1, (g.get("data-x"), cx)
        assert abs(maps["y"](float(g.get("data-y"))) - cy) <= 1, (g.get("data-y"), cy)


# -- numbers a team member can store ------------------------------------------------------------------------------

BAD_SCORES = [[0.5, INF, 0.7, NAN], [NAN, 0.5, -INF, 0.7], [0.5, 1e306, 0.7, 0.6], [0.5, 1e307, 0.7, 0.6]]


@pytest.mark.parametrize("make", [_curve, _view_curve, _evolve_curve], ids=["curve_frame", "RunView", "Evolve"])
@pytest.mark.parametrize("scores", BAD_SCORES, ids=["inf", "-inf", "1e306", "1e307"])
def test_a_nan_or_infinite_score_is_not_measured_and_never_a_coordinate(make, scores):
    curve = make(scores, [0.1, 0.2, 0.3, 0.4])
    for drawn in (score_figure(curve, offline=False), cost_figure(curve)):
        _geometry_is_numbers(drawn)
        _on_the_axes(drawn)
    fig = read(score_figure(curve, offline=False))
    finite = [(r, 100 * s) for r, s in enumerate(scores) if math.isfinite(100 * s)]
    assert fig.points["score per round"] == finite  # a NaN or ±inf score is not a measurement: not drawn
    assert all("nan" not in t and "inf" not in t for t in fig.tips["score per round"])


@pytest.mark.parametrize("make", [_curve, _view_curve, _evolve_curve], ids=["curve_frame", "RunView", "Evolve"])
def test_best_so_far_is_the_running_best_of_the_measured_scores_only(make):
    fig = read(score_figure(make([NAN, 0.5, INF, 0.7], [0.1] * 4), offline=False))
    ys = [y for _, y in fig.lines["best so far"]]
    score_ys = dict(zip([x for x, _ in fig.points["score per round"]],
                        [y for _, y in fig.lines["score per round"]], strict=True))
    assert ys[0] == score_ys[1] and ys[-1] == score_ys[3]  # 50% from round 1, then 70%: no NaN or inf step


@pytest.mark.parametrize("make", [_curve, _view_curve], ids=["curve_frame", "RunView"])
@pytest.mark.parametrize("cost", [NAN, INF, -INF])
def test_a_round_whose_cost_is_not_a_number_is_left_off_the_cost_chart_alone(make, cost):
    drawn = cost_figure(make([0.5, 0.6, 0.7], [0.1, cost, 0.3]))
    _geometry_is_numbers(drawn)
    _on_the_axes(drawn)
    assert read(drawn).points["rounds"] == [(0.1, 50.0), (0.3, 70.0)]


@pytest.mark.parametrize("judge", [INF, -INF, NAN, 1e308])
def test_a_judge_total_that_is_not_a_number_is_not_drawn(judge):
    curve = _curve([None] * 3, [0.0] * 3, judge=[10, judge, 20], status=["structure-only"] * 3)
    drawn = score_figure(curve, offline=True)
    _geometry_is_numbers(drawn)
    _on_the_axes(drawn)
    want = [(0, 10.0), (2, 20.0)] + ([(1, judge)] if math.isfinite(judge) else [])
    assert sorted(read(drawn).points["judge total (structure only)"]) == sorted(want)


@pytest.mark.parametrize(("scores", "costs", "rounds"), [
    ([0.5, -0.4, 0.7], [0.1, 0.2, 0.3], None),  # a score of -40%: below the axis
    ([0.5, 1.5, 0.7], [0.1, 0.2, 0.3], None),  # 150%: above it
    ([0.5, 0.6, 0.7], [0.1, -5.0, 0.3], None),  # a negative cost: left of the cost axis
    ([0.5, 0.6, 0.7], [0.1, 0.2, 0.3], [-30, -20, -10]),  # rounds numbered below zero
    ([0.5, 0.6, 0.7], [0.1, 0.2, 0.3], [0, 2 ** 62, 2 ** 63 - 1]),  # the largest rounds PostgreSQL stores
    ([-1e306, 1e306, 0.7], [-1e308, 1e308, 0.3], None),  # values whose span overflows a float
])
def test_every_point_is_drawn_where_its_stored_value_is_never_outside_the_picture(scores, costs, rounds):
    curve = _curve(scores, costs, rounds=rounds)
    for drawn in (score_figure(curve, offline=False), cost_figure(curve)):
        _geometry_is_numbers(drawn)
        _on_the_axes(drawn)


@pytest.mark.parametrize("costs", [[0.0, 2e-323, 0.0], [5e-324] * 3, [0.0, 1e-322, 5e-324]])
def test_denormal_costs_draw_instead_of_raising(costs):
    drawn = cost_figure(_curve([0.5, 0.6, 0.7], costs))  # StopIteration inside nice_ticks before
    _geometry_is_numbers(drawn)
    assert len(read(drawn).points["rounds"]) == 3


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 5e-324), (0.0, 2.5e-323), (-1e308, 1e308), (-1.7e308, 1.7e308),
                                        (1e300, 1e300 * (1 + 1e-15))])
def test_nice_ticks_of_extreme_ranges_are_numbers_inside_the_range(lo, hi):
    for integer in (False, True):
        ticks = svgplot.nice_ticks(lo, hi, 6, integer)
        assert len(ticks) <= 13 and all(math.isfinite(t) and lo <= t <= hi for t in ticks), (lo, hi, ticks)


def test_svgplot_itself_draws_no_point_that_has_no_place():
    p = svgplot.Plot("t", svgplot.Axis("x", 0, 10), svgplot.Axis("y", 0, 10), [
        svgplot.Series("s", "#000000", [1, INF, 3, 4, NAN], [1, 2, NAN, -INF, 5], shape="circle", line="solid",
                       tips=["a", "b", "c", "d", "e"], labels=["A", "B", "C", "D", "E"])])
    drawn = svgplot.svg(p)
    _geometry_is_numbers(drawn)
    fig = read(drawn)
    assert fig.points["s"] == [(1.0, 1.0)] and fig.tips["s"] == ["a"] and fig.names["s"] == ["A"]
    assert len(fig.lines["s"]) == 1


# -- many rounds, long names: a drawing's size ----------------------------------------------------------------------

def _spots(drawn: str, series: str) -> list[tuple[float, float]]:
    """The marks of a dense series, drawn as one path: where each one starts."""
    root = ET.fromstring(drawn)
    (path,) = [e for e in root.iter(f"{NS}path") if e.get("class") == "mf-dots" and e.get("data-series") == series]
    return [tuple(map(float, m)) for m in re.findall(r"M(-?[\d.]+),(-?[\d.]+)", path.get("d"))]


def test_ten_thousand_failed_rounds_draw_a_small_score_chart_with_every_one_marked():
    n = 10_000
    curve = _curve([0.5] + [None] * (n - 1), [0.01] * n, status=["ok"] + ["failed"] * (n - 1))
    drawn = score_figure(curve, offline=False)
    assert len(drawn) < 150_000, len(drawn)  # 3.2 MB before: a <g> with a ✖ and a hover text per round
    (v0, p0), *_, (v1, p1) = _ticks(read(drawn), "x")
    marks = sorted({x + 5 for x, _ in _spots(drawn, FAILED)})  # each ✖'s centre
    assert len(marks) <= 640  # one per pixel at most
    for r in range(1, n):  # a ✖ on every failed round's pixel
        at = p0 + (r - v0) / (v1 - v0) * (p1 - p0)
        i = bisect.bisect_left(marks, at)
        assert min(abs(m - at) for m in marks[max(0, i - 1):i + 1]) <= 1.1, r  # a 2-pixel grid
    _geometry_is_numbers(drawn)


def test_ten_thousand_measured_rounds_draw_a_small_cost_chart():
    n = 10_000
    rng = np.random.default_rng(0)
    curve = _curve(list(rng.random(n)), list(rng.random(n) * 0.01))
    drawn = cost_figure(curve)
    assert len(drawn) < 250_000, len(drawn)  # 2.1 MB before
    spots = _spots(drawn, "rounds")
    assert 0.8 * n <= len(spots) <= n  # each point drawn (a few share a pixel)
    _geometry_is_numbers(drawn)
    small = read(cost_figure(_curve([0.5, 0.6], [0.1, 0.2])))
    assert small.tips["rounds"] == ["round 0 · score 50.0% · $0.10000", "round 1 · score 60.0% · $0.20000"]


def test_a_run_whose_every_round_is_on_the_cost_front_draws_a_small_cost_chart():
    n = 10_000  # cost and score rising together: every round is the cheapest for its score
    drawn = cost_figure(_curve(list(np.linspace(0, 1, n)), list(np.linspace(0.001, 0.01, n))), selected=7)
    assert len(drawn) < 60_000, len(drawn)  # 2.3 MB before: the front's points kept a <g> and a hover text each
    fig = read(drawn)
    assert fig.dots["rounds"] >= 200 and fig.dots["cheapest per score"] >= 200  # drawn, on a 2-pixel grid
    _geometry_is_numbers(drawn)


def test_a_hundred_thousand_rounds_draw_a_line_of_a_few_corners_a_pixel():
    n = 100_000
    rng = np.random.default_rng(1)
    scores = list(rng.random(n))
    drawn = score_figure(_curve(scores, [0.001] * n), offline=False)
    assert len(drawn) < 60_000, len(drawn)  # 1.1 MB before: a corner per round
    line = read(drawn).lines["score per round"]
    assert len(line) <= 4 * 640
    (v0, p0), *_, (v1, p1) = _ticks(read(drawn), "y")
    y = [p0 + (100 * v - v0) / (v1 - v0) * (p1 - p0) for v in (min(scores), max(scores), scores[0], scores[-1])]
    corners = [cy for _, cy in line]
    assert abs(min(corners) - y[1]) <= 0.2 and abs(max(corners) - y[0]) <= 0.2  # the best and worst rounds kept
    assert abs(corners[0] - y[2]) <= 0.2 and abs(corners[-1] - y[3]) <= 0.2  # and the first and last


def test_a_thinned_line_keeps_each_pixel_columns_first_lowest_highest_and_last_corner():
    rng = np.random.default_rng(2)
    for _ in range(20):
        xs = np.sort(rng.uniform(0, 50, rng.integers(1, 600)))
        pts = [(float(x), float(y)) for x, y in zip(xs, rng.uniform(0, 100, len(xs)), strict=True)]
        out = svgplot._thin(pts, 50)
        it = iter(pts)
        assert all(any(q == p for q in it) for p in out)  # corners of the line, in its order
        columns = {round(x) for x, _ in pts}
        assert len(out) <= max(len(pts) if len(pts) <= 200 else 0, 4 * len(columns))
        for c in columns:
            run, kept = [p for p in pts if round(p[0]) == c], [p for p in out if round(p[0]) == c]
            assert kept[0] == run[0] and kept[-1] == run[-1]
            assert min(y for _, y in kept) == min(y for _, y in run) and max(y for _, y in kept) == max(y for _, y in run)


def test_a_megabyte_edit_name_is_cut_short_in_its_hover_text():
    name = "prompt:" + "A" * 1_000_000
    drawn = score_figure(_curve([0.5] * 50, [0.01] * 50, ops=[name] * 50), offline=False)
    assert len(drawn) < 60_000, len(drawn)  # 50 MB before: the whole name in each point's title
    tip = read(drawn).tips["score per round"][0]
    assert tip.startswith("round 0 · score 50.0% · rewrite a prompt (AAAA") and tip.endswith("…")
    assert len(tip) <= svgplot.MAX_TEXT


# -- texts ----------------------------------------------------------------------------------------------------------

# what Streamlit's frontend does to a markdown source before parsing it, raw HTML included (StreamlitMarkdown):
# `:material/` becomes `:material_`; `$…$` anywhere loads KaTeX; `:word:` anywhere loads the emoji plugin
FRONTEND_REWRITES = ("prompt:the :material/star: kind", "x:costs $1 to $2 :smile: :red[r]")


@pytest.mark.parametrize("name", FRONTEND_REWRITES)
def test_no_text_in_a_drawing_is_rewritten_or_scanned_by_streamlits_markdown(name):
    drawn = score_figure(_curve([0.5, 0.6], [0.1, 0.1], ops=["seed", name]), offline=False)
    body = drawn.split("\n", 1)[1]  # the texts (the opening tag's own style holds a colon)
    assert ":material/" not in body and "$" not in body and not re.search(r":[\w+-][\w_+-]*:", body)
    assert read(drawn).tips["score per round"][1] == f"round 1 · score 60.0% · {edit_name(name)}"  # as stored


LINE_BREAKS = "a\nb\rc\r\nd\u2028e\u2029f\x85g\x0bh\x0ci\x1cj\x1dk\x1el\x1fm"


def test_no_line_break_of_any_kind_and_no_control_character_reaches_the_drawing():
    name = f"x:{LINE_BREAKS}\x00n\x01o\x1b[31mp\x08q\x7fr"
    drawn = score_figure(_curve([0.5, 0.6], [0.1, 0.1], ops=["seed", name]), offline=False)
    first, *rest = drawn.split("\n")
    assert first.startswith("<svg ") and first.count("<") == 1 and rest[-1] == "</svg>"
    assert all(line.strip(" \t") for line in rest)  # CommonMark's blank line (spaces, tabs) never: one block
    assert not re.search("[\r\u2028\u2029\x85\x0b\x0c\x1c-\x1f\x00-\x08\ud800-\udfff]", drawn)
    tip = read(drawn).tips["score per round"][1]  # well-formed XML: a NUL or ESC used to make it unreadable
    assert tip == "round 1 · score 60.0% · x (a b c d e f g h i j k l m\ufffdn\ufffdo\ufffd[31mp\ufffdq\x7fr)"
    assert svgplot.text("a\ud800b") == "a\ufffdb"  # (a lone surrogate: Streamlit could not even send it)


def test_a_drawing_changed_by_any_string_operation_is_no_longer_a_drawing():
    from pages import widgets

    drawn = score_figure(_curve([0.5], [0.1]), offline=False)
    assert isinstance(drawn, svgplot.Drawn) and isinstance(copy.deepcopy(drawn), svgplot.Drawn)
    evil = "<img src=http://evil.invalid/x>"
    changed = [drawn + evil, evil + drawn, drawn[:-6], drawn.replace("</svg>", evil + "</svg>"), drawn * 2,
               drawn.join(["", evil]), f"{drawn}{evil}", drawn.strip(), drawn.lower(),
               drawn.removesuffix("</svg>") + evil, svgplot.text(drawn), drawn.format(), drawn.expandtabs(),
               drawn.translate({ord("<"): "<"}), drawn.center(len(drawn) + 2), str(drawn)]
    for c in (c for c in changed if c != drawn):  # (an unchanged one may stay the same object)
        assert not isinstance(c, svgplot.Drawn), c[:40]
        with pytest.raises(TypeError):
            widgets.plot(c)


# -- the pages, on PostgreSQL (NaN and ±Infinity are values a DOUBLE PRECISION column holds) ------------------------

def test_history_and_evolve_draw_a_shared_workspaces_nan_and_infinite_rows_without_raising(pg_server, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from flowcore.evolution import History
    from flowcore.workspace.store import Workspace

    url = pg_server.new_schema()
    monkeypatch.setenv("MERMAIDFLOW_DB", url)
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    ws, seed = Workspace(url), "flowchart TD\n    P([PROBLEM]) --> R([RETURN])"
    h = History(ws)
    run = h.create_run({"mode": "llm", "candidates": 2}, "pg", seed, "gsm8k", "math", offline=False)
    rows = [(0.5, 0.01), (0.55, 0.02), (0.6, NAN), (INF, 0.01), (0.7, -INF), (-0.5, -3.0), (0.8, 0.05)]
    for i, (score, cost) in enumerate(rows):
        h.add_round(run, {"round": i, "workflow_text": seed, "parents": [0] if i else [], "status": "ok",
                          "operator": "prompt", "score": score, "cost": cost})
    with ws.transaction() as c:  # as a team member's client writes them
        c.execute("UPDATE evo_rounds SET score = 'NaN', judge_total = 'NaN' WHERE round = 1")
    h.set_status(run, "finished")
    app = str(Path(__file__).resolve().parents[2] / "app.py")
    for page, count in (("history", 2), ("evolve", 1)):
        at = AppTest.from_file(app, default_timeout=60)
        at.run()
        at.switch_page(f"pages/{page}.py")
        at.session_state["hist_tab"] = "Score curves"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        drawn = [m.value for m in at.markdown if m.value.startswith("<svg")]
        assert len(drawn) == count
        for d in drawn:
            _geometry_is_numbers(d)
            _on_the_axes(d)
        assert [x for x, _ in read(drawn[0]).points["score per round"]] == [0, 2, 4, 5, 6]  # NaN, inf: unmeasured
        if page == "history":
            assert [x for x, _ in read(drawn[1]).points["rounds"]] == [0.01, -3.0, 0.05]  # and no NaN/inf cost
