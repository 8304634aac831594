"""Finding JSON objects in untrusted text (an answer, a judge's reply) in linear time.

One pass pairs each ``}`` with the nearest open ``{`` (a ``"`` inside braces starts a string, skipped to its
closing quote on the same line), so stray braces in prose neither hide later objects nor cost a second pass.
The *top-level* spans are the pairs inside no other pair; each is handed to the C decoder once, so the work is
linear in the text however many ``{`` it holds (a decode from every ``{`` was 3.4 s at 120 KB of hostile text).
A top-level span that is not JSON is not looked into: ``{see {"a": 1}}`` holds no object.
Tests: tests/tasks/test_json_scan.py.
"""
from __future__ import annotations

import json
import re
from typing import Any

_OUTSIDE = re.compile(r"\{+")  # outside braces only an open brace matters (a run of them is one step)
_INSIDE = re.compile(r'\{+|\}+|"(?:[^"\\\n]|\\[^\n])*"|"')  # inside: braces, and strings (one token each)
_BRACES = re.compile(r"\{+|\}+")  # the rest of a line where a string never closed: its quotes are text


def top_level_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced ``{...}`` inside no other one, in order."""
    stack: list[int] = []  # positions of the open braces not yet closed
    tops: list[tuple[int, int]] = []
    pos = dead = 0  # dead: end of the line where a string failed to close (no string is looked for before it)
    while True:
        if pos < dead and stack:
            m = _BRACES.search(text, pos, dead)
            if m is None:
                pos = dead
                continue
        else:
            m = (_INSIDE if stack else _OUTSIDE).search(text, pos)
            if m is None:
                return tops
        i, pos = m.span()
        c = text[i]
        if c == "{":
            stack.extend(range(i, pos))
        elif c == "}":
            k = min(pos - i, len(stack))  # the closes pair with the last k opens; the outermost pair holds the rest
            s, e = stack[-k], i + k
            del stack[-k:]
            while tops and tops[-1][0] > s:  # the pairs it contains are no longer top-level
                tops.pop()
            tops.append((s, e))
        elif pos == i + 1:  # a quote that closes on no string on its line: the open braces can be no JSON
            stack.clear()
            nl = text.find("\n", pos)
            dead = len(text) if nl < 0 else nl + 1


def load(text: str) -> Any:
    """json.loads, or None when the text is no JSON (nesting too deep for the decoder included)."""
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None


def last_object(text: str) -> tuple[dict, int, int] | None:
    """The last top-level ``{...}`` of ``text`` that is a JSON object, with its span; None when there is none."""
    for s, e in reversed(top_level_spans(text)):
        value = load(text[s:e])
        if isinstance(value, dict):
            return value, s, e
    return None
