"""The hard check through the real Mermaid 11 parser (mermaidx/QuickJS): acceptance, mapped lines, wording."""

import re
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.engines.js import (
    MermaidError,
    MermaidRenderError,
    humanize,
    parse_check,
    render_png,
    render_svg,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"
RAW_TOKEN = re.compile(r"\b(SQE|PE|SQS|PS|TAGEND|TAGSTART|NODE_STRING|START_LINK|LINK|DIAMOND_STOP|EOF"
                       r"|UNICODE_TEXT|SPACE|NEWLINE|SUBROUTINEEND|SEMI)\b")

VALID = """flowchart TD
    %% @prompt solver: Solve the problem step by step.
    PROBLEM(["Problem"])
    C1["Custom<br/>(role: solver)"]
    RETURN(["Return"])
    class C1 CustomOp
    PROBLEM -->|input| C1
    C1 --> RETURN
"""


def test_valid_flowchart_is_accepted():
    assert parse_check(VALID) is None


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.mmd")), ids=lambda p: p.name)
def test_shipped_examples_are_accepted(path):
    assert parse_check(path.read_text()) is None


def test_unclosed_bracket_on_line_3_is_reported_on_line_3():
    text = "flowchart TD\n    A[Start] --> B\n    C[oops --> D\n    D --> E\n"
    err = parse_check(text)
    assert isinstance(err, MermaidError)
    assert err.line == 3
    assert err.message.startswith("line 3:")
    assert "not closed" in err.message and "']'" in err.message
    assert "Parse error" in err.raw  # Mermaid's own message is kept unchanged


def test_bad_arrow_line_and_column():
    text = "flowchart TD\n  A --> B\n  B -x-> C\n  C --> D\n"
    err = parse_check(text)
    assert err is not None and (err.line, err.column) == (3, 5)  # column of "-x", 1-based
    assert "arrow" in err.message and "'-x'" in err.message


def test_lines_count_from_the_original_text_despite_what_mermaid_drops():
    # Mermaid removes front matter, directives, comment and leading blank lines before it counts lines.
    text = ("---\ntitle: demo\n---\n\n%%{init: {'theme': 'dark'}}%%\nflowchart LR\n"
            "  %% a comment\n\n  A --> B\n  B -x-> C\n")
    err = parse_check(text)
    assert err is not None and err.line == 10 and err.column == 5


def test_crlf_text_keeps_its_lines():
    err = parse_check("flowchart TD\r\n  A --> B\r\n  B[x --> C\r\n")
    assert err is not None and err.line == 3


def test_unclosed_subgraph_points_at_the_subgraph():
    err = parse_check("flowchart TD\n  A --> B\n  subgraph S\n    B --> C\n")
    assert err is not None and err.line == 3 and "'end'" in err.message


def test_not_a_diagram_and_empty_text():
    err = parse_check("%% notes\nflowchrt TD\n  A --> B\n")
    assert err is not None and err.line == 2 and "flowchart TD" in err.message
    empty = parse_check("")
    assert empty is not None and "empty" in empty.message


@pytest.mark.parametrize("text", [
    "flowchart TD\n  A[x] --> B(y>\n",
    "flowchart TD\n  A[x]] --> B\n",
    "flowchart TD\n  A -->|lbl B\n",
    "flowchart TD\n  subgraph S\n  A --> B\n  end end\n",
    "flowchart TD\n  A --> B\n  classDef\n",
    "flowchart TD\n  A --> B\n  B -x-> C\n",
])
def test_messages_have_no_parser_token_names(text):
    err = parse_check(text)
    assert err is not None and err.line is not None
    assert not RAW_TOKEN.search(err.message), err.message
    assert RAW_TOKEN.search(err.raw)  # ... which the raw message does have


def test_humanize_translates_tokens_and_keeps_the_line():
    raw = ("Parse error on line 4:\n...B[label>\n---------^\n"
           "Expecting 'SQE', 'PE', 'DIAMOND_STOP', 'STADIUMEND', got 'TAGEND'")
    text = humanize(raw)
    assert text.startswith("line 4:")
    assert "']'" in text and "')'" in text and "'>'" in text and "close the node label" in text
    assert not RAW_TOKEN.search(text)
    assert humanize(raw, line=9).startswith("line 9:")
    eof = humanize("Parse error on line 2:\n...\nExpecting 'SEMI', 'NEWLINE', 'LINK', got 'NODE_STRING'")
    assert eof.startswith("line 2:") and "'-->'" in eof and not RAW_TOKEN.search(eof)


def test_render_svg_contains_the_labels():
    svg = render_svg("flowchart LR\n  A[Draft answer] --> B{Check it}\n  B --> C([Done])\n")
    assert svg.lstrip().startswith("<svg") and "</svg>" in svg
    for label in ("Draft answer", "Check it", "Done"):
        assert label in svg


def test_render_svg_bad_text_raises_a_clear_error():
    with pytest.raises(MermaidRenderError) as info:
        render_svg("flowchart TD\n  A --> B\n  C[oops --> D\n")
    assert "line 3" in str(info.value) and info.value.error is not None and info.value.error.line == 3


def test_render_png_is_a_png_at_the_requested_scale():
    text = "flowchart LR\n  A[one] --> B[two]\n"
    small, big = render_png(text, scale=1.0), render_png(text, scale=2.0)
    assert small[:8] == big[:8] == b"\x89PNG\r\n\x1a\n"
    width = lambda png: int.from_bytes(png[16:20], "big")  # noqa: E731 - IHDR width
    assert abs(width(big) - 2 * width(small)) <= 2
    with pytest.raises(ValueError):
        render_png(text, scale=0)


def test_600_edges_pass_the_check():
    # Mermaid refuses more than 500 edges by default; the hard check raises that limit.
    text = "flowchart TD\n" + "\n".join(f"  n{i} --> n{i + 1}" for i in range(600)) + "\n"
    assert parse_check(text) is None


def test_oversized_text_is_refused_with_a_reason():
    err = parse_check("flowchart TD\n" + "%%" + "x" * mermaid_js.MAX_CHECK_CHARS)
    assert err is not None and "too large" in err.message


def test_parse_from_four_threads():
    goods = [f"flowchart TD\n  T{k}[thread {k}] --> U{k}\n" for k in range(4)]
    bads = [f"flowchart TD\n  A --> B\n  T{k}[oops --> U\n" for k in range(4)]
    results: dict[int, tuple] = {}

    def work(k: int) -> None:
        results[k] = tuple(parse_check(t) for t in (goods[k], bads[k]) for _ in range(3))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(results) == [0, 1, 2, 3]
    for res in results.values():
        assert res[:3] == (None, None, None)
        assert all(e is not None and e.line == 3 for e in res[3:])


def test_wrong_type_is_a_clear_error():
    with pytest.raises(TypeError, match="str"):
        parse_check(b"flowchart TD")  # type: ignore[arg-type]


_FRAGMENTS = ["A", "B1", "-->", "---", "-.->", "==>", "-x->", "|lbl|", "[", "]", "(", ")", "{", "}", '"', "&",
              ";", "%% note", "subgraph S", "end", "class A Op", "  ", "é", "<br/>", ":::C", "--"]


@settings(max_examples=40)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=6).map(" ".join), min_size=1, max_size=8),
       st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_any_text_gives_none_or_an_error_inside_the_text(body, newline, front_matter):
    head = ["---", "title: t", "---"] if front_matter else []
    lines = head + ["flowchart TD"] + body
    err = parse_check(newline.join(lines) + newline)
    if err is not None:
        assert err.message and err.raw
        assert err.line is not None and 1 <= err.line <= len(lines), (err, lines)
        if err.column is not None:
            assert 1 <= err.column <= len(lines[err.line - 1]) + 1, (err, lines)


# ------------------------------------------------------------------ the fast parse context gives Mermaid's answers

def _broken_variants() -> list[str]:
    he = (EXAMPLES / "humaneval_case_study.mmd").read_text()
    lines = he.splitlines()
    return [
        he.replace('G1["CustomCodeGenerate<br/>(instruction: clear)"]', 'G1["CustomCodeGenerate<br/>(instruction: clear)"'),
        he.replace("T1 -->|verdict| D1", "T1 -x-> D1"),
        he.replace("D1 -->|Passed| RETURN", "D1 -->|Passed RETURN"),
        he.replace('E1["ScEnsemble"]', 'E1["ScEnsemble]'),
        he.replace('E1["ScEnsemble"]', "E1[ScEnsemble(x)]"),
        he.replace('D1{"Decision<br/>tests passed?"}', 'D1{"Decision<br/>tests passed?"'),
        he + "    subgraph S\n    A --> B\n",
        he + "    end\n",
        he + "    A --> B --> \n",
        he + '    X@{ shape: nosuch, label: "x" }\n',
        he + '    X@{ shape: rect, label: "x"\n',
        he + "    e1@--> A\n",
        he + "    click A href\n",
        he + "    classDef\n",
        he + "    A --> B\n    B -- text --> C\n    C == thick ==> \n",
        he + "    A[`**md** string` --> B\n",
        he + "    A((((x)))) --> B\n",
        he.replace("flowchart TD", "flowchart XY"),
        he.replace("flowchart TD", "flowchrt TD"),
        "---\ntitle: t\n---\n%%{init: {'theme': 'dark'}}%%\n" + he + "  A --> (\n",
        "\n".join(lines[:20]) + "\n    PROBLEM -->|problem",
        he.replace("-->", "-- >", 1),
        he + "    Ä --> ñ[ünïcødé — label] --> 中文\n",
        he + "    A --> B;;; C\n",
        he.replace("\n", "\r\n").replace("G4 -->|solution| T2", "G4 -->|solution| T2 ]"),
    ]


def _random_texts(n: int = 40) -> list[str]:
    import random

    rnd = random.Random(7)
    return ["flowchart TD\n" + "\n".join(" ".join(rnd.choices(_FRAGMENTS, k=rnd.randint(0, 6)))
                                         for _ in range(rnd.randint(1, 8))) + "\n" for _ in range(n)]


@pytest.fixture(scope="module")
def plain_engine():
    eng = mermaid_js._ParseEngine(fast=False)
    eng.start()
    yield eng
    eng.close()


def test_fast_parse_context_is_in_place():
    parse_check(VALID)
    assert mermaid_js._engine("parse").fast_ready


def test_fast_and_plain_mermaid_parse_agree(plain_engine):
    fast = mermaid_js._engine("parse")
    texts = [p.read_text() for p in sorted(EXAMPLES.glob("*.mmd"))] + _broken_variants() + _random_texts()
    rejected = 0
    for text in texts:
        a, b = fast.parse(text), plain_engine.parse(text)
        assert a == b, text  # same accept/reject, same raw message, same hash (token, loc, expected)
        rejected += not a["ok"]
    assert rejected >= 30  # the broken variants really are broken, so errors were compared too
