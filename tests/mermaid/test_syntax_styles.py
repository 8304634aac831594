"""classDef, class, :::, style, linkStyle, click (mermaid-js: flow-style, flow-lines, flow-interactions)."""

from flowcore import parse
from tests.helpers.mermaid_oracle import agrees, rejected_at


def test_style_statements_survive():
    agrees("flowchart TD\n  A --> B\n  style A fill:#f9f,stroke:#333;\n  linkStyle 0 stroke:red\n"
           "  classDef hot fill:#f96\n  class A,B hot\n  click A callback \"tip\"\n  click B href \"https://x.org\"\n")


def test_a_style_class_named_like_an_operator_alias_stays_a_style_class():
    w = parse("flowchart TD\n  A --> B\n  classDef Test fill:red\n  class A Test\n  class B TestOp\n")
    assert w.nodes["A"].op is None and w.nodes["A"].classes == ["Test"]
    assert w.nodes["B"].op == "TestOp"


def test_malformed_statements_are_rejected_at_their_line():
    rejected_at("flowchart TD\n  A --> B\n  linkStyle 3 stroke:red\n", 3)
    rejected_at("flowchart TD\n  A --> B\n  classDef\n", 3)
    rejected_at("flowchart TD\n  A --> B\n  class A\n", 3)
    rejected_at("flowchart TD\n  A --> B\n  style\n", 3)
