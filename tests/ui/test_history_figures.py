"""History's cost-vs-score figure as the plotly dict the browser draws (issue #30, item 3): only the rounds on
the cost/score front and the chosen round are named, the rest on hover; the axes in percent and dollars, the
score range padded around the data."""

from __future__ import annotations

import random

import pandas as pd

from flowcore.ui.history import cost_figure, cost_front, curve_frame, sampling_figure
from tests.helpers.vega import layers, legend


def _curve(scores: list[float | None], costs: list[float]) -> pd.DataFrame:
    n = len(scores)
    return curve_frame(pd.DataFrame({"round": list(range(n)), "status": ["ok"] * n, "operator": ["x"] * n,
                                     "score": scores, "judge_total": [None] * n, "cost": costs}))


def test_the_front_is_the_cheapest_point_of_each_better_score():
    #            0     1     2     3     4     5
    costs = [0.10, 0.20, 0.15, 0.30, 0.15, 0.40]
    scores = [0.30, 0.30, 0.50, 0.70, 0.50, 0.60]
    # 1 costs more than 0 for the same score; 5 costs more than 3 for less; 2 and 4 are the same point
    assert cost_front(costs, scores) == {0, 2, 3, 4}
    rng = random.Random(7)  # the sweep agrees with the definition on random data, ties included
    for _ in range(50):
        c = [rng.choice([0.1, 0.2, 0.3, 0.4]) for _ in range(12)]
        s = [rng.choice([0.0, 0.5, 1.0]) for _ in range(12)]
        slow = {i for i in range(12) if not any(c[j] <= c[i] and s[j] >= s[i] and (c[j] < c[i] or s[j] > s[i])
                                                for j in range(12))}
        assert cost_front(c, s) == slow


def test_only_the_front_and_the_chosen_round_are_named():
    curve = _curve([0.3, 0.3, 0.5, 0.7, None, 0.6], [0.10, 0.20, 0.15, 0.30, 0.05, 0.40])
    points, names = layers(cost_figure(curve, selected=5))
    assert list(points.data["round"]) == [0, 1, 2, 3, 5]  # round 4 was not measured: not drawn
    assert list(names.data["name"]) == ["#0", "#2", "#3", "#5"]  # 1 only on hover; 5 is the chosen one
    assert points.encoding["tooltip"][0]["field"] == "round"
    _, names = layers(cost_figure(curve))
    assert list(names.data["name"]) == ["#0", "#2", "#3"]


def test_a_flat_run_gets_a_readable_band_in_percent_and_dollars():
    points = layers(cost_figure(_curve([1 / 3] * 4, [0.0001, 0.0002, 0.0003, 0.0005])))[0].encoding
    lo, hi = points["y"]["scale"]["domain"]
    assert "'%'" in points["y"]["axis"]["labelExpr"] and hi - lo >= 10 and lo < 100 / 3 < hi  # not 32.5–34
    assert points["x"]["axis"]["format"].startswith("$")  # never '100μ … 500μ'
    assert points["x"]["scale"]["domain"][0] >= 0


def test_parent_sampling_bars_mark_the_drawn_parents():
    frame = pd.DataFrame({"round": ["#0", "#2", "#1"], "score": [50.0, None, 70.0], "probability": [0.2, 0.5, 0.3],
                          "parent": [False, True, False]})
    (bars,) = layers(sampling_figure(frame))
    assert list(bars.data["round"]) == ["#0", "#2", "#1"] and bars.encoding["x"]["sort"] is None  # pool order
    assert list(bars.data["series"]) == ["not drawn", "drawn parent", "not drawn"]
    assert list(bars.data["measured"]) == ["score 50.0%", "not measured", "score 70.0%"]
    assert legend(sampling_figure(frame))["drawn parent"] == "#1565c0"


def test_a_rounds_score_says_how_many_problems_were_not_run():
    from flowcore.ui.history import score_text

    per_problem = [{"id": "a", "errored": False}, {"id": "b", "errored": True}, {"id": "c", "errored": False}]
    assert score_text(0.5, per_problem) == "50.0% · 1 not run"
    assert score_text(0.5, per_problem[:1]) == "50.0%" and score_text(None, per_problem) == "not measured"
