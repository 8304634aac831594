"""Compare page (the stakeholder view): pick workflows (baselines, examples, saved ones, evolved rounds), a
benchmark and a split; measure them on the same problems in the background; see the table with intervals and
paired tests against the best, score vs cost with the Pareto front, and which problems each one solves.
The work is done by flowcore.evaluation.compare and flowcore.ui.compare.

First paint (issue 30): the browser's cost is each element drawn and each element type's first script, so only
the open tab of a result is built (the table first), and the new-comparison form folds away once comparisons
exist. Which tab and whether the form is open are kept across page switches and reloads (pages/keep.py)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore.evaluation import store as es
from flowcore.evaluation.compare import list_comparisons, load_comparison, start_comparison
from flowcore.mermaid import safe
from flowcore.tasks import DataError, load, split_info
from flowcore.ui import compare as cv
from flowcore.ui.words import count
from flowcore.workspace import jobs
from pages import common, widgets

common.app_shell()  # a link to this page on a fresh server: run inside the app (menu, workspace memory)
ss = st.session_state
JOB_KEY, SHOW_KEY = "cmp_job_id", "cmp_show"
VIEW_KEY, NEW_KEY = "cmp_view", "cmp_new_open"  # the result tab shown, the form unfolded: kept (pages/keep.py)
VIEWS = ("Table", "Score vs cost", "Per problem")
NO_LLM = "No LLM endpoint configured — set OPENAI_BASE_URL/OPENAI_API_KEY or open Settings."


def _split_file(upload) -> str | None:
    """An uploaded split file, kept under its own name in a private temp folder (the name is what results cite)."""
    if upload is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="split-"))
    path = folder / Path(upload.name).name
    path.write_bytes(upload.getvalue())
    return str(path)


def form(settings, configured: bool, busy: bool) -> None:
    ws = common.workspace()
    c = st.columns([1, 1, 1.4], vertical_alignment="bottom")
    task = c[0].radio("Kind", list(es.KINDS), horizontal=True, key="cmp_task")
    options = es.benchmarks_for(task, ws)
    if not options:
        return st.info(f"No {task} task yet: make one on the Tasks page.", icon=":material/dataset:")
    bench = c[1].selectbox("Benchmark or task", options, key=f"cmp_bench_{task}")
    split = c[2].radio("Split", ["test", "validation"], horizontal=True, key="cmp_split",
                       help="Claims are made on the held-out test split; evolution only ever sees validation.")
    sources = cv.workflow_sources(ws, task)
    default = [k for k in sources if k.startswith("baseline")][:2]
    picked = st.multiselect("Workflows (baselines, examples, saved workflows, evolved rounds)", list(sources),
                            default=default, key=f"cmp_pick_{task}")
    c = st.columns(3)
    limit = c[0].number_input("Problems (0 = the whole split)", min_value=0, value=10, key="cmp_limit")
    repeats = c[1].number_input("Repeats (cache bypassed when > 1)", min_value=1, max_value=10, value=1,
                                key="cmp_repeats")
    conc = c[2].number_input("Concurrency", min_value=1, max_value=64, value=4, key="cmp_conc")
    upload = st.file_uploader("Your own split file (optional): JSON {\"validation\": [ids], \"test\": [ids]}",
                              type=["json"], key="cmp_split_file")
    if st.button("Compare", type="primary", icon=":material/compare_arrows:", key="cmp_start",
                 disabled=not configured or busy or len(picked) < 2,
                 help=NO_LLM if not configured else ("Pick at least two workflows" if len(picked) < 2 else None)):
        try:
            path = _split_file(upload)
            problems = load(bench, split, limit=int(limit) or None, split_file=path)
            info = split_info(bench, split, split_file=path, limit=int(limit) or None)
            entries = [(cv.short_name(k), sources[k]) for k in picked]
            job = start_comparison(ws, settings, entries, bench, problems, info, repeats=int(repeats),
                                   concurrency=int(conc), created_by=ss.get("mf_user") or "local")
        except (DataError, ValueError) as e:  # a bad split file or workflow, named
            st.error(f"Not started: {common.md(e)}", icon=":material/error:")
            return
        ss[JOB_KEY], ss[SHOW_KEY] = job.id, job.meta["comparison_id"]
        st.rerun()


@st.fragment(run_every=0.7)
def live(job_id: str) -> None:
    widgets.job_progress(
        job_id, lambda snap: f"Comparison #{snap.meta.get('comparison_id')}: {snap.done}/{snap.total} runs · "
                             f"{snap.message or 'starting'} · {snap.elapsed:.0f} s",
        key="cmp_cancel", cancelling="Cancelling: the workflow under way stops; nothing partial is presented as "
        "a result.")


def show(stored) -> None:
    n = len({r.id for m in stored.result.measurements for r in m.pooled.results}) if stored.result else 0
    if not n:  # still running (or nothing measured yet): the problems it was asked for, not a zero
        split = stored.split or {}
        n = split.get("limit") or split.get(f"{split.get('split')}_n") or "the"
    st.markdown(f"**#{stored.id}** · {stored.benchmark} · {count(n, 'problem')} × {count(stored.repeats, 'repeat')} · status "
                f"**{stored.status}**")
    st.caption(cv.split_caption(stored.split))
    if stored.status in ("failed", "interrupted"):
        st.error(f"The comparison {stored.status}: {common.md(stored.error)}")
        return
    c = stored.result
    if stored.status == "cancelled" and (c is None or not c.measurements):
        st.warning("Cancelled before any workflow was measured on every problem: nothing to compare.")
        return
    if c is None or not c.measurements:
        st.info("Still running: see the progress above.")
        return
    if stored.status == "cancelled":
        st.warning("Cancelled: only the workflows measured in full are compared.")
    c = cv.for_people(c)  # the command line's 'baseline:io' reads 'IO (math)'
    best = c.measurements[c.best]
    if not best.pooled.n:  # the endpoint failed every run of every workflow: there is no result to present
        st.error("No problem was scored: the LLM endpoint failed every run (see the errors column). These are "
                 "server errors, not wrong answers; fix the endpoint and compare again.")
    else:
        st.markdown(f"**Best: {common.md(best.name)}** at {100 * best.pooled.score:.1f}% "
                    f"[{100 * best.pooled.ci_low:.1f}, {100 * best.pooled.ci_high:.1f}]. Each other workflow is tested "
                    "against it on the same problems: Δ is its difference in points with a paired-bootstrap 95% interval, "
                    "and McNemar's exact p-value says how likely such a split of the problems only one of the two solves "
                    "would be if they were equally good.")
    for note in cv.evolved_notes(c, common.workspace()):  # an evolved round: its validation beside this score
        st.caption(note)
    table, pareto, per_problem = st.tabs(VIEWS, key=VIEW_KEY, on_change="rerun")
    if table.open:  # only the open tab is built: a grid or a chart costs the browser even when hidden
        with table:
            # a few rows: markdown draws them with the page (the grid's scripts were a quarter of its first paint)
            st.markdown(safe.table(cv.table_rows(cv.table_frame(c, common.workspace()))))
            if cv.graded_note(c):
                st.caption(f":material/gavel: {cv.graded_note(c)}")
            st.download_button("Download the comparison (.json)", json.dumps(c.to_json(), indent=1).encode(),
                               f"comparison_{stored.id}.json", mime="application/json", on_click="ignore",
                               icon=":material/download:", key=f"cmp_dl_{stored.id}")
    if pareto.open:
        with pareto:
            widgets.chart(cv.pareto_figure(c), key=f"cmp_pareto_{stored.id}")
    if per_problem.open:
        with per_problem:
            agreement(c, stored.id)


def agreement(c, cid: int) -> None:
    agree = cv.agreement_frame(c)
    if agree.empty:
        st.caption("No problem was measured for every workflow: nothing to line up.")
        return
    n_dis = int((~agree["agree"]).sum())
    st.markdown(f"**Per-problem agreement**: the workflows disagree on {n_dis} of {len(agree)} problems "
                "(listed first; 1 = solved, with repeats the solve rate).")
    st.dataframe(agree, hide_index=True, placeholder="—", width="stretch", key=f"cmp_agree_{cid}")


def main() -> None:
    common.header("Compare", "Baselines, seeds and evolved workflows on the same problems, with paired tests: the "
                  "view that shows whether a workflow really beats the obvious alternatives on problems it never saw.")
    settings = common.llm_settings()
    configured = common.llm_banner(settings)
    ws = common.workspace()
    job = jobs.get(ss.get(JOB_KEY))
    past = list_comparisons(ws)
    if job is None:  # a reloaded page finds a comparison still running in this server
        job = next((j for p in past if p.status == "running" and (j := jobs.get(p.job_id))), None)
    busy = job is not None and job.snapshot().active
    if past:  # folded once there are comparisons to look at (its values are kept while folded: pages/keep.py)
        new = st.expander("New comparison", expanded=False, icon=":material/add:", key=NEW_KEY,
                          on_change="rerun")
        if new.open:
            with new:
                form(settings, configured, busy)
    else:
        form(settings, configured, busy)
    if busy:
        live(job.id)
    if not past:
        st.caption("No comparisons yet. (The command line stores one with `compare ... --db`.)")
        return
    st.subheader("Results")
    labels = {p.id: f"#{p.id} · {p.benchmark} · {p.split.get('split', '?')} · "
                    f"{', '.join(cv.people_name(n, p.benchmark) for n in p.names)} · {p.status}"
              f" · by {p.created_by}" for p in past}
    ids = list(labels)
    want = ss.get(SHOW_KEY)
    pick = st.selectbox("Comparison", ids, index=ids.index(want) if want in ids else 0, format_func=labels.get)
    ss[SHOW_KEY] = pick
    show(load_comparison(ws, pick))


main()
