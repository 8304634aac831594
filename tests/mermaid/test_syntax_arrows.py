"""Arrows: heads, strokes, lengths, double-ended and invisible links (mermaid-js: flow-arrows)."""

import pytest

from tests.helpers.mermaid_oracle import agrees, edges, rejected_at

ARROWS = ["-->", "--->", "---", "----", "-.->", "-..->", "-.-", ".->", "<.->", "==>", "===", "====>", "--x", "--o",
          "x--x", "o--o", "<-->", "<==>", "<-.->", "~~~", "~~~~", "==x", "-.-o"]


@pytest.mark.parametrize("arrow", ARROWS)
def test_every_arrow_reads_as_mermaid_does(arrow):
    agrees(f"flowchart LR\n  A {arrow} B\n")


def test_heads_without_spaces_and_canonical_spellings():
    assert edges("flowchart LR\n  A--xB\n  C o--o D\n  E <--> F\n  G .-> H\n") == [
        ("A", "B", "--x", None), ("C", "D", "o--o", None), ("E", "F", "<-->", None), ("G", "H", "-.->", None)]
    agrees("flowchart LR\n  A--xB\n")


def test_length_is_kept_and_capped_like_mermaid():
    assert edges("flowchart LR\n  A ----> B\n")[0][2] == "---->"
    agrees("flowchart LR\n  A " + "-" * 20 + "> B\n")


def test_a_link_that_never_ends_is_rejected_where_mermaid_says():
    rejected_at("flowchart LR\n  A == x --> B\n", 2)
