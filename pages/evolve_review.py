"""The Evolve page's review of a round before its evaluation (a plain module, not a page): every one of the K
candidates (the judged ones drawn, each dropped one with why), the pick, approve, veto, cancel, an edit in
place; a message appears beside the button that caused it. The decision goes to the run's ReviewGate."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from flowcore.evolution import Review
from flowcore.evolution import session as evs
from flowcore.mermaid import safe
from flowcore.ui import story, view
from flowcore.ui.flash import take as take_flash
from flowcore.ui.words import edit_detail, edit_name
from flowcore.workspace import jobs
from pages import widgets
from pages.common import md

ss = st.session_state
MESSAGE = "evo_review_msg"  # (where, text): "buttons" (approve, veto) or "edit"


def take_message(where: str | None) -> str | None:
    """The message a decision left for ``where`` (None: for any place), removed once shown."""
    held = ss.get(MESSAGE)
    if held is None or (where is not None and held[0] != where):
        return None
    take_flash(ss, MESSAGE)  # (kept for a rerun of this very run: see rerun)
    return held[1]


def _decide(job_id: str, rnd: int, action: str, judge_pick: int) -> None:
    """Read the pick and the edit from session state: a button's args were bound when it was drawn, before
    the user changed them."""
    pick = ss.get(f"evo_pick_{rnd}", judge_pick)
    review = {"approve": Review("approve") if pick == judge_pick else Review("choose", index=pick),
              "veto": Review("veto", reason="vetoed on the Evolve page"),
              "edit": Review("edit", index=pick, text=ss.get(f"evo_edit_{rnd}_{pick}") or "")}[action]
    gate = evs.gate_of(job_id)
    try:
        errors = gate.decide(rnd, review) if gate else ["the run is no longer waiting"]
    except ValueError as e:
        errors = [str(e)]
    if errors:
        ss[MESSAGE] = ("edit" if action == "edit" else "buttons", "Not applied: " + "; ".join(errors[:5]))


def _cancel(job: jobs.Job) -> None:
    job.cancel()
    if (gate := evs.gate_of(job.id)) is not None:
        gate.withdraw()


def _said(where: str) -> None:
    if msg := take_message(where):
        st.error(md(msg), icon=":material/error:")


def review_panel(job: jobs.Job, p: evs.PendingReview, run_view: Callable[[int, str], None]) -> None:
    run_id = job.meta["run_id"]
    st.subheader(f"Run #{run_id} · round {p.round}: review before evaluation")
    snap = job.snapshot()
    st.progress(snap.fraction, text=f"Run #{run_id} · round {p.round} of {snap.meta['rounds']}: waiting for your "
                                    f"review · {max(0, snap.done - 1)} of {snap.meta['rounds']} rounds done")
    n, k = len(p.candidates), len(p.candidates) + len(p.dropped)
    dropped = f" {len(p.dropped)} of the {k} candidates were dropped before judging (why is under each)." \
        if p.dropped else ""
    st.caption(f"{md(story.judge_sentence(p.judge, p.chosen))}{dropped} Approve it or another one, edit one, or "
               "veto the round (it is stored as failed and the run goes on).")
    wide = not view.side_by_side(*(c["text"] for c in p.candidates))  # a drawing cut at half the page: stacked
    cols = [st.container()] if wide else st.columns(min(2, k))
    for i, c in enumerate(p.candidates):
        with cols[i % len(cols)]:
            s = c["scores"]
            st.markdown(f"**Candidate {i}**{' (judge pick)' if i == p.chosen else ''} · {md(edit_name(c['operator']))} · "
                        f"total **{s['total']:.1f}** / 50")
            st.caption(safe.markdown(edit_detail(c["detail"])))
            widgets.diagram(c["text"], f"evo_rev_{run_id}_{p.round}_{i}")
    for j, d in enumerate(p.dropped):
        with cols[(n + j) % len(cols)], st.container(border=True):
            st.markdown(f"**Candidate {n + j}** · {md(edit_name(d['operator']))} · dropped")
            st.caption(f":material/block: {md(edit_detail(d['reason']))}")
            if d["text"]:
                with st.expander("What it proposed"):
                    st.code(d["text"], language=None)
    pick = st.radio("Candidate", list(range(n)), index=p.chosen, horizontal=True, key=f"evo_pick_{p.round}",
                    format_func=lambda i: f"{i} · {edit_name(p.candidates[i]['operator'])}")
    b = st.columns([1, 1, 1, 3])
    b[0].button("Approve", type="primary", icon=":material/check:", key="evo_approve", on_click=_decide,
                args=(job.id, p.round, "approve", p.chosen))
    b[1].button("Veto round", icon=":material/block:", key="evo_veto", on_click=_decide,
                args=(job.id, p.round, "veto", p.chosen))
    b[2].button("Cancel run", icon=":material/stop:", key="evo_cancel_review", on_click=_cancel, args=(job,))
    _said("buttons")
    st.text_area(f"Edit candidate {pick} (checked before it is used)", p.candidates[pick]["text"], height=260,
                 key=f"evo_edit_{p.round}_{pick}")
    st.button("Use the edited workflow", icon=":material/edit:", key="evo_use_edit", on_click=_decide,
              args=(job.id, p.round, "edit", p.chosen))
    _said("edit")  # right under the button that was clicked, not at the top of the page
    run_view(run_id, "review")
