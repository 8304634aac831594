"""Shape data is read as Mermaid 11 reads it (js-yaml, JSON schema), checked against Mermaid itself: block scalars,
YAML 1.1 words that js-yaml keeps as text, numbers, lists, duplicate keys; and the text with two subgraphs sharing
one id reads and prints (fmt) as Mermaid draws it."""

from __future__ import annotations

import pytest

from flowcore.mermaid.agreement import compare
from flowcore.mermaid.grammar import load_yaml
from flowcore.mermaid.reader import parse, to_mermaid

CASES = {
    "block scalar": "flowchart TD\n  A@{ label: |\n      line one\n      line two\n    }\n  A --> B\n",
    "folded scalar": "flowchart TD\n  A@{ label: >\n    hello\n    world\n  }\n",
    "yes stays text": "flowchart TD\n  A@{ label: yes }\n",
    "on stays text": "flowchart TD\n  A@{ label: on }\n",
    "a date stays text": "flowchart TD\n  A@{ label: 2024-01-01 }\n",
    "1:20 stays text": "flowchart TD\n  A@{ label: 1:20 }\n",
    "underscored integer": "flowchart TD\n  A@{ label: 1_000 }\n",
    "hex integer": "flowchart TD\n  A@{ label: 0x1F }\n",
    "leading zero": "flowchart TD\n  A@{ label: 012 }\n",
    "float": "flowchart TD\n  A@{ label: 1.50 }\n",
    "null": "flowchart TD\n  A@{ label: ~ }\n",
    "a list": "flowchart TD\n  A@{ label: [a, b] }\n",
    "quotes": "flowchart TD\n  A@{ label: 'it''s', shape: circle }\n",
    "escapes": 'flowchart TD\n  A@{ label: "a\\tb" }\n',
    "a merge key is a key": "flowchart TD\n  A@{ <<: x, label: m }\n",
    "a key twice": "flowchart TD\n  A@{ label: a, label: b }\n",
    "two subgraphs, one id": 'flowchart TD\n  subgraph S["a"]\n    A\n  end\n  subgraph S["b"]\n    B\n  end\n  A --> B\n',
    "the second one nested": "flowchart TD\n  subgraph S\n    A\n  end\n  subgraph T\n    subgraph S\n      B\n    end\n"
                             "  end\n",
    "nested in itself": "flowchart TD\n  subgraph S\n    subgraph S\n      B\n    end\n  end\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_reads_and_prints_as_mermaid_does(name):
    v = compare(CASES[name])
    assert v.outcome in ("agree-accept", "agree-reject"), (v.outcome, v.detail)
    assert v.fmt_change is None, v.fmt_change


def test_the_values_js_yaml_gives():
    doc = load_yaml("{\n a: yes, b: 1_000, c: 0x1F, d: 2024-01-01, e: 1.5, f: ~, 1: x, true: y\n}")
    assert doc == {"a": "yes", "b": 1000, "c": 31, "d": "2024-01-01", "e": 1.5, "f": None, "1": "x", "true": "y"}
    assert load_yaml("label: |\n  line one\n  line two\nshape: rect\n") == {"label": "line one\nline two\n",
                                                                           "shape": "rect"}


def test_a_block_label_keeps_its_lines_through_fmt():
    w = parse(CASES["block scalar"])
    assert w.nodes["A"].label == "line one\nline two\n"
    assert parse(to_mermaid(w)).nodes["A"].label == "line one\nline two\n"


def test_the_nested_duplicate_prints_where_mermaid_draws_it():
    w = parse(CASES["the second one nested"])
    assert {k: s.parent for k, s in w.subgraphs.items()} == {"S": None, "S#2": "T", "T": None}
    assert (w.nodes["A"].subgraph, w.nodes["B"].subgraph) == ("S", "S#2")
