"""A drawing canvas view of a workflow, and back (no Streamlit here; the Editor page adapts it to its widget).

Canvas dict: ``{"nodes": [{"id", "op", "label", "x", "y", "kind"}], "edges": [{"id", "source", "target",
"label"}]}``. ``to_canvas`` lays the nodes out in layers (topological generations along the flowchart's
direction); ``apply_canvas`` takes an edited canvas and applies what a drawing can change (nodes added from
the palette, nodes deleted, connections added or removed, edge labels) to the workflow, keeping everything
else (prompts, classes, subgraphs, labels) as it was. ``apply_canvas(w, to_canvas(w)) == w``.
"""

from __future__ import annotations

from flowcore import catalogue as cat
from flowcore.model import Edge, Node, Workflow

X_GAP, Y_GAP = 230, 110  # canvas pixels between layers / between nodes of a layer (top-down)
CANVAS_WIDTH, CANVAS_HEIGHT = 900, 480  # below this extent the canvas shows the graph at zoom 1 (no fit)
CANVAS_MAX_HEIGHT = 860  # the canvas grows with the graph up to this, then fits it (zoom >= 0.7) and pans
NODE_W, NODE_H = 190, 70
ACROSS_LR = 95  # pixels per node across the flow when it runs left to right
MARGIN = 24  # around the drawing, so no node touches the canvas's edge
PREFIX = {"CustomOp": "C", "AnswerGenerateOp": "A", "ProgrammerOp": "P", "ScEnsembleOp": "E",
          "CustomCodeGenerateOp": "G", "TestOp": "T", "ReviewOp": "R", "ReviseOp": "V", "FormatOp": "F",
          cat.DECISION: "D"}
INTERFACE_LABELS = {"PROBLEM": "Problem", "ENTRY_POINT": "Entry point", "RETURN": "Return"}
PROMPT_WORD = {"CustomOp": "role", "CustomCodeGenerateOp": "instruction"}
NEW_PREFIX = "new"  # ids of canvas nodes not yet in the workflow


def kind_of(node_id: str, op: str | None) -> str:
    """'input' (no incoming handle), 'output' (no outgoing handle) or 'default'."""
    if op == cat.INTERFACE and node_id in ("PROBLEM", "ENTRY_POINT"):
        return "input"
    if op == cat.INTERFACE and node_id == "RETURN":
        return "output"
    return "default"


def _layers(w: Workflow) -> list[list[str]]:
    """Nodes by layer along the flow (a cycle is broken where Mermaid breaks it, so its nodes do not pile up
    in one layer). A node with no edge at all (just added from the palette) goes to the middle layer, at its
    end, where connecting it from above and to below is one short drag each."""
    from flowcore.ui.view import layers as flow_layers

    linked = {e.src for e in w.edges} | {e.dst for e in w.edges}
    alone = [n for n in w.nodes if n not in linked] if len(w.nodes) > 1 else []
    layers = flow_layers(w)
    if alone and len(alone) < len(w.nodes):
        layers = [[n for n in layer if n not in alone] for layer in layers]
        layers = [layer for layer in layers if layer]
        layers[len(layers) // 2].extend(alone) if layers else layers.append(alone)
    return layers


def depth(w: Workflow) -> int:
    """How many layers the layout has (for sizing a rendered diagram)."""
    return len(_layers(w))


def layered_layout(w: Workflow) -> tuple[dict[str, tuple[float, float]], dict[int, list[tuple[float, float]]]]:
    """(node -> top-left position, edge index -> bend points) of the layered drawing: layers along the flow, the
    order in each layer chosen for few crossings, and every edge that skips layers routed through a slot of
    its own in each layer it passes (so it never runs behind a node)."""
    from flowcore.ui.layered import layered

    layers = _layers(w)
    centres, bends = layered(layers, [(e.src, e.dst) for e in w.edges])
    horizontal, flipped = w.direction in ("LR", "RL"), w.direction in ("RL", "BT")
    last = len(layers) - 1

    def point(r: int, across: float) -> tuple[float, float]:  # a centre, in canvas pixels
        along = last - r if flipped else r
        if horizontal:
            return along * X_GAP + NODE_W / 2, across * ACROSS_LR
        return across * NODE_W, along * Y_GAP * 1.2 + NODE_H / 2

    pos = {}
    for nid, (r, across) in centres.items():
        cx, cy = point(r, across)
        pos[nid] = (float(cx - NODE_W / 2 + MARGIN), float(cy - NODE_H / 2 + MARGIN))
    def through(r: int, across: float) -> list[tuple[float, float]]:  # across the layer's band, straight
        x, y = point(r, across)
        if horizontal:
            ends = [(x - NODE_W / 2, y), (x + NODE_W / 2, y)]
            return ends[::-1] if flipped else ends
        ends = [(x, y - NODE_H / 2), (x, y + NODE_H / 2)]
        return ends[::-1] if flipped else ends

    routes = {k: [(float(x + MARGIN), float(y + MARGIN)) for r, a in pts for x, y in through(r, a)]
              for k, pts in bends.items()}
    return pos, routes


def layout(w: Workflow) -> dict[str, tuple[float, float]]:
    """Top-left positions of the layered drawing (see :func:`layered_layout`)."""
    return layered_layout(w)[0]


def to_canvas(w: Workflow, positions: dict[str, tuple[float, float]] | None = None) -> dict:
    """The canvas dict of a workflow; ``positions`` (where the user dragged nodes) win over the layout, and an
    edge keeps its bends (``bends``: edge id -> points) only while both its ends stay where the layout put them."""
    pos, routes = layered_layout(w)
    moved = {k for k, v in (positions or {}).items() if k in w.nodes and tuple(map(float, v)) != pos.get(k)}
    pos.update({k: (float(v[0]), float(v[1])) for k, v in (positions or {}).items() if k in w.nodes})
    nodes = [{"id": n.id, "op": n.op, "label": n.label if n.label is not None else n.id,
              "x": pos[n.id][0], "y": pos[n.id][1], "kind": kind_of(n.id, n.op)} for n in w.nodes.values()]
    edges = [{"id": f"e{i}", "source": e.src, "target": e.dst, "label": e.label or ""}
             for i, e in enumerate(w.edges)]
    bends = {f"e{i}": pts for i, pts in routes.items() if not {w.edges[i].src, w.edges[i].dst} & moved}
    return {"nodes": nodes, "edges": edges, "bends": bends}


WAYPOINT = "~"  # ids of the canvas's bend points ("e3~0") and of an edge's pieces ("e3~s1")


def expand(canvas: dict) -> tuple[list[dict], list[dict]]:
    """The canvas as the component draws it: each bend a tiny fixed point, each bent edge drawn as pieces
    through its points (the last piece carries the label and the arrow)."""
    points, pieces = [], []
    for e in canvas["edges"]:
        pts = canvas.get("bends", {}).get(e["id"], [])
        if not pts:
            pieces.append({**e, "arrow": True})
            continue
        ids = [f"{e['id']}{WAYPOINT}{j}" for j in range(len(pts))]
        points += [{"id": pid, "x": x, "y": y} for pid, (x, y) in zip(ids, pts, strict=True)]
        chain = [e["source"], *ids, e["target"]]
        for j, (a, b) in enumerate(zip(chain, chain[1:], strict=False)):
            last = j == len(chain) - 2
            pieces.append({"id": f"{e['id']}{WAYPOINT}s{j}", "source": a, "target": b,
                           "label": e["label"] if last else "", "arrow": last})
    return points, pieces


def collapse(nodes: list[dict], edges: list[dict], sent: dict) -> dict:
    """What came back from the component, without its bend points: a bent edge is there while all its pieces
    are (deleting any piece deletes the edge); edges drawn by the user come as they are."""
    pieces: dict[str, int] = {}
    plain = []
    for e in edges:
        eid = str(e["id"])
        if WAYPOINT in eid:
            base = eid.split(WAYPOINT)[0]
            pieces[base] = pieces.get(base, 0) + 1
        elif WAYPOINT not in str(e["source"]) + str(e["target"]):
            plain.append(e)
    whole = {e["id"] for e in sent["edges"]
             if (n := len(sent.get("bends", {}).get(e["id"], []))) and pieces.get(e["id"]) == n + 1}
    known = {e["id"]: e for e in plain}
    kept = [known.get(e["id"], e) for e in sent["edges"] if e["id"] in known or e["id"] in whole]
    new = [e for e in plain if e["id"] not in {k["id"] for k in sent["edges"]}]  # drawn by the user
    return {"nodes": [n for n in nodes if WAYPOINT not in str(n["id"])], "edges": kept + new}


def extent(canvas: dict) -> tuple[float, float]:
    """Width and height the canvas's nodes span (pixels at zoom 1)."""
    xs = [float(n["x"]) for n in canvas.get("nodes", [])] or [0.0]
    ys = [float(n["y"]) for n in canvas.get("nodes", [])] or [0.0]
    return max(xs) - min(xs) + NODE_W, max(ys) - min(ys) + NODE_H


def palette(task: str | None, w: Workflow | None = None) -> list[str]:
    """What can be added: the task's operators, then the interface nodes the workflow lacks."""
    items = cat.operators_for(task)
    for nid, (_, _, tasks) in cat.INTERFACE_NODES.items():
        if (task is None or task in tasks) and (w is None or nid not in w.nodes):
            items.append(nid)
    return items


def palette_items(task: str | None, w: Workflow | None = None) -> list[dict]:
    """The palette as the canvas's drag strip shows it: each item's words, colour and one-line help, and what a
    dropped one becomes (an operator's node with a new id, or the interface node itself)."""
    out = []
    for item in palette(task, w):
        if item in cat.INTERFACE_NODES:
            out.append({"item": item, "label": INTERFACE_LABELS.get(item, item), "op": cat.INTERFACE, "id": item,
                        "kind": kind_of(item, cat.INTERFACE), "color": "#fff8e1",
                        "help": f"{INTERFACE_LABELS.get(item, item)} (an interface node)"})
        else:
            spec = cat.CATALOGUE[item]
            out.append({"item": item, "label": item[:-2] if item.endswith("Op") else item, "op": item,
                        "kind": "default", "color": spec.color, "help": spec.description})
    return out


def named_ports(w: Workflow, canvas: dict | None = None) -> dict[str, list[str]]:
    """Node id -> its input ports' names, for nodes whose operator has more than one input (one handle each).
    With the ``canvas`` drawn (to_canvas), each node's ports are ordered as what feeds them comes in, left to
    right (top to bottom across), so two edges do not cross just before they reach the node; unfed ports last."""
    out = {}
    for n in w.nodes.values():
        if n.op is None or n.op == cat.INTERFACE or kind_of(n.id, n.op) != "default":
            continue
        names = [p.name for p in cat.inputs_of(n.op, n.id)]
        if len(names) > 1:
            out[n.id] = names
    if canvas is None:
        return out
    across = w.direction in ("LR", "RL")
    at = {c["id"]: (c["y"] + NODE_H / 2) if across else (c["x"] + NODE_W / 2) for c in canvas["nodes"]}
    fed: dict[tuple[str, str], list[float]] = {}
    for i, e in enumerate(w.edges):
        if e.dst not in out or e.src not in at:
            continue
        port = feeds_port(w, e.dst, e.label)
        bends = canvas.get("bends", {}).get(f"e{i}")
        last = (bends[-1][1] if across else bends[-1][0]) if bends else at[e.src]  # where the edge comes from
        if port is not None:
            fed.setdefault((e.dst, port.name), []).append(last)
    for nid, names in out.items():
        keys = {p: sum(v) / len(v) for p in names if (v := fed.get((nid, p)))}
        out[nid] = sorted(names, key=lambda p: (p not in keys, keys.get(p, 0.0), names.index(p)))
    return out


def feeds_port(w: Workflow, dst: str, label: str | None) -> cat.Port | None:
    """The input of ``dst`` an edge with ``label`` feeds: the port it names, else (a Decision's route, 'fail')
    the default one."""
    op = w.nodes[dst].op
    return cat.port_of(op, dst, label) or cat.port_of(op, dst, None)


def edge_ports(w: Workflow, pieces: list[dict]) -> dict[str, str]:
    """Drawn edge id -> the named port it ends on (the piece that reaches a node with named ports): the port
    its label names, else the target's default port."""
    ports = named_ports(w)  # the port an edge ends on does not depend on the order they are drawn in
    out = {}
    for e in pieces:
        dst = e["target"]
        if dst not in ports:
            continue
        port = feeds_port(w, dst, e.get("label") or None)
        out[e["id"]] = port.name if port is not None and port.name in ports[dst] else ports[dst][0]
    return out


def route_handles(w: Workflow, canvas: dict | None = None) -> dict[str, list[str]]:
    """Decision node id -> its routes (Passed, Failed): one named source handle each, so a drag from one makes an
    edge labelled with that route (an edge out of a Decision is a route, not a port: DESIGN.md section 3). With
    the ``canvas`` drawn, a Decision's routes are ordered as where they go, left to right (top to bottom
    across), so its two edges do not cross as they leave it; an unused route last."""
    out = {n.id: list(cat.ROUTES) for n in w.nodes.values() if n.op == cat.DECISION}
    if canvas is None or not out:
        return out
    across = w.direction in ("LR", "RL")
    at = {c["id"]: (c["y"] + NODE_H / 2) if across else (c["x"] + NODE_W / 2) for c in canvas["nodes"]}
    goes: dict[tuple[str, str], list[float]] = {}
    for i, e in enumerate(w.edges):
        if e.src in out and (route := route_of(e.label)) is not None and e.dst in at:
            bends = canvas.get("bends", {}).get(f"e{i}")
            goes.setdefault((e.src, route), []).append((bends[0][1] if across else bends[0][0]) if bends
                                                       else at[e.dst])
    for nid, names in out.items():
        keys = {r: sum(v) / len(v) for r in names if (v := goes.get((nid, r)))}
        out[nid] = sorted(names, key=lambda r: (r not in keys, keys.get(r, 0.0), names.index(r)))
    return out


def route_of(label: str | None) -> str | None:
    """The route an edge label names, in the catalogue's spelling ('failed' -> 'Failed'), else None."""
    want = (label or "").strip().lower()
    return next((r for r in cat.ROUTES if r.lower() == want), None)


def edge_routes(w: Workflow, pieces: list[dict]) -> dict[str, str]:
    """Drawn edge id -> the route handle it leaves its Decision from (the piece that starts at the Decision; a
    bent edge's label is its workflow edge's, found by the piece's id ``e<i>`` or ``e<i>~s<j>``)."""
    decisions = set(route_handles(w))
    out = {}
    for e in pieces:
        if e["source"] not in decisions:
            continue
        base = str(e["id"]).split(WAYPOINT)[0]
        i = int(base[1:]) if base[:1] == "e" and base[1:].isdigit() else -1
        label = w.edges[i].label if 0 <= i < len(w.edges) and w.edges[i].src == e["source"] else e.get("label")
        if (route := route_of(label)) is not None:
            out[e["id"]] = route
    return out


def add_palette_node(canvas: dict, item: str) -> dict:
    """A copy of ``canvas`` with one new node for a palette item (operator name or interface id),
    placed below/right of the existing nodes. Its id is temporary until ``apply_canvas``."""
    nodes = list(canvas.get("nodes", []))
    if item in cat.INTERFACE_NODES:
        node_id, op = item, cat.INTERFACE
    elif item in cat.CATALOGUE and item != cat.INTERFACE:
        taken = {n["id"] for n in nodes}
        k = 1
        while f"{NEW_PREFIX}{k}" in taken:
            k += 1
        node_id, op = f"{NEW_PREFIX}{k}", item
    else:
        raise ValueError(f"unknown palette item {item!r}: use an operator name "
                         f"({', '.join(cat.operators_for(None))}) or an interface "
                         f"({', '.join(cat.INTERFACE_NODES)})")
    x = max((float(n.get("x", 0)) for n in nodes), default=-X_GAP) + X_GAP
    y = max((float(n.get("y", 0)) for n in nodes), default=0.0)
    nodes.append({"id": node_id, "op": op, "label": None, "x": x, "y": y, "kind": kind_of(node_id, op)})
    return {"nodes": nodes, "edges": list(canvas.get("edges", []))}


def new_node(w: Workflow, op: str, node_id: str | None = None) -> Node:
    """A fresh typed node for ``w`` (not yet inserted): id with the operator's prefix, label naming the
    operator and, for prompt-driven operators, a new prompt name."""
    if op == cat.INTERFACE:
        if node_id not in cat.INTERFACE_NODES:
            raise ValueError(f"an Interface node is one of {', '.join(cat.INTERFACE_NODES)}, not {node_id!r}")
        return Node(node_id, INTERFACE_LABELS[node_id], "([", cat.INTERFACE)
    if op not in cat.CATALOGUE:
        raise ValueError(f"unknown operator {op!r}")
    nid = w.new_id(PREFIX.get(op, "N"))
    word = op[:-2] if op.endswith("Op") else op
    if op in PROMPT_WORD:
        used = set(w.prompts) | {n.prompt for n in w.nodes.values() if n.prompt}
        name = nid.lower()
        while name in used:
            name += "_"
        return Node(nid, f"{word}<br/>({PROMPT_WORD[op]}: {name})", "[", op, prompt=name)
    if op == cat.DECISION:
        return Node(nid, "Decision<br/>tests passed?", "{", op)
    return Node(nid, word, "[", op)


def _out_types(w: Workflow, nid: str) -> tuple[str, ...]:
    n = w.nodes[nid]
    if n.op == cat.INTERFACE:
        return cat.INTERFACE_NODES.get(nid, ((), (), ()))[1]
    if n.op is None:
        return ()
    out = cat.CATALOGUE[n.op].output
    return out if isinstance(out, tuple) else (cat.TEXT,)


def port_for(w: Workflow, src: str, dst: str) -> str | None:
    """The label for a new edge src -> dst: None (the target's default port) when that port takes what the
    source emits, else the first port that does; Decision sources get the route not yet used."""
    s, d = w.nodes[src], w.nodes[dst]
    if s.op == cat.DECISION:
        used = {(e.label or "").lower() for e in w.out_edges(src)}
        return next((r for r in cat.ROUTES if r.lower() not in used), cat.ROUTES[0])
    if d.op is None:
        return None
    types = _out_types(w, src)
    ports = cat.inputs_of(d.op, d.id)
    default = next((p for p in ports if p.default), None)
    if not types or default is None or any(cat.is_assignable(t, default.types) for t in types):
        return None
    fed = {(e.label or "").lower() for e in w.in_edges(dst)}
    fitting = [p for p in ports if any(cat.is_assignable(t, p.types) for t in types)]
    free = [p for p in fitting if p.name.lower() not in fed]
    return (free or fitting)[0].name if fitting else None


def dropped_positions(w: Workflow, canvas: dict, new: Workflow) -> dict[str, tuple[float, float]]:
    """Where the canvas's new nodes were put (dropped from the palette), under the ids ``apply_canvas`` gave
    them in ``new``: {new id: (x, y)}, so the drawing keeps a dropped node where the user let go of it (moved in
    from the canvas's top and left edges, where its port names would be cut). Empty
    when the new nodes cannot be told apart (the layout then places them, as for the Add node button)."""
    dropped = [n for n in canvas.get("nodes", []) if isinstance(n, dict) and n.get("id") and str(n["id"]) not in w.nodes
               and "x" in n and "y" in n]
    made = [nid for nid in new.nodes if nid not in w.nodes]
    if not dropped or len(dropped) != len(made):
        return {}
    # inside the drawing's margin, with room above for the names of the node's input ports
    return {nid: (max(float(n["x"]), MARGIN), max(float(n["y"]), 2 * MARGIN))
            for nid, n in zip(made, dropped, strict=True)}


def apply_canvas(w: Workflow, canvas: dict) -> Workflow:
    """A new workflow: ``w`` with the canvas's node additions/deletions and edge changes applied."""
    out = w.copy()
    cnodes = [n for n in canvas.get("nodes", []) if isinstance(n, dict) and n.get("id")]
    present = {str(n["id"]) for n in cnodes}
    for nid in [nid for nid in out.nodes if nid not in present]:
        del out.nodes[nid]
    rename: dict[str, str] = {nid: nid for nid in out.nodes}
    for cn in cnodes:
        cid = str(cn["id"])
        if cid in rename:
            continue
        op = cn.get("op") or cat.resolve((cn.get("label") or "").split("<", 1)[0].strip())
        if op is None:
            continue  # nothing says what this node is; a drawing cannot add untyped nodes
        node = new_node(out, op, cid if op == cat.INTERFACE else None)
        if node.id in out.nodes:
            continue
        out.nodes[node.id] = node
        rename[cid] = node.id
    by_id = {f"e{i}": e for i, e in enumerate(w.edges)}
    edges: list[Edge] = []
    out.edges = edges  # filled below; port_for reads the edges kept so far
    seen: set[str] = set()
    for ce in canvas.get("edges", []):
        eid = str(ce.get("id", ""))
        src, dst = rename.get(str(ce.get("source"))), rename.get(str(ce.get("target")))
        if src is None or dst is None or eid in seen:
            continue
        seen.add(eid)
        label = (ce.get("label") or "").strip() or None
        old = by_id.get(eid)
        if old is not None and (old.src, old.dst) == (src, dst):
            same = old.label == label
            edges.append(old if same else Edge(src, dst, label, old.arrow, old.line, old.column))
            continue
        if src == dst or kind_of(dst, out.nodes[dst].op) == "input" \
                or kind_of(src, out.nodes[src].op) == "output":  # no handle there to draw it with
            continue
        if label is None:
            label = port_for(out, src, dst)
        if any((e.src, e.dst, e.label) == (src, dst, label) for e in edges):
            continue
        edges.append(Edge(src, dst, label))
    return out


# -- edits the Editor page makes to the text itself (kept here so the page stays layout only) ----------------

def prompt_names(w: Workflow) -> list[str]:
    """Every prompt the workflow names or defines, once: the nodes' first, in their order, then the rest."""
    return list(dict.fromkeys([n.prompt for n in w.nodes.values() if n.prompt] + list(w.prompts)))


def prompt_users(w: Workflow, name: str) -> list[str]:
    """The ids of the nodes that use prompt ``name``."""
    return [n.id for n in w.nodes.values() if n.prompt == name]


def set_prompt_text(text: str, name: str, prompt: str) -> str:
    """``text`` with the ``%% @prompt name:`` line set to ``prompt`` (added after the header when missing);
    every other line, comments included, is kept as written."""
    from flowcore.mermaid.reader import _PROMPT, _escape

    line = f"%% @prompt {name}: {_escape(prompt.strip())}"
    rows = text.split("\n")
    for i, row in enumerate(rows):
        m = _PROMPT.match(row.strip())
        if m and m["name"] == name:
            rows[i] = row[:len(row) - len(row.lstrip())] + line
            return "\n".join(rows)
    header = next((i for i, row in enumerate(rows) if row.strip().startswith(("flowchart", "graph"))), None)
    if header is None:
        return "\n".join([line, *rows])
    rows.insert(header + 1, "    " + line)
    return "\n".join(rows)


def annotations(diags: list) -> list[dict]:
    """Ace editor gutter annotations (0-based rows) for diagnostics; those without a line go on the first."""
    return [{"row": max((d.line or 1) - 1, 0), "column": max((d.column or 1) - 1, 0),
             "type": "error" if d.severity == "error" else "warning", "text": f"{d.code} {d.message}"}
            for d in diags]


# -- the node dialog: what the canvas can change about one node, written back to the text -------------------

def _word(op: str) -> str:
    return op[:-2] if op.endswith("Op") else op


def node_form(w: Workflow, nid: str, task: str | None) -> dict:
    """What the node dialog shows for ``nid``: its operator, the operators it may become (the task's), its
    prompt (name and text, for prompt-driven operators) and each incoming edge with the ports it may feed."""
    n = w.nodes[nid]
    ops = [o for o in cat.operators_for(task) if o != cat.INTERFACE]
    if n.op and n.op not in ops and n.op != cat.INTERFACE:
        ops.insert(0, n.op)
    ports = [p.name for p in cat.inputs_of(n.op, n.id)] if n.op else []
    incoming = [{"index": i, "source": e.src, "port": e.label or "", "choices": ports}
                for i, e in enumerate(w.edges) if e.dst == nid]
    return {"id": nid, "op": n.op, "ops": ops, "interface": n.op == cat.INTERFACE,
            "prompt_word": PROMPT_WORD.get(n.op or ""), "prompt": n.prompt or "",
            "prompt_text": w.prompts.get(n.prompt or "", ""), "incoming": incoming}


def edit_node(w: Workflow, nid: str, *, op: str | None = None, prompt: str | None = None,
              ports: dict[int, str] | None = None) -> Workflow:
    """A new workflow: node ``nid`` with another operator type (its label's first word and its class follow),
    its prompt text set (a prompt-driven operator gets a prompt name when it has none), and the incoming
    edges ``{edge index: port}`` relabelled ('' = the default port). ValueError names a bad operator or port."""
    out = w.copy()
    if nid not in out.nodes:
        raise ValueError(f"node {nid!r} is not in the workflow")
    n = out.nodes[nid]
    if op is not None and op != n.op:
        if op not in cat.CATALOGUE or op == cat.INTERFACE or n.op == cat.INTERFACE:
            raise ValueError(f"node {nid}: cannot become {op!r}; choose one of "
                             f"{', '.join(o for o in cat.operators_for(None) if o != cat.INTERFACE)}")
        old_word = _word(n.op) if n.op else None
        head, sep, rest = (n.label or "").partition("<br/>")
        if n.label is None or head.strip() in (old_word, n.op, n.id) or not head.strip():
            head = _word(op)
        if op in PROMPT_WORD:
            name = n.prompt or nid.lower()
            rest = f"({PROMPT_WORD[op]}: {name})"
            sep, n.prompt = "<br/>", name
        elif n.prompt and n.op in PROMPT_WORD:  # the role line belonged to the old operator
            rest, sep, n.prompt = "", "", None
        n.label = head + sep + rest if sep and rest else head
        n.op, n.op_class = op, None
        if n.shape in ("", "([", "{") and op != cat.DECISION:
            n.shape = "["
    if prompt is not None and n.prompt:
        if prompt.strip():
            out.prompts[n.prompt] = prompt.strip()
        else:
            out.prompts.pop(n.prompt, None)
    for index, port in (ports or {}).items():
        if not 0 <= index < len(out.edges) or out.edges[index].dst != nid:
            raise ValueError(f"edge {index} does not feed node {nid}")
        allowed = [p.name for p in cat.inputs_of(n.op, n.id)] if n.op else []
        if port and port not in allowed:
            raise ValueError(f"node {nid} ({n.op}) has no input port {port!r}; its ports: {', '.join(allowed)}")
        e = out.edges[index]
        out.edges[index] = Edge(e.src, e.dst, port or None, e.arrow, e.line, e.column)
    return out


def delete_node(w: Workflow, nid: str) -> Workflow:
    """A new workflow without node ``nid`` and its edges (the checker then says what lost its input)."""
    out = w.copy()
    out.nodes.pop(nid, None)
    out.edges = [e for e in out.edges if nid not in (e.src, e.dst)]
    return out


# -- how readable a layout is: edge crossings, edges drawn through a node ---------------------------------------

def _cross(p: tuple[float, float], q: tuple[float, float], r: tuple[float, float], s: tuple[float, float]) -> bool:
    def orient(a, b, c) -> float:  # noqa: ANN001
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    d1, d2, d3, d4 = orient(r, s, p), orient(r, s, q), orient(p, q, r), orient(p, q, s)
    return d1 * d2 < 0 and d3 * d4 < 0


def _segments(w: Workflow, pos: dict, routes: dict | None = None) -> list[tuple[int, list]]:
    """Each edge as the polyline it is drawn with: the source's handle, its bends (``routes``), the target's."""
    out = []
    for i, e in enumerate(w.edges):
        if e.src not in pos or e.dst not in pos or e.src == e.dst:
            continue
        (sx, sy), (tx, ty) = pos[e.src], pos[e.dst]
        if w.direction in ("LR", "RL"):  # the handles the canvas draws from and to
            ends = [(sx + NODE_W, sy + NODE_H / 2), (tx, ty + NODE_H / 2)]
            if w.direction == "RL":
                ends = [(sx, sy + NODE_H / 2), (tx + NODE_W, ty + NODE_H / 2)]
        else:
            ends = [(sx + NODE_W / 2, sy + NODE_H), (tx + NODE_W / 2, ty)]
            if w.direction == "BT":
                ends = [(sx + NODE_W / 2, sy), (tx + NODE_W / 2, ty + NODE_H)]
        pts = [ends[0], *((routes or {}).get(i, [])), ends[1]]
        out.append((i, list(zip(pts, pts[1:], strict=False))))
    return out


def crossings(w: Workflow, pos: dict | None = None, routes: dict | None = None) -> tuple[int, int]:
    """(pairs of edges that cross, pairs of edges) in a layout (default: the layered one, with its bends); edges
    that share a node are not counted as crossing."""
    if pos is None:
        pos, routes = layered_layout(w)
    segs = _segments(w, pos, routes)
    crossed = 0
    pairs = len(segs) * (len(segs) - 1) // 2
    for a in range(len(segs)):
        ea = w.edges[segs[a][0]]
        for b in range(a + 1, len(segs)):
            eb = w.edges[segs[b][0]]
            if {ea.src, ea.dst} & {eb.src, eb.dst}:
                continue
            if any(_cross(p, q, r, s) for p, q in segs[a][1] for r, s in segs[b][1]):
                crossed += 1
    return crossed, pairs


def hidden_edges(w: Workflow, pos: dict | None = None, routes: dict | None = None) -> int:
    """How many edges run through a node box other than their own ends (drawn behind it, unseen)."""
    if pos is None:
        pos, routes = layered_layout(w)
    hidden = 0
    for i, segs in _segments(w, pos, routes):
        e = w.edges[i]
        for nid, (x, y) in pos.items():
            if nid in (e.src, e.dst):
                continue
            box = [(x, y), (x + NODE_W, y), (x + NODE_W, y + NODE_H), (x, y + NODE_H)]
            inside = any(x < px < x + NODE_W and y < py < y + NODE_H for p, q in segs for px, py in (p, q))
            if inside or any(_cross(p, q, box[k], box[(k + 1) % 4]) for p, q in segs for k in range(4)):
                hidden += 1
                break
    return hidden
