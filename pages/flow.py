"""The Editor's drawing canvas (a plain module, not a page): streamlit-flow's own browser build (React Flow) with
two things it lacks, so a Langflow user finds them.

- **Named port handles.** A node whose operator has several inputs (Review: solution, problem) gets one target
  handle per input, named on the canvas; a drag onto one makes an edge labelled with that port, so the text
  gets ``A -->|feedback| V1``. A Decision gets one source handle per route (Passed, Failed), named too: a
  drag from one makes ``D1 -->|Failed| V1``. streamlit-flow 1.6.1 draws one unnamed handle each way per node
  and drops the handles of a new connection, so its main chunk is patched in three places (:data:`PATCHES`).
- **A palette to drag operators from** (components/flow/palette.js): a strip above the canvas; a drop adds the
  node, as the Add node button does.

The build is copied once per version into a folder of its own (pages/component_dir.py) and served from there:
nothing is loaded from outside 127.0.0.1. A streamlit-flow whose build does not have the expected code gets its
stock component (one handle per node, no drag palette), never an error.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import streamlit.components.v1 as components
import streamlit_flow
from streamlit_flow.elements import StreamlitFlowEdge, StreamlitFlowNode
from streamlit_flow.layouts import ManualLayout
from streamlit_flow.state import StreamlitFlowState

from pages.component_dir import built

BUILD = Path(streamlit_flow.__file__).resolve().parent / "frontend" / "build"
OURS = Path(__file__).resolve().parent / "components" / "flow"
ADDED = ("palette.js", "palette.css")

# The markdown node's one target handle -> one per named port when data.ports lists them (left-to-right along
# the top, or top-to-bottom along the left side), each with its name (every other name a line higher, so three
# names on one node do not run into each other).
_ONE_TARGET = '(0,qp.jsx)(Bh,{type:"target",position:a,isConnectable:!0})]})};var oM'
_PORTS = ('...(t.ports&&t.ports.length?t.ports.map(((p,k)=>(0,qp.jsx)(Bh,{type:"target",position:a,id:p,'
          'isConnectable:!0,className:"mf-port"+(k%2?" mf-port-odd":""),title:"input: "+p,style:("left"===a||"right"===a)?'
          '{top:100*(k+1)/(t.ports.length+1)+"%"}:{left:100*(k+1)/(t.ports.length+1)+"%"},'
          'children:(0,qp.jsx)("span",{className:"mf-port-name",children:p})},p))):'
          '[(0,qp.jsx)(Bh,{type:"target",position:a,isConnectable:!0},"t")])]})};var oM')
# The default node's one source handle -> one per route when data.routes lists them (a Decision: Passed, Failed),
# each named beside it, so a drag from one makes an edge labelled with that route.
_ONE_SOURCE = ('const i=JI[n]||Zl.Right,a=JI[r]||Zl.Left;return(0,qp.jsxs)(qp.Fragment,{children:['
               '(0,qp.jsx)(Bh,{type:"source",position:i,isConnectable:!0}),')
_ROUTES = ('const i=JI[n]||Zl.Right,a=JI[r]||Zl.Left;return(0,qp.jsxs)(qp.Fragment,{children:['
           '...(t.routes&&t.routes.length?t.routes.map(((p,k)=>(0,qp.jsx)(Bh,{type:"source",position:i,id:p,'
           'isConnectable:!0,className:"mf-route mf-route-"+String(p).toLowerCase(),title:"route: "+p,'
           'style:("left"===i||"right"===i)?{top:100*(k+1)/(t.routes.length+1)+"%"}:'
           '{left:100*(k+1)/(t.routes.length+1)+"%"},'
           'children:(0,qp.jsx)("span",{className:"mf-route-name",children:p})},"s"+p))):'
           '[(0,qp.jsx)(Bh,{type:"source",position:i,isConnectable:!0},"s")]),')
# A new connection keeps the port it was dropped on, as the edge's label (and in its id, so two ports of one
# node can both be fed from the same source).
_CONNECT = "onConnect:e.args.allowNewEdges?t=>{const n=`st-flow-edge_${t.source}-${t.target}`,r=mh({...t,"
_LABELLED = ("onConnect:e.args.allowNewEdges?t=>{const n=`st-flow-edge_${t.source}-${t.target}`+"
             '(t.sourceHandle?"-"+t.sourceHandle:"")+(t.targetHandle?"-"+t.targetHandle:""),'
             'r=mh({...t,label:t.sourceHandle||t.targetHandle||"",')  # a route names the edge, else the port
PATCHES = ((_ONE_TARGET, _PORTS), (_ONE_SOURCE, _ROUTES), (_CONNECT, _LABELLED))


def _main_chunk(build: Path) -> Path:
    found = re.findall(r'src="\./(static/js/main\.[0-9a-f]+\.js)"', (build / "index.html").read_text())
    if len(found) != 1:
        raise RuntimeError(f"streamlit-flow's index.html in {build} loads {len(found)} main chunks, expected 1")
    return build / found[0]


@cache
def build_dir() -> Path:
    """The patched copy, made once per version of streamlit-flow and of our files. RuntimeError when the build
    does not have the code this patches (a new streamlit-flow: look again, then update PATCHES)."""
    main = _main_chunk(BUILD)
    source = main.read_text(encoding="utf-8")
    for old, _ in PATCHES:
        if source.count(old) != 1:
            raise RuntimeError(f"streamlit-flow's {main.name} does not have the code the canvas patches")
    for old, new in PATCHES:
        source = source.replace(old, new)
    page = (BUILD / "index.html").read_text(encoding="utf-8")
    if page.count('<div id="root"></div>') != 1 or page.count("</head>") != 1:
        raise RuntimeError("streamlit-flow's index.html has no single root element")
    page = page.replace("</head>", '<link rel="stylesheet" href="./palette.css"/>'
                        '<script defer="defer" src="./palette.js"></script></head>')
    page = page.replace('<div id="root"></div>', '<div id="mf-palette" hidden></div><div id="root"></div>')
    digest = hashlib.sha256(source.encode() + page.encode() + b"".join((OURS / n).read_bytes() for n in ADDED))

    def fill(folder: Path) -> None:
        shutil.copytree(BUILD, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("index.html"),
                        copy_function=shutil.copyfile)
        (folder / main.relative_to(BUILD)).write_text(source, encoding="utf-8")
        for name in ADDED:
            shutil.copyfile(OURS / name, folder / name)
        (folder / "index.html").write_text(page, encoding="utf-8")  # last: its presence says the folder is whole

    return built("mermaidflow-flow-", digest.hexdigest()[:16], fill, "index.html")


@cache
def _component():  # noqa: ANN202 - Streamlit's component function
    return components.declare_component("streamlit_flow", path=str(build_dir()))


def patched() -> bool:
    """Whether the canvas has named ports and the drag palette (else it is streamlit-flow's stock one)."""
    try:
        _component()
    except (RuntimeError, OSError):
        return False
    return True


def flow(key: str, state: StreamlitFlowState, *, palette: list[dict[str, Any]], height: int, min_zoom: float
         ) -> StreamlitFlowState:
    """The canvas as the Editor uses it (new edges allowed, edge menu on, the app's own node dialog): the state
    it reports back. ``palette``: what can be dragged in ({item, label, op, kind, id, color, help})."""
    if not patched():
        return streamlit_flow.streamlit_flow(
            key, state, height=height, fit_view=True, allow_new_edges=True, enable_node_menu=False,
            enable_edge_menu=True, get_node_on_click=True, hide_watermark=True, min_zoom=min_zoom,
            layout=ManualLayout())
    value = _component()(
        nodes=[n.asdict() for n in state.nodes], edges=[e.asdict() for e in state.edges], height=height,
        showControls=True, fitView=True, showMiniMap=False, style={}, animateNewEdges=False, allowNewEdges=True,
        layoutOptions=ManualLayout().__to_dict__(), getNodeOnClick=True,
        getEdgeOnClick=False, panOnDrag=True, allowZoom=True, minZoom=min_zoom, enableNodeMenu=False,
        enablePaneMenu=False, enableEdgeMenu=True, hideWatermark=True, key=key, timestamp=state.timestamp,
        component="streamlit_flow", palette=palette)
    if value is None:
        return state
    return StreamlitFlowState(nodes=[StreamlitFlowNode.from_dict(n) for n in value["nodes"]],
                              edges=[StreamlitFlowEdge.from_dict(e) for e in value["edges"]],
                              selected_id=value["selectedId"], timestamp=value["timestamp"])
