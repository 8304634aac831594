"""Editor: write or draw a workflow. The checker marks problems in the gutter as you type (no submit)."""

from __future__ import annotations

import hashlib
import json
import time

import streamlit as st
from streamlit_ace import st_ace
from streamlit_flow import streamlit_flow
from streamlit_flow.elements import StreamlitFlowEdge, StreamlitFlowNode
from streamlit_flow.layouts import ManualLayout
from streamlit_flow.state import StreamlitFlowState
from streamlit_mermaid import st_mermaid

from flowcore import WorkflowSyntaxError, check, is_valid, library, parse, parse_lenient, to_mermaid
from flowcore import canvas as cv
from flowcore import catalogue as cat
from pages import common

common.app_shell()
ss = st.session_state


def ace_key() -> str:
    return f"ace_{common.editor_rev()}"


def name_key() -> str:
    return f"ed_save_name_{common.editor_rev()}"


def prompt_key(name: str, text: str) -> str:
    return f"ed_prompt_{name}_{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def live_text() -> str:
    """The editor's latest value (it may be newer than the shared workflow during a callback)."""
    value = ss.get(ace_key())
    return value if isinstance(value, str) else common.current_workflow()["text"]


def flash(kind: str, message: str) -> None:
    ss["ed_flash"] = (kind, message)


def md(text: str) -> str:
    """Plain text for st.markdown (no emphasis, links, LaTeX or HTML from workflow text)."""
    return "".join("\\" + c if c in "\\`*_[]<>$~#|" else c for c in text)


# -- callbacks (run before the script, so the page below already shows their result) ------------------------

def load_example() -> None:
    name, task, text = next(e for e in library.examples() if e[0] == ss["ed_example"])
    common.set_current_workflow(text, task, name)
    flash("info", f"Loaded the example {name} ({task}).")


def open_saved() -> None:
    name, version = ss.get("ed_open_name"), ss.get("ed_open_version")
    try:
        text, task = library.load_workflow(common.workspace(), name, version)
    except library.LibraryError as e:
        return flash("error", str(e))
    common.set_current_workflow(text, task, name)
    flash("info", f"Opened {name} version {version}.")


def save() -> None:
    wf = common.current_workflow()
    try:
        version = library.save_workflow(common.workspace(), ss.get(name_key(), ""), live_text(), wf["task"])
    except library.LibraryError as e:
        return flash("error", f"Not saved: {e}")
    name = library.validate_name(ss[name_key()])
    common.set_current_workflow(live_text(), name=name, from_editor=True)
    ok = is_valid(check(live_text(), wf["task"]))
    flash("success" if ok else "warning", f"Saved {name} as version {version}"
          + ("." if ok else " (it has errors; fix them before running it)."))


def reformat() -> None:
    try:
        common.set_current_workflow(to_mermaid(parse(live_text())))
    except WorkflowSyntaxError as e:
        flash("error", f"Cannot format a text with syntax errors: {e}")


def check_hard() -> None:
    ss["ed_hard_for"] = hashlib.sha1(live_text().encode()).hexdigest()


# -- page ---------------------------------------------------------------------------------------------------

st.title("Editor")
wf = common.current_workflow()
rev, ws = common.editor_rev(), common.workspace()
examples = library.examples()
saved = library.list_workflows(ws)

bar = st.columns([1.2, 2, 1.2, 0.9, 0.9, 1.1], vertical_alignment="bottom")
task = bar[0].radio("Task", cat.TASKS, index=cat.TASKS.index(wf["task"]) if wf["task"] in cat.TASKS else 0,
                    horizontal=True, key=f"ed_task_{rev}", help="math: GSM8K/MATH; code: HumanEval/MBPP")
if task != wf["task"]:
    common.set_current_workflow(wf["text"], task, from_editor=True)
names = [e[0] for e in examples]
bar[1].selectbox("Example", names, key="ed_example",
                 index=names.index(wf["name"]) if wf["name"] in names else 0)
bar[2].button("Load example", on_click=load_example, key="ed_load")
with bar[3].popover("Open", icon=":material/folder_open:"):
    if saved:
        oname = st.selectbox("Workflow", [s.name for s in saved], key="ed_open_name",
                             format_func=lambda n: next(f"{s.name} · {s.task} · v{s.version}"
                                                        + ("" if s.valid else " · has errors")
                                                        for s in saved if s.name == n))
        st.selectbox("Version", [v for v, _, _ in library.versions(ws, oname)], key="ed_open_version")
        st.button("Open", on_click=open_saved, key="ed_open", type="primary")
    else:
        st.caption("Nothing saved in this workspace yet.")
with bar[4].popover("Save", icon=":material/save:"):
    st.text_input("Name", value=wf["name"], key=name_key(), max_chars=80)
    st.button("Save version", on_click=save, key="ed_save", type="primary")
bar[5].download_button(".mmd", live_text(), file_name=f"{wf['name'] or 'workflow'}.mmd",
                       mime="text/plain", icon=":material/download:", key="ed_download",
                       on_click="ignore")

if "ed_flash" in ss:
    kind, message = ss.pop("ed_flash")
    getattr(st, kind)(message)

text = live_text()
if text != wf["text"]:
    common.set_current_workflow(text, from_editor=True)
live_hard = st.session_state.get("ed_live_hard", False)
hard = live_hard or ss.get("ed_hard_for") == hashlib.sha1(text.encode()).hexdigest()
diags = check(text, task, hard=hard)

left, right = st.columns([0.9, 1.1])
with left:
    st_ace(value=text, language="text", theme="chrome", keybinding="vscode", font_size=15, tab_size=4,
           min_lines=22, show_print_margin=False, wrap=True, auto_update=True,
           annotations=cv.annotations(diags), key=ace_key())
    c1, c2, c3 = st.columns([0.8, 1.2, 1.4], vertical_alignment="center")
    c1.button("Format", on_click=reformat, key="ed_format", help="Rewrite the text in canonical form")
    c2.button("Mermaid 11 check", on_click=check_hard, key="ed_hard",
              help="Parse with the real Mermaid library too (slower than the checker)")
    c3.toggle("Mermaid 11 live", key="ed_live_hard", help="Run the Mermaid 11 check on every change")

w, parse_diags = parse_lenient(text)
readable = not any(d.code == "M001" for d in parse_diags)
with right:  # fixed slots (list, notice, diagram): the diagram keeps its place, so it is not rebuilt
    with st.container():
        errors = [d for d in diags if d.severity == "error"]
        if not diags:
            st.success(f"Valid for {task} tasks: no problems found" + (" (Mermaid 11 agrees)." if hard else "."))
        elif not errors:
            st.success(f"Valid for {task} tasks, with {len(diags)} warning(s).")
        else:
            st.error(f"{len(errors)} error(s), {len(diags) - len(errors)} warning(s)")
        for d in diags:
            color = "red" if d.severity == "error" else "orange"
            where = f"line {d.line}" if d.line else "workflow"
            st.markdown(f":{color}[**{d.code}**] {where}: {md(d.message)}")
    notice = st.empty()
    if readable:
        ss["ed_last_good"] = (to_mermaid(w, styles=True), cv.depth(w))
    if "ed_last_good" in ss:
        code, depth = ss["ed_last_good"]
        if not readable:
            notice.caption("The diagram shows the last readable version of the text.")
        st_mermaid(code, height=f"{min(max(90 * depth + 60, 260), 800)}px", key="ed_mermaid")

st.subheader("Draw")
if not readable:
    st.info("Fix the syntax error above to draw: the canvas edits the same workflow as the text.")
else:
    items = cv.palette(task, w)
    pc = st.columns([2, 1, 4], vertical_alignment="bottom")
    item = pc[0].selectbox("Palette", items, key="ed_palette",
                           format_func=lambda i: f"{i} — {cat.CATALOGUE[i].description}" if i in cat.CATALOGUE
                           else f"{i} (interface)")
    if pc[1].button("Add node", icon=":material/add:", key="ed_add"):
        added = cv.apply_canvas(w, cv.add_palette_node(cv.to_canvas(w), item))
        common.set_current_workflow(to_mermaid(added))
        st.rerun()
    pc[2].caption("Drag from a node's handle to another node to connect; right-click a node or edge to "
                  "delete it. Drawing rewrites the text in canonical form (only prompt comments are kept).")
    ids = frozenset(w.nodes)
    plain = cv.to_canvas(w)
    structure = json.dumps([w.direction, [(n["id"], n["op"], n["label"]) for n in plain["nodes"]],
                            plain["edges"]])
    fkey = f"flow_{hashlib.sha1(structure.encode()).hexdigest()[:12]}_{ss.get('ed_flow_nonce', 0)}"
    if ss.get("ed_flow", {}).get("key") != fkey:  # the same arguments on every rerun, or the canvas resets
        saved_pos = ss.get("ed_positions", (frozenset(), {}))
        ss["ed_flow"] = {"key": fkey, "ts": int(time.time() * 1000),
                         "sent": cv.to_canvas(w, saved_pos[1] if saved_pos[0] == ids else None)}
    sent, across = ss["ed_flow"]["sent"], w.direction in ("LR", "RL")
    nodes = [StreamlitFlowNode(
        n["id"], (n["x"], n["y"]),
        {"content": f"**{n['id']}**  \n" + md(str(n["label"])).replace("\\<br/\\>", "  \n"),
         "op": n["op"], "mlabel": n["label"]},
        node_type=n["kind"], source_position="right" if across else "bottom",
        target_position="left" if across else "top", connectable=True, deletable=True,
        style={"background": cat.CATALOGUE[n["op"]].color if n["op"] in cat.CATALOGUE else "#ffffff",
               "width": "180px", "fontSize": "12px", "padding": "6px"}) for n in sent["nodes"]]
    edges = [StreamlitFlowEdge(e["id"], e["source"], e["target"], label=e["label"], deletable=True,
                               focusable=True, marker_end={"type": "arrowclosed"}, label_show_bg=True)
             for e in sent["edges"]]
    got = streamlit_flow(fkey, StreamlitFlowState(nodes, edges, timestamp=ss["ed_flow"]["ts"]), height=480,
                         fit_view=True, allow_new_edges=True, enable_node_menu=True, enable_edge_menu=True,
                         hide_watermark=True, layout=ManualLayout())
    back = {"nodes": [{"id": n.id, "op": n.data.get("op"), "label": n.data.get("mlabel"),
                       "x": n.position["x"], "y": n.position["y"]} for n in got.nodes],
            "edges": [{"id": e.id, "source": e.source, "target": e.target, "label": e.label or ""}
                      for e in got.edges]}

    def shape(c: dict) -> tuple:
        return (sorted(n["id"] for n in c["nodes"]),
                sorted((e["id"], e["source"], e["target"], e["label"] or "") for e in c["edges"]))

    if shape(back) != shape(sent):
        ss["ed_flow_nonce"] = ss.get("ed_flow_nonce", 0) + 1
        common.set_current_workflow(to_mermaid(cv.apply_canvas(w, back)))
        st.rerun()
    ss["ed_positions"] = (ids, {n["id"]: (n["x"], n["y"]) for n in back["nodes"]})

st.subheader("Prompts")
names = list(dict.fromkeys([n.prompt for n in w.nodes.values() if n.prompt] + list(w.prompts)))
if not readable:
    st.caption("Fix the syntax error above to edit prompts here.")
elif not names:
    st.caption("No node names a prompt. A Custom or CustomCodeGenerate node names one in its label, "
               "e.g. `Custom<br/>(role: solver)`.")
for name in names if readable else []:
    users = [n.id for n in w.nodes.values() if n.prompt == name]
    label = f"`{name}` — used by {', '.join(users)}" if users else f"`{name}` — not used by any node"
    current = w.prompts.get(name, "")  # keyed by the prompt's text: an edit in the editor above refreshes it
    value = st.text_area(label, value=current, key=prompt_key(name, current), height=80,
                         placeholder="Missing (M013): write the prompt here and press Ctrl+Enter to add it.")
    if name not in w.prompts:
        st.caption(f":orange[**M013**] prompt `{name}` is not defined yet; type it above to add it.")
    if value.strip() and value.strip() != w.prompts.get(name, "").strip():
        common.set_current_workflow(cv.set_prompt_text(text, name, value))
        st.rerun()
