"""The soft reader's speed-ups change nothing it reads: each is compared with the plain way on many inputs."""

from __future__ import annotations

import gc
import random
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore import check
from flowcore.mermaid.grammar import graph_json, parse_flowchart
from flowcore.mermaid.reader import _comment_lines, gc_paused, parse_lenient
from flowcore.mermaid.text import _COMMENT, Prepared, _CommentFinder
from flowcore.mermaid.text import lines as text_lines

# the characters that decide what a '%%' comment line is: '%', '{', line breaks, JS and non-JS blanks
_PIECES = ["%", "%%", "{", "\n", " ", "\t", "a", "\u00a0", "\u2028", "\r", "\x1c", "%%{", "\n%%", "}%%", "x\n"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=16))
def test_comment_lines_are_found_as_the_regex_finds_them(pieces):
    text = "".join(pieces)
    assert [m.span() for m in _CommentFinder.finditer(text)] == [m.span() for m in _COMMENT.finditer(text)]


def test_comment_finder_on_texts_with_many_comments():
    rng = random.Random(3)
    for _ in range(300):
        text = "".join(rng.choice(_PIECES + ["flowchart TD\n", "  %% note\n", "A --> B %% not a comment\n"])
                       for _ in range(rng.randint(0, 40)))
        assert [m.span() for m in _CommentFinder.finditer(text)] == [m.span() for m in _COMMENT.finditer(text)], text


_LINE_PIECES = ["%", "%%", "a", "\n", "\r", "\r\n", " ", "\u00e9", "\x0b", "\x1d", "\u2028", "\x85", "%%{", "\n\n"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_LINE_PIECES), max_size=14))
def test_comment_lines_are_the_lines_mermaid_cuts(pieces):
    # the reader cuts the '%%' lines out with str.find when there is no '\r', else splits every line. Mermaid 11 ends
    # a line at '\n', '\r\n' and '\r' only: the other breaks of str.splitlines ('\x0b', U+2028...) are in the line
    text = "".join(pieces)
    lines = re.split(r"\r\n|\r|\n", text)
    assert _comment_lines(text) == [line for line in lines if "%%" in line]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_LINE_PIECES), max_size=14))
def test_lines_are_cut_as_mermaid_cuts_them_with_or_without_a_carriage_return(pieces):
    text = "".join(pieces)
    want = re.split(r"\r\n|\r|\n", text)
    want = want[:-1] if not want[-1] else want  # (as splitlines: no empty line after the last break)
    assert text_lines(text) == want
    kept = text_lines(text, keepends=True)
    assert "".join(kept) == text and [re.sub(r"(\r\n|\r|\n)$", "", k) for k in kept] == want


def test_line_starts_with_every_kind_of_line_break():
    for text in ("a\nb\r\nc\rd", "flowchart TD\n  A --> B\n", "", "\n\n", "x"):
        pre = Prepared(text)
        assert pre.original_line_starts() == [0] + [i + 1 for i, ch in enumerate(text)
                                                   if ch == "\n" or (ch == "\r" and text[i + 1:i + 2] != "\n")]


# texts that make Prepared rewrite (and so map offsets back): CRLF, comments, directives, front matter,
# leading blanks, entities, a ';' after a style, blanks after '}'
_REWRITES = ["flowchart TD\n", "\r\n", "\r", "  %% note\n", "%%{init: {}}%%\n", "---\ntitle: x\n---\n", "   ",
             'A["a #quot; b"]\n', "style A fill:#f9f;\n", "B{x}   \n", "A --> B\n", "\n", "\u00a0", "C(c)\n"]


def test_many_positions_at_once_are_each_position():
    rng = random.Random(5)
    for _ in range(300):
        text = "".join(rng.choice(_REWRITES) for _ in range(rng.randint(0, 25)))
        pre = Prepared(text)
        offsets = [rng.randint(-2, len(pre.code) + 3) for _ in range(rng.randint(0, 40))]
        # (a vertex never placed has offset -1: read as the start of the text)
        assert pre.positions(offsets) == [pre.position(max(p, 0)) for p in offsets], (text, offsets)


def test_fast_path_inside_subgraphs_keeps_the_members():
    text = "flowchart TD\n  A --> B\n  subgraph S\n    C --> D\n    E[\"e\"]\n  end\n  F --> C\n"
    fast, slow = parse_flowchart(text), parse_flowchart(text, fast=False)
    assert graph_json(fast.db) == graph_json(slow.db)
    assert sorted(graph_json(fast.db)["subgraphs"][0]["nodes"]) == ["C", "D", "E"]


def test_a_class_on_a_fast_path_edge_is_its_own():
    text = "flowchart TD\n  A --> B\n  C --> D\n  class L_A_B_0 hot\n  classDef hot stroke:red\n"
    g = graph_json(parse_flowchart(text).db)
    assert [e["classes"] for e in g["edges"]] == [["hot"], []]
    assert g == graph_json(parse_flowchart(text, fast=False).db)


def test_gc_is_back_on_after_a_check_and_stays_off_if_it_was_off():
    assert gc.isenabled()
    check("flowchart TD\n  A --> B\n")
    parse_lenient("flowchart TD\n  A -->\n")  # an error on the way
    assert gc.isenabled()
    gc.disable()
    try:
        check("flowchart TD\n  A --> B\n")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_gc_paused_from_several_threads_ends_enabled():
    def work():
        for _ in range(20):
            with gc_paused():
                parse_lenient("flowchart TD\n" + "".join(f"  N{i} --> N{i + 1}\n" for i in range(50)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.isenabled()


def test_one_long_line_reads_in_linear_time():
    """Issue 20: a 300-character link expands to `flowchart TD;` + `A-->B;` x 20,000 on one line (120 KB). Mermaid's
    lexer rules that skip ahead to a word (`[^\\n]*direction ...`, `[^\\s"]+@`) made every token cost the rest of
    the line; they are tried only where their word comes before the skip ends, so the line reads in linear time."""
    import time

    def cpu(n: int) -> float:  # the least of 3 reads: the process's other threads (an earlier test's) add noise
        text = "flowchart TD;" + "A-->B;" * n
        spent = []
        for _ in range(3):
            t = time.process_time()
            check(text)
            spent.append(time.process_time() - t)
        return min(spent)

    small, big = cpu(5_000), cpu(20_000)
    assert big < 5.0, f"the 120 KB one-line chain took {big:.2f} s of CPU"  # was > 120 s
    assert big / max(small, 1e-3) < 7, (small, big)  # x4 the text, about x4 the time (quadratic would be x16)


def test_positions_in_one_pass_are_prepareds():
    """The conversion places every vertex and edge with convert.lines_columns (compiled) and the plain build's."""
    from flowcore.mermaid import compiled, reader

    plain = compiled.plain("convert")
    rng = random.Random(9)
    for _ in range(400):
        text = "".join(rng.choice(_REWRITES) for _ in range(rng.randint(0, 25)))
        pre = Prepared(text)
        offsets = [rng.randint(-2, len(pre.code) + 3) for _ in range(rng.randint(0, 40))]
        want = tuple(list(x) for x in pre.lines_columns(offsets))
        for module in (reader.convert, plain):
            got = module.lines_columns(pre._steps, pre.original_line_starts(), offsets, len(pre.original))
            assert tuple(got) == want, (text, offsets)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["(", ")", "role", "ROLE", "instruction", ":", " ", "\t", "\u00a0", "\u2028",
                                 "\u3000", "x", "solver", "\u0131", "\u017f", "K", "\n", "a b", "(role:", "\x85",
                                 "\u200b", "\x1c"]), max_size=12))
def test_the_prompt_name_is_the_one_the_lazy_pattern_reads(pieces):
    """convert reads (role: name) with a greedy pattern and strips the blanks itself: the same name as the lazy one."""
    import re

    from flowcore.mermaid import reader

    label = "".join(pieces)
    m = re.search(r"\(\s*(?:role|instruction)\s*:\s*([^)]*?)\s*\)", label, re.I)
    assert reader.convert.role_name(label) == ((m.group(1) or None) if m else None)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["---\n", "title: x\n", "  ---\n", "%%{init: {}}%%\n", "%% c\n", "  %% x\n",
                                 "flowchart TD\n", "graph LR\n", "  ", "\n", "\u00a0", "x", "%%", "{", "}%%",
                                 "swimlane-beta", "flowchart-elk", "\r\n"]), max_size=10))
def test_the_diagram_type_is_detected_as_the_three_rewrites_detect_it(pieces):
    """diagram_kind rewrites only where a pattern can match (the front matter only at the start)."""
    from flowcore.mermaid import text as t

    pre = Prepared("".join(pieces))
    head = pre.detect_text[:4000]
    cleaned = t._DETECT_CLEAN.sub("\n", t._DIRECTIVE.sub("", t._FRONT_MATTER.sub("", head, count=1)))
    m = t._HEADER_DETECT.match(cleaned)
    assert t.diagram_kind(pre) == (m.group(1) if m else None)


def test_the_plain_build_of_every_module_reads_what_the_compiled_one_reads(monkeypatch):
    """FlowDB, the driver and the conversion as Python runs them (what runs without a C compiler) against the build
    that runs here: the same model and diagnostics on generated texts."""
    from flowcore.mermaid import compiled, grammar, reader
    from tests.helpers.flowchart_gen import text_from_random

    rng = random.Random(13)
    texts = [text_from_random(rng, broken=rng.random() < 0.3) for _ in range(250)]
    want = [parse_lenient(t) for t in texts]
    monkeypatch.setattr(grammar, "lalr", compiled.plain("lalr"))
    monkeypatch.setattr(grammar, "FlowDB", compiled.plain("flowdb").FlowDB)
    monkeypatch.setattr(reader, "convert", compiled.plain("convert"))
    for text, (w, diags) in zip(texts, want, strict=True):
        got_w, got_diags = parse_lenient(text)
        assert got_w == w and got_diags == diags, text
        assert [(n.line, n.column) for n in got_w.nodes.values()] == [(n.line, n.column) for n in w.nodes.values()]


def test_a_diagnostic_made_the_fast_way_is_a_frozen_dataclass_as_before():
    import copy
    import dataclasses
    import pickle

    from flowcore.model import Diagnostic

    d = Diagnostic("M013", "warning", "node A names prompt 'x'", 3, 5, "A")
    assert d == Diagnostic("M013", "warning", "node A names prompt 'x'", 3, 5, "A") != Diagnostic("M013", "warning", "x")
    assert hash(d) == hash(copy.deepcopy(d)) and pickle.loads(pickle.dumps(d)) == d
    assert dataclasses.asdict(d) == {**d.to_dict(), "mermaid_at": None} and dataclasses.replace(d, line=4).line == 4
    moved = Diagnostic("M001", "error", "line 20: the edge label ...", 20, 16, mermaid_at=(21, 11))
    assert moved.to_dict()["mermaid_at"] == [21, 11] and pickle.loads(pickle.dumps(moved)) == moved
    assert moved != dataclasses.replace(moved, mermaid_at=None) and "mermaid_at" not in d.to_dict()
    assert Diagnostic("M1", "error", "m").line is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.line = 1  # type: ignore[misc]


def _corpus() -> list[str]:
    """The repository's own flowcharts, the benchmarks' shapes, the pathological families at small sizes and
    generated texts (a third of them broken)."""
    from pathlib import Path

    from benchmarks.check_speed import generated_workflow, papers
    from tests.helpers.flowchart_gen import text_from_random
    from tests.mermaid.test_pathological import FAMILIES

    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text(encoding="utf-8") for p in sorted(root.glob("assets/**/*.mmd"))]
    texts += [papers(10), papers(100), generated_workflow(10), generated_workflow(300)]
    texts += [make(n) for make in FAMILIES.values() for n in (1, 3, 40)]
    rng = random.Random(29)
    texts += [text_from_random(rng, broken=rng.random() < 0.3) for _ in range(300)]
    return texts


_READ_ALL = """
import json, sys
from flowcore import check
from flowcore.mermaid import grammar, reader
from flowcore.mermaid.reader import parse_lenient
texts = json.load(sys.stdin)
files = [grammar.lalr.__file__, grammar.flowdb.__file__, reader.convert.__file__]
out = []
for t in texts:
    w, diags = parse_lenient(t)
    out.append([repr(w), repr(diags), repr(check(t))])
json.dump({"files": files, "out": out}, sys.stdout)
"""


def _read_all(texts: list[str], plain: bool) -> dict:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "FLOWCORE_PLAIN_READER"}
    env["PYTHONHASHSEED"] = "2" if plain else "1"  # (a difference of string hashing would show too)
    if plain:
        env["FLOWCORE_PLAIN_READER"] = "1"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _READ_ALL], input=json.dumps(texts), capture_output=True,
                          text=True, env=env, cwd=root, timeout=600, check=True)
    return json.loads(done.stdout)


def test_without_a_compiler_python_reads_the_corpus_as_the_build_does():
    """What a machine without a C compiler runs (the .py files, FLOWCORE_PLAIN_READER=1 in a fresh process) reads
    every text of the corpus to the same model, positions and diagnostics, and checks it the same, as the build."""
    from flowcore.mermaid import compiled

    if not compiled.all_current():
        pytest.skip("the compiled reader is not built here (make build): nothing to compare the plain one with")
    texts = _corpus()
    built, plain = _read_all(texts, plain=False), _read_all(texts, plain=True)
    assert all(f.endswith(".so") for f in built["files"]), built["files"]
    assert all(f.endswith(".py") for f in plain["files"]), plain["files"]
    assert len(built["out"]) == len(texts)
    for text, b, p in zip(texts, built["out"], plain["out"], strict=True):
        assert b == p, text


def test_make_builds_every_module_the_reader_loads_compiled():
    """The Makefile's build target lists (and is re-run on a change of) every module compiled.py loads compiled."""
    import re
    from pathlib import Path

    from flowcore.mermaid import compiled

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text(encoding="utf-8")
    listed = re.search(r"^COMPILED := (.*)$", makefile, re.M)
    assert listed and tuple(listed.group(1).split()) == compiled.MODULES
    assert "flowcore/mermaid/compiled.py" in makefile and "$(m).pxd" in makefile
