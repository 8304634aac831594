"""How a workflow is shown in the browser (no Streamlit here): the diagram text the pages hand to Mermaid,
its size, a zoom, what big graphs show instead of a full drawing, and labels that load nothing remote.

- **Safe labels**: a label, subgraph title or edge label may hold HTML (`<img src=...>`), and Mermaid draws
  HTML labels, so the browser would fetch that URL. Every drawing goes through `flowcore.mermaid.safe` (one
  sanitiser): only `<br/>` line breaks stay tags, styles keep plain colours and lengths, and `click` lines,
  directives, front matter and image shapes are left out of the drawing.
- **Zoom**: Mermaid fits a diagram to the box width unless told otherwise (`useMaxWidth`). A zoom level
  draws it at its natural size times the zoom (by the font size, so the layout grows with the text), and the
  box scrolls: that is the pan.
- **Big graphs**: past :data:`LIVE_DRAWING_NODES` nodes the browser would block for seconds laying out the
  drawing (a 2,000-node one took 63 s), so the pages show an overview (node counts by type and layer) and
  draw the first :data:`PREVIEW_NODES` nodes on demand; past :data:`BIG_GRAPH_NODES` the Editor also edits
  the text a section at a time. The text and the checker stay live.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import networkx as nx

from flowcore.mermaid.reader import to_mermaid
from flowcore.mermaid.safe import display_copy, safe_label
from flowcore.mermaid.text import lines as text_lines
from flowcore.model import Workflow

__all__ = ["BIG_GRAPH_NODES", "PREVIEW_NODES", "ZOOMS", "diagram_code", "diagram_height", "texts_height", "is_big",
           "layers", "natural_width", "overview", "preview", "safe_label", "section", "sections", "side_by_side", "splice"]

BIG_GRAPH_NODES = 300  # above this the text is edited a section at a time
LIVE_DRAWING_NODES = 80  # above this the diagram is drawn on demand (Mermaid's layout of 100 nodes blocked 3 s)
CANVAS_MAX_NODES = 60  # above this the canvas (one React component per node) warns that it is slow
PREVIEW_NODES = 120  # how many nodes the on-demand partial drawing of a big graph shows
SECTION_LINES = 1000  # a big workflow's text is edited a section at a time (one box with it all froze the tab)
MAX_LISTED_DIAGNOSTICS = 40  # the rest go in a table: thousands of markdown lines would freeze the tab
ZOOMS = {"Fit": None, "50%": 0.5, "75%": 0.75, "100%": 1.0, "125%": 1.25, "150%": 1.5, "200%": 2.0}


def diagram_code(w: Workflow, zoom: float | None = None) -> str:
    """Mermaid text for the drawing: styled, safe labels, and the zoom (None: fit the box width)."""
    init: dict = {"securityLevel": "strict", "flowchart": {"useMaxWidth": zoom is None}}
    if zoom is not None:
        init["themeVariables"] = {"fontSize": f"{round(16 * zoom)}px"}
    return f"%%{{init: {json.dumps(init)}}}%%\n" + to_mermaid(display_copy(w), styles=True)


def _dag(w: Workflow) -> nx.DiGraph:
    """The graph without the edges that close a cycle (DFS back edges), as Mermaid's layout breaks cycles."""
    g = nx.DiGraph()
    g.add_nodes_from(w.nodes)
    g.add_edges_from((e.src, e.dst) for e in w.edges if e.src in w.nodes and e.dst in w.nodes)
    if nx.is_directed_acyclic_graph(g):
        return g
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: finished
    back = []
    for root in g:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(g.successors(root)))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                back.append((node, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(g.successors(nxt))))
    g.remove_edges_from(back)
    return g


def layers(w: Workflow) -> list[list[str]]:
    """Nodes by layer as a drawing lays them out: a cycle's nodes get layers of their own (a cycle drawn in
    one layer was clipped), the edge back is drawn looping."""
    g = _dag(w)
    return [sorted(gen, key=list(w.nodes).index) for gen in nx.topological_generations(g)] if len(g) else []


def diagram_height(w: Workflow, zoom: float | None = None, lo: int = 260, hi: int = 900) -> int:
    """Pixels for the drawing's box: its layers along the flow (or the widest layer across it), zoomed."""
    ls = layers(w)
    along = len(ls) if w.direction not in ("LR", "RL") else max((len(x) for x in ls), default=1)
    return int(min(max((90 * along + 60) * (zoom or 1.0), lo), hi))


def texts_height(*texts: str, hi: int = 760) -> int:
    """One height for drawings shown side by side (a round beside its parent): the tallest one's."""
    from flowcore.mermaid.reader import parse_lenient

    return max((diagram_height(parse_lenient(t)[0], hi=hi) for t in texts if t), default=260)


# Mermaid's layout at its 16 px text, roughly: a character's width, a node's padding, the gap between nodes
CHAR_PX, NODE_PAD_PX, NODE_GAP_PX, RANK_GAP_PX = 8.5, 32, 50, 50
MIN_TEXT_SCALE = 11 / 16  # the drawing's Fit never draws text under 11 px (drawing.js), so it scrolls past this
HALF_ROOM_PX = 560  # a drawing's room in half the page (1,400 px window, less the box's padding), with a margin
# Mermaid 11 drew the bundled examples and the demo's evolved rounds 0.83-1.42x natural_width's estimate (dagre
# spreads the nodes an edge fans out to): side by side only while even 1.45x the estimate fits
ESTIMATE_MARGIN = 1.45


def _text_px(label: str) -> float:
    lines = re.split(r"<br\s*/?>", label, flags=re.I)
    return CHAR_PX * max((len(re.sub(r"<[^>]*>", "", x).strip()) for x in lines), default=1) + NODE_PAD_PX


def natural_width(w: Workflow) -> float:
    """About how wide Mermaid draws ``w`` at 100 % (pixels): its widest layer of nodes (or, along a left-to-right
    flow, its layers one after another), edge labels included."""
    ls = layers(w)
    width = {nid: _text_px(n.label if n.label is not None else nid) for nid, n in w.nodes.items()}
    if w.direction in ("LR", "RL"):
        labels = max((_text_px(e.label) for e in w.edges if e.label), default=0.0)
        return sum(max(width[n] for n in layer) + RANK_GAP_PX + labels for layer in ls)
    rank = {n: i for i, layer in enumerate(ls) for n in layer}
    out = [sum(width[n] for n in layer) + NODE_GAP_PX * (len(layer) - 1) for layer in ls]
    between: dict[int, list[float]] = {}  # the labels of edges leaving a layer sit in a row of their own
    for e in w.edges:
        if e.label and e.src in rank:
            between.setdefault(rank[e.src], []).append(_text_px(e.label))
    out += [sum(v) + NODE_GAP_PX * (len(v) - 1) for v in between.values()]
    return max(out, default=0.0)


def side_by_side(*texts: str) -> bool:
    """Whether drawings of ``texts`` fit next to each other in half the page each, with text of at least 11 px
    (else they are shown one above the other, each the page's width, and none is cut at the box's edge)."""
    from flowcore.mermaid.reader import parse_lenient

    return all(natural_width(parse_lenient(t)[0]) * ESTIMATE_MARGIN * MIN_TEXT_SCALE <= HALF_ROOM_PX
               for t in texts if t)


def is_big(w: Workflow) -> bool:
    return len(w.nodes) > BIG_GRAPH_NODES


def draw_live(w: Workflow) -> bool:
    """Whether the drawing follows the text as it is typed (else an overview, and a drawing on demand)."""
    return len(w.nodes) <= LIVE_DRAWING_NODES


def overview(w: Workflow) -> dict:
    """What a big graph holds, for a table instead of a drawing."""
    ls = layers(w) if len(w.nodes) <= 20_000 else []
    return {"nodes": len(w.nodes), "edges": len(w.edges), "prompts": len(w.prompts), "layers": len(ls),
            "widest layer": max((len(x) for x in ls), default=0),
            "by type": dict(Counter(n.op or "(untyped)" for n in w.nodes.values()).most_common())}


def preview(w: Workflow, n: int = PREVIEW_NODES) -> Workflow:
    """The first ``n`` nodes along the flow and the edges among them (a partial drawing of a big graph)."""
    keep: list[str] = []
    for layer in layers(w):
        keep += layer[: n - len(keep)]
        if len(keep) >= n:
            break
    kept = set(keep)
    d = w.copy()
    d.nodes = {k: v for k, v in d.nodes.items() if k in kept}
    d.edges = [e for e in d.edges if e.src in kept and e.dst in kept]
    return d


def sections(text: str, size: int = SECTION_LINES) -> list[tuple[int, int]]:
    """(first, last) line numbers (1-based, inclusive) of each section of ``size`` lines. Lines as the diagnostics
    number them (``text.lines``: a U+2028 in a comment is no line break), so that line N is in the section that
    says so."""
    n = max(1, len(text_lines(text)))
    return [(a + 1, min(a + size, n)) for a in range(0, n, size)]


def section(text: str, index: int, size: int = SECTION_LINES) -> str:
    """The text of section ``index`` (lines included with their line ends)."""
    lines = text_lines(text, keepends=True)
    return "".join(lines[index * size:(index + 1) * size])


def splice(text: str, index: int, new: str, size: int = SECTION_LINES) -> str:
    """``text`` with section ``index`` replaced by ``new`` (which may have more or fewer lines)."""
    lines = text_lines(text, keepends=True)
    if not 0 <= index * size <= len(lines):
        raise ValueError(f"section {index} is past the end of a {len(lines)}-line text")
    if new and not new.endswith("\n") and (index + 1) * size < len(lines):
        new += "\n"  # the next section still starts on its own line
    return "".join(lines[:index * size]) + new + "".join(lines[(index + 1) * size:])
