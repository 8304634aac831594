"""The fast driver (flowcore/mermaid/lalr.py) reads what jison's loop reads, compiled by Cython or run as plain
Python, and a stale compiled build is never run. (The lexer's DFA against Python's re: test_lexdfa.py.)"""

from __future__ import annotations

import os
import random

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


def test_the_skip_ahead_rules_are_left_out_only_where_they_cannot_match():
    """A token starts with Mermaid's `[^\\n]*direction...` and `[^\\s"]+@` rules left out while their literal does not
    come before the end of their skip (one long line stays linear): force every mask and compare with the reference."""
    t = PLAIN.tables(grammar.grammar())
    dfa = t.dfa
    saved = dfa.start_tab
    rng = random.Random(5)
    try:
        for _ in range(150):
            # every slot answered as if both skip-ahead rules were always kept (mask 3), as the reference lexer does
            dfa.start_tab = type(saved)("i", [-1]) * len(saved)
            for cond in range(len(t.cond_names)):
                for prev in (0, 1):
                    full = t.start((cond * t.masks + t.masks - 1) * 2 + prev)
                    for mask in range(t.masks):
                        dfa.start_tab[(cond * t.masks + mask) * 2 + prev] = full
            text = text_from_random(rng, broken=rng.random() < 0.3)
            if parse_flowchart(text).kind is None:
                continue
            assert _read(text, PLAIN) == _reference(text), text
    finally:
        dfa.start_tab = type(saved)("i", [-1]) * len(saved)


def test_a_lexer_that_cannot_be_built_leaves_the_reference_driver(monkeypatch):
    text = 'flowchart TD\n  A["x"] -->|y| B{z}\n  class A hot\n'
    want = _reference(text)
    t = grammar.lalr.tables(grammar.grammar())
    monkeypatch.setattr(t, "dfa", None)
    assert grammar.lalr.run(_Run(Prepared(text), FlowDB(), [], True, True)) is False
    res = parse_flowchart(text)  # (fast=True) falls back to the reference driver, same answer
    assert (graph_json(res.db), [e.message for e in res.errors]) == want


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
    if not compiled.all_current():
        pytest.skip("no current compiled build (make build): the plain build runs, tested above")
    from flowcore.mermaid import reader

    for module in (grammar.lalr, grammar.flowdb, reader.convert):
        assert module.__file__.endswith((".so", ".pyd")), module.__file__
    assert os.path.basename(PLAIN.__file__) == "lalr.py"


def test_the_modules_are_used_all_compiled_or_all_plain(tmp_path, monkeypatch):
    """convert's compiled loop reads flowdb's compiled records: one stale module means none compiled is used."""
    monkeypatch.setattr(compiled, "HERE", str(tmp_path))
    monkeypatch.setattr(compiled, "_ALL_CURRENT", None)
    for name in compiled.MODULES:
        (tmp_path / f"{name}.py").write_text("X = 1\n")
        (tmp_path / f"{name}.build").write_text(compiled.source_hash(name) + "\n")
    assert compiled.all_current()
    monkeypatch.setattr(compiled, "_ALL_CURRENT", None)
    (tmp_path / "flowdb.py").write_text("X = 2\n")
    assert not compiled.all_current()
