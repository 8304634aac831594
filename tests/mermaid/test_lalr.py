"""The fast driver (flowcore/mermaid/lalr.py) reads what jison's loop reads, compiled by Cython or run as plain
Python, and a stale compiled build is never run."""

from __future__ import annotations

import os
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore.mermaid import compiled, grammar
from flowcore.mermaid.grammar import FlowDB, _Run, graph_json, parse_flowchart
from flowcore.mermaid.text import Prepared
from tests.helpers.flowchart_gen import text_from_random

PLAIN = compiled.plain("lalr")  # lalr.py as Python runs it, whether or not a compiled build exists


def _read(text: str, driver) -> tuple[dict, list[str]]:
    prepared = Prepared(text)
    db, errors = FlowDB(), []
    driver.run(_Run(prepared, db, errors, True, True))
    return graph_json(db), [e.message for e in errors]


def _reference(text: str) -> tuple[dict, list[str]]:
    res = parse_flowchart(text, fast=False)
    return graph_json(res.db), [e.message for e in res.errors]


def test_both_builds_read_what_the_reference_driver_reads():
    rng = random.Random(11)
    for _ in range(400):
        text = text_from_random(rng, broken=rng.random() < 0.3)
        if parse_flowchart(text).kind is None:
            continue  # not a flowchart: the driver never runs on it
        want = _reference(text)
        assert _read(text, PLAIN) == want, text
        assert _read(text, grammar.lalr) == want, text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("AB \n-->|[](){}\"@:;&x.o=~`#%\u00e9")
                                + ["direction TB", "class ", "end", "@{", "subgraph ", "style "]), max_size=40))
def test_any_text_after_a_header_reads_the_same(pieces):
    text = "flowchart TD\n" + "".join(pieces)
    want = _reference(text)
    assert _read(text, PLAIN) == want
    assert _read(text, grammar.lalr) == want


def test_the_lexer_keeps_only_rules_that_cannot_match_out():
    """For every start condition and first character, the rules a bucket leaves out never match text starting
    with that character (so the first rule that matches is jison's)."""
    g = grammar.grammar()
    t = PLAIN.tables(g)
    rng = random.Random(3)
    tails = ["", "a", "-->", " x", "]", "--", "\n", "direction TB", "@{", '"', "`", "b\\"]
    for name, rules in g.condition_rules.items():
        cond = t.condition(name)
        buckets = cond._buckets()
        for bucket in range(130):
            kept = {cond.rules[i] for i in buckets[bucket]}
            for k in set(rules) - kept:
                pattern = re.compile(g.condition_res._rules[k], re.ASCII)
                for _ in range(30):
                    ch = chr(bucket) if bucket < 128 else rng.choice("\u00e9\u2028\u00a0\u4e00")
                    if bucket == 129:
                        continue
                    assert pattern.match(ch + rng.choice(tails) + rng.choice(tails)) is None, (name, bucket, k)


@pytest.mark.parametrize("warm", [False, True])
def test_every_rule_at_once_and_by_first_character_read_the_same(warm):
    """A start condition lexes its first tokens with one regex of all its rules, then by first character: force
    each way for every condition and compare with the reference on the generated texts."""
    t = PLAIN.tables(grammar.grammar())
    for name in grammar.grammar().condition_rules:
        t.condition(name)
    saved = {name: c.uses for name, c in t.conditions.items()}
    rng = random.Random(5)
    try:
        for _ in range(150):
            for c in t.conditions.values():
                c.uses = PLAIN._WARM if warm else -10**9
            text = text_from_random(rng, broken=rng.random() < 0.3)
            if parse_flowchart(text).kind is None:
                continue  # not a flowchart: the driver never runs on it
            assert _read(text, PLAIN) == _reference(text), text
    finally:
        for name, c in t.conditions.items():
            c.uses = saved[name]


def test_a_papers_workflow_reads_the_same_in_every_build():
    lines = ["flowchart TD", "    PROBLEM([Problem])", '    S0["Custom<br/>(role: solver)"]',
             "    class S0 CustomOp", "    PROBLEM --> |input|S0", "    S0 --> RETURN([Return])"]
    text = "\n".join(lines) + "\n"
    assert _read(text, PLAIN) == _reference(text) == _read(text, grammar.lalr)


def test_a_stale_build_is_not_run(tmp_path, monkeypatch):
    (tmp_path / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(compiled, "HERE", str(tmp_path))
    assert not compiled.is_current("mod")  # no stamp: no build
    (tmp_path / "mod.build").write_text(compiled.source_hash("mod") + "\n")
    assert compiled.is_current("mod")
    (tmp_path / "mod.py").write_text("X = 2\n")  # edited after the build
    assert not compiled.is_current("mod")


def test_the_compiled_build_runs_when_make_built_it():
    if not compiled.is_current("lalr"):
        pytest.skip("no current compiled build of lalr.py (make build): the plain build runs, tested above")
    assert grammar.lalr.__file__.endswith(tuple(s for s in (".so", ".pyd"))), grammar.lalr.__file__
    assert os.path.basename(PLAIN.__file__) == "lalr.py"
