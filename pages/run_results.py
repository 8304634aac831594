"""The Run page's results (a plain module, not a page): an evaluation's score, its interval with n, whether
its answers came from the cache (and a fresh measurement), the per-problem table with the verdict, the
extracted answer and the reference, filterable to the failures, and a click-through to one problem's trace.
What is shown comes from flowcore.evaluation.results."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from flowcore.evaluation import results as rs
from flowcore.evaluation import store as es
from flowcore.execution.runtime import NodeError, WorkflowInvalid
from flowcore.llm.client import LLMError
from flowcore.mermaid import safe
from flowcore.mermaid.reader import WorkflowSyntaxError
from flowcore.tasks import kind_of, load
from flowcore.tasks.harness import not_run_text
from flowcore.ui import tasks as tv

JOB_KEY, SHOW_KEY = "run_job_id", "run_show_eval"
NO_LLM = "No LLM endpoint configured — set OPENAI_BASE_URL/OPENAI_API_KEY or open Settings."
_money, _pct = rs.money, rs.pct


def trace_table(trace: list[dict]) -> None:
    st.caption(rs.trace_caption(trace))
    st.dataframe(pd.DataFrame(rs.trace_rows(trace), columns=rs.TRACE_COLUMNS), hide_index=True,
                 placeholder="—", width="stretch",
                 column_config={"cost": st.column_config.NumberColumn(format="$%.5f"),
                                "latency": st.column_config.NumberColumn("latency (s)", format="%.2f")})


def picked_row(selection) -> int | None:  # noqa: ANN001 - a dataframe's selection state
    """The row a click chose: a row selected by its checkbox, else the row of the clicked cell."""
    if selection is None:
        return None
    rows, cells = list(selection.get("rows") or []), list(selection.get("cells") or [])
    return rows[0] if rows else (cells[0][0] if cells else None)


def show_evaluation(ws, settings, rec: es.EvalRecord, can_run: bool, busy: bool) -> None:
    split = rec.split or ""
    st.markdown(f"**#{rec.id}** · {safe.code(rec.workflow_name or 'workflow')} on **{safe.plain(rec.benchmark)}** "
                f"({safe.plain(split.removeprefix('file:') + ' file' if split.startswith('file:') else split)}) · "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(rec.created))} · status **{rec.status}**")
    if rec.status == "cancelled":
        st.warning(f"Cancelled after {rec.n} of {rec.total} problems; the score covers those {rec.n}.")
    elif rec.status in ("failed", "interrupted"):
        st.error(f"The evaluation {rec.status}: {safe.plain(rec.error)}")
    elif rec.status == "running":
        st.info("Still running: see the progress above.")
        return
    c = st.columns([1, 1, 2, 1])
    solved = sum(bool(r.get("correct")) for r in rec.results)
    not_run = not_run_text(sum(bool(r.get("errored")) for r in rec.results))
    c[0].metric("Score", _pct(rec.score) + (f" · {not_run.split(' (')[0]}" if not_run else ""),
                help="Fraction of the problems solved" + (f"; {not_run}" if not_run else ""))
    c[1].metric("Solved", f"{solved} / {rec.n}")
    c[2].metric("95% interval", rs.interval_text(rec).removeprefix("95% interval ").split(" (")[0] or "—",
                help=rs.interval_text(rec))
    use = rs.cache_use(ws, rec.id)
    c[3].metric("Cost", _money(rec.cost, use.estimated), help=rs.estimate_note(use.estimated) or None)
    st.caption(rs.interval_text(rec))
    graded = tv.graded_caption(sorted({r["grade"]["model"] for r in rec.results if (r.get("grade") or {}).get("model")}))
    if graded:
        st.caption(graded)
    (st.info if use.all_cached else st.caption)(use.text())
    if use.cached and rec.status == "done" and not split.startswith("file:"):
        if st.button("Measure afresh (bypass the cache)", icon=":material/refresh:", key=f"run_fresh_{rec.id}",
                     disabled=not can_run or busy, help=NO_LLM if not can_run else "New LLM calls: costs money"):
            kind_of(rec.benchmark, ws)  # a task of your own is read from the workspace
            problems = load(rec.benchmark, split, limit=rec.total)
            job = es.start_evaluation(ws, rs.fresh(settings), workflow_text=rec.workflow_text,
                                      benchmark=rec.benchmark, problems=problems, split=split,
                                      workflow_name=rec.workflow_name)
            st.session_state[JOB_KEY], st.session_state[SHOW_KEY] = job.id, job.meta["eval_id"]
            st.session_state["run_mirrored_job"] = job.id  # its settings are not the form's: leave the form
            st.rerun()
    which = st.segmented_control("Show", list(rs.FILTERS), format_func=rs.FILTERS.get, default="all",
                                 key=f"run_filter_{rec.id}") or "all"
    rows = rs.result_rows(rec, which)
    event = st.dataframe(pd.DataFrame(rows, columns=["id", "verdict", "extracted", "reference", "error", "cost",
                                                     "latency", "answer"]),
                         hide_index=True, placeholder="—", width="stretch", key=f"run_results_{rec.id}_{which}",
                         on_select="rerun",
                         selection_mode=["single-row", "single-cell"],
                         column_config={"cost": st.column_config.NumberColumn(format="$%.5f"),
                                        "latency": st.column_config.NumberColumn("latency (s)", format="%.2f"),
                                        "answer": st.column_config.TextColumn("model's answer", width="large")})
    st.caption(f"{len(rows)} of {len(rec.results)} problems · click a row for its full answer and trace.")
    picked = picked_row(event.selection if event is not None else None)  # a click on any cell opens its row
    if picked is not None and picked < len(rows):
        problem_detail(ws, settings, rec, rows[picked]["id"], can_run)


def problem_detail(ws, settings, rec: es.EvalRecord, pid: str, can_run: bool) -> None:
    r = next(x for x in rec.results if x.get("id") == pid)
    st.markdown(f"**Problem `{pid}`** · {rs.verdict_of(r)}")
    problem = rs.find_problem(rec, pid)
    if problem is not None:
        with st.expander("Question", expanded=False):
            st.text(problem.question)
    st.code(r.get("prediction") or "(empty)", wrap_lines=True)
    if problem is None:
        st.caption("The trace needs the problem, and an uploaded file's problems are not kept.")
    elif st.button("Show this problem's trace", icon=":material/account_tree:", key=f"run_trace_{rec.id}_{pid}",
                   help="Runs the workflow on this problem again: its calls come from the cache (free, the "
                        "same answer) when the cache is on."):
        try:
            with st.spinner("Replaying…"):
                res = rs.trace_problem(settings, ws, rec, problem)
        except (WorkflowSyntaxError, WorkflowInvalid, NodeError, LLMError, ValueError) as e:
            st.error(f"The replay failed: {safe.plain(e)}")
            return
        trace_table(res.trace)
