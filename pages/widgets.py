"""Widgets the pages share (a plain module, not a page): the Mermaid drawing with zoom and safe labels, a
big graph's overview, charts, the workflow picker and a job's progress. What is drawn comes from flowcore.ui.view;
the Editor's canvas is pages/canvas_parts.py."""

from __future__ import annotations

from typing import Any

import streamlit as st

from flowcore import parse_lenient
from flowcore.model import Workflow
from flowcore.ui import code_view, svgplot, view
from flowcore.workspace import jobs, library
from pages import common
from pages.common import md
from pages.drawing import drawing

ss = st.session_state


def code(text: str, language: str | None = None, *, line_numbers: bool = False, height: int | None = None,
         where: Any = None) -> None:
    """A highlighted code box, drawn as HTML highlighted on the server (flowcore.ui.code_view): st.code would
    load Streamlit's 1.5 MB highlighter before the page paints."""
    (where or st).html(code_view.html(text, language, line_numbers=line_numbers, height=height))


def plot(drawn: svgplot.Drawn, where: Any = None) -> None:
    """A chart drawn on the server (flowcore.ui.svgplot): it paints with the page, no chart library loaded.
    st.html would drop the SVG (its sanitiser keeps HTML only), so it is a raw HTML block of markdown: only
    svgplot's own output, every text in it escaped there, is ever drawn this way."""
    if not isinstance(drawn, svgplot.Drawn):
        raise TypeError("widgets.plot draws svgplot.svg() output only")
    (where or st).markdown(drawn, unsafe_allow_html=True)


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


def diagram(w: Workflow | str, key: str, zoom: float | None = None, height: int | None = None, *,
            server_first: bool = False) -> None:
    """A Mermaid drawing (the app's own component): labels cannot load anything, a zoom to start with (None fits
    the width, never below 11 px text), wheel and drag pan, Ctrl + wheel zooms, copy link and PNG buttons.
    A big graph is not drawn here (it would freeze the tab): its overview is shown instead. ``server_first``:
    the first view shows the server's drawing as an image until the browser's Mermaid has loaded (the Editor)."""
    if isinstance(w, str):
        w = parse_lenient(w)[0]
    if not view.draw_live(w):
        big_graph(w, key)
        return
    drawing(view.diagram_code(w), key, max_height=height or 720, zoom=zoom, server_first=server_first)


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


def rerun_when(ready, every: float = 0.4, keep: tuple[str, ...] = ()) -> None:  # noqa: ANN001 - ready() -> bool
    """Poll ``ready`` in a small fragment (the page itself is not rerun) and rerun the page once it is true:
    for a result computed off the typing path, such as Mermaid 11's verdict. ``keep``: as ``job_progress``'s."""
    @st.fragment(run_every=every)
    def _poll() -> None:
        if ready():
            common.rerun(*keep)

    _poll()


def scroll_to_top() -> None:
    """Bring the page to its top (after a switch from far down another page, or a launch at the bottom)."""
    st.html("<script>for (const el of [window, document.querySelector('[data-testid=\"stMain\"]'),"
            " document.querySelector('[data-testid=\"stAppViewContainer\"]')]) { if (el) el.scrollTo(0, 0); }"
            "</script>", unsafe_allow_javascript=True)


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
                 body=None, rerun_if=None, keep: tuple[str, ...] = ()) -> None:  # noqa: ANN001 - text(snap) -> str, body(snap), rerun_if()
    """Inside a page's polling fragment: rerun the whole page once the job is over (or ``rerun_if()``), else its
    bar (``text(snapshot)``), what ``body(snapshot)`` adds, and Cancel (or what cancelling means). ``keep``: the
    page's one-shot message keys (``common.rerun``)."""
    job = jobs.get(job_id)
    if job is None or not job.snapshot().active or (rerun_if is not None and rerun_if()):
        common.rerun(*keep)
    snap = job.snapshot()
    st.progress(snap.fraction, text=text(snap))
    if body is not None:
        body(snap)
    if job.cancel_requested:
        st.info(cancelling)
    else:  # a callback: it runs before the rerun the click starts, so that rerun already says "Cancelling"
        st.button(cancel_label, icon=":material/stop:", key=key, on_click=job.cancel)
