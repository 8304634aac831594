"""Attacks on the Export page's code views (flowcore.ui.code_view) and Home's markdown table (safe.table): the
text comes back whole as text, a character that hides or reorders what is seen is marked where it stands, and a
table cell shows exactly what it holds."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from flowcore.mermaid.safe import plain, table
from flowcore.ui import code_view

HIDDEN = ["\u202e", "\u2066", "\u200f", "\u200b", "\ufeff", "\U000e0041", "\x00", "\x1b", "\x7f", "\u00ad"]
BREAKOUT = ('</code></pre></div><style>body{display:none}</style><img src=http://evil.example/i onerror=x()>'
            '<link rel=prefetch href=//evil.example><!--<script>alert(1)</script>]]><svg onload=x()>"\'&amp;')


def _box(out: str) -> str:
    return out.split("</style>", 1)[1]


def _text(out: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", _box(out)))


@pytest.mark.parametrize("language", ["python", "json", None])
def test_bidi_invisible_and_control_characters_are_marked_and_kept(language):
    text = "x = '" + "|".join(HIDDEN) + "edoc neddih'\n"
    out = code_view.html(text, language, line_numbers=True)
    assert _text(out).lstrip(" 1") == text  # after its line number
    marks = re.findall(r'<span class="mf-hidden" data-u="([0-9A-F]{4,6})">(.)</span>', out, re.S)
    assert [chr(int(u, 16)) for u, _ in marks] == [c for _, c in marks] == HIDDEN
    assert not any(c in re.sub(r'<span class="mf-hidden"[^>]*>.</span>', "", out, flags=re.S) for c in HIDDEN)
    css = code_view.stylesheet()  # isolated (an override ends with its span), drawn by the stylesheet, not copied
    assert ".mf-code .mf-hidden {unicode-bidi: isolate" in css and 'content: "U+" attr(data-u)' in css


@pytest.mark.parametrize("language", ["python", "json", None])
def test_breakout_markup_with_hidden_characters_stays_text_in_spans(language):
    text = BREAKOUT + "\u202e" + BREAKOUT + "\r\n"
    out = code_view.html(text, language)
    assert _text(out) == text.replace("\r\n", "\n")  # Pygments reads CRLF as a line end
    assert set(re.findall(r"<(/?\w+)", _box(out))) <= {"div", "/div", "pre", "/pre", "code", "/code", "span",
                                                      "/span"}
    attributes = {a for tag in re.findall(r"<\w+[^>]*>", _box(out)) for a in re.findall(r"\s([\w-]+)=", tag)}
    assert attributes <= {"class", "data-u"}


def test_a_lone_surrogate_and_a_huge_line_come_back_without_an_error():
    out = code_view.html("a = '\ud800'\n" + "b = '" + "(" * 50_000 + "'\n", "python")
    assert "\ud800" in out and _text(out).count("(") == 50_000


@pytest.mark.parametrize("cell", ["&amp; &lt;b&gt; &#124;", ":red[x] :red y", "a:smile: :+1: :material/warning:",
                                  "one\n| injected | row |", "\\|", "x\u2028| y"])
def test_a_table_cell_is_one_cell_shown_as_typed(cell):
    lines = table([{"name": cell, "n": 1}]).split("\n")
    assert len(lines) == 3
    got = re.split(r"(?<!\\)\|", lines[2].replace("\\\\", "\0"))[1:-1]  # the unescaped pipes split the cells
    assert len(got) == 2
    shown = got[0].strip().replace("\0", "\\\\")
    assert not re.search(r"(?<!\\)[&\[]|(?<!\\):(?=\w)|:(?=material/)", shown), shown
    assert re.sub(r"\\(.)", r"\1", shown).replace("\u2060", "") == " ".join(cell.split())
    assert plain(cell) == shown or cell != " ".join(cell.split())
