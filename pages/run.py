"""Run page: run a workflow on one problem, or evaluate it on a benchmark split / an uploaded file in the
background with progress and cancel; scores with their 95% bootstrap interval and cost; past evaluations.

Without an LLM endpoint the page says so and the Run buttons are disabled; viewing stored evaluations still
works. The work is done by flowcore.evaluation.store and flowcore.workspace.jobs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore import is_valid
from flowcore.checker.bounded import check
from flowcore.evaluation import results as rs
from flowcore.evaluation import single
from flowcore.evaluation import store as es
from flowcore.execution.runtime import WorkflowInvalid
from flowcore.mermaid.reader import WorkflowSyntaxError
from flowcore.ui.words import count
from flowcore.workspace import jobs
from pages import common, widgets
from pages.run_results import show_evaluation, trace_table

JOB_KEY, SHOW_KEY, ONE_KEY = "run_job_id", "run_show_eval", "run_one_result"
MIRRORED = "run_mirrored_job"  # the running evaluation whose settings this session's form already shows
NO_LLM = "No LLM endpoint configured — set OPENAI_BASE_URL/OPENAI_API_KEY or open Settings."
SOURCES = {"validation": "Validation split", "test": "Test split", "file": "Upload a .jsonl file"}


_money, _pct = rs.money, rs.pct


# -- one problem --------------------------------------------------------------------------------------------------

def _fill_sample(benchmark: str) -> None:
    done = st.session_state.get("run_samples_used", 0)
    p = single.sample_problem(benchmark, done)
    st.session_state.update(run_problem_text=p["question"], run_entry=p["entry"], run_samples_used=done + 1,
                            run_reference=p["reference"],
                            run_sample_problem={"benchmark": benchmark, "id": p["id"], "question": p["question"]})


def _verdict(out: dict) -> None:
    """Whether a single run's answer is right, when its problem has a reference."""
    try:
        v = rs.single_verdict(out["benchmark"], out["answer"], out["problem"], out.get("reference", ""),
                              out.get("sample"))
    except ValueError as e:
        return st.warning(f"Could not score the answer: {common.md(e)}")
    if v is None:
        st.caption("No reference for this problem: type the expected answer above to have the answer checked.")
    else:
        (st.success if v.correct else st.error)(v.text(), icon=":material/check_circle:" if v.correct
                                                 else ":material/cancel:")


def one_problem(settings, text: str, task: str, name: str, can_run: bool) -> None:
    bench = es.default_benchmark(task, name, common.workspace())
    st.button(f"Fill in a {bench} validation problem", on_click=_fill_sample, args=(bench,), key="run_sample",
              icon=":material/lightbulb:")
    problem = st.text_area("Problem", key="run_problem_text", height=160,
                           placeholder="Type or paste the problem the workflow should solve.")
    entry = st.text_input("Entry point (function name)", key="run_entry",
                          help="Leave empty to guess it from the problem.") if task == "code" else None
    if task != "code":
        st.text_input("Expected answer (optional)", key="run_reference", help="With it, the answer is scored "
                      f"the way {bench} scores answers.")
    if st.button("Run", type="primary", icon=":material/play_arrow:", disabled=not can_run, key="run_one",
                 help=None if can_run else NO_LLM):
        if not problem.strip():
            st.warning("Type a problem first.")
        else:
            with st.spinner("Running the workflow…"):
                st.session_state[ONE_KEY] = single.run_one(
                    settings, common.workspace(), text, task, problem, entry, benchmark=bench,
                    reference=st.session_state.get("run_reference") or "",
                    sample=st.session_state.get("run_sample_problem"),
                    trace_by=st.session_state.get("mf_user") or "local", workflow_name=name or None)
    out = st.session_state.get(ONE_KEY)
    if not out or out.get("text") != text:  # a result of another workflow is not shown under this one
        return
    if "error" in out:
        st.error(f"The run failed: {common.md(out['error'])}", icon=":material/error:")  # the endpoint's words
        return
    st.subheader("Answer")
    _verdict(out)
    st.code(out["answer"] or "(empty)", language="python" if out["task"] == "code" else None, wrap_lines=True)
    c1, c2, c3 = st.columns(3)
    guessed = out.get("estimated") or 0
    c1.metric("Cost", _money(out["cost"], guessed) if out.get("priced", True) else "price unknown",
              help=rs.estimate_note(guessed) or None)
    c2.metric("LLM calls", out["calls"])
    c3.metric("Tokens/s", "—" if not out.get("tps") else f"{out['tps']:.1f}",
              help="Completion tokens per second of generation (cache hits excluded)")
    cached, calls = out.get("cached") or 0, out["calls"]
    if calls and cached == calls:
        st.caption(f":material/cached: All {count(calls, 'LLM call')} were answered from this workspace's cache: nothing "
                   "new was paid, and there was no generation to time. Turn the cache off in Settings to ask again.")
    elif cached:
        st.caption(f":material/cached: {cached} of {calls} LLM calls were answered from this workspace's cache "
                   "(no new cost); the cost and tokens/s are the other calls'.")
    trace_table(out["trace"])


# -- benchmark evaluation -----------------------------------------------------------------------------------------

def benchmark_form(settings, text: str, task: str, name: str, can_run: bool, busy: bool) -> None:
    options = es.benchmarks_for(task, common.workspace())
    if not options:
        return st.info(f"No {task} task yet: make one on the Tasks page.", icon=":material/dataset:")
    c = st.columns([1, 2, 1, 1], vertical_alignment="bottom")
    bench = c[0].selectbox("Benchmark or task", options, index=options.index(es.default_benchmark(task, name, common.workspace())),
                           key=f"run_bench_{task}")
    source = c[1].radio("Problems", list(SOURCES), format_func=SOURCES.get, horizontal=True, key="run_source")
    limit = c[2].number_input("Limit (0 = all)", min_value=0, value=10, step=1, key="run_limit",
                              help="Evaluate only the first N problems.")
    conc = c[3].number_input("Concurrency", min_value=1, max_value=64, value=4, key="run_conc",
                             help="How many problems run at the same time.")
    upload = st.file_uploader("Rows in the benchmark's own format (.jsonl)", type=["jsonl", "json", "gz"],
                              key="run_upload") if source == "file" else None
    if st.button("Start evaluation", type="primary", icon=":material/play_arrow:", key="run_start",
                 disabled=not can_run or busy, help=NO_LLM if not can_run else None):
        try:
            problems, split = single.problems_for(bench, source, int(limit), upload and upload.name,
                                                  upload and upload.getvalue())
            job = es.start_evaluation(common.workspace(), settings, workflow_text=text, benchmark=bench,
                                      problems=problems, split=split, workflow_name=name, concurrency=int(conc))
        except (WorkflowSyntaxError, WorkflowInvalid, ValueError) as e:  # DataError is a ValueError
            st.error(common.md(e), icon=":material/error:")
            return
        st.session_state[JOB_KEY], st.session_state[SHOW_KEY] = job.id, job.meta["eval_id"]
        st.session_state[MIRRORED] = job.id  # the form already shows what it was started with
        st.rerun()


@st.fragment(run_every=0.5)
def live(job_id: str) -> None:
    """Polls the job; when it has finished, reruns the whole page to show the stored result."""

    def metrics(snap) -> None:  # noqa: ANN001
        data = snap.data or {}
        c = st.columns(4)
        live_score = es.running_score(data, snap.done)
        c[0].metric("Running score", "—" if live_score is None else _pct(live_score))
        c[1].metric("Not run", data.get("errors", 0), help="Problems with no verdict (errored): not in the score")
        c[2].metric("Cost so far", _money(data.get("cost")))
        c[3].metric("Elapsed", f"{snap.elapsed:.0f} s")

    widgets.job_progress(
        job_id, lambda snap: f"Evaluation #{snap.meta.get('eval_id')}: {snap.done}/{snap.total} problems · "
                             f"{snap.message}",
        key="run_cancel", body=metrics,
        cancelling="Cancelling: no new problems start; those already running finish first.")


def evaluations(ws, settings, text: str, task: str, name: str, can_run: bool) -> None:
    es.reconcile(ws)  # 'running' rows whose job died with an earlier server process
    past = es.list_evaluations(ws)
    job = jobs.get(st.session_state.get(JOB_KEY)) or es.running_job(ws)  # a reload: found from the workspace
    busy = job is not None and job.snapshot().active
    benchmark_form(settings, text, task, name, can_run, busy)
    if busy:
        live(job.id)
    if not past:
        st.caption("No evaluations yet.")
        return
    st.subheader("Results")
    ids = [r.id for r in past]
    labels = {r.id: f"#{r.id} · {r.workflow_name or 'workflow'} · {r.benchmark} · "  # one live figure: the progress's
                    + ("running (its score is in the progress above)" if r.status == "running" else
                       f"{r.status} · {_pct(r.score)}") for r in past}
    want = st.session_state.get(SHOW_KEY)
    pick = st.selectbox("Evaluation", ids, index=ids.index(want) if want in ids else 0, format_func=labels.get)
    st.session_state[SHOW_KEY] = pick
    show_evaluation(ws, settings, es.load_evaluation(ws, pick), can_run, busy)
    with st.expander(f"Past evaluations ({len(past)})"):
        st.dataframe(pd.DataFrame(rs.past_rows(past)), hide_index=True, placeholder="—", width="stretch",
                     column_config={c: st.column_config.NumberColumn(format="percent") for c in ("score", "ci_low",
                                                                                               "ci_high")}
                     | {"cost": st.column_config.NumberColumn(format="$%.4f")})


def mirror_running(job) -> None:  # noqa: ANN001 - a jobs.Job or None
    """A page that finds an evaluation running that it has not shown yet (a reload, a new tab) opens on it, its
    form showing what the run was started with (benchmark, split, limit, concurrency), not the defaults."""
    ss = st.session_state
    if job is None or ss.get(MIRRORED) == job.id:
        return
    ss[MIRRORED] = job.id
    form = job.meta.get("form") or {}
    ss["run_mode"] = "Benchmark"
    if form.get("benchmark"):
        ss[f"run_bench_{es.kind_of(form['benchmark'], common.workspace())}"] = form["benchmark"]
    split = str(form.get("split") or "")
    if split:
        ss["run_source"] = split if split in SOURCES else "file"
    if isinstance(form.get("total"), int):
        ss["run_limit"] = form["total"]
    if isinstance(form.get("concurrency"), int):
        ss["run_conc"] = form["concurrency"]


def main() -> None:
    common.app_shell()
    common.header("Run", "Run a workflow on one problem, or evaluate it on a benchmark.")
    settings = common.llm_settings()
    configured = common.llm_banner(settings)
    common.sandbox_banner()
    text, task, name = widgets.pick_workflow("run_pick")
    diags = check(text, task)
    valid = is_valid(diags)
    if not valid:
        st.error(f"This workflow is invalid for the {task} task; fix it in the Editor before running it:")
        st.dataframe([d.to_dict() for d in diags if d.severity == "error"], hide_index=True,
                     placeholder="—", width="stretch",
                     column_order=["line", "column", "code", "message", "node"])
    can_run = configured and valid
    mirror_running(es.running_job(common.workspace()))
    mode = st.radio("Mode", ["One problem", "Benchmark"], horizontal=True, key="run_mode")
    if mode == "One problem":
        one_problem(settings, text, task, name, can_run)
    else:
        evaluations(common.workspace(), settings, text, task, name, can_run)


main()
