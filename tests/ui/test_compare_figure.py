"""The Compare page's score-vs-cost figure, read as the plotly dict the browser draws (issue #30, item 3): names
only on the Pareto points (the rest on hover), each name placed clear of the front's step line, percent and
dollar axes, ranges padded around the data, the legend below the axis title; and the command line's
'baseline:io' shown as 'IO (math)'."""

from __future__ import annotations

from flowcore.evaluation.compare import Comparison
from flowcore.ui.compare import for_people, label_positions, pareto_figure, people_name, table_frame

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


def test_only_the_pareto_points_carry_names_and_the_rest_are_on_hover():
    fig = pareto_figure(for_people(_comparison())).to_dict()
    named = {t["name"]: t for t in fig["data"]}
    assert set(named) == {"best", "on the Pareto front", "others (name on hover)", "Pareto front"}
    assert list(named["best"]["text"]) == ["math_seed"] and named["best"]["marker"]["symbol"] == "star"
    assert list(named["on the Pareto front"]["text"]) == ["IO (math)"]
    others = named["others (name on hover)"]
    assert others["mode"] == "markers" and "text" not in others  # no label drawn ...
    assert [h.split(":")[0] for h in others["hovertext"]] == ["CoT (math)", "CoT-SC (5 samples) (math)",
                                                             "Self-Refine (math)"]  # ... the name on hover
    assert all(t.get("cliponaxis") is False for t in fig["data"][:3])  # a name near an edge is drawn whole


def test_names_sit_clear_of_the_step_line():
    rows = _comparison().rows()
    where = label_positions(rows)
    # the line leaves the cheapest point to the right and climbs to the next: its name below-right, the
    # next one's above-left (never 'top right', where the vertical segment of a near-equal cost runs)
    assert where == {"baseline:io": "bottom right", "math_seed": "top left"}
    fig = pareto_figure(_comparison()).to_dict()
    named = {t["name"]: t for t in fig["data"]}
    assert list(named["best"]["textposition"]) == ["top left"]
    assert list(named["on the Pareto front"]["textposition"]) == ["bottom right"]
    assert named["Pareto front"]["line"]["shape"] == "hv"


def test_axes_are_written_for_people_and_padded_around_the_data():
    layout = pareto_figure(_comparison()).to_dict()["layout"]
    assert layout["yaxis"]["ticksuffix"] == "%" and layout["xaxis"]["tickformat"].startswith("$")
    lo_y, hi_y = layout["yaxis"]["range"]
    # intervals span 8.3 % (io's low) to 100 % (the seed's high): padded on both sides, not 0-100 flat
    assert lo_y < 100 * (4 / 12 - 0.25) and hi_y > 100
    lo_x, hi_x = layout["xaxis"]["range"]
    assert 0 <= lo_x < 0.0000148 and hi_x > 0.0000780
    legend = layout["legend"]
    assert legend["orientation"] == "h" and legend["y"] < 0 and legend["yanchor"] == "top"  # below the ticks
    assert layout["margin"]["b"] >= 90  # room for tick labels, axis title and legend, one under the other


def test_baselines_are_named_as_the_pages_name_them():
    assert people_name("baseline:io", "gsm8k") == "IO (math)"
    assert people_name("baseline:cot_sc", "humaneval") == "CoT-SC (5 samples) (code)"
    assert people_name("baseline:io") == "IO"  # no benchmark: the title alone
    assert people_name("math_seed", "gsm8k") == "math_seed"
    c = _comparison()
    assert list(table_frame(for_people(c))["workflow"]) == ["IO (math)", "CoT (math)", "CoT-SC (5 samples) (math)",
                                                           "Self-Refine (math)", "math_seed"]
    assert [m.name for m in c.measurements][0] == "baseline:io"  # the stored comparison is left as it was
