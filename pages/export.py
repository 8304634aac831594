"""Export page: the generated Python of a workflow, and downloads of .py, .mmd, .svg, .png and .json.

Works without an LLM endpoint. Compiling and drawing are cached by the workflow text; the drawings are made
only when their download button is clicked (Mermaid takes about a second per diagram).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore import is_valid, parse, to_mermaid
from flowcore.checker.bounded import check
from flowcore.execution.compiler import compile_workflow
from flowcore.export import bundle as fx
from flowcore.mermaid.engines import js as mermaid_js
from flowcore.ui import code_view, view
from pages import common, widgets

# -- cached work (keyed by the text; never by a key or a secret) ------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=64)
def _python(text: str, task: str) -> str:
    return compile_workflow(parse(text), task)


@st.cache_data(show_spinner=False, max_entries=64)
def _drawing_error(drawing: str, nodes: int) -> str | None:
    """Why Mermaid cannot draw it (None: it can). Drawn once here, so a download never fails silently."""
    if nodes > view.BIG_GRAPH_NODES:
        return f"{nodes:,} nodes are too many to draw here (download the .mmd and draw it elsewhere)"
    err = mermaid_js.parse_check(drawing)
    if err is not None:
        return err.message
    try:
        mermaid_js.render_svg(drawing)
    except Exception as e:  # noqa: BLE001 - the renderer's own error, said on the page
        return str(e)
    return None


@st.cache_data(show_spinner=False, max_entries=32)
def _svg(drawing: str) -> bytes:
    return mermaid_js.render_svg(drawing).encode()


@st.cache_data(show_spinner=False, max_entries=32)
def _png(drawing: str) -> bytes:
    return mermaid_js.render_png(drawing)


# -- the page -----------------------------------------------------------------------------------------------------

def show_invalid(text: str, task: str, name: str, errors: list) -> None:
    st.error(f"**This workflow is invalid for the {task} task**, so it cannot be compiled to Python. Fix it "
             "in the Editor; the checker found:", icon=":material/error:")
    st.dataframe([d.to_dict() for d in errors], hide_index=True, placeholder="—", width="stretch",
                 column_order=["line", "column", "code", "message", "node"])
    st.download_button("Download the text as .mmd anyway", text.encode(), f"{fx.file_stem(name)}.mmd",
                       mime=fx.MIME[".mmd"], on_click="ignore", icon=":material/download:", key="ex_dl_raw")


def main() -> None:
    common.app_shell()
    common.header("Export", "The workflow as a standalone Python module, its Mermaid text, a drawing, or a "
                  "JSON description.")
    st.caption("The `.py` needs **only Python 3 and its standard library** (no flowcore, no pip install): "
               "`OPENAI_BASE_URL=... OPENAI_API_KEY=... python3 workflow.py --problem \"...\"`. It uses the "
               "`openai` package when installed, otherwise a plain urllib request to the same endpoint.")
    text, task, name = widgets.pick_workflow("ex_pick")
    diags = check(text, task)
    if not is_valid(diags):
        show_invalid(text, task, name, [d for d in diags if d.severity == "error"])
        return
    w = parse(text)
    stem = fx.file_stem(name)
    with st.spinner("Compiling…"):
        source = _python(text, task)
    mmd = to_mermaid(w)
    data = json.dumps(fx.workflow_json(w, task=task, name=name), indent=2, ensure_ascii=False) + "\n"
    drawing = fx.drawing_text(w)
    try:  # a key pasted into a prompt or label must not leave in a file
        fx.assert_no_secrets({f"{stem}.py": source.encode(), f"{stem}.mmd": mmd.encode(),
                              f"{stem}.json": data.encode(), "the drawing": drawing.encode()},
                             [common.llm_settings().api_key])
    except fx.ExportError as e:
        st.error(common.md(e), icon=":material/key:")
        return
    with st.spinner("Checking that Mermaid can draw it…"):
        draw_err = _drawing_error(drawing, len(w.nodes))

    counts = ", ".join(f"{n:,} {word}{'' if n == 1 else 's'}"
                       for n, word in ((len(w.nodes), "node"), (len(w.edges), "edge"), (len(w.prompts), "prompt")))
    st.markdown(f"**{common.md(name)}** · task `{task}` · {counts}")
    cols = st.columns(5)
    cols[0].download_button("Python (.py)", source.encode(), f"{stem}.py", mime=fx.MIME[".py"], on_click="ignore",
                            icon=":material/code:", type="primary", key="ex_dl_py")
    cols[1].download_button("Mermaid (.mmd)", mmd.encode(), f"{stem}.mmd", mime=fx.MIME[".mmd"],
                            on_click="ignore", icon=":material/account_tree:", key="ex_dl_mmd")
    cols[2].download_button("Drawing (.svg)", lambda: _svg(drawing), f"{stem}.svg", mime=fx.MIME[".svg"],
                            on_click="ignore", icon=":material/image:", disabled=draw_err is not None,
                            key="ex_dl_svg")
    cols[3].download_button("Drawing (.png)", lambda: _png(drawing), f"{stem}.png", mime=fx.MIME[".png"],
                            on_click="ignore", icon=":material/image:", disabled=draw_err is not None,
                            key="ex_dl_png")
    cols[4].download_button("JSON (.json)", data.encode(), f"{stem}.json", mime=fx.MIME[".json"],
                            on_click="ignore", icon=":material/data_object:", key="ex_dl_json")
    if draw_err:
        st.warning(f"Mermaid cannot draw this workflow, so there is no SVG/PNG: {common.md(draw_err)}")

    tab_py, tab_mmd, tab_json, tab_png = st.tabs(["Python", "Mermaid", "JSON", "Drawing"])
    with tab_py:
        own, marker, support = source.partition("\n# " + "=" * 106 + "\n")
        st.caption(f"{len(source.splitlines()):,} lines: the prompts, the graph and the function that runs "
                   f"it (independent nodes run at the same time) below; then {len(support.splitlines()):,} lines of operator and "
                   "sandbox code pasted from flowcore (in the download).")
        widgets.code(code_view.head(own, "# … (the rest is in the .py download)"), "python", line_numbers=True,
                     height=560)
        if marker and st.toggle("Show the pasted support code too", key="ex_support"):
            widgets.code(support, "python", height=560)
    with tab_mmd:
        widgets.code(code_view.head(mmd, "%% … (the rest is in the .mmd download)"), None, line_numbers=True)
    with tab_json:
        widgets.code(code_view.head(data, "… (the rest is in the .json download)"), "json", height=560)
    with tab_png:
        if draw_err:
            st.info("No drawing (see the warning above).")
        elif st.toggle("Draw the PNG here (about a second)", key="ex_preview"):
            with st.spinner("Drawing…"):
                st.image(_png(drawing), width="content")


if __name__ == "__main__":  # run as a page
    main()
