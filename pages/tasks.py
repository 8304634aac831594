"""Tasks page: make a task of your own (DESIGN §11). Upload rows, preview them, pick the problem template and the
reference column, choose the metric and its options, see the metric on a few rows with each reference scored
against itself, see the split sizes, save the task to the workspace. The work is done by flowcore.ui.tasks and
flowcore.tasks.saved; a task is saved whole or not at all."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore.tasks import BUILTIN, DataError
from flowcore.tasks import saved as task_store
from flowcore.ui import tasks as tv
from pages import common

common.app_shell()
ss = st.session_state
KIND_HELP = "Which operators a workflow may use: text for anything that is neither math nor code."


def upload_step():  # noqa: ANN201 - the Table read from the upload, or None
    st.subheader("1 · Your rows")
    up = st.file_uploader(f"A .csv, .jsonl or .json file (a list of objects), optionally .gz — up to {tv.MAX_MB} MB",
                          type=["csv", "jsonl", "json", "gz"], key="tk_upload", max_upload_size=tv.MAX_MB)
    if up is not None:
        ss["tk_source"] = (up.name, up.getvalue())
    elif st.button("Use the worked example (capitals.csv, 40 rows)", icon=":material/lightbulb:", key="tk_example"):
        ss["tk_source"] = ("capitals.csv", tv.EXAMPLE.read_bytes())
    if "tk_source" not in ss:
        st.info("Upload a file to start, or try the worked example.", icon=":material/upload_file:")
        return None
    name, data = ss["tk_source"]
    try:
        table = tv.read_upload(name, data)
    except DataError as exc:  # not UTF-8, a broken quote, too large, 0 rows: named, nothing kept
        st.error(f"**Cannot read {common.md(name)}**: {common.md(str(exc))}", icon=":material/error:")
        return None
    st.caption(f"{len(table.rows)} rows · columns: {', '.join(table.columns)}")
    st.dataframe(tv.preview_frame(table), hide_index=True, placeholder="—", width="stretch", key="tk_preview")
    return table


def mapping_step(table) -> dict:  # noqa: ANN001
    st.subheader("2 · Problem and reference")
    c = st.columns([1, 1, 1])
    stem = Path(table.name).name.split(".")[0].replace(" ", "-")
    name = c[0].text_input("Task name (letters, digits, - and _)", value=stem, key="tk_name")
    kind = c[1].radio("Kind", tv.KINDS, index=tv.KINDS.index("text"), horizontal=True, key="tk_kind", help=KIND_HELP)
    cols = table.columns
    reference = c[2].selectbox("Reference column (the expected answer)", cols,
                               index=cols.index(tv.default_reference(table)), key="tk_reference")
    problem = st.text_input("Problem: a column's name, or a template over the row's fields such as "
                            "`What is the capital of {country}?`", value=tv.default_template(table),
                            key="tk_problem")
    c = st.columns(2)
    share = c[0].slider("Validation share (what evolution may look at; the rest is the held-out test)", 0.05, 0.95,
                        0.2, 0.05, key="tk_share")
    seed = c[1].number_input("Split seed", value=42, step=1, key="tk_seed")
    return {"name": name.strip(), "kind": kind, "problem": problem, "reference": reference,
            "split": {"validation": float(share), "seed": int(seed)}}


def metric_step(spec: dict) -> str:
    st.subheader("3 · Metric")
    metric = st.selectbox("Metric", tv.PAGE_METRICS, key="tk_metric", format_func=lambda m: f"{m} — {tv.describe(m)}")
    options: dict = {}
    source = ""
    specs = tv.option_specs(metric)
    cols = st.columns(max(1, min(3, len(specs)))) if specs else []
    for i, (opt, kind, default) in enumerate(specs):
        box, key = cols[i % len(cols)], f"tk_opt_{metric}_{opt}"
        if metric == "python" and opt == "file":
            up = box.file_uploader("Your metric file: `def metric(prediction, row) -> bool | float` (runs in the "
                                   "sandbox)", type=["py"], key=key, max_upload_size=1)
            if up is not None:
                options[opt], source = up.name, up.getvalue().decode("utf-8", "replace")
            continue
        if kind == "bool":
            value = box.checkbox(opt.replace("_", " "), value=bool(default), key=key)
        elif kind == "number":
            value = box.number_input(opt, value=float(default), min_value=0.0, format="%g", key=key)
        elif kind == "texts":
            value = box.text_area(f"{opt} (one per line)", value="\n".join(default or []), key=key)
        else:
            value = box.text_area(opt, value=default or "", key=key) if opt == "rubric" else \
                box.text_input(opt, value=default or "", key=key)
        options[opt] = tv.parse_option(kind, value)
    if metric == "judge":
        st.caption(":material/gavel: Scores of this metric are **graded by a model** (the judge model of "
                   "Settings); every grade keeps its reason and the model's name.")
    spec.update(metric=metric, metric_options=options)
    return source


def check_step(table, spec: dict, source: str):  # noqa: ANN001, ANN201 - the task, or None
    st.subheader("4 · Check")
    d = tv.draft(table, spec, source=source)
    if d.task is None:
        st.error(f"**Not a task yet**: {common.md(d.error)}", icon=":material/error:")
        return None
    task = d.task
    sizes = task.sizes()
    c = st.columns(3)
    c[0].metric("Rows", sizes["rows"])
    c[1].metric("Validation (evolution)", sizes["validation"])
    c[2].metric("Test (held out)", sizes["test"])
    try:
        frame, grades = tv.sample_frame(task)
    except RuntimeError as exc:  # SandboxUnavailable: a python metric cannot run here
        st.error(f"The metric cannot be tried here: {common.md(str(exc))}", icon=":material/shield:")
        return None
    st.markdown("The metric on the first rows, each **reference scored against itself**:")
    st.dataframe(frame, hide_index=True, placeholder="—", width="stretch", key="tk_samples")
    ok, text = tv.self_score_text(task, grades)
    (st.success if ok else st.warning)(common.md(text), icon=":material/check_circle:" if ok else ":material/warning:")
    return task


def save_step(task) -> None:  # noqa: ANN001
    ws = common.workspace()
    exists = task.name in {t["name"] for t in task_store.saved(ws)}
    label = f"Replace the saved task '{task.name}'" if exists else f"Save task '{task.name}' to the workspace"
    if st.button(label, type="primary", icon=":material/save:", key="tk_save"):
        try:
            task_store.save(ws, task)
        except (DataError, OSError) as exc:
            st.error(f"Not saved: {common.md(str(exc))}", icon=":material/error:")
            return
        ss["tk_flash"] = (f"Saved task **{common.md(task.name)}** ({task.kind}, {len(task.rows)} rows, metric "
                          f"{task.metric.name}). Pick it on the Run, Evolve and Compare pages.")
        st.rerun()


def saved_list() -> None:
    ws = common.workspace()
    rows = task_store.saved(ws)
    st.subheader("Tasks in this workspace")
    st.caption("Built in: " + ", ".join(BUILTIN) + ". A PostgreSQL workspace shares these with every app process "
               "and worker on it.")
    if not rows:
        st.caption("None saved yet.")
        return
    for r in rows:
        c = st.columns([4, 1])
        c[0].markdown(f"**{common.md(r['name'])}** · {r['kind']} · {r['rows']} rows")
        if c[1].button("Delete", key=f"tk_del_{r['name']}", icon=":material/delete:"):
            task_store.delete(ws, r["name"])
            st.rerun()


common.header("Tasks", "Bring your own rows and metric: evaluate, evolve and compare workflows on them.",
              show_open=False)
if "tk_flash" in ss:
    st.success(ss.pop("tk_flash"), icon=":material/check_circle:")
table = upload_step()
if table is not None:
    spec = mapping_step(table)
    source = metric_step(spec)
    task = check_step(table, spec, source)
    if task is not None:
        save_step(task)
saved_list()
