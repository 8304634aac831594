"""An AOV graph as a Mermaid flowchart, nodes coloured by status."""

from __future__ import annotations

import re
from collections.abc import Iterable

from flowcore.aov.model import STATUSES, AOVGraph
from flowcore.mermaid.safe import safe_label

CLASS_STYLES = {
    "pending": "fill:#e5e7eb,stroke:#6b7280,color:#111827",
    "running": "fill:#bfdbfe,stroke:#2563eb,color:#1e3a8a",
    "completed": "fill:#bbf7d0,stroke:#16a34a,color:#14532d",
    "failed": "fill:#fecaca,stroke:#dc2626,color:#7f1d1d",
}
CHANGED_STYLE = "stroke:#7c3aed,stroke-width:3px,stroke-dasharray:5 3"
# Mermaid entity codes for characters that would end or confuse a quoted label.
_ENTITIES = {"#": "#35;", "&": "#38;", '"': "#quot;", "<": "#lt;", ">": "#gt;", "`": "#96;"}


def node_ids(graph: AOVGraph) -> dict[str, str]:
    """Subtask id -> Mermaid-safe node id (letters, digits, underscore; prefixed so 'end' etc. stay legal)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for sid in graph.subtasks:
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", sid)
        nid, n = base, 2
        while nid in used:
            nid, n = f"{base}_{n}", n + 1
        used.add(nid)
        out[sid] = nid
    return out


def _label(text: str, max_len: int) -> str:
    """One line of the subtask's text (an LLM wrote it) that loads nothing (the one drawing sanitiser)."""
    text = safe_label(" ".join(str(text).split()))
    if len(text) > max_len:
        text = text[: max_len - 1].rstrip() + "…"
    return "".join(_ENTITIES.get(ch, ch) for ch in text)


def to_mermaid(graph: AOVGraph, max_label: int = 48, direction: str = "TD",
               changed: Iterable[str] = ()) -> str:
    """Flowchart of the graph; ``changed`` subtasks (e.g. a repair diff's added/changed ones) get a thick
    dashed border on top of their status colour."""
    ids = node_ids(graph)
    lines = [f"flowchart {direction}"]
    for sid, st in graph.subtasks.items():
        label = _label(f"{sid}: {st.subtask_requirement}", max_label) + " (" + _label(st.agent, 40) + ")"
        lines.append(f'    {ids[sid]}["{label}"]')
    for p, c in graph.edges():
        lines.append(f"    {ids[p]} --> {ids[c]}")
    for status in STATUSES:
        lines.append(f"    classDef {status} {CLASS_STYLES[status]}")
    lines.append(f"    classDef changed {CHANGED_STYLE}")
    for status in STATUSES:
        members = [ids[s] for s, st in graph.subtasks.items() if st.status == status]
        if members:
            lines.append(f"    class {','.join(members)} {status}")
    marked = [ids[s] for s in dict.fromkeys(changed) if s in ids]
    if marked:
        lines.append(f"    class {','.join(marked)} changed")
    return "\n".join(lines) + "\n"
