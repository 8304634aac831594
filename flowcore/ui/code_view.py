"""Code shown on a page, highlighted on the server (Pygments) and drawn as plain HTML (no Streamlit here).

``st.code`` loads Streamlit's highlighter before the page can paint: 1.5 MB of scripts (every Prism language) for
the Export page's three views (its first paint, medians of 4 alternated loads: 1.95 s with it, 1.52 s without).
Pygments escapes every character of the text it is given (``<``, ``&``, quotes) and writes only ``<span>``s with
class names; the page's ``st.html`` sanitises the result once more. One stylesheet, scoped to :data:`BOX`.

A character that is not seen, or that reorders what is seen, is marked where it stands: a bidi control (U+202E
shows the rest of its line backwards: the box would show other code than the file holds), a zero-width or
Unicode tag character (invisible text an LLM still reads), a control character (a NUL is dropped by the HTML
parser). The character itself stays in the box, in a span isolated from the text around it, and its code
point is drawn by the stylesheet (``::before``), so it is seen but never copied.
"""

from __future__ import annotations

import re
from functools import cache

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

BOX = "mf-code"  # the class of the box every code view is drawn in
# C0/C1 controls but tab and line ends, then the invisible format characters (Unicode category Cf): soft hyphen,
# Arabic letter mark, Mongolian vowel separator, zero-width and bidi marks, embeddings, overrides and isolates,
# word joiner and invisible operators, byte order mark, interlinear annotations, and the tag characters.
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e"
                    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
FONT = '"Source Code Pro", ui-monospace, SFMono-Regular, Menlo, monospace'  # Streamlit's own code font first


@cache
def stylesheet() -> str:
    """The token colours (Pygments' default style) and the box: Streamlit's code background, scrolled past its
    height, numbers apart from the text and never selected with it."""
    tokens = [rule for rule in HtmlFormatter(style="default").get_style_defs(f".{BOX}").splitlines()
              if rule.startswith(f".{BOX} .")]  # the token colours only: nothing outside the box is styled
    box = (f".{BOX} {{background: #f0f2f6; border-radius: 0.5rem; padding: 0.75rem 1rem; overflow: auto;"
           f" font-family: {FONT}; font-size: 0.875rem; line-height: 1.5; margin-bottom: 1rem}}"
           f" .{BOX} pre {{margin: 0; background: none; font-family: inherit; white-space: pre}}"
           f" .{BOX} .linenos {{color: #8a8f98; padding-right: 1rem; user-select: none}}"
           f" .{BOX} .mf-hidden {{unicode-bidi: isolate; direction: ltr}}"
           f' .{BOX} .mf-hidden::before {{content: "U+" attr(data-u); color: #c00; background: #fde8e8;'
           f" font-size: 0.75em; border-radius: 0.2rem; padding: 0 0.15em; user-select: none}}")
    return "\n".join(tokens) + "\n" + box


def html(text: str, language: str | None = None, *, line_numbers: bool = False, height: int | None = None) -> str:
    """``text`` as a highlighted, scrolled code box: ``language`` a Pygments name (``python``, ``json``; None or
    unknown: plain text), ``height`` the most pixels it takes before it scrolls."""
    try:
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False) if language else None
    except ClassNotFound:
        lexer = None
    lexer = lexer or TextLexer(stripnl=False, ensurenl=False)
    body = highlight(text, lexer, HtmlFormatter(nowrap=False, linenos="inline" if line_numbers else False,
                                                  cssclass="", wrapcode=True))
    body = HIDDEN.sub(_mark, body)  # Pygments writes none of these characters itself: each one is the text's
    tall = f' style="max-height: {int(height)}px"' if height else ""
    return f'<style>{stylesheet()}</style><div class="{BOX}"{tall}>{body.rstrip()}</div>'


SHOWN_CHARS, SHOWN_LINES = 400_000, 3_000  # past these a view shows the start: the file is in the download


def head(text: str, note: str) -> str:
    """``text`` whole when it is at most :data:`SHOWN_CHARS`, else its start (at most :data:`SHOWN_LINES` lines
    and :data:`SHOWN_CHARS` characters) and ``note`` on a line of its own. A 10,000-node workflow's JSON is
    4 MB, 24 MB once highlighted: too much for a page to hold for a look."""
    if len(text) <= SHOWN_CHARS:
        return text
    kept, size = [], 0
    for line in text.splitlines()[:SHOWN_LINES]:
        if size + len(line) > SHOWN_CHARS:
            kept.append(line[:SHOWN_CHARS - size])
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept) + "\n" + note


def _mark(m: re.Match) -> str:
    return f'<span class="mf-hidden" data-u="{ord(m[0]):04X}">{m[0]}</span>'
