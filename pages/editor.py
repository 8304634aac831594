"""Editor: write or draw a workflow. The checker marks problems in the gutter as you type (no submit)."""

from __future__ import annotations

import hashlib

import streamlit as st

from flowcore import WorkflowSyntaxError, is_valid, parse, parse_lenient, to_mermaid
from flowcore import catalogue as cat
from flowcore.checker import bounded
from flowcore.export.bundle import file_stem
from flowcore.mermaid.live import verdict as mermaid_verdict
from flowcore.mermaid.live import with_mermaid
from flowcore.ui import canvas as cv
from flowcore.ui import view
from flowcore.ui.flash import take as take_flash
from flowcore.ui.words import count
from flowcore.workspace import library
from pages import canvas_parts, common, conflicts, prompt_parts, serve_parts, widgets
from pages.ace import ace
from pages.common import md

common.app_shell()
ss = st.session_state


def ace_key() -> str:
    return f"ace_{common.editor_rev()}"


def name_key() -> str:
    return f"ed_save_name_{common.editor_rev()}"


def live_text() -> str:
    """The editor's latest value (it may be newer than the shared workflow during a callback); a big
    workflow's sections are spliced into the shared text as they are edited."""
    value = ss.get(ace_key()) if ss.get("ed_mode", "ace") == "ace" else None
    return value if isinstance(value, str) else common.current_workflow()["text"]


def flash(kind: str, message: str) -> None:
    ss["ed_flash"] = (kind, message)


# -- callbacks (run before the script, so the page below already shows their result) ------------------------

def load_example() -> None:
    if not ss.get("ed_example"):
        return flash("warning", "Choose an example first.")
    name, task, text = next(e for e in library.examples() if e[0] == ss["ed_example"])
    common.set_current_workflow(text, task, name, version=None)
    flash("info", f"Loaded the example {name} ({task}).")


def open_saved() -> None:
    name, version = ss.get("ed_open_name"), ss.get("ed_open_version")
    try:
        text, task = library.load_workflow(common.workspace(), name, version)
    except library.LibraryError as e:
        return flash("error", str(e))
    common.set_current_workflow(text, task, name, version=int(version))
    flash("info", f"Opened {name} version {version}.")


def save() -> None:
    wf = common.current_workflow()
    same = (ss.get(name_key()) or "").strip() == wf["name"]  # a save names the version it started from
    try:
        version = library.save_workflow(common.workspace(), ss.get(name_key(), ""), live_text(), wf["task"],
                                        serve_parts.user(), base_version=wf["version"] if same else None)
    except library.LibraryConflict as e:  # someone saved a newer version meanwhile: never left out silently
        return conflicts.refused(e)
    except library.LibraryError as e:
        return flash("error", f"Not saved: {md(str(e))}")
    name = library.validate_name(ss[name_key()])
    common.set_current_workflow(live_text(), name=name, version=version, from_editor=True)
    ok = is_valid(bounded.check(live_text(), wf["task"]))
    flash("success" if ok else "warning", f"Saved {name} as version {version}"
          + ("." if ok else " (it has errors; fix them before running it)."))


def reformat() -> None:
    try:
        common.set_current_workflow(to_mermaid(parse(live_text())))
    except WorkflowSyntaxError as e:
        flash("error", f"Cannot format a text with syntax errors: {md(str(e))}")


def check_hard() -> None:
    ss["ed_hard_for"] = hashlib.sha1(live_text().encode()).hexdigest()


def apply_drawing(w) -> None:  # noqa: ANN001 - a Workflow drawn on the canvas
    common.set_current_workflow(to_mermaid(w))
    st.rerun()


# -- page ---------------------------------------------------------------------------------------------------

common.header("Editor")
if ss.pop("mf_scroll_top", False):
    widgets.scroll_to_top()
wf = common.current_workflow()
rev, ws = common.editor_rev(), common.workspace()
examples = library.examples()
saved = library.list_workflows(ws)

# One row of small controls: the popovers' contents are built when opened (a closed one costs the page's first
# paint nothing; the example list, the download and the width slider loaded 24 of Streamlit's scripts before the
# text could show)
bar = st.columns([1.6, 0.9, 0.9, 1.1, 1.0, 3.5], vertical_alignment="bottom")
task = bar[0].radio("Task", cat.TASKS, index=cat.TASKS.index(wf["task"]) if wf["task"] in cat.TASKS else 0,
                    horizontal=True, key=f"ed_task_{rev}", help="math: GSM8K/MATH; code: HumanEval/MBPP")
if task != wf["task"]:
    common.set_current_workflow(wf["text"], task, from_editor=True)
names = [e[0] for e in examples]
if ss.get("ed_example_rev") != rev:  # another workflow opened: the box names it only if it is an example
    ss["ed_example_rev"], ss["ed_example"] = rev, wf["name"] if wf["name"] in names else None
if (pop := bar[1].popover("Open", icon=":material/folder_open:", key="ed_open_pop", on_change="rerun",
                          help="An example, or a workflow saved in this workspace")).open:
    with pop:
        st.selectbox("Example", names, key="ed_example", placeholder="Choose an example…")
        st.button("Load example", on_click=load_example, key="ed_load")
        st.divider()
        if saved:
            oname = st.selectbox("Saved workflow", [s.name for s in saved], key="ed_open_name",
                                 format_func=lambda n: next(f"{s.name} · {s.task} · v{s.version}"
                                                            + ("" if s.valid else " · has errors")
                                                            for s in saved if s.name == n))
            by = library.authors(ws, oname)
            st.selectbox("Version", [v for v, _, _ in library.versions(ws, oname)], key="ed_open_version",
                         format_func=lambda v: f"v{v} · by {by.get(v, 'local')}")
            st.button("Open", on_click=open_saved, key="ed_open", type="primary")
        else:
            st.caption("Nothing saved in this workspace yet.")
if (pop := bar[2].popover("Save", icon=":material/save:", key="ed_save_pop", on_change="rerun",
                          help="Save a version in this workspace, or download the text")).open:
    with pop:
        st.text_input("Name", value=wf["name"], key=name_key(), max_chars=80)
        st.button("Save version", on_click=save, key="ed_save", type="primary")
        st.download_button("Download .mmd", live_text(), file_name=f"{file_stem(wf['name'])}.mmd",
                           mime="text/plain", icon=":material/download:", key="ed_download", on_click="ignore")
serve_parts.publish_popover(bar[3], live_text(), task, wf["name"] or "", key="ed_publish")

if (shown := take_flash(ss, "ed_flash")) is not None:
    kind, message = shown
    getattr(st, kind)(message)
conflicts.library_panel(live_text, flash)
conflicts.other_tabs_panel()

text = live_text()
if text != wf["text"]:
    common.set_current_workflow(text, from_editor=True)
live_hard = st.session_state.get("ed_live_hard", False)
hard = live_hard or ss.get("ed_hard_for") == hashlib.sha1(text.encode()).hexdigest()
# a typed, pasted or linked text is read within a time and size budget (a long one in a process that is stopped)
diags, w, parse_diags = bounded.read(text, task, hard=hard)
# Mermaid 11's own verdict whenever the soft reader accepts: computed off the typing path (debounced); a
# "Mermaid 11 check" (or live) read has just asked Mermaid itself, so its answer is already in diags
diags, mermaid_pending = (diags, False) if hard else with_mermaid(text, diags)
readable = not any(d.code == "M001" for d in parse_diags)

split = ss.get("ed_text_width", 45)  # kept while its popover is closed (keep.FORM_KEYS)
if (pop := bar[4].popover("Width", icon=":material/width:", key="ed_width_pop", on_change="rerun",
                          help="How much of the width the text gets")).open:
    with pop:
        split = st.slider("Text width (%)", 25, 75, split, 5, key="ed_split")
ss["ed_text_width"] = split
bar[5].caption("Drawing: wheel or drag to pan, Ctrl + wheel to zoom; Fit never draws text under 11 px (the box "
               "scrolls instead).")
left, right = st.columns([split, 100 - split])
with left:
    ss["ed_mode"] = "plain" if view.is_big(w) else "ace"
    if ss["ed_mode"] == "ace":
        ace(text, annotations=cv.annotations(diags), key=ace_key())  # Ace without word-completion pop-ups
    else:  # one editor (even a plain text box) with every line of a text this long froze the tab for seconds
        parts = view.sections(text)
        i = st.selectbox(f"{len(w.nodes):,} nodes: edit a section at a time", range(len(parts)), key="ed_section",
                         format_func=lambda k: f"lines {parts[k][0]:,}–{parts[k][1]:,}")
        i = min(i or 0, len(parts) - 1)
        part = view.section(text, i)
        new = st.text_area("Section", part, height=560, key=f"ed_plain_{rev}_{i}_{hash(part)}",
                           label_visibility="collapsed", help="Ctrl+Enter applies an edit")
        if new != part:
            common.set_current_workflow(view.splice(text, i, new), from_editor=True)
            st.rerun()
    c1, c2, c3 = st.columns([0.8, 1.2, 1.4], vertical_alignment="center")
    c1.button("Format", on_click=reformat, key="ed_format", help="Rewrite the text in canonical form")
    c2.button("Mermaid 11 check", on_click=check_hard, key="ed_hard",
              help="Parse with the real Mermaid library too (slower than the checker)")
    c3.toggle("Mermaid 11 live", key="ed_live_hard", help="Run the Mermaid 11 check on every change")

with right:  # fixed slots (list, notice, diagram): the diagram keeps its place, so it is not rebuilt
    with st.container():
        errors = [d for d in diags if d.severity == "error"]
        if mermaid_pending and not errors:
            st.info(f"No problems found for {task} tasks so far; Mermaid 11 is checking the text…")
            widgets.rerun_when(lambda: mermaid_verdict(text) is not None, keep=("ed_flash",))
        elif not diags:
            st.success(f"Valid for {task} tasks: no problems found (Mermaid 11 agrees).")
        elif not errors:
            st.success(f"Valid for {task} tasks, with {count(len(diags), 'warning')} (Mermaid 11 agrees).")
        else:
            st.error(f"{count(len(errors), 'error')}, {count(len(diags) - len(errors), 'warning')}")
        for d in diags[:view.MAX_LISTED_DIAGNOSTICS]:
            color = "red" if d.severity == "error" else "orange"
            st.markdown(f":{color}[**{d.code}**] {md(d.located())}")
        if len(diags) > view.MAX_LISTED_DIAGNOSTICS:
            with st.expander(f"All {len(diags):,} diagnostics"):
                st.dataframe([d.to_dict() for d in diags], hide_index=True, placeholder="—", width="stretch",
                             column_order=["line", "column", "code", "severity", "message", "node"])
    notice = st.empty()
    if readable:  # the text itself, not a parsed object a later edit could change
        ss["ed_last_good"] = text
    if isinstance(ss.get("ed_last_good"), str):
        if not readable:
            notice.caption("The diagram shows the last readable version of the text.")
        last = ss["ed_last_good"]  # the text read just now within its budget is not read again
        # the first view's drawing comes from the server as an image: the browser's Mermaid (3.5 MB of script)
        # loads after the page's first paint
        widgets.diagram(w if last == text else parse_lenient(last)[0], "ed_mermaid", server_first=True)

st.subheader("Draw")
if not readable:
    st.info("Fix the syntax error above to draw: the canvas edits the same workflow as the text.")
elif st.toggle("Draw on a canvas", key="ed_canvas", help="Add typed nodes from a palette, connect and delete "
               "them; the text follows. Loaded on demand: it is the heaviest part of the page"
               + (f", and slow with {len(w.nodes):,} nodes." if len(w.nodes) > view.CANVAS_MAX_NODES else ".")):
    canvas_parts.canvas(w, task, apply_drawing)

prompt_parts.prompts_section(w, text, readable)
