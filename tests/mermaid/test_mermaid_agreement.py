"""Differential tests: the soft reader and fmt against the bundled Mermaid 11, on generated flowcharts.

The property (issue #8): for every text Mermaid accepts, the soft reader accepts it and reads the same graph,
Mermaid's graph of fmt(text) is its graph of text, and fmt is a fixed point; for every text Mermaid rejects,
the soft reader rejects it at the line Mermaid names. benchmarks/mermaid_agreement.py runs thousands.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings

from flowcore.mermaid.agreement import compare, fmt_problem
from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.grammar import _TABLES, canonical_graph, graph_json, parse_flowchart, runtime_tables
from flowcore.mermaid.reader import parse_lenient, to_mermaid
from tests.helpers.flowchart_gen import flowchart_texts, text_from_random


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flowchart_texts())
def test_soft_reader_and_fmt_agree_with_mermaid(text):
    v = compare(text)
    assert v.outcome in ("agree-accept", "agree-reject"), (v.outcome, v.detail)
    assert not v.wrong_line, v.detail
    assert v.fmt_change is None, v.fmt_change


def test_the_fast_path_reads_what_the_grammar_reads():
    rng = random.Random(7)
    for _ in range(300):
        text = text_from_random(rng, broken=rng.random() < 0.2)
        fast, slow = parse_flowchart(text), parse_flowchart(text, fast=False)
        assert graph_json(fast.db) == graph_json(slow.db), text
        assert [e.message for e in fast.errors] == [e.message for e in slow.errors], text


def test_the_grammar_tables_are_the_bundled_mermaids():
    bundled = runtime_tables(mermaid_js.flowchart_grammar_tables())
    with open(_TABLES, encoding="utf-8") as f:
        stored = json.load(f)
    assert {k: v for k, v in stored.items() if k != "source"} == bundled


# Mermaid strips every line starting with '%%' (blanks before it too) as a comment before it lexes: fmt must not
# print a statement that opens with an id like '%%B', nor a label line starting with '%%' (found by the property
# test above at random).
PERCENT_TEXTS = [
    "flowchart TD\n    A --> %%B[hello] & %%C\n    A;%%B --> %%C\n",  # node ids, an edge from one
    'flowchart TD\n    subgraph %%S["%%title"]\n        A --> %%B("%%label")\n    end\n    A --> %%S\n',
    'flowchart TD\n    A["%%x"] --> B\n    A@{ shape: rect, label: "x\\n%% y" }\n',  # a label line '%% y'
    "flowchart TD\n    A %%e@--> B\n    ;%%e@{ animate: true }\n",  # an edge id and its data
    "flowchart TD\n    A --> %%B\n    class %%B foo\n    classDef foo stroke:#00f\n",
]


@pytest.mark.parametrize("text", PERCENT_TEXTS)
def test_fmt_keeps_ids_and_labels_starting_with_percents(text):
    from flowcore.mermaid.engines.js import mermaid_graph

    oracle = mermaid_graph(text)
    assert oracle["ok"], oracle.get("error")
    w, diags = parse_lenient(text)
    assert not [d for d in diags if d.code == "M001"], diags
    out = to_mermaid(w)
    want = canonical_graph(oracle, exact_order=False)
    again = mermaid_graph(out)
    assert again["ok"], (out, again.get("error"))
    assert canonical_graph(again, exact_order=False) == want, out  # Mermaid draws fmt's text as the original
    mine = parse_flowchart(out, recover=False)
    assert not mine.errors and canonical_graph(graph_json(mine.db), exact_order=False) == want, out
    assert to_mermaid(parse_lenient(out)[0]) == out  # a fixed point
    assert fmt_problem(text, oracle) is None
