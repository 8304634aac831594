"""Differential check of the soft reader and printer against the bundled Mermaid 11 (the oracle).

For one text: does the soft reader accept exactly when Mermaid does (and name Mermaid's line when both
reject)? When both accept, is the graph the same (vertices, edges in order, subgraphs, classes)? And is
``fmt`` safe: Mermaid accepts ``fmt(text)``, draws the same graph, and ``fmt`` is a fixed point?
Used by ``benchmarks/mermaid_agreement.py`` and the differential tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowcore.mermaid.grammar import canonical_graph, graph_json, parse_flowchart
from flowcore.mermaid.reader import parse_lenient, to_mermaid


@dataclass
class Verdict:
    outcome: str  # agree-accept | agree-reject | false-error | missed-error | misread
    wrong_line: bool = False  # both reject, at different lines
    fmt_change: str | None = None  # why fmt broke the drawing (None: fine or not applicable)
    detail: str = ""


def compare(text: str, *, check_fmt: bool = True) -> Verdict:
    from flowcore.mermaid.engines.js import mermaid_graph

    oracle = mermaid_graph(text)
    mine = parse_flowchart(text, recover=False)
    mine_ok = mine.kind is not None and not mine.errors
    if not oracle["ok"]:
        if mine_ok:
            return Verdict("missed-error", detail=oracle["error"].message)
        _, diags = parse_lenient(text)
        first = next((d for d in diags if d.code == "M001"), None)
        line = (first.mermaid_at or (first.line,))[0] if first else None  # Mermaid's place, not the opener's
        named = oracle["error"].line  # Mermaid names no line for some errors (bad shape data, front matter)
        return Verdict("agree-reject", wrong_line=named is not None and line != named,
                       detail=f"mermaid line {oracle['error'].line}, ours {line}")
    if not mine_ok:
        why = mine.errors[0].message if mine.errors else "not a flowchart"
        return Verdict("false-error", detail=why)
    if canonical_graph(graph_json(mine.db), exact_order=False) != canonical_graph(oracle, exact_order=False):
        return Verdict("misread", detail=_diff(canonical_graph(graph_json(mine.db), exact_order=False),
                                               canonical_graph(oracle, exact_order=False)))
    verdict = Verdict("agree-accept")
    if check_fmt:
        try:
            verdict.fmt_change = fmt_problem(text, oracle)
        except Exception as exc:  # a crash of the printer is a fmt failure too, not the end of the run
            verdict.fmt_change = f"fmt raised {type(exc).__name__}: {exc}"
    return verdict


def fmt_problem(text: str, oracle: dict | None = None) -> str | None:
    """None when fmt keeps Mermaid's drawing of ``text`` and is a fixed point; else what went wrong."""
    from flowcore.mermaid.engines.js import mermaid_graph

    w, diags = parse_lenient(text)
    if any(d.code == "M001" for d in diags):
        return "the soft reader rejects a text Mermaid accepts"
    out = to_mermaid(w)
    again = mermaid_graph(out)
    if not again["ok"]:
        return f"Mermaid rejects fmt's output: {again['error'].message}"
    oracle = oracle or mermaid_graph(text)
    a, b = canonical_graph(oracle, exact_order=False), canonical_graph(again, exact_order=False)
    if a != b:
        return "fmt changes the drawing: " + _diff(a, b)
    w2, _ = parse_lenient(out)
    if to_mermaid(w2) != out:
        return "fmt is not a fixed point"
    return None


def _diff(a: dict, b: dict) -> str:
    parts = []
    for key in a:
        if a[key] != b[key]:
            if isinstance(a[key], dict):
                ks = sorted(set(a[key]) ^ set(b[key]), key=str)
                ks += sorted((k for k in set(a[key]) & set(b[key]) if a[key][k] != b[key][k]), key=str)
                parts.append(f"{key}: " + "; ".join(f"{k}: {a[key].get(k)} vs {b[key].get(k)}" for k in ks[:3]))
            elif isinstance(a[key], list):
                diffs = [(i, x, y) for i, (x, y) in enumerate(zip(a[key], b[key])) if x != y]
                parts.append(f"{key}: {len(a[key])} vs {len(b[key])}; " + "; ".join(
                    f"#{i}: {x} vs {y}" for i, x, y in diffs[:2]))
            else:
                parts.append(f"{key}: {a[key]} vs {b[key]}")
    return " | ".join(parts)
