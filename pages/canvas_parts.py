"""The Editor's drawing canvas (a plain module, not a page): React Flow with named ports and a palette, kept in sync
with the text, and the app's own node dialog. What is drawn comes from flowcore.ui.canvas."""

from __future__ import annotations

import hashlib
import json
import time

import streamlit as st
from streamlit_flow.elements import StreamlitFlowEdge, StreamlitFlowNode
from streamlit_flow.state import StreamlitFlowState

from flowcore import catalogue as cat
from flowcore.model import Workflow
from flowcore.ui import canvas as cv
from flowcore.ui import view
from flowcore.ui.words import operator_name
from pages import flow
from pages.common import md

ss = st.session_state


def _structure(w: Workflow) -> str:
    """What the canvas's graph is (ids, types, labels, edges): dragged positions are kept while it stays the same."""
    plain = cv.to_canvas(w)
    return json.dumps([w.direction, [(n["id"], n["op"], n["label"]) for n in plain["nodes"]], plain["edges"]])


def canvas(w: Workflow, task: str, on_change) -> None:  # noqa: ANN001 - on_change(new_text) -> None
    """Palette, canvas and the write-back of what was drawn. ``on_change`` gets the new workflow."""
    items = cv.palette(task, w)
    pc = st.columns([2, 1, 4], vertical_alignment="bottom")
    item = pc[0].selectbox("Palette", items, key="ed_palette",
                           format_func=lambda i: f"{operator_name(i)} — {cat.CATALOGUE[i].description}"
                           if i in cat.CATALOGUE else f"{cv.INTERFACE_LABELS.get(i, i)} (interface)")
    if pc[1].button("Add node", icon=":material/add:", key="ed_add"):
        on_change(cv.apply_canvas(w, cv.add_palette_node(cv.to_canvas(w), item)))
    pc[2].caption("Drag an operator from the strip above the canvas onto it, or pick one here. Drag from a node's "
                  "lower handle onto a named input of another to connect (the edge takes the input's name; from a "
                  "Decision's Passed or Failed handle, the route's); click "
                  "a node to edit its type, prompt and ports; right-click an edge to delete it. The text follows.")
    structure = _structure(w)
    fkey = f"flow_{hashlib.sha1(structure.encode()).hexdigest()[:12]}_{ss.get('ed_flow_nonce', 0)}"
    if ss.get("ed_flow", {}).get("key") != fkey:  # the same arguments on every rerun, or the canvas resets
        kept = ss.get("ed_positions", ("", {}))  # dragged positions survive only while the graph is the same
        ss["ed_flow"] = {"key": fkey, "ts": int(time.time() * 1000),
                         "sent": cv.to_canvas(w, kept[1] if kept[0] == structure else None)}
    sent, across = ss["ed_flow"]["sent"], w.direction in ("LR", "RL")
    points, pieces = cv.expand(sent)  # a bent edge is drawn through fixed points, never behind a node
    ports = cv.named_ports(w, sent) if flow.patched() else {}  # a handle per input, where there is more than one
    handles = cv.edge_ports(w, pieces) if ports else {}
    routes = cv.route_handles(w, sent) if flow.patched() else {}  # a Decision: a named handle per route
    leaving = cv.edge_routes(w, pieces) if routes else {}
    nodes = [StreamlitFlowNode(
        n["id"], (n["x"], n["y"]),
        {"content": f"**{n['id']}**  \n" + md(str(view.safe_label(n["label"]))).replace("\\<br/\\>", "  \n"),
         "op": n["op"], "mlabel": n["label"], **({"ports": ports[n["id"]]} if n["id"] in ports else {}),
         **({"routes": routes[n["id"]]} if n["id"] in routes else {})},
        node_type=n["kind"], source_position="right" if across else "bottom",
        target_position="left" if across else "top", connectable=True, deletable=True,
        style={"background": cat.CATALOGUE[n["op"]].color if n["op"] in cat.CATALOGUE else "#ffffff",
               "width": f"{cv.NODE_W - 10}px", "fontSize": "13px", "padding": "6px"}) for n in sent["nodes"]]
    nodes += [StreamlitFlowNode(p["id"], (p["x"] - 1, p["y"] - 1), {"content": ""}, node_type="default",
                                source_position="right" if across else "bottom", draggable=False,
                                target_position="left" if across else "top", connectable=False, deletable=False,
                                selectable=False, focusable=False,
                                style={"width": "2px", "height": "2px", "padding": "0", "border": "none",
                                       "background": "transparent", "minWidth": "0"}) for p in points]
    edges = [StreamlitFlowEdge(e["id"], e["source"], e["target"], label=e["label"], deletable=True,
                               focusable=True, marker_end={"type": "arrowclosed"} if e["arrow"] else {},
                               label_show_bg=not (named := bool(e["label"]) and (e["id"] in handles or bool(
                                   routes) and cv.route_of(e["label"]) is not None)),  # a named handle says it
                               edge_type="straight" if cv.WAYPOINT in e["id"] else "default",
                               label_style={"display": "none"} if named else {"fontSize": "12px"},
                               **({"targetHandle": h} if (h := handles.get(e["id"])) else {}),
                               **({"sourceHandle": r} if (r := leaving.get(e["id"])) else {})) for e in pieces]
    width, height = cv.extent(sent)
    got = flow.flow(fkey, StreamlitFlowState(nodes, edges, timestamp=ss["ed_flow"]["ts"]),
                    palette=cv.palette_items(task, w) if flow.patched() else [],
                    height=int(min(max(height + 60, 320), cv.CANVAS_MAX_HEIGHT)), min_zoom=0.7)
    if got.selected_id and got.selected_id != ss.get("ed_node_seen") and cv.WAYPOINT not in got.selected_id:
        ss["ed_node"] = ss["ed_node_seen"] = got.selected_id  # a click on a node: the app's node dialog
    back = cv.collapse([{"id": n.id, "op": n.data.get("op"), "label": n.data.get("mlabel"),
                         "x": n.position["x"], "y": n.position["y"]} for n in got.nodes],
                       [{"id": e.id, "source": e.source, "target": e.target, "label": e.label or ""}
                        for e in got.edges], sent)

    def shape(c: dict) -> tuple:
        return (sorted(n["id"] for n in c["nodes"]),
                sorted((e["id"], e["source"], e["target"], e["label"] or "") for e in c["edges"]))

    if shape(back) != shape(sent):  # a connection or deletion: a fresh layered layout of the new graph ...
        ss["ed_flow_nonce"] = ss.get("ed_flow_nonce", 0) + 1
        ss.pop("ed_positions", None)
        new = cv.apply_canvas(w, back)
        if dropped := cv.dropped_positions(w, back, new):  # ... with a node dropped from the palette where it fell
            ss["ed_positions"] = (_structure(new), dropped)
        on_change(new)
    ss["ed_positions"] = (structure, {n["id"]: (n["x"], n["y"]) for n in back["nodes"]})
    if ss.get("ed_node") in w.nodes:
        node_dialog(w, task, ss["ed_node"], on_change)


def node_dialog(w: Workflow, task: str, nid: str, on_change) -> None:  # noqa: ANN001 - on_change(Workflow)
    """The app's own dialog for the node clicked on the canvas: operator type, prompt and the port each incoming
    edge feeds. Apply writes the change to the text (the one source of truth); the checker then judges it."""
    f = cv.node_form(w, nid, task)
    with st.container(border=True, key="ed_node_dialog"):
        st.markdown(f"**Node {md(nid)}**" + (" · an interface node (its type is fixed)" if f["interface"] else ""))
        if f["interface"]:
            op = None
        else:
            op = st.selectbox("Operator type", f["ops"], index=f["ops"].index(f["op"]) if f["op"] in f["ops"] else 0,
                              key=f"ed_node_op_{nid}", format_func=lambda o: f"{operator_name(o)} — {cat.CATALOGUE[o].description}")
        prompt = None
        if f["prompt_word"] and op == f["op"]:
            prompt = st.text_area(f"Prompt `{md(f['prompt'])}`", f["prompt_text"], height=90,
                                  key=f"ed_node_prompt_{nid}_{hash(f['prompt_text'])}")
        elif op in cv.PROMPT_WORD:
            st.caption("Apply first: the new operator gets a prompt of its own, editable here afterwards.")
        ports = {}
        choices = [p.name for p in cat.inputs_of(op or f["op"], nid)] if (op or f["op"]) else []
        for e in f["incoming"]:
            opts = [""] + choices
            ports[e["index"]] = st.selectbox(
                f"Edge from {e['source']} feeds", opts, index=opts.index(e["port"]) if e["port"] in opts else 0,
                key=f"ed_node_port_{nid}_{e['index']}_{op}", format_func=lambda p: p or "the default port")
        b = st.columns([1, 1, 1, 3])
        if b[0].button("Apply", type="primary", key="ed_node_apply", icon=":material/check:"):
            try:
                new = cv.edit_node(w, nid, op=op if op != f["op"] else None, prompt=prompt, ports=ports)
            except ValueError as e:
                st.error(md(e))
            else:
                on_change(new)
        if b[1].button("Delete node", key="ed_node_delete", icon=":material/delete:"):
            ss.pop("ed_node", None)
            on_change(cv.delete_node(w, nid))
        if b[2].button("Close", key="ed_node_close"):
            ss.pop("ed_node", None)
            st.rerun()
