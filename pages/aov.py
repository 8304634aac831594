"""AOV Execution (Flow): candidate graphs, their metrics and the rule's choice; event-driven execution shown
live (which subtasks run now, a timeline) or lock-step steps by hand; repair proposals and periodic
refinements to accept, edit or reject; saved executions; exports.

Only layout here: the actions (button callbacks, run before the script) are flowcore.aov.session.Actions.
"Run to end" runs in a background job; a fragment polls it every second and reruns the page when the run
stops or a decision is needed."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a page of app.py or on its own (AppTest)
    sys.path.insert(0, str(ROOT))

from flowcore.aov import session as S
from flowcore.aov import to_mermaid
from flowcore.aov.session import md
from flowcore.llm.client import LLM
from flowcore.mermaid import safe
from flowcore.ui.flash import take as take_flash
from flowcore.ui.words import count
from pages import aov_parts, common

common.app_shell()  # a link to this page on a fresh server: run inside the app (menu, workspace memory)
ss = st.session_state
NO_LLM = "No LLM endpoint is configured: set one on the Settings page (or OPENAI_BASE_URL) to generate."
AGENTS = {"llm": "LLM agents", "manual": "Manual (you type each output)", "echo": "Echo (offline demo)"}
LLM_OR_RULES = {"llm": "LLM", "rules": "Rules", "off": "Off"}
MODES = {"interactive": "Ask me (interactive)", "auto": "Apply the best (auto)"}


def llm() -> LLM | None:
    settings = common.llm_settings()
    return LLM(settings, workspace=common.workspace()) if settings.configured else None


act = S.Actions(ss, common.workspace(), llm)  # the callbacks: flowcore/aov/session.py
act.open_remembered(common.browser_id())  # a reload reopens what this browser had open


# -- drawing ------------------------------------------------------------------------------------------------

def diagram(graph, changed=(), max_label: int = 48, direction: str = "TD") -> None:
    """Streamlit's own Mermaid chart: sized to its content (st_mermaid's iframe needs a guessed height and
    leaves blank bands under scaled-down diagrams). Top-down for the live graph, left-right in columns."""
    st.mermaid_chart(to_mermaid(graph, max_label, direction, changed), width="content")


def candidates_section(configured: bool) -> int | None:
    st.subheader("1 · Candidate graphs")
    if st.radio("Source", ["Examples and files", "Generate with the LLM"], horizontal=True,
                key="aov_source").startswith("Examples"):
        c1, c2 = st.columns(2)
        sets = S.example_sets()
        # the first set, ready to use: a default in the session (a restored choice is kept; a widget's own
        # default beside a value set by the session made Streamlit warn on every run)
        st.session_state.setdefault("aov_example_set", next(iter(sets), None))
        c1.selectbox("Example: K candidate graphs for one goal", [None, *sets], key="aov_example_set",
                     format_func=lambda k: "— (only my files)" if k is None else
                     f"{md(S.example_goal(k))} ({len(sets[k])} graphs)")
        c2.file_uploader("AOV JSON files", type=["json"], accept_multiple_files=True, key="aov_upload")
        st.text_area("…or paste one AOV JSON document", key="aov_paste", height=90,
                     placeholder='{"goal": "...", "subtasks": {...}, "agents": [...]}')
        st.button("Use as candidates", on_click=act.use_files, key="aov_use", type="primary")
    else:
        titles = S.task_titles()
        st.selectbox("…or a task of the task set (checkable acceptance)", [None, *titles], key="aov_taskset",
                     format_func=lambda t: "—" if t is None else titles[t], on_change=act.use_task)
        st.text_area("Task", key="aov_task", height=90, placeholder="What should the team of agents do?")
        st.slider("K (candidates, requested at once)", 1, act.flow.k_max, act.flow.k, key="aov_gen_k")
        st.button("Generate", on_click=act.generate, key="aov_generate", type="primary",
                  disabled=not configured, help=None if configured else NO_LLM)
        if not configured:
            st.caption(NO_LLM + " Without one, use the example graphs or your own files.")
    cands = ss.get("aov_cands") or []
    best = S.rule_choice(cands)
    for i, c in enumerate(cands):
        with st.container(border=True):
            left, right = st.columns([1, 2.6])
            badge = " :green-badge[chosen by the rule]" if i == best else ""
            left.markdown(f"**Candidate {i + 1}** · {safe.code(c.label)}{badge}")
            if c.candidate.graph is None:
                left.error(f"Dropped: {md(c.candidate.error)}")
                continue
            aov_parts.metrics(left, c.candidate.metrics)
            if c.candidate.repairs:
                left.caption("Fixed on reading: " + md("; ".join(c.candidate.repairs)))
            with right:
                diagram(c.candidate.graph, max_label=30, direction="LR")
    if cands and best is None:
        st.error("No candidate is valid: fix the files or generate again.")
    return best


def start_row(cands: list, best: int | None) -> None:
    if best is not None:
        valid = [i for i, c in enumerate(cands) if c.candidate.graph is not None]
        pick = st.radio("Graph to execute", valid, index=valid.index(best), horizontal=True,
                        key=f"aov_pick_{ss.get('aov_gen', 0)}",
                        format_func=lambda i: f"Candidate {i + 1}" + (" (chosen by the rule)" * (i == best)))
        st.button("Start execution", on_click=act.start, args=(cands[pick].candidate.graph,), key="aov_start",
                  type="primary", icon=":material/play_arrow:")
    if saved := S.saved(common.workspace()):
        c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
        labels = {r["id"]: S.saved_label(r) for r in saved}  # by goal and local time, not id and ISO stamp
        # keyed by the labels: the browser keeps showing a keyed select's old labels when only they change
        eid = c1.selectbox("Reopen saved execution", list(labels), format_func=labels.get,
                           key=f"aov_saved_{zlib.crc32(repr(labels).encode())}")
        c2.button("Reopen", on_click=act.reopen, args=(eid,), key="aov_reopen", icon=":material/history:")


def settings_row(configured: bool) -> None:
    c, first, f = st.columns([1.4, 0.8, 0.8, 1.2, 0.6, 0.7]), ["llm"] if configured else [], act.flow
    c[0].radio("Agents", first + ["manual", "echo"], format_func=AGENTS.get, key="aov_agents")
    c[1].radio("Inspector", first + ["rules"], format_func=LLM_OR_RULES.get, key="aov_inspector")
    c[2].radio("Repair proposals", first + ["rules"], format_func=LLM_OR_RULES.get, key="aov_repairs",
               help="LLM proposals are topped up by the rule-made ones")
    c[3].radio("Repairs and refinements", list(MODES), format_func=MODES.get, key="aov_mode")
    c[4].number_input("K", 1, f.k_max, key="aov_k",
                      help="Repair proposals per failure and updates per refinement, requested at once")
    c[5].number_input("Max repairs", 0, 10, key="aov_max_repairs", help="Per subtask; then it stays failed")
    r = st.columns([1.4, 0.8, 1, 2.6], vertical_alignment="bottom")
    r[0].radio("Periodic refinement", first + ["off"], format_func=LLM_OR_RULES.get, key="aov_refine",
               horizontal=True, help=None if configured else "Refinement re-plans with the LLM: configure one")
    r[1].number_input("every M completed", 1, 100, key="aov_refine_every")
    r[2].number_input("at most (times)", 0, 50, key="aov_max_refinements")
    # built when opened: five number boxes closed on every view cost the page's first paint
    if (pop := r[3].popover("Flow settings", icon=":material/tune:", key="aov_fs_pop", on_change="rerun")).open:
        with pop:
            d = {k: st.number_input(label, 1 if k != "max_refinements" else 0, hi, getattr(f, k),
                                    key=f"aov_fs_{k}")
                 for k, label, hi in [("k", "Default K", 50), ("k_max", "Largest K", 50),
                                      ("refine_every", "Refine every M", 100),
                                      ("max_refinements", "Max refinements", 50),
                                      ("context_chars", "Log budget of repair/refinement prompts (chars)", 10**7)]}
            st.button("Save in the workspace", on_click=act.save_flow, args=(d,), key="aov_fs_save")


@st.fragment(run_every=1.0)
def live_view(ex) -> None:
    """While the background run goes on: what runs now, the live graph and the timeline. The whole page
    reruns once the run stops, or when a decision is awaited (to show the proposals)."""
    if act.job() is None or len(ex.queue) != ss.get("aov_seen_queue", 0):
        ss["aov_seen_queue"] = len(ex.queue)
        common.rerun("aov_flash")
    st.markdown(f"status **{ex.status}** · step **{ex.step_index}** · {S.running_text(ex)}")
    graph_and_timeline(ex)


def graph_and_timeline(ex) -> None:
    st.markdown("**Live graph** · grey pending · blue running · green completed · red failed")
    diagram(ex.graph)
    if any(e["kind"] in ("subtask_start", "step_start") for e in ex.events):
        st.markdown("**Timeline** · overlapping bars ran at the same time")
        st.plotly_chart(S.timeline(ex.events, ex.running_now()), key=f"aov_timeline_{len(ex.events)}")


def execution_section(ex) -> None:
    running = act.job() is not None
    done, paused, manual = ex.done, ex.status == "paused", ss.get("aov_agents") == "manual"
    st.markdown(f"**{md(ex.graph.goal)}** · {md(S.started_text(common.workspace(), ex.id))}")
    st.caption("Step runs every ready subtask and waits for all of them (lock-step, outputs by hand in manual "
               "mode). Run to end is event-driven: each subtask starts the moment its last parent completes.")
    for sid in ex.graph.ready() if manual and not (done or paused or running) else []:
        s = ex.graph.subtasks[sid]
        st.text_area(f"Output of {safe.code(sid)} ({md(s.agent)}): {md(s.subtask_requirement)}", height=70,
                     key=act.out_key(ex, sid), placeholder="What the agent returns ('ERROR: ...' fails it).")
    b = st.columns([1, 1.2, 1, 1, 2.4], vertical_alignment="bottom")
    b[0].button("Step", on_click=act.step, key="aov_step", type="primary", icon=":material/skip_next:",
                disabled=done or paused or running)
    b[1].button("Run to end", on_click=act.run_to_end, key="aov_run", icon=":material/fast_forward:",
                disabled=done or running or manual or (paused and ex.queue[0].kind == "refine"),
                help="Manual mode needs your outputs at every step: use Step." if manual else None)
    b[2].button("Pause", on_click=act.pause, key="aov_pause", icon=":material/pause:", disabled=not running)
    b[3].button("Reset", on_click=act.reset, key="aov_reset", icon=":material/restart_alt:")
    if done:
        (st.success if ex.status == "completed" else st.warning)(
            f"The execution {ex.status} after {count(ex.step_index, 'step')}.")
    if ex.pending_failure:
        aov_parts.proposals(ex, act, diagram)
    if running:
        live_view(ex)
    else:
        st.markdown(f"status **{ex.status}** · step **{ex.step_index}**")
        graph_and_timeline(ex)
    for title, rows, key in [("State of every subtask", S.state_rows(ex), "aov_state"),
                             ("Steps", S.step_rows(ex.events), "aov_steps"),
                             ("Inspector verdicts", S.verdict_rows(ex.events), "aov_verdicts")]:
        st.markdown(f"**{title}**")
        st.dataframe(rows, hide_index=True, placeholder="—", width="stretch", key=key)
    if S.task_of(ex) is not None:
        st.button("Check acceptance (in the sandbox)", on_click=act.check_acceptance, key="aov_acc",
                  icon=":material/fact_check:", disabled=running)
        if (acc := ss.get(f"aov_acc_{ex.id}")) is not None:
            (st.success if acc[0] else st.warning)("Accepted." if acc[0] else "Not accepted.")
            st.dataframe(acc[1], hide_index=True, placeholder="—", width="stretch", key="aov_acc_rows")
    e = st.columns(3)
    e[0].download_button("Graph JSON", ex.graph.to_json(), file_name=f"aov_{ex.id}.json", key="aov_dl_graph",
                         mime="application/json", icon=":material/download:")
    e[1].download_button("Execution log (JSON lines)", S.events_jsonl(ex.events), key="aov_dl_log",
                         file_name=f"aov_{ex.id}_log.jsonl", mime="application/x-ndjson",
                         icon=":material/download:")


def main() -> None:
    common.header("AOV Execution", "Flow: split a task into a dependency graph of subtasks, pick the most parallel "
                  "candidate, start every subtask the moment its last parent completes, repair the graph locally "
                  "when the inspector fails a result, and re-plan what has not started every few completions.",
                  show_open=False)  # a Flow task, not the open workflow: the endpoint line, as on every page
    configured = common.llm_banner()
    best = candidates_section(configured)
    st.subheader("2 · Execution")
    settings_row(configured)
    start_row(ss.get("aov_cands") or [], best)
    act.settle()  # a background run that has ended: why
    act.sync()  # another tab, window or process may have moved the execution on
    ex = ss.get("aov_ex")
    if (flash := take_flash(ss, "aov_flash")) is not None:
        kind, message = flash
        getattr(st, kind)(md(message))
    if ex is None:
        st.caption("Pick a candidate above and press Start execution, or reopen a saved execution.")
    else:
        execution_section(ex)
    act.remember(common.browser_id())


main()
