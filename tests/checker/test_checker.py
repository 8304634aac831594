"""Each checker code: texts that must raise it (at the right line/node) and near-identical texts that must not."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcore import check, is_valid, parse, to_mermaid
from flowcore.mermaid.reader import WorkflowSyntaxError

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"

MATH_OK = """flowchart TD
    %% @prompt solver: Solve it.
    PROBLEM([Problem])
    C1["Custom<br/>(role: solver)"]
    RETURN([Return])
    PROBLEM -->|input| C1
    C1 --> RETURN
"""

CODE_OK = """flowchart LR
    PROBLEM([Problem])
    ENTRY_POINT([Entry point])
    G1["CustomCodeGenerate"]
    T1["Test"]
    D1{"Decision"}
    G2["CustomCodeGenerate"]
    RETURN([Return])
    PROBLEM --> G1 & G2
    ENTRY_POINT -->|entry_point| G1 & G2
    G1 --> T1
    T1 --> D1
    D1 -->|Passed| RETURN
    D1 -->|Failed| G2
    G2 --> RETURN
"""


def codes(text: str, task: str | None = None) -> list[str]:
    return [d.code for d in check(text, task) if d.severity == "error"]


def only(text: str, code: str, task: str | None = None):
    diags = [d for d in check(text, task) if d.code == code]
    assert diags, f"expected {code}, got {[str(d) for d in check(text, task)]}"
    return diags


def test_reference_workflows_are_valid():
    assert check(MATH_OK, "math") == []
    assert check(CODE_OK, "code") == []
    for f in EXAMPLES.glob("*.mmd"):
        task = "math" if f.name.startswith(("math", "gsm8k")) else "code"
        assert is_valid(check(f.read_text(), task)), f.name


@pytest.mark.parametrize("text,line,col", [
    ("flowchart TD\n  PROBLEM([Problem])\n  C1[Custom (role: x)]\n", 3, 13),
    ("flowchart TD\n  PROBLEM --> \n", 2, 10),  # where Mermaid points: the dangling arrow
    ("flowchart TD\n  A -> B\n", 2, 5),
    ('flowchart TD\n  A["unclosed]\n', 2, 5),  # the quote left open (Mermaid: column 6)
    ("flowchart XY\n", 1, 11),
    ("PROBLEM --> RETURN\n", 1, 1),
    ("flowchart TD\n  subgraph S\n  A --> B\n", 2, 3),
    ("flowchart TD\n  end\n", 2, 3),
])
def test_m001_syntax_points_at_line_and_column(text, line, col):
    d = only(text, "M001")[0]
    assert (d.line, d.column) == (line, col)
    with pytest.raises(WorkflowSyntaxError):
        parse(text)


def test_m001_not_raised_for_general_syntax():
    text = """graph LR;
    %% comment
    PROBLEM(["Problem"]):::Interface; RETURN[[Return]]
    C1("Custom<br/>(role: solver)") --> |input| C2{{"Custom"}}
    PROBLEM -- input --> C1
    PROBLEM ==>|input| C2
    C1 & C2 -.-> E1((ScEnsemble)) ---> RETURN
    classDef Interface fill:#eee
    class C1,C2 CustomOp
    style E1 fill:#f9f
    linkStyle 0 stroke:red
    click C1 callback
    """
    assert codes(text) == ["M013"] or codes(text) == []
    assert "M001" not in [d.code for d in check(text)]


def test_m002_declared_twice_with_different_labels():
    text = MATH_OK + '    C1["Review"]\n'
    d = only(text, "M002")[0]
    assert d.node == "C1" and d.line == 8
    assert codes(MATH_OK + '    C1["Custom<br/>(role: solver)"]\n') == []  # same label: fine


def test_m002_two_operator_classes():
    only(MATH_OK + "    class C1 CustomOp\n    class C1 ReviewOp\n", "M002")


def test_m003_unknown_operator_suggests_nearest():
    d = only(MATH_OK.replace('C1["Custom<br/>(role: solver)"]', 'C1["Custm<br/>(role: solver)"]'), "M003")[0]
    assert "CustomOp" in d.message and d.node == "C1" and d.line == 4
    d = only(MATH_OK + "    class C1 ScEnsemblOp\n", "M003")[0]
    assert "ScEnsembleOp" in d.message


def test_aliases_map_to_one_name():
    for alias in ("ScEnSembleOp", "ScEnsemble", "ScEnsembleOp"):
        w = parse(f"flowchart TD\n  E1[x]\n  class E1 {alias}\n")
        assert w.nodes["E1"].op == "ScEnsembleOp"


def test_m004_missing_or_non_interface():
    only(MATH_OK.replace("RETURN([Return])", "").replace("C1 --> RETURN", ""), "M004")
    d = only(MATH_OK + "    class RETURN CustomOp\n", "M004")[0]
    assert d.node == "RETURN"
    assert "M004" not in codes(MATH_OK)


def test_m005_unreachable_and_dead_end():
    d = only(MATH_OK + '    C2["Custom"]\n    C2 --> RETURN\n', "M005")[0]
    assert d.node == "C2" and "reachable" in d.message
    d = only(MATH_OK + '    C3["Custom"]\n    PROBLEM --> C3\n', "M005")[0]
    assert d.node == "C3" and "RETURN" in d.message


def test_m006_cycle_named():
    text = MATH_OK + '    C2["Custom"]\n    C1 --> C2\n    C2 --> C1\n'
    d = only(text, "M006")[0]
    assert "C1" in d.message and "C2" in d.message and d.line == 10


def test_m006_names_each_cycle_the_same_in_every_process():
    """Cycles are named from the text's order, not from set order (which follows each process's string hash):
    two processes once named `A -> B -> A` and `B -> A -> B` for one text."""
    import subprocess
    import sys

    text = (MATH_OK + '    C2["Custom"]\n    X3["Custom"]\n    C1 --> C2\n    C2 --> X3\n    X3 --> C1\n'
            '    Q["Custom"]\n    R["Custom"]\n    Q --> R\n    R --> Q\n')
    code = "import sys; from flowcore import check; print([d for d in check(sys.stdin.read()) if d.code == 'M006'])"
    root = Path(__file__).resolve().parents[2]
    seen = {subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True,
                           cwd=root, env={"PYTHONHASHSEED": str(seed), "PATH": ""}).stdout for seed in range(6)}
    assert len(seen) == 1, seen
    assert "cycle: C1 -> C2 -> X3 -> C1" in seen.pop()


def test_m007_bad_port_label_and_bad_route():
    d = only(MATH_OK.replace("PROBLEM -->|input| C1", "PROBLEM -->|banana| C1"), "M007")[0]
    assert "banana" in d.message and "input" in d.message and d.line == 6
    only(CODE_OK.replace("D1 -->|Failed| G2", "D1 -->|Maybe| G2"), "M007", "code")
    only(MATH_OK + "    C1 --> PROBLEM\n", "M007")


def test_m008_type_mismatch():
    # A Text does not flow into a Problem port; a Text is not a Code.
    text = MATH_OK.replace("C1 --> RETURN", 'C1 -->|problem| P1["Programmer"]\n    PROBLEM --> P1\n    P1 --> RETURN')
    d = only(text, "M008")[0]
    assert "Problem" in d.message and d.node == "P1"
    text = CODE_OK.replace('G1["CustomCodeGenerate"]', 'G1["Custom"]').replace(
        "ENTRY_POINT -->|entry_point| G1 & G2", "ENTRY_POINT -->|entry_point| G2")
    assert "M008" in codes(text, "code")  # Custom emits Text, Test wants Code
    assert "M008" not in codes(CODE_OK, "code")


def test_m008_decision_needs_a_verdict():
    text = CODE_OK.replace("T1 --> D1", "G1 --> D1").replace("G1 --> T1", "")
    assert "M008" in codes(text, "code")


def test_m009_required_inputs():
    text = MATH_OK.replace("C1 --> RETURN", 'C1 -->|analysis| P1["Programmer"]\n    P1 --> RETURN')
    d = only(text, "M009", "math")[0]
    assert d.node == "P1" and "problem" in d.message
    d = only(CODE_OK.replace("ENTRY_POINT -->|entry_point| G1 & G2", "ENTRY_POINT -->|entry_point| G2"),
             "M009", "code")[0]
    assert d.node == "G1" and "entry_point" in d.message


def test_m010_ensemble_needs_two():
    one = MATH_OK.replace("C1 --> RETURN", 'C1 --> E1["ScEnsemble"]\n    E1 --> RETURN')
    assert only(one, "M010")[0].node == "E1"
    two = one.replace("PROBLEM -->|input| C1", 'PROBLEM -->|input| C1 & C2["Custom"]\n    C2 --> E1')
    assert "M010" not in codes(two)


def test_m011_task_restrictions():
    prog = MATH_OK.replace("C1 --> RETURN", 'C1 -->|analysis| P1["Programmer"]\n    PROBLEM --> P1\n    P1 --> RETURN')
    assert codes(prog, "math") == []
    assert only(prog, "M011", "code")[0].node == "P1"
    assert {d.node for d in check(CODE_OK, "math") if d.code == "M011"} >= {"G1", "T1", "ENTRY_POINT"}


def test_m012_return_fan_in():
    text = MATH_OK + '    C2["Custom"]\n    PROBLEM --> C2\n    C2 --> RETURN\n'
    assert only(text, "M012")[0].node == "RETURN"
    assert "M012" not in codes(CODE_OK, "code")  # exclusive Passed/Failed branches are fine
    both = CODE_OK.replace("D1 -->|Failed| G2", "D1 -->|Failed| G2\n    G1 --> RETURN")
    assert "M012" in codes(both, "code")


def test_m013_missing_prompt_is_a_warning():
    text = MATH_OK.replace("%% @prompt solver: Solve it.", "")
    d = only(text, "M013")[0]
    assert d.severity == "warning" and d.node == "C1" and is_valid(check(text))


def test_m014_untyped_node():
    d = only(MATH_OK.replace('C1["Custom<br/>(role: solver)"]', 'C1["Think hard"]'), "M014")[0]
    assert d.node == "C1" and d.line == 4
    only("flowchart TD\n  PROBLEM --> X --> RETURN\n", "M014")


@pytest.mark.parametrize("junk", ["", "\x00\x01", "flowchart TD\n" + "A-->" * 50, "%%", "graph", 123, None,
                                  "flowchart TD\n  A[\"x\"]:::", "flowchart TD\n class , ,", "flowchart TD\n  A -- x"])
def test_never_raises(junk):
    diags = check(junk)
    assert all(d.code.startswith("M") for d in diags)


def test_round_trip_examples():
    for f in EXAMPLES.glob("*.mmd"):
        w = parse(f.read_text())
        text = to_mermaid(w)
        assert parse(text) == w
        assert to_mermaid(parse(text)) == text  # canonical text is a fixed point


def test_hard_check_maps_mermaid_error_to_line():
    pytest.importorskip("flowcore.mermaid.engines.js")
    text = MATH_OK.replace('C1 --> RETURN', 'C1 --> RETURN\n    C1 --> (')
    diags = check(text, hard=True)
    assert any(d.code == "M001" and d.line == 8 for d in diags)
    assert not [d for d in check(MATH_OK, hard=True) if d.severity == "error"]


def test_prompts_keep_latex_backslashes_and_round_trip_escapes():
    w = parse((EXAMPLES / "math_seed.mmd").read_text())
    assert "\\boxed{}" in w.prompts["solver"]
    for text in ["a\\boxed{x}", "line1\nline2", "literal \\n here", "ends with \\", "\\\\", "\\\\n", "x\\"]:
        w.prompts["solver"] = text
        assert parse(to_mermaid(w)).prompts["solver"] == text
