"""History page: an evolution run's buffer as a filterable table, its score curves (per round, best so far,
cost vs score), the lineage tree, and one round in detail: parent and child side by side with the text diff,
the parent sampling probabilities, the judge's scores; pin, annotate, fork to the Editor, re-evaluate.

Scores are shown only where they were measured; a structure-only run says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore.evaluation import results as rs
from flowcore.evolution import History, remote
from flowcore.evolution import session as evs
from flowcore.mermaid import safe
from flowcore.ui import history as hv
from flowcore.ui import tasks as tv
from flowcore.ui import view
from flowcore.ui.flash import take as take_flash
from flowcore.ui.words import EDIT_HELP, edit_name
from flowcore.workspace import jobs
from pages import common, serve_parts, widgets
from pages.protocol_parts import rescore_controls, test_section

ss = st.session_state
RUN_KEY, REEVAL_KEY = "hist_run", "hist_reeval_job"
PCT = st.column_config.NumberColumn(format="percent")
TAB_KEY = "hist_tab"  # kept across page switches and reloads (pages/keep.py)
NO_LLM = "No LLM endpoint configured — set OPENAI_BASE_URL/OPENAI_API_KEY or open Settings."


def _pin(run_id: int, rnd: int, pinned: bool) -> None:
    History(common.workspace()).pin(run_id, rnd, pinned)


def _note(run_id: int, rnd: int, key: str) -> None:
    note = (ss.get(key) or "").strip()
    History(common.workspace()).set_note(run_id, rnd, note or None)
    ss["hist_flash"] = f"Note {'saved' if note else 'cleared'} for round {rnd}."


def _reevaluate(run_id: int, rnd: int) -> None:
    try:
        settings = common.llm_settings()  # a fresh measurement bypasses the LLM cache
        job = evs.start_reevaluation(common.workspace(), rs.fresh(settings) if ss.get("hist_fresh") else settings,
                                     run_id, rnd)
    except ValueError as e:  # no endpoint, no workflow, a bad data file
        ss["hist_flash"] = f"Not started: {safe.plain(e)}"
        return
    ss[REEVAL_KEY] = job.id


@st.fragment(run_every=0.7)
def reeval_live(job_id: str) -> None:
    widgets.job_progress(job_id, lambda snap: f"Re-evaluating: {snap.done}/{snap.total} problems · {snap.message}",
                         key="hist_reeval_cancel", cancel_label="Cancel re-evaluation",
                         cancelling="Cancelling: the problems already running finish first.")


@st.fragment(run_every=3)
def live_rounds(run_id: int, shown: int) -> None:
    """While the run is going (in this server or another process on the same workspace), rerun the page when
    a new round is stored or the run stops."""
    h = History(common.workspace())
    last, info = h.last_round(run_id), h.run(run_id)
    if last != shown or info.status != "running":
        common.rerun("hist_flash")
    st.caption(f":material/autorenew: The run is going ({evs.run_status(info, common.workspace())}): round {last} stored, new rounds "
               "appear here by themselves.")


# -- sections --------------------------------------------------------------------------------------------------------

def buffer_table(view: hv.RunView, offline: bool) -> None:
    f = st.columns([2, 2, 1.2, 1], vertical_alignment="bottom")
    statuses = f[0].multiselect("Status", view.statuses(), key="hist_status")
    operators = f[1].multiselect("Edit", view.operators(), key="hist_ops", format_func=edit_name, help=EDIT_HELP)
    min_score = f[2].number_input("Min score (%)", min_value=0.0, max_value=100.0, value=0.0, step=5.0,
                                  key="hist_min", disabled=offline, help="Rounds without a measured score are "
                                  "hidden by any minimum above 0.")
    pinned = f[3].checkbox("Pinned only", key="hist_pinned")
    rounds = view.rows(statuses=statuses, operators=operators, min_score=min_score / 100, pinned_only=pinned)
    pages = hv.page_count(len(rounds))  # past PAGE_ROWS rounds, one page at a time (the filters see them all)
    page = st.number_input(f"Page (of {pages}; {hv.PAGE_ROWS} rounds a page, the last has the latest)", 1, pages,
                           pages, key=f"hist_page_{pages}") if pages > 1 else 1
    table = view.table(rounds, page, offline)
    st.dataframe(hv.for_people(table, view.estimated()), hide_index=True, placeholder="—", width="stretch", key="hist_table",
                 column_config={"pinned": st.column_config.CheckboxColumn(),
                                "operator": st.column_config.TextColumn("edit", help=EDIT_HELP)})
    st.caption(hv.table_caption(table, view.total))


def charts(view: hv.RunView, run_id: int) -> None:
    c = st.columns(2)
    widgets.plot(view.score_figure(), where=c[0])
    picked = ss.get(f"hist_round_{run_id}", view.cols["round"][-1])  # the Round box below: its name is drawn
    if (cost := view.cost_figure(picked)) is not None:
        widgets.plot(cost, where=c[1])
    else:
        c[1].info("Cost vs score needs measured rounds; this run has none.", icon=":material/info:")


def round_detail(info, row: dict, parent: dict | None, configured: bool) -> None:
    run_id, rnd = info.id, row["round"]
    st.subheader(f"Round #{rnd} · {common.md(edit_name(row['operator']))} · {row['status']}")
    for col, (label, value, why) in zip(st.columns(4), hv.round_metrics(row, evs.judge_total(row)), strict=True):
        col.metric(label, value, help=why)
    if row["reason"] and row["status"] == "failed":
        st.error(f"Failed: {safe.plain(row['reason'])}")
    st.caption(hv.round_caption(row, info))
    has_text = bool(row["workflow_text"])
    a = st.columns([1, 1.4, 1.4, 4], vertical_alignment="bottom")
    a[0].button("Unpin" if row["pinned"] else "Pin", icon=":material/push_pin:", key="hist_pin", on_click=_pin,
                args=(run_id, rnd, not row["pinned"]))
    if a[1].button("Fork to Editor", icon=":material/call_split:", key="hist_fork", disabled=not has_text,
                   type="primary", help="Open this round's workflow in the Editor"):
        common.set_current_workflow(row["workflow_text"], info.task, evs.fork_name(info.benchmark, run_id, rnd),
                                    version=None)
        ss["mf_scroll_top"] = True  # the button is far down this page: the Editor opens at its top
        st.switch_page("pages/editor.py")
    done = evs.reevaluations(common.workspace(), run_id, rnd)  # a running one is found after a reload too
    j = jobs.get(ss.get(REEVAL_KEY)) or next((jobs.get(e.job_id) for e in done if e.status == "running"), None)
    busy = j is not None and j.snapshot().active
    a[2].button("Re-evaluate", icon=":material/replay:", key="hist_reeval", on_click=_reevaluate,
                args=(run_id, rnd), disabled=not (configured and has_text) or busy,
                help=NO_LLM if not configured else "Evaluate this workflow again on the run's validation problems")
    a[3].toggle("Fresh (bypass the cache)", key="hist_fresh", help="Off: answers already in the LLM cache are "
                "reused ($0, the same measurement again). On: every call goes to the endpoint.")
    note_key = f"hist_note_{run_id}_{rnd}"
    n = st.columns([5, 1, 1], vertical_alignment="bottom")
    n[0].text_input("Note", value=row["note"] or "", key=note_key, placeholder="What is worth remembering?")
    n[1].button("Save note", key="hist_note_save", on_click=_note, args=(run_id, rnd, note_key))
    serve_parts.publish_popover(n[2], row["workflow_text"] or "", info.task, f"{info.benchmark}-run{run_id}",
                                key="hist_publish", run_id=run_id, rnd=rnd)
    if not configured:
        st.caption(f"Re-evaluate: {NO_LLM}")
    if busy:
        reeval_live(j.id)
    if done:
        st.dataframe(hv.reeval_rows(done, lambda i: rs.cache_use(common.workspace(), i).text()), hide_index=True,
                     placeholder="—", key="hist_reevals", column_config={"score": PCT, "cost": st.column_config.NumberColumn(format="$%.5f")})

    texts = (row["workflow_text"] or "", parent["workflow_text"] if parent else "")
    height = view.texts_height(*texts)
    # side by side while both fit half the page with readable text; else one above the other, nothing cut
    left, right = st.columns(2) if view.side_by_side(*texts) else (st.container(), st.container())
    with left:
        if parent is not None and parent["workflow_text"]:
            st.markdown(f"**Parent #{parent['round']}** · {hv.score_text(parent['score'])}")
            widgets.diagram(parent["workflow_text"], "hist_parent_mermaid", height=height)
        else:
            st.markdown("**No parent**: this is the seed workflow." if rnd == 0 else "**Parent not stored.**")
    with right:
        st.markdown(f"**Round #{rnd}** · {hv.score_text(row['score'], row.get('per_problem'))}")
        if has_text:
            widgets.diagram(row["workflow_text"], "hist_child_mermaid", height=height)
        else:
            st.info("This round produced no workflow.")
    if parent is not None and parent["workflow_text"] and has_text:
        diff = evs.text_diff(parent["workflow_text"], row["workflow_text"], f"round {parent['round']}",
                             f"round {rnd}")
        st.markdown("**Change (unified diff of the Mermaid texts)**")
        st.html(hv.diff_html(diff))
    samp = evs.sampling_frame(row)
    c = st.columns([1, 1.8])  # the candidates' table has eight columns; the chart has a few bars
    if len(samp):
        widgets.chart(hv.sampling_figure(samp), key="hist_sampling", where=c[0])
    else:
        c[0].caption("The seed round has no parent sampling.")
    cands = hv.candidates_table(evs.candidates_frame(row))
    if len(cands):
        c[1].markdown("**Candidates and the judge's scores**")
        c[1].dataframe(cands, hide_index=True, placeholder="—", key="hist_cands",
                       column_config={"operator": st.column_config.TextColumn("edit", help=EDIT_HELP)})
    if row.get("per_problem"):
        with st.expander(f"Per-problem results ({len(row['per_problem'])})"):
            st.dataframe(row["per_problem"], hide_index=True, placeholder="—", width="stretch")


def main() -> None:
    common.app_shell()
    common.header("History", "Every evolution run's rounds: scores, lineage, and what changed from parent to "
                  "child.")
    if (flash := take_flash(ss, "hist_flash")) is not None:
        st.info(flash)
    ws = common.workspace()
    settings = common.llm_settings()
    runs = evs.runs_overview(ws)
    if not runs:
        st.info("No evolution runs yet: start one on the Evolve page.", icon=":material/info:")
        return
    labels = {o["id"]: evs.run_label(o) for o in runs}
    ids = list(labels)
    want = ss.get(RUN_KEY)
    run_id = st.selectbox("Run", ids, index=ids.index(want) if want in ids else 0, format_func=labels.get)
    ss[RUN_KEY] = run_id
    h = History(ws)
    view = hv.run_view(h, run_id)  # derived once per stored state of the run, then reused by every rerun
    info, cols = view.info, view.cols
    st.caption(hv.run_caption(info, evs.run_status(info, ws)))
    if info.status == "stopped" and (cmd := remote.resume_hint(info.reason)):  # its Ray actor died for good
        st.caption("Resume it with:")
        st.code(cmd, language="bash")
    st.caption(tv.graded_caption(tv.run_graded_by(ws, run_id)) or "")  # a judge metric's scores say so
    if info.offline:
        st.info("**Structure-only run**: no LLM endpoint was configured, so no benchmark score was measured. "
                "Curves show the rule judge's structural total instead.", icon=":material/cloud_off:")
    if info.status == "running":  # here or in another app process/worker: new rounds show up by themselves
        live_rounds(run_id, h.last_round(run_id))
    if not cols["round"]:
        st.caption("No round stored yet.")
        return
    rounds = list(view.labels)
    pick = st.selectbox("Round", rounds, index=len(rounds) - 1, key=f"hist_round_{run_id}",
                        format_func=view.labels.get)
    # One section at a time, built only when open: the page paints its first view without the grids, charts and
    # drawings of the others (each costs the browser a few hundred ms of rendering).
    names = hv.sections(info.offline)
    if ss.get(TAB_KEY) not in (None, *names):  # kept from a measured run, now showing a structure-only one
        del ss[TAB_KEY]
    tabs = dict(zip(names, st.tabs(names, key=TAB_KEY, on_change="rerun"), strict=True))
    if tabs["Score curves"].open:
        with tabs["Score curves"]:
            charts(view, run_id)
    if tabs["Rounds"].open:
        with tabs["Rounds"]:
            buffer_table(view, info.offline)
    if tabs["Lineage"].open:
        with tabs["Lineage"]:
            fig, caption = view.lineage(pick)
            widgets.chart(fig, key="hist_lineage")
            st.caption(caption)
    if tabs["Round detail"].open:
        with tabs["Round detail"]:
            row, parent = hv.round_and_parent(h, run_id, pick)  # the only round read in full
            if row is not None:
                round_detail(info, row, parent, settings.configured)
    if "Validation → test" in tabs and tabs["Validation → test"].open:
        with tabs["Validation → test"]:  # the run's claim: its best rounds on the held-out test split
            test_section(run_id, "hist")
            rescore_controls(settings, info, settings.configured)

main()
