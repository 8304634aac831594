"""Chains and & groups (mermaid-js: flow-vertice-chaining)."""

from tests.helpers.mermaid_oracle import agrees, edges


def test_chains_and_groups_give_mermaids_edges_in_order():
    assert edges("flowchart TD\n  A & B --> C & D --> E\n") == [
        ("A", "C", "-->", None), ("A", "D", "-->", None), ("B", "C", "-->", None), ("B", "D", "-->", None),
        ("C", "E", "-->", None), ("D", "E", "-->", None)]
    agrees("flowchart TD\n  A & B --> C & D --> E\n  A:::c-->B\n  classDef c fill:red\n")


def test_semicolons_and_indentation():
    agrees("flowchart TD;A-->B;B-->C;\n\tC --> D\n")
