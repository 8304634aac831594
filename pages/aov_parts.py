"""The AOV page's decision panel (a plain module, not a page): repair proposals and periodic refinements, each with
its diff and drawing, to accept, edit or reject. A proposal is edited as a form (each subtask's requirement, agent
and parents; completed work shown, not editable), never as raw JSON with bookkeeping fields in it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import streamlit as st

from flowcore.aov import session as S
from flowcore.aov.session import md
from flowcore.mermaid import safe

SOURCE_WORDS = {"rules": "from the rules", "llm": "from the LLM", "edited": "edited by you"}  # who proposed it

ss = st.session_state


def metrics(where, m) -> None:  # noqa: ANN001 - a container, a graph's Metrics
    """A graph's metrics side by side, each with its one-line explanation on hover."""
    for col, (label, value, why) in zip(where.columns(3), S.metric_cards(m), strict=True):
        col.metric(label, value, help=why)


def edit_form(p, prefix: str) -> None:  # noqa: ANN001 - a Proposal
    """One row per subtask of the proposed graph: requirement, agent, parents (the links follow from them)."""
    g = p.graph
    agents = [a.id for a in g.agents]
    ids = list(g.subtasks)
    for sid, s in g.subtasks.items():
        if s.status == "completed":
            st.caption(f"{safe.code(sid)} ({md(s.agent)}) · completed, kept as it is: {md(s.subtask_requirement)}")
            continue
        c = st.columns([3, 1, 1.6])
        c[0].text_area(f"{safe.code(sid)}: what it must do", s.subtask_requirement, height=68,
                       key=S.form_key(prefix, "req", sid))
        c[1].selectbox("Agent", agents, index=agents.index(s.agent) if s.agent in agents else 0,
                       key=S.form_key(prefix, "agent", sid))
        c[2].multiselect("Waits for", [x for x in ids if x != sid], default=[x for x in s.parents if x in ids],
                         key=S.form_key(prefix, "parents", sid), help="The subtasks whose results it needs")


def proposals(ex, act, diagram: Callable) -> None:  # noqa: ANN001 - an Execution, the page's Actions
    rs, tag, token = ex.pending_failure, f"{ex.id}_{len(ex.events)}", S.decision_token(ex)
    (st.error if rs.kind == "repair" else st.info)(S.decision_text(ex), icon=":material/error:"
                                                   if rs.kind == "repair" else ":material/update:")
    for i, p in enumerate(rs.proposals):
        with st.container(border=True):
            st.markdown(f"**Proposal {i + 1}** ({md(SOURCE_WORDS.get(p.source, p.source))}) · {md(p.summary)}")
            metrics(st.columns([1.2, 1.4])[0], p.metrics)
            left, right = st.columns([0.8, 1.4])
            left.code("\n".join(S.diff_lines(p)) or "(no change)", language=None, wrap_lines=True)
            with right:
                diagram(p.graph, S.changed(p), max_label=30, direction="LR")
            b = st.columns([1, 1, 4])
            b[0].button("Accept", on_click=act.accept, args=(i, None, token), key=f"aov_accept_{i}", type="primary")
            if b[1].toggle("Edit", key=f"aov_edit_{tag}_{i}"):
                prefix = f"aov_form_{tag}_{i}"
                edit_form(p, prefix)
                st.button("Accept edited graph", on_click=act.accept, args=(i, prefix, token),
                          key=f"aov_accept_edit_{i}")
    if rs.dropped:
        counts = Counter(rs.dropped)  # one reason said once, with how many it held back
        st.caption("Not offered: " + md("; ".join(r if n == 1 else f"{r} (×{n})" for r, n in counts.items())))
    st.button("Reject all (the subtask stays failed)" if rs.kind == "repair" else "Reject all (keep the plan)",
              on_click=act.reject, args=(token,), key="aov_reject", icon=":material/block:")
