"""Evolve page: pick a seed, a benchmark and the settings; launch a run in the background, watch its progress
and curve, cancel, resume, and optionally review each round's candidates before evaluation. Without an LLM
endpoint a run is structure-only and says so. The work is done by flowcore.evolution.session."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore import is_valid
from flowcore.checker.bounded import check
from flowcore.evaluation import store as es
from flowcore.evolution import OPERATORS, EvolutionConfig, History, remote
from flowcore.evolution import session as evs
from flowcore.mermaid import safe
from flowcore.ui import history as hv
from flowcore.ui import story
from flowcore.ui import tasks as tv
from flowcore.ui.words import EDIT_HELP, edit_detail, edit_name
from flowcore.workspace import jobs
from pages import common, widgets
from pages import evolve_review as review
from pages.common import md
from pages.protocol_parts import after_run, run_options

ss = st.session_state
JOB_KEY, LAST_KEY = "evo_job_id", "evo_last_run"
MODES = {"llm": "LLM optimizer", "programmatic": "Programmatic operators"}
OFFLINE_NOTE = ("**Structure-only run**: it has no LLM endpoint, so candidates come from the programmatic "
                "operators, the rule-based judge picks one, and **no benchmark score is measured**. The curve "
                "shows the judge's structural total instead.")


# -- one run: its curve, latest round and status ---------------------------------------------------------------

def run_view(run_id: int, key: str) -> None:
    h = History(common.workspace())
    info, rows = h.run(run_id), h.rounds(run_id)
    if info.offline:
        st.info(OFFLINE_NOTE, icon=":material/cloud_off:")
    curve = evs.curve_frame(rows)
    figures = story.run_summary(info, rows, curve, h.estimated_calls(run_id))
    for col, (label, value, why) in zip(st.columns(len(figures)), figures):
        col.metric(label, value, help=why or None)
    widgets.plot(hv.score_figure(curve, info.offline, width=1100))  # as History draws it
    st.caption(tv.graded_caption(tv.run_graded_by(common.workspace(), run_id)) or "")  # a judge's scores say so
    if rows and rows[-1]["round"] > 0:
        last = rows[-1]
        score = "" if last["score"] is None else f" · {100 * last['score']:.1f}%"
        st.markdown(f"**Latest round #{last['round']}** · {md(edit_name(last['operator']))} · {last['status']}{score} "
                    f"· {md(story.judge_words(last['judge']))}")
        st.caption(safe.markdown(edit_detail(last["detail"] or last["reason"])))  # the optimizer's words
        cands = story.candidate_rows(last)
        # built only when opened: the grid is the costliest thing this page draws on its first view
        box = st.expander(f"The {len(cands)} candidates of round #{last['round']} and what became of each",
                          key=f"evo_cands_open_{key}", on_change="rerun", icon=":material/table_rows:")
        if box.open:
            box.dataframe(cands, hide_index=True, placeholder="—", width="stretch", key=f"evo_cands_{key}",
                          column_config={"what happened": st.column_config.TextColumn(width="large"),
                                         "operator": st.column_config.TextColumn("edit", help=EDIT_HELP)})


@st.fragment(run_every=1.0)
def live(job_id: str) -> None:
    """Polls the job; reruns the whole page when it has finished or a round waits for review."""
    gate = evs.gate_of(job_id)

    def text(snap) -> str:  # noqa: ANN001
        stored = len(History(common.workspace()).rounds(snap.meta["run_id"]))
        return (f"Run #{snap.meta['run_id']} · {story.progress_phrase(snap.meta['rounds'], snap.data, stored)}"
                f" · {snap.elapsed:.0f} s")

    widgets.job_progress(job_id, text, key="evo_cancel", cancel_label="Cancel run",
                         rerun_if=lambda: gate is not None and gate.pending is not None, keep=(review.MESSAGE,),
                         cancelling="Cancelling: the round under way stops; every stored round is kept (Resume "
                         "continues it).")
    run_view(jobs.get(job_id).snapshot().meta["run_id"], "live")


# -- new run / resume --------------------------------------------------------------------------------------------

SEARCH_DEFAULTS = {"evo_alpha": 0.2, "evo_lam": 0.3, "evo_topk": 4, "evo_seed": 0, "evo_ops": list(OPERATORS)}


def search_settings(shown: bool) -> tuple:
    """(α, λ, top-k, seed, edits): the boxes when shown, else what they hold (kept by pages/keep.py) or the
    defaults."""
    if not shown:
        return tuple(ss.get(k, v) for k, v in SEARCH_DEFAULTS.items())
    c = st.columns(4)
    alpha = c[0].number_input("Favour the best parents (α)", min_value=0.0, value=0.2, step=0.05, key="evo_alpha",
                              help="How strongly parents with higher scores are preferred: 0 picks among the top "
                              "rounds evenly, 0.2 (the papers') makes a round 10 points better about 7 times as likely.")
    lam = c[1].number_input("Share picked at random (λ)", min_value=0.0, max_value=1.0, value=0.3, step=0.05,
                            key="evo_lam", help="The share of parent picks made uniformly at random, whatever the "
                            "scores, so weaker rounds still get explored.")
    top = c[2].number_input("Parents from the best", min_value=1, max_value=50, value=4, key="evo_topk",
                            help="How many of the best rounds so far parents are drawn from (top-k)")
    seed = c[3].number_input("Random seed", min_value=0, value=0, key="evo_seed")
    ops = st.multiselect("Edits the optimizer may make", list(OPERATORS), default=list(OPERATORS), key="evo_ops",
                         format_func=edit_name, help=EDIT_HELP)
    return alpha, lam, top, seed, ops


def new_run(settings, configured: bool, busy: bool) -> None:
    text, task, name = widgets.pick_workflow("evo_pick_seed")
    valid = is_valid(check(text, task))
    if not valid:
        st.error(f"The seed workflow is invalid for the {task} task: fix it in the Editor first.")
    options = es.benchmarks_for(task, common.workspace())
    if not options:
        return st.info(f"No {task} task yet: make one on the Tasks page.", icon=":material/dataset:")
    c = st.columns([2, 1.2, 1, 1.2, 1.2])
    bench = c[0].selectbox("Benchmark or task", options, index=options.index(es.default_benchmark(task, name, common.workspace())),
                           key=f"evo_bench_{task}")
    limit = c[1].number_input("Validation problems (0 = all)", min_value=0, value=5, key="evo_limit",
                              disabled=not configured, help="Each round is evaluated on the first N problems "
                              "of the validation split.")
    rounds = c[2].number_input("Rounds", min_value=1, max_value=200, value=5, key="evo_rounds")
    k = c[3].number_input("Candidates per round (K)", min_value=1, max_value=16, value=4, key="evo_k")
    budget = c[4].number_input("Budget in $ (0 = none)", min_value=0.0, value=0.0, step=0.1, key="evo_budget",
                               disabled=not configured)
    mode = st.radio("Candidates come from", list(MODES), format_func=MODES.get, horizontal=True, key="evo_mode",
                    index=0 if configured else 1, disabled=not configured)
    if not configured:
        st.caption("The LLM optimizer needs an endpoint: this run will use the programmatic operators and the "
                   "rule-based judge, and its rounds will be structure-only (no score measured).")
    # The search's finer settings are built only when opened (a closed box keeps what was set, else the defaults)
    more = st.expander("Search settings: parents, edits, repeats, the test split", key="evo_more",
                       on_change="rerun", icon=":material/tune:")
    with more:
        alpha, lam, top, seed, ops = search_settings(more.open)
        protocol = run_options(configured, more.open)
    review = st.toggle("Review each round's candidates before evaluation", key="evo_review")
    if st.button("Launch", type="primary", icon=":material/rocket_launch:", key="evo_launch",
                 disabled=busy or not valid or not ops, help="One run at a time" if busy else None if ops else
                 "No edit is allowed: pick at least one under Search settings"):
        cfg = EvolutionConfig(benchmark=bench, rounds=int(rounds), candidates=int(k), seed=int(seed),
                              workflow=text, alpha=float(alpha), lam=float(lam), top_k=int(top), operators=ops,
                              budget=float(budget) or None, limit=int(limit) or None, mode=mode, **protocol)
        try:
            job = evs.start_run(common.workspace(), settings, cfg, review=review, created_by=ss.get("mf_user") or "local")
        except ValueError as e:  # bad settings or data file, named
            st.error(f"Not started: {md(e)}", icon=":material/error:")
            return
        ss[JOB_KEY], ss[LAST_KEY], ss["evo_scroll_top"] = job.id, job.meta["run_id"], True
        st.rerun()


def resume(settings, busy: bool) -> None:
    todo = [o for o in evs.runs_overview(common.workspace())
            if o["status"] in ("interrupted", "cancelled", "stopped")]
    if not todo:
        return
    box = st.expander(f"Resume an unfinished run ({len(todo)})", icon=":material/replay:", key="evo_resume_open",
                      on_change="rerun")
    if not box.open:
        return
    with box:
        labels = {o["id"]: evs.run_label(o) for o in todo}
        run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="evo_resume_run")
        review = st.toggle("Review its rounds", key="evo_resume_review")
        if st.button("Resume", icon=":material/play_arrow:", key="evo_resume", disabled=busy):
            try:
                job = evs.resume_run(common.workspace(), settings, run_id, review=review)
            except ValueError as e:
                st.error(f"Cannot resume: {md(e)}", icon=":material/error:")
                return
            ss[JOB_KEY], ss[LAST_KEY], ss["evo_scroll_top"] = job.id, run_id, True
            st.rerun()


def main() -> None:
    common.app_shell()
    common.header("Evolve", "Each round samples parents from the history buffer, makes K valid candidates, "
                  "lets a judge pick one and evaluates it on the validation split.")
    if ss.pop("evo_scroll_top", False):  # Launch is at the bottom: the run's progress is at the top
        widgets.scroll_to_top()
    settings = common.llm_settings()
    configured = common.llm_banner(settings)
    common.sandbox_banner()
    job = jobs.get(ss.get(JOB_KEY))
    if job is None or not job.snapshot().active:
        job = evs.active_job() or job  # a reloaded page finds a run still going in this server
    busy = job is not None and job.snapshot().active
    if busy:  # the run this page follows, found in the server, not only in this tab's memory
        ss[JOB_KEY], ss[LAST_KEY] = job.id, job.meta["run_id"]
    elif ss.get(LAST_KEY) is None and (latest := evs.runs_overview(common.workspace())):
        ss[LAST_KEY] = latest[0]["id"]  # a new tab shows the latest run in the workspace
    gate = evs.gate_of(job.id) if busy else None
    pending = gate.pending if gate is not None else None
    if pending is None and (left := review.take_message(None)):  # a review decided elsewhere meanwhile
        st.error(left, icon=":material/error:")
    # The run (live, waiting for a review, or the last one) on top; the form for a new one in a box built only when
    # open, open by itself while there is no run to show.
    show_run = busy or ss.get(LAST_KEY) is not None
    if show_run:
        run_section(settings, job, busy, pending)
        st.divider()
    box = st.expander("New run", expanded=not show_run, key="evo_new_open", on_change="rerun",
                      icon=":material/rocket_launch:")
    if box.open:
        with box:
            new_run(settings, configured, busy)
    resume(settings, busy)


def run_section(settings, job, busy: bool, pending) -> None:  # noqa: ANN001 - a job, a pending review
    if pending is not None:
        review.review_panel(job, pending, run_view)
    elif busy:
        live(job.id)
    else:
        run_id = ss[LAST_KEY]
        try:
            info = History(common.workspace()).run(run_id)
        except KeyError:  # another workspace since: nothing to show
            ss.pop(LAST_KEY)
            st.rerun()
        err = job.snapshot().error if job is not None and job.meta.get("run_id") == run_id else None
        st.subheader(f"Run #{run_id}: {info.status}")
        if err or info.reason:
            (st.error if err else st.caption)(md(err or info.reason))
        if info.status == "stopped" and (cmd := remote.resume_hint(info.reason)):  # a Ray actor died for good
            st.code(cmd, language="bash")
        run_view(run_id, "last")
        after_run(settings, run_id, info.status, busy, JOB_KEY)
        if st.button("Open in History", icon=":material/history:", key="evo_to_history"):
            ss["hist_run"] = run_id
            st.switch_page("pages/history.py")

main()
