"""Node ids and every shape, brackets and Mermaid 11 shape data (mermaid-js: flow-singlenode, flow-node-data)."""

import pytest

from flowcore import parse
from tests.helpers.mermaid_oracle import agrees, fmt, rejected_at

BRACKETS = ["[x]", "(x)", "([x])", "[[x]]", "[(x)]", "((x))", "(((x)))", "{x}", "{{x}}", ">x]", "[/x/]", "[\\x\\]",
            "[/x\\]", "[\\x/]", "(-x-)", "[|borders:tb|x]"]


@pytest.mark.parametrize("shape", BRACKETS)
def test_every_bracket_shape(shape):
    agrees(f"flowchart TD\n  A{shape} --> B\n")


def test_trapezoid_is_not_lean():
    w = parse("flowchart TD\n  A[/x\\]\n  B[/y/]\n  C(-z-)\n")
    assert (w.nodes["A"].shape, w.nodes["B"].shape, w.nodes["C"].shape) == ("[/\\", "[/", "(-")
    out = fmt("flowchart TD\n  A[/x\\]\n  B[/y/]\n")
    assert 'A[/"x"\\]' in out and 'B[/"y"/]' in out


@pytest.mark.parametrize("name", ["rect", "rounded", "stadium", "cloud", "lean-r", "trap-t", "doc", "cyl", "fork",
                                  "bolt", "hourglass", "text", "notch-rect", "sm-circ", "flag", "tri", "bang"])
def test_shape_data_names(name):
    agrees(f'flowchart TD\n  A@{{ shape: {name}, label: "Go" }} --> B\n')


def test_ids_with_punctuation():
    w = parse("flowchart TD\n  a-b --> c.d\n  e_1 --> 42\n")
    assert list(w.nodes) == ["a-b", "c.d", "e_1", "42"]
    agrees("flowchart TD\n  a-b --> c.d\n  A&B --> é1\n  id#1 --> n:x\n")


def test_empty_labels():
    agrees("flowchart TD\n  A(( )) --> B[ ]\n")
    rejected_at("flowchart TD\n  A{}\n", 2)


def test_unknown_or_capitalised_shape_is_rejected():
    rejected_at("flowchart TD\n  A@{ shape: nosuch }\n", 2)
    rejected_at("flowchart TD\n  A@{ shape: Rect }\n", 2)
