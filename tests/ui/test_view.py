"""What the browser is given to draw (flowcore.ui.view): labels that load nothing, zoom, cycles that get room,
big graphs shown as an overview or a partial drawing."""

from __future__ import annotations

import json

from flowcore import parse
from flowcore.ui import canvas as cv
from flowcore.ui import view

CYCLE = "flowchart TD\n    A --> B\n    B --> C\n    C --> A\n    C --> D\n"


def test_labels_cannot_load_remote_resources():
    w = parse('flowchart TD\n    A["x<img src=\'http://203.0.113.9/p.png\'>y<br/>z"] --> B\n'
              '    click A "http://203.0.113.9/go"\n')
    w.extras.append("style B fill:url(http://203.0.113.9/i.svg)")  # Mermaid's grammar rejects it in text
    code = view.diagram_code(w)
    assert "<img" not in code and "click" not in code and "url(" not in code
    assert "‹img src='http://203.0.113.9/p.png'›y<br/>z" in code  # shown as text; line breaks kept
    assert '"securityLevel": "strict"' in code


def test_zoom_draws_at_natural_size_times_the_zoom():
    w = parse(CYCLE)
    init = json.loads(view.diagram_code(w, 1.5).split("\n")[0].removeprefix("%%{init: ").removesuffix("}%%"))
    assert init["flowchart"]["useMaxWidth"] is False and init["themeVariables"]["fontSize"] == "24px"
    assert json.loads(view.diagram_code(w).split("\n")[0][9:-3])["flowchart"]["useMaxWidth"] is True
    assert view.diagram_height(w, 2.0) > view.diagram_height(w, 1.0)


def test_a_cycle_gets_one_layer_per_node_so_its_drawing_is_not_clipped():
    w = parse(CYCLE)
    assert view.layers(w) == [["A"], ["B"], ["C"], ["D"]]
    assert view.diagram_height(w) == 90 * 4 + 60
    pos = cv.layout(w)
    assert len({y for _, y in pos.values()}) == 4  # the canvas lays the cycle out in layers too


def test_a_new_unconnected_node_goes_to_the_middle_layer_not_the_corner():
    w = parse('flowchart TD\n    PROBLEM(["Problem"]) --> C1["Custom"]\n    C1 --> C2["Custom"]\n'
              '    C2 --> RETURN(["Return"])\n    N1["Review"]\n')
    pos = cv.layout(w)
    assert pos["N1"][1] == pos["C1"][1] or pos["N1"][1] == pos["C2"][1]
    assert pos["N1"][0] > pos["C1"][0]


def test_big_graphs_get_an_overview_and_a_partial_drawing():
    lines = ["flowchart TD", 'PROBLEM(["Problem"])'] + [f'N{i}["Custom"]' for i in range(400)]
    lines += ["PROBLEM --> N0"] + [f"N{i} --> N{i + 1}" for i in range(399)]
    w = parse("\n".join(lines) + "\n")
    assert view.is_big(w)
    o = view.overview(w)
    assert (o["nodes"], o["edges"], o["layers"], o["by type"]) == (401, 400, 401, {"CustomOp": 400, "Interface": 1})
    part = view.preview(w)
    assert len(part.nodes) == view.PREVIEW_NODES and len(part.edges) == view.PREVIEW_NODES - 1
    assert "PROBLEM" in part.nodes


def test_a_big_text_is_edited_a_section_at_a_time():
    text = "".join(f"line {i}\n" for i in range(1, 2501))
    assert view.sections(text) == [(1, 1000), (1001, 2000), (2001, 2500)]
    middle = view.section(text, 1)
    assert middle.startswith("line 1001\n") and middle.endswith("line 2000\n")
    edited = view.splice(text, 1, middle.replace("line 1500\n", "line 1500a\nline 1500b\n"))
    assert edited.splitlines()[1499:1502] == ["line 1500a", "line 1500b", "line 1501"]
    assert len(edited.splitlines()) == 2501 and edited.endswith("line 2500\n")
    assert view.splice(text, 0, "no newline").splitlines()[:2] == ["no newline", "line 1001"]
    assert view.splice(text, 2, "") == "".join(f"line {i}\n" for i in range(1, 2001))
    import pytest

    with pytest.raises(ValueError, match="past the end"):
        view.splice(text, 5, "x")


def test_a_section_holds_the_lines_the_diagnostics_number():
    """A U+2028 (or U+0085, '\\v'...) in a comment line ends no line for Mermaid, the diagnostics or Ace: the section
    that says 'lines 3-4' holds lines 3 and 4 (before, str.splitlines counted one more line per separator)."""
    import re

    text = "flowchart TD\n    %% @prompt a: one\u2028two\x85three\n    A --> B\r\n    B --> C\rC --> D\n"
    rows = re.split(r"\r\n|\r|\n", text)[:-1]
    assert view.sections(text, size=2) == [(1, 2), (3, 4), (5, 5)]
    for i, (first, last) in enumerate(view.sections(text, size=2)):
        assert re.split(r"\r\n|\r|\n", view.section(text, i, size=2))[:-1] == rows[first - 1:last]
    edited = view.splice(text, 0, "flowchart LR\n    %% @prompt a: one\u2028two\n", size=2)
    assert edited == text.replace("TD", "LR").replace("\x85three", "")


def _fan(n: int, direction: str = "TD") -> str:
    """PROBLEM feeding ``n`` parallel Custom nodes, ensembled: as wide as ``n`` nodes side by side."""
    lines = [f"flowchart {direction}", '    PROBLEM(["Problem"])', '    E["ScEnsemble"]', '    RETURN(["Return"])']
    for i in range(n):
        lines += [f'    C{i}["Custom<br/>(role: solver)"]', f"    PROBLEM -->|input| C{i}", f"    C{i} -->|solutions| E"]
    return "\n".join([*lines, "    E --> RETURN", "    class C0 CustomOp"]) + "\n"


def test_drawings_go_side_by_side_only_while_both_fit_half_the_page_with_readable_text():
    from flowcore.workspace import library

    examples = {name: text for name, _, text in library.examples()}
    assert view.side_by_side(examples["math_seed"], examples["code_seed"])
    # five parallel nodes were cut at half the page (History, issue 30): one above the other instead
    assert not view.side_by_side(examples["math_seed"], examples["gsm8k_case_study"])
    widths = [view.natural_width(parse(_fan(n))) for n in (1, 2, 5)]
    assert widths[0] < widths[1] < widths[2]  # each node across adds its width
    assert view.side_by_side(_fan(1)) and not view.side_by_side(_fan(5))
    # left to right, a fan is tall, not wide: its layers, one after another, decide
    assert view.natural_width(parse(_fan(5, "LR"))) == view.natural_width(parse(_fan(1, "LR")))
    assert view.side_by_side("") and view.side_by_side()  # nothing to draw fits anywhere
