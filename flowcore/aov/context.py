"""What repair and refinement prompts see of an execution: the whole log and the graph, within a budget.

Flow's optimizer re-plans "conditioned on the current graph and all execution logs". A long run's log does
not fit a model's context, so it is fitted into ``budget`` characters, the one place this is decided:
every event keeps a line (oldest first) and the longest lines are cut first, evenly ("water-filling"), so
a long output cannot crowd out the events after it; only when even short lines do not fit are the oldest
events after the start dropped, and the prompt says how many.
"""

from __future__ import annotations

import json
from typing import Any

from flowcore.aov.model import AOVGraph

DEFAULT_BUDGET = 24_000  # characters of log (~6,000 tokens); FlowSettings.context_chars overrides it
MIN_LINE = 80  # below this a cut line says too little to be worth keeping


def event_line(e: dict[str, Any]) -> str:
    """One event as one line. The start event's graph is left out: the prompt shows the current graph."""
    p = e.get("payload", {})
    if e.get("kind") == "start":
        p = {k: v for k, v in p.items() if k != "graph"}
    body = json.dumps(p, ensure_ascii=False, separators=(",", ":"))
    return f"#{e.get('seq', '?')} step {e.get('step', 0)} {e.get('kind', '?')}: {body}"


def _cut(line: str, n: int) -> str:
    return line if len(line) <= n else line[: n - 22] + f"… ({len(line) - n + 22} chars cut)"


def log_text(events: list[dict[str, Any]], budget: int = DEFAULT_BUDGET) -> str:
    """The whole log in at most about ``budget`` characters (see the module docstring)."""
    lines = [event_line(e) for e in events]
    if not lines:
        return "(no events yet)"
    if sum(len(x) + 1 for x in lines) <= budget:
        return "\n".join(lines)
    dropped = 0
    # Too many events for even MIN_LINE each: keep the start and the most recent ones.
    while len(lines) > 2 and len(lines) * (MIN_LINE + 1) + 60 > budget:
        lines.pop(1)
        dropped += 1
    room = budget - len(lines) - (60 if dropped else 0)
    lo, hi = MIN_LINE, max(len(x) for x in lines)  # the largest cap that fits: binary search
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(len(x), mid) for x in lines) <= room:
            lo = mid
        else:
            hi = mid - 1
    out = [_cut(x, lo) for x in lines]
    if dropped:
        out.insert(1, f"… {dropped} earlier events left out to fit the context budget …")
    return "\n".join(out)


def graph_text(graph: AOVGraph, data_chars: int = 600) -> str:
    """The graph as compact JSON with each subtask's data cut to ``data_chars`` (the full results are in the
    log; the model needs the structure and a reminder of what each subtask produced)."""
    doc = graph.to_dict()
    for rec in doc["subtasks"].values():
        rec.pop("num_parents_not_completed", None)
        d = rec.get("data")
        text = d if isinstance(d, str) else json.dumps(d, ensure_ascii=False)
        if len(text) > data_chars:
            rec["data"] = text[:data_chars] + f"… ({len(text) - data_chars} chars cut)"
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
