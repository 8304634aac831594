"""Code highlighted on the server (flowcore.ui.code_view): every character of the text comes back as text,
nothing in it becomes markup, and the styles touch nothing outside the box."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from flowcore.ui import code_view

HOSTILE = ('name = "</code></pre></div><img src=http://evil.example/x onerror=alert(1)>"\n'
           "# <script>fetch('//evil.example')</script> &amp; &lt;\n"
           "def f():\n    return '<style>body{display:none}</style>'\n")


def _text(out: str) -> str:
    """What a browser shows of ``out``'s box: the tags dropped, the entities read."""
    box = out.split(f'<div class="{code_view.BOX}"', 1)[1]
    return html_lib.unescape(re.sub(r"<[^>]+>", "", box.split(">", 1)[1]))


@pytest.mark.parametrize("language", ["python", "json", None, "no-such-language"])
def test_the_text_comes_back_exactly_and_nothing_in_it_becomes_markup(language):
    out = code_view.html(HOSTILE, language)
    assert _text(out) == HOSTILE
    tags = set(re.findall(r"<(/?\w+)", out.split("</style>", 1)[1]))
    assert tags <= {"div", "/div", "pre", "/pre", "code", "/code", "span", "/span"}, tags
    assert out.count("<style>") == 1  # the stylesheet's own, before the box; none from the text


def test_line_numbers_are_numbered_spans_apart_from_the_text_and_height_scrolls():
    out = code_view.html("a = 1\nb = 2\nc = 3\n", "python", line_numbers=True, height=120)
    assert re.findall(r'<span class="linenos">\s*(\d+)</span>', out) == ["1", "2", "3"]
    assert 'style="max-height: 120px"' in out
    assert "user-select: none" in code_view.stylesheet()  # copying the code leaves the numbers behind


def test_every_style_rule_is_scoped_to_the_box():
    css = re.sub(r"/\*.*?\*/", "", code_view.stylesheet())  # Pygments names each rule in a comment
    rules = [r.strip() for r in re.split(r"(?<=\})", css) if r.strip()]
    assert rules and all(r.startswith(f".{code_view.BOX}") for r in rules), rules


def test_a_view_shows_the_start_of_a_big_text_and_says_where_the_rest_is():
    small = "x = 1\n" * 10
    assert code_view.head(small, "# more") == small  # a text under the bound is shown whole
    many = "".join(f"line {i}\n" for i in range(100_000))  # 100,000 short lines
    shown = code_view.head(many, "# … (the rest is in the download)")
    assert shown.splitlines()[:2] == ["line 0", "line 1"] and shown.endswith("\n# … (the rest is in the download)")
    assert len(shown.splitlines()) == code_view.SHOWN_LINES + 1
    one = "p" * (3 * code_view.SHOWN_CHARS)  # one huge line (a 1.9M-character prompt in the JSON)
    shown = code_view.head(one, "…")
    assert len(shown) <= code_view.SHOWN_CHARS + 2 and shown.startswith("ppp") and shown.endswith("\n…")
