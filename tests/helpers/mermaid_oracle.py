"""Helpers for the syntax tests: compare the soft reader and fmt with the bundled Mermaid 11."""

from __future__ import annotations

from flowcore import parse, parse_lenient, to_mermaid
from flowcore.mermaid.agreement import compare, fmt_problem
from flowcore.mermaid.engines.js import mermaid_graph


def agrees(text: str) -> None:
    """Mermaid accepts ``text``; the soft reader reads the same graph; fmt keeps it and is a fixed point."""
    v = compare(text)
    assert v.outcome == "agree-accept", (v.outcome, v.detail, text)
    assert v.fmt_change is None, (v.fmt_change, text)


def rejected_at(text: str, line: int) -> None:
    """Mermaid rejects ``text`` at ``line``, and so does the soft reader (M001 at that line)."""
    oracle = mermaid_graph(text)
    assert not oracle["ok"], f"Mermaid accepts {text!r}"
    _, diags = parse_lenient(text)
    m001 = [d for d in diags if d.code == "M001"]
    assert m001, f"the soft reader accepts {text!r}; Mermaid: {oracle['error'].message}"
    if oracle["error"].line is not None:  # Mermaid names no line for some errors (FlowDB's own)
        assert oracle["error"].line == line, oracle["error"].message
    assert m001[0].line == line, (m001[0], oracle["error"].message)


def edges(text: str) -> list[tuple]:
    w = parse(text)
    return [(e.src, e.dst, e.arrow, e.label) for e in w.edges]


def fmt(text: str) -> str:
    assert fmt_problem(text) is None
    return to_mermaid(parse(text))
