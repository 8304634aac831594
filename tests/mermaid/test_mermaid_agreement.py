"""Differential tests: the soft reader and fmt against the bundled Mermaid 11, on generated flowcharts.

The property (issue #8): for every text Mermaid accepts, the soft reader accepts it and reads the same graph,
Mermaid's graph of fmt(text) is its graph of text, and fmt is a fixed point; for every text Mermaid rejects,
the soft reader rejects it at the line Mermaid names. benchmarks/mermaid_agreement.py runs thousands.
"""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings

from flowcore.mermaid.agreement import compare
from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.grammar import _TABLES, graph_json, parse_flowchart, runtime_tables
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
