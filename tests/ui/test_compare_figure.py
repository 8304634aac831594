"""The Compare page's score-vs-cost figure, read as the plotly dict the browser draws (issue #30, item 3): names
only on the Pareto points (the rest on hover), each name placed clear of the front's step line, percent and
dollar axes, ranges padded around the data, the legend below the axis title; and the command line's
'baseline:io' shown as 'IO (math)'."""

from __future__ import annotations

from flowcore.evaluation.compare import Comparison
from flowcore.ui.compare import STAR, for_people, label_positions, pareto_figure, people_name, table_frame
from tests.helpers.vega import layers, legend

N = 12


def _workflow(name: str, solved: int, cost: float) -> dict:
    """A stored measurement: ``solved`` of N problems right, ``cost`` dollars per problem."""
    results = [{"id": f"p{i}", "correct": i < solved, "prediction": "", "extracted": None, "cost": cost,
                "latency": 0.1, "error": None, "repeat": 0} for i in range(N)]
    score = solved / N
    return {"name": name, "score": score, "ci": [max(0.0, score - 0.25), min(1.0, score + 0.2)], "n": N,
            "scores": [score], "sd": None, "cost_priced": cost * N, "cost_paid": cost * N, "calls": N,
            "rates": {f"p{i}": float(i < solved) for i in range(N)}, "results": results}


def _comparison() -> Comparison:
    # the cheapest two nearly share a cost (the compare.png case): io at 4/12, the seed at 11/12
    return Comparison.from_json({"benchmark": "gsm8k", "split": {"split": "test"}, "repeats": 1, "workflows": [
        _workflow("baseline:io", 4, 0.0000148), _workflow("baseline:cot", 7, 0.0000160),
        _workflow("baseline:cot_sc", 7, 0.0000780), _workflow("baseline:self_refine", 9, 0.0000550),
        _workflow("math_seed", 11, 0.0000150)]})


def _points(chart) -> dict[str, list[str]]:
    return {la.data["series"].iloc[0]: list(la.data["workflow"]) for la in layers(chart)
            if la.mark["type"] == "point" and len(la.data)}


def _names(chart) -> dict[str, list[str]]:
    """The names drawn on the plot, by where they sit."""
    return {(la.mark["align"], la.mark["baseline"]): list(la.data["workflow"]) for la in layers(chart)
            if la.mark["type"] == "text" and len(la.data)}


def test_only_the_pareto_points_carry_names_and_the_rest_are_on_hover():
    chart = pareto_figure(for_people(_comparison()))
    assert _points(chart) == {"best": ["math_seed"], "on the Pareto front": ["IO (math)"],
                              "others (name on hover)": ["CoT (math)", "CoT-SC (5 samples) (math)",
                                                         "Self-Refine (math)"]}
    assert sorted(n for names in _names(chart).values() for n in names) == ["IO (math)", "math_seed"]  # no others
    points = [la for la in layers(chart) if la.mark["type"] == "point"]
    assert all(t["field"] == "workflow" for la in points for t in la.encoding["tooltip"][:1])  # names on hover
    assert not any(la.mark.get("clip") for la in layers(chart))  # a mark near an edge is drawn whole
    shapes = legend(chart, "shape")  # the legend draws what the plot draws: the star, dots, the line
    assert shapes["best"] == STAR and shapes["others (name on hover)"] == "circle"
    assert shapes["Pareto front"] == "stroke"


def test_names_sit_clear_of_the_step_line():
    rows = _comparison().rows()
    where = label_positions(rows)
    # the line leaves the cheapest point to the right and climbs to the next: its name below-right, the
    # next one's above-left (never 'top right', where the vertical segment of a near-equal cost runs)
    assert where == {"baseline:io": "bottom right", "math_seed": "top left"}
    chart = pareto_figure(_comparison())
    assert _names(chart) == {("right", "bottom"): ["math_seed"], ("left", "top"): ["baseline:io"]}
    (front,) = [la for la in layers(chart) if la.mark["type"] == "line"]
    assert front.mark["interpolate"] == "step-after" and list(front.data["workflow"]) == ["baseline:io", "math_seed"]


def test_axes_are_written_for_people_and_padded_around_the_data():
    enc = next(la.encoding for la in layers(pareto_figure(_comparison())) if la.mark["type"] == "point")
    assert "'%'" in enc["y"]["axis"]["labelExpr"] and enc["x"]["axis"]["format"].startswith("$")
    lo_y, hi_y = enc["y"]["scale"]["domain"]
    # intervals span 8.3 % (io's low) to 100 % (the seed's high): padded on both sides, not 0-100 flat
    assert lo_y < 100 * (4 / 12 - 0.25) and hi_y > 100
    lo_x, hi_x = enc["x"]["scale"]["domain"]
    assert 0 <= lo_x < 0.0000148 and hi_x > 0.0000780
    assert enc["color"]["legend"]["orient"] == "bottom"  # below the axis title, clear of the ticks


def test_baselines_are_named_as_the_pages_name_them():
    assert people_name("baseline:io", "gsm8k") == "IO (math)"
    assert people_name("baseline:cot_sc", "humaneval") == "CoT-SC (5 samples) (code)"
    assert people_name("baseline:io") == "IO"  # no benchmark: the title alone
    assert people_name("math_seed", "gsm8k") == "math_seed"
    c = _comparison()
    assert list(table_frame(for_people(c))["workflow"]) == ["IO (math)", "CoT (math)", "CoT-SC (5 samples) (math)",
                                                           "Self-Refine (math)", "math_seed"]
    assert [m.name for m in c.measurements][0] == "baseline:io"  # the stored comparison is left as it was


def test_the_table_prints_every_cell_for_people():
    import pandas as pd

    from flowcore.ui.compare import table_rows

    frame = pd.DataFrame([{"workflow": "a|b", "score %": 62.5, "validation %": None, "cost/problem $": 0.0004275000000000001,
                           "tokens": 12345, "calls": 7.0, "errors": 0, "McNemar p": "0.125"},
                          {"workflow": "c", "score %": float("nan"), "validation %": 40.0, "cost/problem $": None,
                           "tokens": 0, "calls": 1, "errors": 3, "McNemar p": "—"}])
    assert table_rows(frame) == [
        {"workflow": "a|b", "score %": "62.5", "validation %": "—", "cost/problem $": "$0.000428", "tokens": "12,345",
         "calls": "7", "errors": "0", "McNemar p": "0.125"},
        {"workflow": "c", "score %": "—", "validation %": "40.0", "cost/problem $": "—", "tokens": "0", "calls": "1",
         "errors": "3", "McNemar p": "—"}]
