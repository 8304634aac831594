"""Evaluation-protocol pieces shared by the Evolve and History pages: the options of a run (validation rounds,
top-N re-scored on the test split), validation and test side by side, "continue N more rounds", and the
on-demand test re-score. A plain module (not a page): app.py lists the pages explicitly."""

from __future__ import annotations

import streamlit as st

from flowcore.evolution import session as evs
from flowcore.evolution.testsplit import start_test_rescore
from flowcore.ui import compare as cv
from flowcore.ui.words import EDIT_HELP
from flowcore.workspace import jobs
from pages import common
from pages.common import md

ss = st.session_state
RESCORE_KEY = "proto_rescore_job"


RUN_DEFAULTS = {"evo_val_rounds": 1, "evo_test_top": 0, "evo_test_limit": 20, "evo_search": "guided",
                "evo_remeasure": 2}


def run_options(configured: bool, shown: bool = True) -> dict:
    """The protocol fields of a new run's EvolutionConfig: the boxes when ``shown``, else what they hold (kept by
    pages/keep.py) or the defaults."""
    if shown:
        c = st.columns(3)
        c[0].number_input("Validation repeats (R)", min_value=1, max_value=10, value=RUN_DEFAULTS["evo_val_rounds"],
                          key="evo_val_rounds", disabled=not configured,
                          help="AFlow's validation rounds: evaluate each round's workflow R times with the "
                               "cache bypassed; the score is the mean solve rate.")
        top = c[1].number_input("Re-score the top N on the test split (0 = no)", min_value=0, max_value=20,
                                value=RUN_DEFAULTS["evo_test_top"], key="evo_test_top", disabled=not configured,
                                help="When the run ends, its N best rounds by validation score are evaluated on "
                                     "the held-out test split, never seen during evolution.")
        c[2].number_input("Test problems (0 = the whole test split)", min_value=0,
                          value=RUN_DEFAULTS["evo_test_limit"], key="evo_test_limit",
                          disabled=not configured or not top)
        c = st.columns(3)
        search = c[0].radio("Search", ["guided", "paper"], horizontal=True, key="evo_search",
                            help="guided: the paper's loop plus diverse parents and operators, a judge that uses "
                                 "the history's evidence, and re-measured close calls; paper: DESIGN §5 as written")
        c[1].number_input("Re-measure close calls (times)", min_value=0, max_value=5,
                          value=RUN_DEFAULTS["evo_remeasure"], key="evo_remeasure",
                          disabled=not configured or search != "guided",
                          help="A round that reaches the best score so far is measured again with fresh samples")
    v = {k: st.session_state.get(k, d) for k, d in RUN_DEFAULTS.items()}
    return {"validation_rounds": int(v["evo_val_rounds"]), "test_top": int(v["evo_test_top"]),
            "test_limit": int(v["evo_test_limit"]) or None, "search": v["evo_search"],
            "remeasure": int(v["evo_remeasure"])}


def test_section(run_id: int, key: str) -> None:
    """Validation and test side by side (with intervals) for the run's test-scored rounds, if any."""
    sentence = cv.result_sentence(common.workspace(), run_id)
    if sentence:
        st.markdown(f"**{sentence}**")
    df = cv.validation_test_frame(common.workspace(), run_id)
    if df.empty:
        return
    st.markdown("**Validation → test**: the best rounds re-scored on the held-out test split")
    st.dataframe(df, hide_index=True, placeholder="—", width="stretch", key=f"proto_test_{key}",
                 column_config={c: st.column_config.NumberColumn(format="%.1f")
                                for c in ("validation %", "test %", "test sd %")}
                 | {"test cost $": st.column_config.NumberColumn(format="%.5f"),
                    "edit": st.column_config.TextColumn(help=EDIT_HELP)})
    st.caption(f"Test split: {md(df['split'].iloc[0])}. Our split is not the papers' files (see README).")


def continue_controls(settings, run_id: int, status: str, busy: bool) -> jobs.Job | None:
    """'Continue N more rounds' for a finished run; returns the started job."""
    if status != "finished":
        return None
    c = st.columns([1, 1, 3], vertical_alignment="bottom")
    more = c[0].number_input("More rounds", min_value=1, max_value=200, value=3, key=f"evo_more_{run_id}")
    if c[1].button(f"Continue {int(more)} more rounds", icon=":material/fast_forward:", key="evo_continue",
                   disabled=busy):
        try:
            return evs.continue_run(common.workspace(), settings, run_id, int(more))
        except ValueError as e:
            st.error(f"Cannot continue: {md(e)}", icon=":material/error:")
    return None


def after_run(settings, run_id: int, status: str, busy: bool, job_key: str) -> None:
    """Below a stored run on the Evolve page: validation vs test, and 'continue N more rounds' (which starts
    the job, remembers it under ``job_key`` and reruns the page to follow it)."""
    test_section(run_id, "last")
    job = continue_controls(settings, run_id, status, busy)
    if job is not None:
        ss[job_key] = job.id
        st.rerun()


def rescore_controls(settings, info, configured: bool) -> None:
    """History's on-demand 'score the top N on the test split'."""
    if info.offline:
        return
    job = jobs.get(ss.get(RESCORE_KEY))
    busy = job is not None and job.snapshot().active
    c = st.columns([1, 1, 1.6, 2], vertical_alignment="bottom")
    top = c[0].number_input("Top N", min_value=1, max_value=20, value=3, key="hist_test_top")
    lim = c[1].number_input("Test problems (0 = all)", min_value=0, value=20, key="hist_test_limit")
    if c[2].button("Score on the test split", icon=":material/fact_check:", key="hist_test_go",
                   disabled=busy or not configured, help=None if configured else "No LLM endpoint configured"):
        try:
            job = start_test_rescore(common.workspace(), settings, info.id, int(top), limit=int(lim) or None,
                                     repeats=int(info.config.get("validation_rounds") or 1))
            ss[RESCORE_KEY] = job.id
        except ValueError as e:
            st.error(f"Not started: {md(e)}", icon=":material/error:")
    if job is not None:
        snap = job.snapshot()
        if snap.active:
            c[3].progress(snap.fraction, text=snap.message or "starting")
            c[3].button("Refresh", key="hist_test_refresh")
        elif snap.error:
            c[3].error(md(snap.error))
