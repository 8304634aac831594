"""Subgraphs: ids, titles, nesting, direction, membership (mermaid-js: flow-subgraph)."""

from flowcore import parse, to_mermaid
from tests.helpers.mermaid_oracle import agrees, rejected_at


def test_ids_titles_and_quoted_titles():
    text = 'flowchart TD\n  subgraph "Some Title"\n    A\n  end\n  subgraph S1 [One]\n    B\n  end\n  subgraph S2\n    C\n  end\n'
    agrees(text)
    w = parse(text)
    assert [(s.id, s.title) for s in w.subgraphs.values()] == [("subGraph0", "Some Title"), ("S1", "One"),
                                                                ("S2", "S2")]


def test_a_node_used_outside_first_belongs_where_mermaid_puts_it():
    text = "flowchart TD\n  A --> B\n  subgraph S\n    A\n  end\n"
    agrees(text)
    assert parse(text).nodes["A"].subgraph == "S"


def test_nesting_direction_and_classes_on_subgraphs():
    agrees("flowchart LR\n  subgraph outer\n    direction TB\n    subgraph inner\n      A --> B\n    end\n  end\n"
           "  class outer hot\n  classDef hot fill:#f96\n")


def test_a_subgraph_without_id_is_rejected_like_mermaid():
    rejected_at("flowchart TD\n  subgraph\n    A\n  end\n", 2)  # Mermaid names no line; ours is the subgraph's


def test_unclosed_subgraph_points_at_its_line():
    rejected_at("flowchart TD\n  subgraph S\n  A --> B\n", 2)


def test_fmt_of_a_thousand_nested_subgraphs_does_not_recurse():
    n = 1000
    text = "flowchart TD\n" + "".join(f"subgraph s{i}\n" for i in range(n)) + "A\n" + "end\n" * n
    w = parse(text)
    out = to_mermaid(w)  # (Mermaid itself is not asked here)
    assert out.count("subgraph ") == n and parse(out) == w


def test_classes_of_a_subgraph_whose_id_a_later_subgraph_takes_over():
    # Mermaid looks a subgraph's class up by id, and the last subgraph with that id wins: fmt prints the earlier
    # one's class right after its `end` (printed at the bottom it would class the later one)
    for text in ('flowchart TD\n  subgraph A10["solve"]\n    subgraph A10["solve"]\n    end\n'
                 '    class A10 hot\n  end\n',
                 "flowchart TD\n  subgraph X\n    A\n  end\n  class X c1\n  subgraph X\n    B\n  end\n  class X c2\n"):
        agrees(text)
        w = parse(text)
        assert parse(to_mermaid(w)) == w
