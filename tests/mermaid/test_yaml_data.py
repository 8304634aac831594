"""Shape data and the front matter are read as Mermaid 11 reads them (js-yaml, JSON schema), checked against Mermaid
itself: block scalars, YAML 1.1 words that js-yaml keeps as text, numbers, lists, duplicate keys, tags, tabs, YAML
1.2 flow syntax; the text with two subgraphs sharing one id reads and prints (fmt) as Mermaid draws it; a YAML
error is placed in the text; an alias bomb is refused at once."""

from __future__ import annotations

import pytest

from flowcore.mermaid import yamldata
from flowcore.mermaid.agreement import compare
from flowcore.mermaid.grammar import load_yaml
from flowcore.mermaid.reader import parse, parse_lenient, to_mermaid

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
    "a subgraph id only a quoted title spells": 'flowchart TD\n  subgraph ")T"\n  end\n  subgraph "`)U`"\n  end\n',
    # tags: only the JSON schema's, and an explicit one must fit its value
    "!!binary is unknown": "flowchart TD\n  A@{ label: !!binary aGVsbG8= }\n",
    "!!bool yes is an error": "flowchart TD\n  A@{ label: !!bool yes }\n",
    "!!str 12 is text": "flowchart TD\n  A@{ label: !!str 12 }\n",
    "a local tag is unknown": "flowchart TD\n  A@{ label: !x y }\n",
    # YAML 1.2 as js-yaml reads it, where PyYAML's 1.1 scanner differs
    "a tab inside text": "flowchart TD\n  A@{ label: a\tb, shape: rect }\n",
    "a tab before ':'": "flowchart TD\n  A@{ shape\t: circle, label: '  q''s' }\n",
    "'?' starts text": "flowchart TD\n  A@{ ?label: A chart, shape: rect }\n",
    "':' starts text": "flowchart TD\n  A@{ label: :::x }\n",
    "an empty key": "flowchart TD\n  A@{ : x, label: y }\n",
    "a value that is a pair": "flowchart TD\n  A@{ label: a, shape: rect: }\n",
    "an anchor name runs to a blank": "flowchart TD\n  A@{ label: &a: x }\n",
    "a label inside itself": "flowchart TD\n  A@{ label: &a [1, *a] }\n",
    "data that is text": "flowchart TD\n  A@{ label:|\n      line one\n    }\n",
    "data that is null": "flowchart TD\n  A@{ ~\n  }\n",
    "a document's text less indented than its first line": "flowchart TD\n  A@{ label |\n   lin\ne one\n  }\n",
    "a document's text indented as its first line": "flowchart TD\n  A@{ a b\n c\n}\n",
    "edge data that is null": "flowchart TD\n  A e1@--> B\n  e1@{ ~\n  }\n",
}

FRONT = {
    "the property test's: an unclosed '['": "---\n[title: A chart\n---\nflowchart TD\n A-->B",
    "a title": "---\ntitle: A chart\n---\nflowchart TD\n A-->B",
    "yes is text": "---\ntitle: yes\n---\nflowchart TD\n A-->B",
    "no key": "---\n: x\n---\nflowchart TD\n A-->B",
    "a key twice": "---\ntitle: a\ntitle: b\n---\nflowchart TD\n A-->B",
    "a list": "---\n- a\n- b\n---\nflowchart TD\n A-->B",
    "an unknown tag": "---\ntitle: !!binary aGVsbG8=\n---\nflowchart TD\n A-->B",
    "!!timestamp": "---\ntitle: !!timestamp 2001-01-01\n---\nflowchart TD\n A-->B",
    "aliases": "---\na: &x [1]\nb: *x\nc: &y [*y]\n---\nflowchart TD\n A-->B",
    "an open quote": '---\ntitle: "x\n---\nflowchart TD\n A-->B',
    "a tab as indentation": "---\n\tt: 1\n---\nflowchart TD\n A-->B",
    "a tab in text": "---\ntitle: A\t chart\n---\nflowchart TD\n A-->B",
    "a YAML directive": "---\n%YAML 1.2\n---\nflowchart TD\n A-->B",
    "a merge key is a key": "---\n<<: {a: 1}\n---\nflowchart TD\n A-->B",
    "flow key and value touching": "---\nconfig: {gantt:{a: 1}}\n---\nflowchart TD\n A-->B",
    "a multi-line flow key": "---\nconfig: {gant\n?0xt: {a: 1}}\n---\nflowchart TD\n A-->B",
    "a '%%' line in a block scalar is YAML, not a comment": "---\ntitle: |\n  two\n  %%lines\n---\n%% c\nflowchart TD\n A-->B",
    "a block scalar under its key, not indented": "---\ntitle:\n|\n  two\n---\nflowchart TD\n A-->B",
    "a tab after '|'": "---\ntitle: |\t\n  two\n---\nflowchart TD\n A-->B",
    "a blank line holding a tab": "---\na: |\n  x\n \t\nb: 2\n  \t# c\n---\nflowchart TD\n A-->B",
    "an anchor on a mapping's first key": "---\nconfig:\n  flowchart:\n   ! curve: basis\n---\nflowchart TD\n A-->B",
    "an anchor on a later key": "---\na: 1\n&x b: 2\n? &y c\n: 3\n---\nflowchart TD\n A-->B",
    "an anchor in a list item's mapping": "---\na:\n  - &x b: 1\n---\nflowchart TD\n A-->B",
    # processFrontmatter writes config.gantt.displayMode: a config (or gantt) that is a number or text throws
    "displayMode, config a number": "---\ndisplayMode: x\nconfig: 5\n---\nflowchart TD\n A-->B",
    "displayMode, config 0": "---\ndisplayMode: x\nconfig: 0\n---\nflowchart TD\n A-->B",
    "displayMode, config a list": "---\ndisplayMode: x\nconfig: [1]\n---\nflowchart TD\n A-->B",
    "displayMode, gantt text": '---\ndisplayMode: x\nconfig: {gantt: "s"}\n---\nflowchart TD\n A-->B',
    "displayMode 0": "---\ndisplayMode: 0\nconfig: 5\n---\nflowchart TD\n A-->B",
    "a second front matter after a comment": "%% c\n---\ntitle: [\n---\nflowchart TD\n A-->B",
}


@pytest.mark.parametrize("name", list(FRONT))
def test_front_matter_is_read_as_mermaid_reads_it(name):
    v = compare(FRONT[name])
    assert v.outcome in ("agree-accept", "agree-reject"), (v.outcome, v.detail)
    assert v.fmt_change is None, v.fmt_change


def test_fmt_keeps_comments_around_the_front_matter_and_none_from_inside_it():
    w, _ = parse_lenient("%% c\n---\ntitle: |\n  %%x\n---\n%% d\nflowchart TD\n  A --> B\n")
    assert [e.split("%%")[-1].strip() for e in w.extras] == ["c", "d"]
    w, _ = parse_lenient("---\ntitle: |\n  two\n  %%lines\n---\nflowchart TD\n  A --> B\n")
    assert not w.extras and "%%lines" in w.front_matter


def test_a_front_matter_error_names_its_place_in_the_text():
    _, diags = parse_lenient("%% top\n---\ntitle: ok\nconfig: {a: 1\n---\nflowchart TD\n A-->B\n")
    (d,) = [d for d in diags if d.code == "M001"]
    assert "front matter" in d.message and "YAML" in d.message, d.message
    assert (d.line, d.column) == (4, 14), d  # the end of the YAML, where the '}' is missing
    _, diags = parse_lenient("---\ntitle: a\ntitle: b\n---\nflowchart TD\n A-->B\n")
    (d,) = [d for d in diags if d.code == "M001"]
    assert "duplicated mapping key" in d.message and (d.line, d.column) == (3, 1), d


@pytest.mark.parametrize("char", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e"], ids=lambda c: f"U+{ord(c):04X}")
def test_a_character_yaml_does_not_allow_is_an_error_in_the_text_not_a_traceback(char):
    """js-yaml refuses '\\v', '\\f', '\\x1c'-'\\x1e' ("the stream contains non-printable characters"), and so does
    PyYAML, but in its reader's constructor, before the code that turns its errors into diagnostics: the check and
    the Editor raised a ReaderError (a '%%' line with a separator, pasted into the front matter, was enough)."""
    from flowcore import check
    from flowcore.mermaid.engines.js import mermaid_graph

    for text, line, column in ((f"---\ntitle: ok\n%% a note{char} more\n---\nflowchart TD\n  A --> B\n", 3, 10),
                               (f'flowchart TD\n  A@{{ label: "a{char}b" }}\n  A --> B\n', 2, 3)):
        assert not mermaid_graph(text)["ok"], text
        for diags in (parse_lenient(text)[1], check(text)):
            d = next(d for d in diags if d.code == "M001")
            assert "non-printable characters" in d.message and f"U+{ord(char):04X}" in d.message, d
            assert (d.line, d.column) == (line, column), d  # the front matter's: the character itself


def test_an_alias_bomb_is_refused_at_once():
    import time

    levels = ["a: &a [x,x,x,x,x,x,x,x,x,x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(9)]
    t0 = time.process_time()
    for text in ("---\n" + "\n".join(levels) + "\n---\nflowchart TD\n A-->B\n",
                 "flowchart TD\n  A@{\n" + "\n".join(levels) + "\nlabel: *j\n}\n"):
        _, diags = parse_lenient(text)
        (d,) = [d for d in diags if d.code == "M001"]
        assert "alias" in d.message, d.message
    assert time.process_time() - t0 < 1.0  # 10**10 values if built: refused before building anything
    # the mapping and its 3 keys; a: a list of 10 (11); b: a list of 10 a's (1 + 110); c: of 10 b's (1 + 1110)
    assert yamldata.expanded_size(yamldata._loader()("\n".join(levels[:3])).get_single_node()) == 4 + 11 + 111 + 1111


def test_a_small_alias_tree_is_read_as_mermaid_reads_it():
    v = compare("flowchart TD\n  A@{\na: &a [x, y]\nb: &b [*a, *a]\nlabel: *b\n}\n")
    assert v.outcome == "agree-accept" and v.fmt_change is None, (v.outcome, v.detail, v.fmt_change)
    assert parse("flowchart TD\n  A@{\na: &a [x, y]\nb: &b [*a, *a]\nlabel: *b\n}\n").nodes["A"].label == "x,y,x,y"


def test_tags_outside_the_json_schema_are_errors():
    for doc in ("a: !!binary aGVsbG8=", "a: !!set {x}", "a: !!bool yes", "a: !!int x", "a: !foo x"):
        with pytest.raises(yamldata.YamlDataError) as e:
            yamldata.load(doc)
        assert e.value.line == 1 and e.value.column == 4, (doc, e.value.line, e.value.column)
    assert yamldata.load("a: !!str 12\nb: !!float 1\nc: on") == {"a": "12", "b": 1.0, "c": "on"}


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


def _m001(text: str):
    _, diags = parse_lenient(text)
    return [d for d in diags if d.code == "M001"]


def test_yaml_over_its_size_is_refused_before_it_is_read_naming_the_bound():
    import time

    t0 = time.process_time()
    (d,) = _m001("---\nconfig: [" + "1," * 200_000 + "1]\n---\nflowchart TD\nA-->B\n")  # 400 KB: 9-17 s to load
    assert "front matter" in d.message and "at most 16,384" in d.message and (d.line, d.column) == (2, 1), d
    assert "alias" not in d.message  # a plain list is no alias bomb
    (d,) = _m001("flowchart TD\nA --> B\nC@{ x: [" + "1," * 5000 + "1] }\n")
    assert "at most 8,192" in d.message and d.line == 3, d
    # 1 MB of node data in pieces under the per-node bound: the text's YAML has one bound in all
    diags = _m001("flowchart TD\n" + "".join(f"A{i}@{{ x: [" + "1," * 4000 + "1] }\n" for i in range(128)))
    assert diags and "at most 32,768 are read in one text" in diags[0].message and diags[0].line == 6, diags[0]
    assert time.process_time() - t0 < 3.0  # three texts that took 9 + 26 s to load


def test_yaml_nested_past_the_bound_is_refused_as_the_scanner_reaches_it():
    (d,) = _m001("flowchart TD\nA@{ x: " + "[" * 4000 + "]" * 4000 + " }\n")  # under the size bound
    assert "nested deeper than 64 levels" in d.message and d.line == 2, d
    (d,) = _m001("---\nconfig:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(100)) + "---\nflowchart TD\n")
    assert "front matter" in d.message and "nested deeper than 64" in d.message and d.line == 66, d
    (d,) = _m001("---\nconfig:\n  " + "- " * 3000 + "x\n---\nflowchart TD\nA-->B\n")
    assert "nested deeper than 64" in d.message, d


def test_yaml_within_the_bounds_is_read_whole():
    w = parse("flowchart TD\nA@{ label: " + "[" * 60 + "x" + "]" * 60 + " }\n")
    assert w.nodes["A"].label == "x"
    assert not _m001("---\nconfig:\n  " + "- " * 60 + "x\n---\nflowchart TD\nA-->B\n")
    assert not _m001("---\nconfig:\n  themeVariables: {" + ", ".join(f"v{i}: '#ffffff'" for i in range(500))
                     + "}\n---\nflowchart TD\nA-->B\n")  # a large real config, 8 KB
    text = "flowchart TD\n" + "".join(f"A{i}@{{ label: '{'x' * 2000}' }}\n" for i in range(15))
    assert parse(text).nodes["A14"].label == "x" * 2000  # 30 KB of node data in all: under the text's bound
    with pytest.raises(yamldata.YamlDataError) as e:
        yamldata.load("x: " + "y" * 9000)
    assert e.value.bound and "at most 8,192" in e.value.message
