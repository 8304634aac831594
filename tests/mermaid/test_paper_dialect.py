"""The MermaidFlow papers' own dialect opens as is (item 4 of issue #8).

The texts below are written for these tests in the style of the published MermaidFlow templates and code
seeds (their class names, spacing and slips), not copied from them.
"""

from __future__ import annotations

from flowcore import check, is_valid, parse
from flowcore.catalogue import resolve

TEMPLATE = """flowchart TD
    %% Nodes
    PROBLEM([Problem])
    S1["Custom<br/>(role: first_solver)"]
    S2["Custom<br/>(role: second_solver)"]
    S3["Custom<br/>(role: outline_solution]"]
    PRG["Programmer<br/>(analysis: 'Work it out in Python')"]
    MERGE["ScEnsemble<br/>"]
    POLISH["Custom<br/>(role: polish)"]
    RETURN([Return response & cost])

    %% Styles
    classDef CustomOp fill:#d0e1f9,stroke:#4378a2,stroke-width:2px;
    classDef ProgrammerOp fill:#f9c2c2,stroke:#c23737,stroke-width:2px;
    classDef ScEnSembleOp fill:#f9e4b7,stroke:#b99b37,stroke-width:2px;
    classDef Interface fill:#e2e2f2,stroke:#6a6ab2,stroke-width:2px;

    %% Assign classes
    class S1 CustomOp
    class S2 CustomOp
    class S3 CustomOp
    class PRG ProgramOp
    class POLISH CustomOp
    class PROBLEM Interface
    class RETURN Interface
    class MERGE ScEnSembleOp

    PROBLEM --> |input|S1
    PROBLEM --> |input|S2
    PROBLEM --> |input|S3
    PROBLEM --> |problem|PRG
    S1 --> MERGE
    S2 --> MERGE
    S3 --> MERGE
    PRG --> MERGE
    MERGE --> POLISH
    POLISH --> RETURN
"""

CODE_SEED = """flowchart TD
    PROBLEM([Problem])
    ENTRY_POINT([Entry point])
    GEN["CustomCodeGenerate<br/>(instruction: write_code)"]
    TST["Test"]
    DEC{"Tests passed?"}
    FIX["CustomCodeGenerate<br/>(instruction: fix_code)"]
    RETURN([Return])
    class PROBLEM,ENTRY_POINT,RETURN Interface
    class GEN,FIX CustomCodeGenerateOp
    class TST TestOp
    class DEC DecisionOp
    PROBLEM -->|input| GEN
    ENTRY_POINT -->|entry_point| GEN
    GEN --> TST
    PROBLEM -->|problem| TST
    TST --> DEC
    DEC -->|Passed| RETURN
    DEC -->|Failed| FIX
    PROBLEM -->|input| FIX
    ENTRY_POINT -->|entry_point| FIX
    FIX --> RETURN
"""


def codes(diags, severity):
    return sorted(d.code for d in diags if d.severity == severity)


def test_paper_class_names_resolve_to_our_operators():
    assert resolve("ScEnSembleOp") == "ScEnsembleOp"
    assert resolve("ProgramOp") == "ProgrammerOp"
    assert resolve("DecisionOp") == "Decision"
    assert resolve("CustomCodeGenerateOp") == "CustomCodeGenerateOp"


def test_published_style_template_opens_with_warnings_only():
    diags = check(TEMPLATE, "math")
    assert is_valid(diags), [str(d) for d in diags if d.severity == "error"]
    w = parse(TEMPLATE)
    assert w.nodes["MERGE"].op == "ScEnsembleOp" and w.nodes["PRG"].op == "ProgrammerOp"
    assert w.class_defs["CustomOp"] == "fill:#d0e1f9,stroke:#4378a2,stroke-width:2px"  # Mermaid drops the ';'
    slips = {d.node: d.message for d in diags if d.code == "M015"}
    # the bracket typo leaves S3 without its prompt, and the Programmer's inline analysis is ignored: both said
    assert "never closed" in slips["S3"] and w.nodes["S3"].prompt is None
    assert "analysis" in slips["PRG"]


def test_problem_input_label_reads_as_the_problem_port_with_a_warning():
    diags = check(CODE_SEED, "code")
    assert is_valid(diags), [str(d) for d in diags if d.severity == "error"]
    notes = [d for d in diags if d.code == "M007"]
    assert {d.node for d in notes} == {"GEN", "FIX"}
    assert all(d.severity == "warning" and "-->|problem|" in d.message for d in notes)


def test_a_single_input_ensemble_stays_an_error():
    one = TEMPLATE.replace("    S2 --> MERGE\n    S3 --> MERGE\n    PRG --> MERGE\n", "")
    one = one.replace("    PROBLEM --> |input|S2\n    PROBLEM --> |input|S3\n    PROBLEM --> |problem|PRG\n", "")
    for nid in ("S2", "S3", "PRG"):
        one = "\n".join(row for row in one.splitlines() if nid not in row) + "\n"
    diags = check(one, "math")
    assert "M010" in codes(diags, "error")


def test_a_label_that_names_no_port_is_still_an_error_elsewhere():
    bad = CODE_SEED.replace("GEN --> TST", "GEN -->|input| TST")
    assert "M007" in codes(check(bad, "code"), "error")
