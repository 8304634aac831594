"""History's cost-vs-score figure as the SVG the page draws (issue #30, item 3): only the rounds on the
cost/score front and the chosen round are named, the rest on hover; the axes in percent and dollars, the score
range padded around the data; nothing clipped, the legend clear of the ticks."""

from __future__ import annotations

import random

import pandas as pd

from flowcore.ui.history import FAILED, cost_figure, cost_front, curve_frame, sampling_figure, score_figure
from tests.helpers.plots import read
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
    fig = read(cost_figure(curve, selected=5))
    assert [x for x, _ in fig.points["rounds"]] == [0.10, 0.20, 0.15, 0.30, 0.40]  # round 4 was not measured
    assert fig.names["rounds"] == ["#0", "#2", "#3", "#5"]  # 1 only on hover; 5 is the chosen one
    assert fig.tips["rounds"][1] == "round 1 · score 30.0% · $0.20000"
    assert read(cost_figure(curve)).names["rounds"] == ["#0", "#2", "#3"]
    assert cost_figure(_curve([None, None], [0.1, 0.2])) is None  # nothing measured: no figure


def _ticks(labels: list[str]) -> list[float]:
    return [float(t.strip("$%").replace(",", "")) for t in labels]


def test_a_flat_run_gets_a_readable_band_in_percent_and_dollars():
    fig = read(cost_figure(_curve([1 / 3] * 4, [0.0001, 0.0002, 0.0003, 0.0005])))
    assert all(t.endswith("%") for t in fig.yticks)
    ys = _ticks(fig.yticks)
    assert max(ys) - min(ys) >= 8 and min(ys) < 100 / 3 < max(ys)  # a band around 33.3% (±5), not 32.5–34
    assert all(t.startswith("$") and "μ" not in t for t in fig.xticks)  # never '100μ … 500μ'
    assert min(_ticks(fig.xticks)) >= 0 and len(set(fig.xticks)) == len(fig.xticks) >= 3


def _inside(fig) -> None:
    """Every mark drawn whole inside the picture, and the legend below the round/cost tick labels."""
    _, _, width, height = map(float, fig.root.get("viewBox").split())
    ns = "{http://www.w3.org/2000/svg}"
    for c in fig.root.iter(f"{ns}circle"):
        x, y, r = float(c.get("cx")), float(c.get("cy")), float(c.get("r"))
        assert r <= x <= width - r and r <= y <= height - r, (x, y)
    ticks = [float(t.get("y")) for t in fig.root.iter(f"{ns}text") if t.get("class") == "mf-xtick"]
    keys = [float(t.get("y")) for g in fig.root.iter(f"{ns}g") if g.get("class") == "mf-legend"
            for t in g.iter(f"{ns}text")]
    assert ticks and all(k > max(ticks) + 12 for k in keys)


def test_score_curves_clip_nothing_and_keep_the_legend_clear_of_the_ticks():
    n = 8
    curve = curve_frame(pd.DataFrame({"round": range(n), "status": ["ok", "failed"] + ["ok"] * (n - 2),
                                      "operator": ["x"] * n, "score": [1.0, None, 0.0, 1.0, 0.5, 0.5, 0.25, 1.0],
                                      "judge_total": [None] * n, "cost": [0.01] * n}))
    fig = read(score_figure(curve, offline=False))
    assert fig.points["score per round"][0] == (0, 100.0) and fig.points[FAILED] == [(1, 0.0)]
    assert fig.yticks == ["0%", "20%", "40%", "60%", "80%", "100%"]
    _inside(fig)  # the round-0 marker at 100% and the failed round's ✖ at 0 whole
    _inside(read(cost_figure(curve, selected=7)))


def test_a_long_run_drops_per_point_marks_and_labels_its_rounds_sparsely():
    n = 2000
    curve = _curve([(i % 10) / 10 for i in range(n)], [0.001 * (i % 7 + 1) for i in range(n)])
    fig = read(score_figure(curve, offline=False))
    assert "score per round" not in fig.points and len(fig.lines["score per round"]) == n  # the line, no dots
    assert 3 <= len(fig.xticks) <= 12 and fig.xticks[0] == "0"
    cost = cost_figure(curve, selected=5)
    fig = read(cost)
    spots = {(c, s) for c, s in zip(curve["cost"], curve["score"], strict=True)}  # 70 points, each drawn once
    assert not fig.names and fig.dots["rounds"] == len(spots)  # past DENSE rounds: every round a dot, no names
    front = cost_front(list(curve["cost"]), list(curve["score"]))
    hovered = [int(t.split()[1]) for t in fig.tips["cheapest per score"]]
    assert hovered == sorted({i for i in front} | {5})  # the front and the chosen round keep their hover text
    assert len(cost) < 40 * n  # ~20 bytes a round, not a <g> and a <title> each (2 MB at 10,000 rounds)


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
