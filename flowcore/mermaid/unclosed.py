"""Where an unclosed label, bracket or quote was opened, for a syntax error reported further on.

Mermaid's lexer lets a quoted string and an edge label (``-->|text|``) run over line breaks, so a label left
open on line 20 is only noticed where the next ``|`` or ``"`` closes it, on line 21 or later, and Mermaid names
that place. :func:`opener` scans the text up to the error and names the construct that was still open there,
or that crossed a line break and closed on the error's line: the line where the writer left it open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Opener", "opener", "relocate"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CLOSE = {"[": "]", "(": ")", "{": "}"}
_WHAT = {'"': "quote", "|": "edge label", "[": "bracket", "(": "bracket", "{": "brace"}


@dataclass(frozen=True)
class Opener:
    line: int  # 1-based
    column: int  # 1-based
    char: str  # '"', '|', '[', '(' or '{'
    closed: bool  # closed later, on the error's line, after running over a line break

    def sentence(self) -> str:
        """E.g. "the edge label opened here with '|' is not closed"."""
        what, close = _WHAT[self.char], _CLOSE.get(self.char, self.char)
        if self.closed:
            return (f"the {what} opened here with '{self.char}' is not closed on its line (the next '{close}' "
                    "is on a later line)")
        return f"the {what} opened here with '{self.char}' is not closed"


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset, row) of every line."""
    out, pos = [], 0
    for m in _LINE_BREAK.finditer(text):
        out.append((pos, text[pos:m.start()]))
        pos = m.end()
    out.append((pos, text[pos:]))
    return out


def opener(text: str, line: int | None, column: int | None) -> Opener | None:
    """The quote, edge label or bracket responsible for a syntax error at ``line``/``column`` (1-based): open at
    that place, or opened on an earlier line and closed only on the error's line. None when there is none (the
    error is something else) or the error has no line."""
    if not line:
        return None
    rows = _lines(text)
    if line > len(rows):
        line = len(rows)
    stop = rows[line - 1][0] + max(0, (column or len(rows[line - 1][1]) + 1) - 1)
    stack: list[tuple[int, int, str]] = []  # (line, column, char) of what is open
    crossed: Opener | None = None  # the last construct that ran over a line break and closed on the error's line
    front = text.lstrip().startswith("---")
    for n, (start, row) in enumerate(rows, 1):
        if start > stop:
            break
        stripped = row.strip()
        if front:  # YAML front matter: not flowchart text
            front = not (n > 1 and stripped == "---")
            continue
        if not stack and stripped.startswith("%%"):
            continue
        for i, ch in enumerate(row):
            if start + i >= stop:
                break
            top = stack[-1][2] if stack else ""
            if top == '"':
                if ch == '"':
                    crossed = _closed(stack.pop(), n, line, crossed)
                continue
            if ch == '"':
                stack.append((n, i + 1, ch))
            elif ch == "|":
                if top == "|":
                    crossed = _closed(stack.pop(), n, line, crossed)
                elif top not in _CLOSE:  # '|' inside a node's brackets is text
                    stack.append((n, i + 1, ch))
            elif top == "|":
                continue  # an edge label's text
            elif ch in _CLOSE:
                stack.append((n, i + 1, ch))
            elif ch in _CLOSE.values() and stack and _CLOSE.get(top) == ch:
                crossed = _closed(stack.pop(), n, line, crossed)
    if stack:  # still open at the error; a construct opened inside it and closed too late is the better clue
        n, col, ch = stack[-1]
        rest = text[stop:rows[n - 1][0] + len(rows[n - 1][1])] if n == line else ""
        if _CLOSE.get(ch, ch) in rest:  # closed later on its own line: the error is inside it, not an open end
            return crossed
        if crossed is None or (crossed.line, crossed.column) < (n, col):
            return Opener(n, col, ch, False)
    return crossed


def _closed(opened: tuple[int, int, str], at: int, error_line: int, crossed: Opener | None) -> Opener | None:
    n, col, ch = opened
    if n < at == error_line:  # ran over a line break and closed on the error's line
        return Opener(n, col, ch, True)
    return crossed


def relocate(text: str, line: int | None, column: int | None, message: str) -> tuple[int | None, int | None, str]:
    """A syntax error moved to the unclosed construct that caused it (when there is one), with Mermaid's own
    position kept as a second note: (line, column, message)."""
    o = opener(text, line, column)
    if o is None or (o.line, o.column) == (line, column):
        return line, column, message
    said = message.removeprefix(f"line {line}: ")
    where = f"line {line}" + (f", column {column}" if column else "")
    return o.line, o.column, f"line {o.line}: {o.sentence()}. Mermaid's own position: {where}: {said}"
