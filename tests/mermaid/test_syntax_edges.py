"""Edge labels, edge ids and edge data (mermaid-js: flow-edges, flow-text)."""

from tests.helpers.mermaid_oracle import agrees, edges, fmt, rejected_at


def test_pipe_and_inline_text_labels():
    assert edges("flowchart TD\n  A -->|yes| B\n  A -- no --> C\n  A --yes--> D\n  A -- \"test()\" --> E\n") == [
        ("A", "B", "-->", "yes"), ("A", "C", "-->", "no"), ("A", "D", "-->", "yes"), ("A", "E", "-->", "test()")]
    agrees("flowchart TD\n  A -- \"test()\" --> E\n  A == big ==> F\n  A -. dotted .-> G\n  A <-- both --> H\n")


def test_a_chain_with_a_text_arrow_is_not_misread():
    assert edges("flowchart TD\n  A -- yes --x B --> C\n") == [("A", "B", "--x", "yes"), ("B", "C", "-->", None)]
    agrees("flowchart TD\n  A -- yes --x B --> C\n")


def test_edge_ids_and_edge_data_survive_fmt():
    text = "flowchart LR\n  A e1@--> B\n  e1@{ animate: true }\n  class e1 hot\n  classDef hot stroke:red\n"
    agrees(text)
    out = fmt(text)
    assert "A e1@--> B" in out and "e1@{ animate: true }" in out


def test_quotes_or_braces_inside_pipe_labels_are_rejected():
    rejected_at('flowchart LR\n  A -->|a "b" c| B\n', 2)
    rejected_at("flowchart LR\n  A -->|a {b}| B\n", 2)


def test_markdown_edge_label():
    agrees('flowchart LR\n  A -->|"`**bold**`"| B\n')
