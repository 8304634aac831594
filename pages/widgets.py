"""Widgets the pages share (a plain module, not a page): the Mermaid drawing with zoom and safe labels, a
big graph's overview, and the drawing canvas adapter. What is drawn comes from flowcore.ui.view/canvas."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import streamlit as st
from streamlit_flow.elements import StreamlitFlowEdge, StreamlitFlowNode
from streamlit_flow.state import StreamlitFlowState

from flowcore import catalogue as cat
from flowcore import parse_lenient
from flowcore.model import Workflow
from flowcore.ui import canvas as cv
from flowcore.ui import view
from flowcore.ui.words import operator_name
from flowcore.workspace import jobs, library
from pages import common, flow
from pages.common import md
from pages.drawing import drawing

ss = st.session_state


def chart(fig: Any, *, key: str, where: Any = None) -> None:
    """``st.altair_chart(fig)`` without Altair's JSON-schema validation of the whole spec, which was half of the
    History page's first run (200 ms for four charts). The figures are ours and fixed in shape; the tests
    validate each one (tests/helpers/vega.py). The rest is Streamlit's own conversion: theme "none", the
    data as Arrow datasets, under Streamlit's lock on Altair's global settings."""
    import altair as alt
    from streamlit.elements import vega_charts as vc

    datasets: dict[str, Any] = {}
    alt.data_transformers.register("to_arrow_dataset", vc._to_arrow_dataset)
    with vc._altair_globals_lock, alt.theme.enable("none"), \
            alt.data_transformers.enable("to_arrow_dataset", datasets=datasets):
        spec = fig.to_dict(validate=False)
    spec["datasets"] = {**spec.get("datasets", {}), **datasets}
    (where or st).vega_lite_chart(spec=spec, key=key)


def diagram(w: Workflow | str, key: str, zoom: float | None = None, height: int | None = None) -> None:
    """A Mermaid drawing (the app's own component): labels cannot load anything, a zoom to start with (None fits
    the width, never below 11 px text), wheel and drag pan, Ctrl + wheel zooms, copy link and PNG buttons.
    A big graph is not drawn here (it would freeze the tab): its overview is shown instead."""
    if isinstance(w, str):
        w = parse_lenient(w)[0]
    if not view.draw_live(w):
        big_graph(w, key)
        return
    drawing(view.diagram_code(w), key, max_height=height or 720, zoom=zoom)


def big_graph(w: Workflow, key: str) -> None:
    """Overview of a graph too big to draw live, and an on-demand drawing of its first nodes."""
    o = view.overview(w)
    st.info(f"**{o['nodes']:,} nodes, {o['edges']:,} edges, {o['layers']:,} layers** — too big to draw as you "
            "type (the browser would freeze). The text and the checker stay live.",
            icon=":material/account_tree:")
    st.dataframe([{"operator": k, "nodes": v} for k, v in o["by type"].items()], hide_index=True, placeholder="—",
                 height=min(36 * (len(o["by type"]) + 1) + 10, 300), key=f"{key}_types")
    what = "it" if len(w.nodes) <= view.PREVIEW_NODES else f"the first {view.PREVIEW_NODES} nodes along the flow"
    if st.toggle(f"Draw {what}", key=f"{key}_preview"):
        part = view.preview(w)
        drawing(view.diagram_code(part), f"{key}_part")


def rerun_when(ready, every: float = 0.4) -> None:  # noqa: ANN001 - ready() -> bool
    """Poll ``ready`` in a small fragment (the page itself is not rerun) and rerun the page once it is true:
    for a result computed off the typing path, such as Mermaid 11's verdict."""
    @st.fragment(run_every=every)
    def _poll() -> None:
        if ready():
            st.rerun()

    _poll()


def scroll_to_top() -> None:
    """Bring the page to its top (after a switch from far down another page, or a launch at the bottom)."""
    st.html("<script>for (const el of [window, document.querySelector('[data-testid=\"stMain\"]'),"
            " document.querySelector('[data-testid=\"stAppViewContainer\"]')]) { if (el) el.scrollTo(0, 0); }"
            "</script>", unsafe_allow_javascript=True)


# -- the drawing canvas (React Flow), kept in sync with the text ---------------------------------------------

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


# -- choosing the workflow (Run, Export, Evolve) ----------------------------------------------------------------------------------------

CURRENT = ("current", "")


def _label(choice: tuple[str, str], current_name: str) -> str:
    kind, name = choice
    return {"current": f"Current workflow ({current_name})", "saved": f"Saved: {name}",
            "example": f"Example: {name}"}[kind]


def pick_workflow(key: str) -> tuple[str, str, str]:
    """(text, task, name) of the open workflow, a saved one or a bundled example."""
    cur = common.current_workflow()
    ws = common.workspace()
    saved = library.list_workflows(ws)
    examples = {name: (text, task) for name, task, text in library.examples()}
    options = [CURRENT] + [("saved", e.name) for e in saved] + [("example", n) for n in examples]
    kind, name = st.selectbox("Workflow", options, format_func=lambda c: _label(c, cur["name"]), key=key)
    if kind == "saved":
        try:
            text, task = library.load_workflow(ws, name)
            return text, task, name
        except library.LibraryError as e:
            st.warning(md(e))
    elif kind == "example":
        text, task = examples[name]
        return text, task, name
    return cur["text"], cur["task"], cur["name"]


# -- a background job's progress (Run, Evolve, History, Compare) ---------------------------------------------------

def job_progress(job_id: str, text, *, key: str, cancelling: str, cancel_label: str = "Cancel",  # noqa: ANN001
                 body=None, rerun_if=None) -> None:  # noqa: ANN001 - text(snap) -> str, body(snap), rerun_if()
    """Inside a page's polling fragment: rerun the whole page once the job is over (or ``rerun_if()``), else its
    bar (``text(snapshot)``), what ``body(snapshot)`` adds, and Cancel (or what cancelling means)."""
    job = jobs.get(job_id)
    if job is None or not job.snapshot().active or (rerun_if is not None and rerun_if()):
        st.rerun()
    snap = job.snapshot()
    st.progress(snap.fraction, text=text(snap))
    if body is not None:
        body(snap)
    if job.cancel_requested:
        st.info(cancelling)
    else:  # a callback: it runs before the rerun the click starts, so that rerun already says "Cancelling"
        st.button(cancel_label, icon=":material/stop:", key=key, on_click=job.cancel)
