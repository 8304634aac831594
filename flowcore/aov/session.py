"""What the AOV execution page needs that is not layout: candidates from files, backends from the user's
choices, the event-driven run in a background job (the page polls it live), and the execution's state,
steps, verdicts and timeline as rows and a figure. No Streamlit here."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowcore.aov import metrics as M
from flowcore.aov import settings as flow_settings
from flowcore.aov.execute import EchoAgent, Execution, LLMAgent, ManualAgent, run_sync
from flowcore.aov.generate import Candidate, generate_candidates
from flowcore.aov.inspector import LLMInspector, RuleInspector
from flowcore.aov.model import AOVError, AOVGraph
from flowcore.aov.repair import Proposal
from flowcore.aov.settings import FlowSettings
from flowcore.aov.store import (
    ExecutionConflict,
    ExecutionStore,
    load_execution,
    open_of,
    remember_open,
    save_execution,
)
from flowcore.mermaid import safe
from flowcore.workspace import jobs

CHOICE_KEYS = ("aov_agents", "aov_inspector", "aov_repairs", "aov_refine")  # radios kept with an execution
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "assets" / "aov"
AGENT_MODES = ("manual", "echo", "llm")  # who produces a subtask's output
PREVIEW = 80


@dataclass
class Labeled:
    """A candidate graph and where it came from (an example, a file, the LLM)."""

    label: str
    candidate: Candidate


def examples() -> list[str]:
    """The bundled example graphs, one per goal (``gobang.json``); each set's other candidates are in
    :func:`example_sets`."""
    return sorted(p.name for p in EXAMPLES_DIR.glob("*.json"))


def example_sets() -> dict[str, list[str]]:
    """The bundled candidate sets: for each example goal, K graphs for that same goal (``gobang.json`` and the
    files of the folder ``gobang/``), so the rule compares plans for one task, never plans for different ones."""
    out = {}
    for name in examples():
        stem = name.removesuffix(".json")
        out[stem] = [name] + sorted(f"{stem}/{p.name}" for p in (EXAMPLES_DIR / stem).glob("*.json"))
    return out


def example_goal(stem: str) -> str:
    """An example set's goal, for the picker."""
    try:
        return str(json.loads(example_text(f"{stem}.json")).get("goal") or stem)
    except (AOVError, ValueError):
        return stem


def example_text(name: str) -> str:
    if name not in examples() and name not in {n for names in example_sets().values() for n in names}:
        raise AOVError(f"no example named {name!r} in {EXAMPLES_DIR}")
    return (EXAMPLES_DIR / name).read_text(encoding="utf-8")


def mixed_goals(cands: Sequence[Labeled]) -> bool:
    """Whether valid candidates are plans for different goals (then ranking them compares unrelated plans)."""
    goals = {" ".join(c.candidate.graph.goal.split()).lower() for c in cands if c.candidate.graph is not None}
    return len(goals) > 1


def local_time(stamp: str) -> str:
    """A stored ISO timestamp (UTC) in this machine's local time, as people read it: '4 Dec 20:15'."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(stamp).astimezone()
    except (TypeError, ValueError):
        return str(stamp)
    return f"{when.day} {when:%b %H:%M}"


def saved_label(row: dict[str, Any], n: int = 60) -> str:
    """A saved execution named by its goal and when it started (local time), then its status."""
    goal = " ".join(str(row.get("goal") or "").split()) or "(no goal)"
    goal = goal if len(goal) <= n else goal[:n - 1] + "…"
    return f"{goal} · started {local_time(row.get('created') or '')} · {row.get('status')}"


def started_text(ws: Any, execution_id: str) -> str:
    """'started 4 Dec 20:15 (local time)' for an execution's heading, or 'not saved yet'."""
    try:
        row = ExecutionStore(ws).row(execution_id)
    except AOVError:
        return "not saved yet"
    return f"started {local_time(row.get('created') or '')}"


def edited_graph(graph: AOVGraph, edits: dict[str, dict[str, Any]]) -> AOVGraph:
    """``graph`` with the form's edits: per subtask id, its ``requirement``, ``agent`` and ``parents`` (what
    is not given stays). AOVError naming the subtask and field when the result is not a valid graph (an empty
    requirement, an unknown agent or parent, a cycle); completed work is checked where it is accepted."""
    doc = json.loads(graph.to_json())
    for sid, e in edits.items():
        rec = doc["subtasks"].get(sid)
        if rec is None:
            raise AOVError(f"subtask {sid!r} is not in the graph")
        if "requirement" in e:
            req = str(e["requirement"] or "").strip()
            if not req:
                raise AOVError(f"subtask {sid!r}: its requirement is empty")
            rec["subtask_requirement"] = req
        if "agent" in e:
            rec["agent"] = str(e["agent"])
        if "parents" in e:
            rec["parents"] = [str(p) for p in e["parents"]]
            rec.pop("child", None)
            rec.pop("num_parents_not_completed", None)
    for rec in doc["subtasks"].values():  # links are made from the parents alone: an edit never disagrees
        rec.pop("child", None)
        rec.pop("num_parents_not_completed", None)
    return AOVGraph.from_dict(doc)


def candidates_from_texts(named: Sequence[tuple[str, str]]) -> list[Labeled]:
    """One candidate per (label, AOV JSON text); an invalid text stays in the list with its error."""
    out: list[Labeled] = []
    for i, (label, text) in enumerate(named):
        try:
            g = AOVGraph.from_json(text)
            out.append(Labeled(label, Candidate(i, g, M.compute(g))))
        except AOVError as e:
            out.append(Labeled(label, Candidate(i, None, None, f"{label}: {e}")))
    return out


def candidates_state(cands: Sequence[Labeled]) -> list[dict[str, Any]]:
    """The candidates as JSON values (kept per browser, so a reload finds them): each one's label, graph (AOV
    JSON) or the error that dropped it, and what was fixed on reading."""
    return [{"label": c.label, "graph": c.candidate.graph.to_json() if c.candidate.graph is not None else None,
             "error": c.candidate.error, "repairs": list(c.candidate.repairs)} for c in cands]


def candidates_from_state(value: Any) -> list[Labeled]:
    """The candidates :func:`candidates_state` kept; an entry that no longer reads is left out."""
    out: list[Labeled] = []
    for i, d in enumerate(value if isinstance(value, list) else []):
        if not isinstance(d, dict) or not isinstance(d.get("label"), str):
            continue
        repairs = [str(r) for r in d.get("repairs") or [] if isinstance(r, str)]
        if isinstance(d.get("graph"), str):
            try:
                g = AOVGraph.from_json(d["graph"])
            except AOVError:
                continue
            out.append(Labeled(d["label"], Candidate(i, g, M.compute(g), repairs=repairs)))
        elif isinstance(d.get("error"), str):
            out.append(Labeled(d["label"], Candidate(i, None, None, d["error"])))
    return out


def rule_choice(cands: Sequence[Labeled]) -> int | None:
    """Index of the candidate the selection rule picks (None when no candidate is valid)."""
    order = M.rank([c.candidate.metrics for c in cands])
    return order[0] if order else None


def backends(agent_mode: str, llm_inspector: bool, llm_repairs: bool, llm: Any) -> tuple[Any, Any, Any]:
    """(agent, inspector, repair_llm) for the user's choices; the LLM ones need ``llm`` (not None)."""
    if agent_mode not in AGENT_MODES:
        raise ValueError(f"agent mode must be one of {AGENT_MODES}, not {agent_mode!r}")
    if llm is None and (agent_mode == "llm" or llm_inspector or llm_repairs):
        raise AOVError("no LLM endpoint is configured: use manual or echo agents and the rule inspector")
    agent = {"manual": lambda: ManualAgent({}), "echo": EchoAgent, "llm": lambda: LLMAgent(llm)}[agent_mode]()
    return agent, (LLMInspector(llm) if llm_inspector else RuleInspector()), (llm if llm_repairs else None)


def start(ws: Any, graph: AOVGraph, agent: Any, inspector: Any, repair_llm: Any = None, *,
          mode: str = "interactive", k: int = 3, max_repairs: int = 3, refine_llm: Any = None,
          refine_every: int = 3, max_refinements: int = 5, context_chars: int | None = None,
          choices: dict[str, Any] | None = None) -> Execution:
    """A new execution of ``graph``, saved in the workspace (every later step saves itself). ``choices``: the
    page's own settings (agents, inspector, ...), kept with it so that reopening it sets them again."""
    extra = {} if context_chars is None else {"context_chars": context_chars}
    ex = Execution(graph, agent, inspector, repair_llm=repair_llm, mode=mode, k=k, max_repairs=max_repairs,
                   refine_llm=refine_llm, refine_every=refine_every, max_refinements=max_refinements, **extra)
    ex.choices = dict(choices or {})
    save_execution(ws, ex)
    return ex


# ---- the event-driven run in the background ------------------------------------------------------------
# A Streamlit rerun re-executes the page, not this module: the live executions stay here, keyed by id, so a
# reload (or a second tab reopening the execution) finds the very object the run is changing.
_LIVE: dict[str, tuple[jobs.Job, Execution]] = {}
_LIVE_LOCK = threading.Lock()


def live(execution_id: str) -> tuple[jobs.Job, Execution] | None:
    """The running job and its execution, while the run goes on."""
    with _LIVE_LOCK:
        entry = _LIVE.get(execution_id)
    return entry if entry is not None and entry[0].snapshot().active else None


def wait(execution_id: str, timeout: float = 60) -> bool:
    """Wait for the latest background run of an execution (tests, scripts); True when it has ended."""
    with _LIVE_LOCK:
        entry = _LIVE.get(execution_id)
    return entry is None or entry[0].wait(timeout)


def run_in_background(ex: Execution) -> jobs.Job:
    """Run ``ex`` event-driven on a job's own thread and loop; it ends when done, paused for a decision, or
    stopped (``ex.request_stop()``)."""
    if (running := live(ex.id)) is not None:
        return running[0]
    job = jobs.Job(lambda ctx: ex.run(), name="aov", meta={"execution_id": ex.id}).start()
    with _LIVE_LOCK:
        _LIVE[ex.id] = (job, ex)
    return job


def flow_defaults(ws: Any) -> tuple[FlowSettings, str | None]:
    """The Flow settings (environment overlaid by the workspace) and a problem to show, if any."""
    try:
        return flow_settings.load(ws), None
    except ValueError as e:
        return FlowSettings(), str(e)


def initial_graph(ex: Execution) -> AOVGraph:
    """The graph the execution started from (for Reset)."""
    for e in ex.events:
        if e["kind"] == "start" and isinstance(e["payload"].get("graph"), dict):
            return AOVGraph.from_dict(e["payload"]["graph"])
    raise AOVError(f"execution {ex.id} has no start event")


def saved(ws: Any) -> list[dict[str, Any]]:
    return ExecutionStore(ws).list()


def missing_outputs(ex: Execution, outputs: dict[str, str]) -> list[str]:
    """Ready subtasks for which the user has typed nothing (manual mode)."""
    return [s for s in ex.graph.ready() if not (outputs.get(s) or "").strip()]


def preview(value: Any, n: int = PREVIEW) -> str:
    s = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _last_results(events: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for e in events:
        if e["kind"] == "result":
            out[e["payload"]["subtask"]] = e["payload"]
    return out


def state_rows(ex: Execution) -> list[dict[str, Any]]:
    """One row per subtask of the live graph; "ran as" is the agent instance of its last run (a clone id
    like ``coder#2`` when its agent was busy with another subtask)."""
    last = _last_results(list(ex.events))
    g = ex.graph  # the run may swap it for a repaired one meanwhile: read one graph
    return [{"id": sid, "requirement": st.subtask_requirement, "agent": st.agent,
             "ran as": last.get(sid, {}).get("agent", ""), "status": st.status,
             "parents": ", ".join(st.parents), "output": preview(st.data)}
            for sid, st in list(g.subtasks.items())]


def step_rows(events: list[dict]) -> list[dict[str, Any]]:
    """One row per step (of a lock-step run, or the step view of an event-driven one): its subtasks, clones
    made, failures, repairs and refinements."""
    rows: dict[int, dict[str, Any]] = {}
    for e in list(events):
        n, p = e["step"], e["payload"]
        if e["kind"] in ("step_start", "subtask_start"):
            row = rows.setdefault(n, {"step": n, "subtasks": "", "clones": "", "failed": "", "repairs": ""})
            for sid in p["subtasks"] if e["kind"] == "step_start" else [p["subtask"]]:
                if sid not in row["subtasks"].split(", "):
                    row["subtasks"] = _join(row["subtasks"], sid, ", ")
        elif n in rows or e["kind"] in ("refine", "reject"):
            row = rows.setdefault(n, {"step": n, "subtasks": "", "clones": "", "failed": "", "repairs": ""})
            if e["kind"] == "clone":
                row["clones"] = _join(row["clones"], f"{p['clone']} for {p['subtask']}")
            elif e["kind"] == "result" and not p["verdict"]["passed"]:
                row["failed"] = _join(row["failed"], p["subtask"])
            elif e["kind"] == "repair":
                row["repairs"] = _join(row["repairs"], f"{p['how']}: {p['summary']}")
            elif e["kind"] == "reject":
                what = f"the proposals for {p['subtask']}" if p.get("subtask") else "the refinement"
                row["repairs"] = _join(row["repairs"], f"rejected {what}")
            elif e["kind"] == "give_up":
                row["repairs"] = _join(row["repairs"], f"gave up on {p['subtask']} ({p['reason']})")
            elif e["kind"] == "refine":
                row["repairs"] = _join(row["repairs"], f"refinement {p['number']} ({p['how']}): {p['summary']}")
    return [rows[n] for n in sorted(rows)]


def _join(a: str, b: str, sep: str = "; ") -> str:
    return f"{a}{sep}{b}" if a else b


def spans(events: list[dict], now: float | None = None) -> list[dict[str, Any]]:
    """Every run of a subtask as [start, end] seconds from the first start (end: now while it runs)."""
    out: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    t0 = None
    for e in list(events):
        p = e["payload"]
        if e["kind"] in ("subtask_start", "step_start") and "t" in p:
            t0 = p["t"] if t0 is None else t0
            pairs = [(p["subtask"], p["agent"])] if e["kind"] == "subtask_start" else list(p["agents"].items())
            for sid, inst in pairs:
                open_[sid] = {"subtask": sid, "agent": inst, "step": e["step"], "start": p["t"] - t0,
                              "end": None, "status": "running"}
                out.append(open_[sid])
        elif e["kind"] == "result" and p["subtask"] in open_ and t0 is not None:
            span = open_.pop(p["subtask"])
            span["end"] = p.get("t", t0) - t0
            span["status"] = "completed" if p["verdict"]["passed"] else "failed"
    end_now = (now or time.time()) - (t0 or 0.0)
    for span in out:
        if span["end"] is None:
            span["end"] = max(span["start"], end_now)
    return out


def timeline(events: list[dict], running: Sequence[str] = (), now: float | None = None) -> Any:
    """A Gantt chart of the runs (plotly): subtasks that overlap ran at the same time."""
    import plotly.graph_objects as go

    from flowcore.aov.render import CLASS_STYLES

    rows = [r for r in spans(events, now) if r["status"] != "running" or r["subtask"] in running]
    colour = {k: v.split(",")[0].split(":")[1] for k, v in CLASS_STYLES.items()}
    edge = {k: v.split(",")[1].split(":")[1] for k, v in CLASS_STYLES.items()}
    fig = go.Figure()
    for status in ("completed", "failed", "running"):
        mine = [r for r in rows if r["status"] == status]
        if mine:
            fig.add_bar(y=[r["subtask"] for r in mine], x=[max(r["end"] - r["start"], 0.02) for r in mine],
                        base=[r["start"] for r in mine], orientation="h", name=status,
                        marker={"color": colour[status], "line": {"color": edge[status], "width": 1}},
                        customdata=[[r["agent"], r["step"]] for r in mine],
                        hovertemplate="%{y} (%{customdata[0]}, step %{customdata[1]}): %{base:.1f}-"
                                      "%{x:.1f} s<extra></extra>")
    order = list(dict.fromkeys(r["subtask"] for r in sorted(rows, key=lambda r: r["start"])))
    fig.update_layout(height=110 + 24 * max(len(order), 1), margin={"l": 10, "r": 10, "t": 40, "b": 40},
                      barmode="overlay", xaxis_title="seconds since the first start",  # the legend above, clear of ticks
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                      yaxis={"categoryorder": "array", "categoryarray": order[::-1]})
    return fig


def verdict_rows(events: list[dict]) -> list[dict[str, Any]]:
    return [{"step": e["step"], "subtask": e["payload"]["subtask"], "agent": e["payload"]["agent"],
             "attempt": e["payload"]["attempt"], "passed": e["payload"]["verdict"]["passed"],
             "reason": e["payload"]["verdict"]["reason"], "by": e["payload"]["verdict"]["source"],
             "output": preview(e["payload"]["output"])} for e in events if e["kind"] == "result"]


def events_jsonl(events: list[dict]) -> str:
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events)


def changed(p: Proposal) -> list[str]:
    """Subtasks a proposal adds or changes (outlined in its diagram)."""
    return list(dict.fromkeys(p.diff.added + list(p.diff.changed)))


def accept_edited(ex: Execution, index: int, text: str) -> None:
    """Accept proposal ``index`` as edited by the user; AOVError (naming the problem) when the text is not
    a valid AOV graph or changes completed work."""
    ex.accept(index, edited_graph=AOVGraph.from_json(text))


FORM_FIELDS = ("req", "agent", "parents")


def form_key(prefix: str, fld: str, sid: str) -> str:
    """The page's widget key of one field of one subtask in a proposal's edit form."""
    return f"{prefix}_{fld}_{sid}"


def form_edits(state: MutableMapping[str, Any], prefix: str, graph: AOVGraph) -> dict[str, dict[str, Any]]:
    """What the edit form holds for each subtask that is not completed (completed work is not edited)."""
    out: dict[str, dict[str, Any]] = {}
    for sid, st in graph.subtasks.items():
        if st.status == "completed":
            continue
        e = {}
        for fld, name in (("req", "requirement"), ("agent", "agent"), ("parents", "parents")):
            key = form_key(prefix, fld, sid)
            if key in state:
                e[name] = state[key]
        if e:
            out[sid] = e
    return out


FIELD_WORDS = {"subtask_requirement": "requirement", "data": "output", "num_parents_not_completed": "parents not done"}


def diff_lines(p: Proposal, n: int = 400) -> list[str]:
    """The proposal's diff for people: like ``Diff.lines`` but a changed requirement is shown in full on
    old/new lines (a rule edit appends its note at the end, which an 80-character cut would hide), and each
    field by its name in words ('win · output', not 'win.data')."""
    d, new = p.diff, p.graph
    out = [f"+ subtask {s} ({new.subtasks[s].agent}): {new.subtasks[s].subtask_requirement}"
           for s in d.added if s in new.subtasks]
    out += [f"- subtask {s}" for s in d.removed]
    for sid, fields in d.changed.items():
        for f, (a, b) in fields.items():
            name = FIELD_WORDS.get(f, f.replace("_", " "))
            if f == "subtask_requirement":
                out += [f"~ {sid} · {name}", f"    - {preview(a, n)}", f"    + {preview(b, n)}"]
            else:
                was, now = (preview(v, 60) or "(empty)" for v in (a, b))
                out.append(f"~ {sid} · {name}: {was} → {now}")
    out += [f"+ edge {a} → {b}" for a, b in d.added_edges]
    out += [f"- edge {a} → {b}" for a, b in d.removed_edges]
    return out


def named_texts(example_names: Sequence[str], uploads: Sequence[tuple[str, bytes]] = (),
                pasted: str = "") -> list[tuple[str, str]]:
    """(label, text) for the chosen examples, uploaded files and a pasted document, in that order."""
    out = [(n, example_text(n)) for n in example_names]
    out += [(name, data.decode("utf-8", "replace")) for name, data in uploads]
    return out + ([("pasted JSON", pasted)] if pasted.strip() else [])


def metric_cards(m: M.Metrics) -> list[tuple[str, str, str]]:
    """(label, value, one-line explanation) for each metric of a graph, as the page shows them on hover; the
    papers' symbols only inside the explanation. The rule picks the highest parallelism, then the lowest spread."""
    return [("Parallelism", f"{m.P_avg:.2f}", "How many subtasks can run at the same time, on average over the "
             "steps; higher finishes sooner (the paper's P_avg). The rule picks the highest."),
            ("Dependency spread", f"{m.C_dependency:.2f}", "How unevenly the links are shared among the subtasks; "
             "lower means fewer bottlenecks (C_dependency). It breaks a tie in parallelism."),
            ("Steps", f"{m.T:,}", "Rounds of waiting the graph needs: the subtasks of one step run together.")]


def md(text: Any) -> str:
    """Plain text for Markdown: no emphasis, links, images or HTML from graph or model text."""
    return safe.plain(text)


def task_titles() -> dict[str, str]:
    """The task set for the page: id -> "title (kind)"."""
    from flowcore.aov.tasks import load_tasks
    return {t.id: f"{t.title} ({t.kind})" for t in load_tasks()}


def task_of(ex: Execution) -> Any:
    """The task of the task set this execution works on (its goal is the task's), or None."""
    from flowcore.aov.tasks import load_tasks
    goal = ex.graph.goal.strip()
    return next((t for t in load_tasks() if goal in (t.prompt_goal.strip(), t.goal.strip())), None)


def acceptance_rows(ex: Execution) -> tuple[bool, list[dict[str, Any]]]:
    """The task's acceptance checks, run in the sandbox on the files the completed subtasks delivered."""
    from flowcore.aov.tasks import accept, files_from
    t = task_of(ex)
    if t is None:
        raise AOVError("this execution is not on a task of the task set")
    files = files_from(ex.graph)
    acc = accept(t, files)
    return acc.passed, [{"check": c.check, "passed": c.passed, "detail": c.detail} for c in acc.checks]


def decision_text(ex: Execution) -> str:
    """What the decision awaited first is about, in Markdown."""
    rs = ex.pending_failure
    if rs is None:
        return ""
    if rs.kind == "refine":
        return (f"**Periodic refinement:** {md(rs.reason)}. The not-yet-started part of the plan can be "
                "updated (completed work is kept as it is). Accept an update (best first by the rule), edit "
                "one, or reject them all to keep the plan.")
    return (f"**Subtask {safe.code(rs.failed)} failed:** {md(rs.reason)}. Accept a repair (best first by the rule), edit "
            "one, or reject them all.")


def decision_token(ex: Execution) -> str:
    """Which decision is awaited first: its kind, its subtask and how many decisions were taken before it. A
    button drawn for one decision must not apply its proposal number to the next one (a double click, a
    second tab that already decided)."""
    rs = ex.pending_failure
    if rs is None:
        return ""
    taken = sum(1 for e in list(ex.events) if e["kind"] in ("reject", "resolved") or (
        e["kind"] in ("repair", "refine") and e["payload"].get("how") in ("accepted", "edited")))
    return f"{rs.kind}:{rs.failed}:{taken}"


def running_text(ex: Execution) -> str:
    """"Running now: b (coder), c (coder#2) · 1.2 s" for the live view."""
    now, started = time.time(), {}
    for e in list(ex.events):
        if e["kind"] == "subtask_start":
            started[e["payload"]["subtask"]] = (e["payload"]["agent"], e["payload"]["t"])
    run = [f"{safe.code(sid)} ({md(started[sid][0])}, {now - started[sid][1]:.1f} s)" for sid in ex.running_now()
           if sid in started]
    return "Running now: " + (", ".join(run) if run else "nothing (finishing)")


# ---- the page's actions ------------------------------------------------------------------------------
class Actions:
    """The AOV page's button actions on its key-value state (Streamlit's session state; a dict in tests).

    Keys read: aov_agents, aov_inspector, aov_repairs, aov_refine (``llm``/``rules``/``off``), aov_mode, aov_k,
    aov_max_repairs, aov_refine_every, aov_max_refinements, aov_example_set, aov_upload, aov_paste, aov_task,
    aov_gen_k and the manual output boxes (``out_key``). Keys written: aov_cands, aov_gen, aov_ex,
    aov_running (the user asked to run to the end: a decision taken resumes the run) and aov_flash
    (kind, message), the outcome to show. ``llm`` returns the configured client or None."""

    def __init__(self, state: MutableMapping[str, Any], ws: Any, llm: Callable[[], Any]) -> None:
        self.s, self.ws, self.llm = state, ws, llm
        self.flow, problem = flow_defaults(ws)
        if problem:
            self.flash("warning", problem)
        f = self.flow  # the number boxes' first values (set here, not by the widgets: reopening sets them)
        for key, value in (("aov_k", min(f.k, f.k_max)), ("aov_max_repairs", 3),
                           ("aov_refine_every", max(f.refine_every, 1)), ("aov_max_refinements", f.max_refinements)):
            state.setdefault(key, value)
        if isinstance(state.get("aov_k"), int) and state["aov_k"] > f.k_max:  # K max lowered since
            state["aov_k"] = f.k_max

    def open_remembered(self, browser: str | None) -> None:
        """A new session of this browser (a reload): reopen the execution it had open. Once per session."""
        if self.s.get("aov_ex") is not None or self.s.get("aov_restored") or not browser:
            return
        self.s["aov_restored"] = True
        if eid := open_of(self.ws, browser):
            self.reopen(eid)

    def remember(self, browser: str | None) -> None:
        """After each run of the page: the execution open here is the one a reload of this browser reopens."""
        ex = self.s.get("aov_ex")
        if ex is not None and browser and self.s.get("aov_remembered") != (browser, ex.id):
            remember_open(self.ws, browser, ex.id)
            self.s["aov_remembered"] = (browser, ex.id)

    def _adopt(self, ex: Execution) -> None:
        """The settings the execution ran with onto the page's widgets (only before they are drawn: from a
        callback or before the layout)."""
        configured = self.llm() is not None
        for key, value in ex.choices.items():
            if key in CHOICE_KEYS and isinstance(value, str) and (value != "llm" or configured):
                self.s[key] = value
        self.s["aov_mode"] = ex.mode
        self.s["aov_k"] = min(max(ex.k, 1), self.flow.k_max)
        self.s["aov_max_repairs"] = min(max(ex.max_repairs, 0), 10)
        if ex.refine_every >= 1:
            self.s["aov_refine_every"] = min(ex.refine_every, 100)
        self.s["aov_max_refinements"] = min(max(ex.max_refinements, 0), 50)

    def _choices(self) -> dict[str, Any]:
        return {k: self.s[k] for k in CHOICE_KEYS if isinstance(self.s.get(k), str)}

    def flash(self, kind: str, message: str) -> None:
        self.s["aov_flash"] = (kind, message)

    @staticmethod
    def out_key(ex: Execution, sid: str) -> str:  # a fresh box for every attempt of a subtask
        return f"aov_out_{ex.id}_{sid}_{ex.attempts.get(sid, 0)}"

    def choices(self) -> tuple[Any, Any, Any]:
        """(agent, inspector, repair_llm) for the settings; before they are drawn, the radios' defaults."""
        client, s = self.llm(), self.s
        first = "llm" if client else "rules"
        return backends(s.get("aov_agents", "llm" if client else "manual"),
                        s.get("aov_inspector", first) == "llm", s.get("aov_repairs", first) == "llm", client)

    def refine_llm(self) -> Any:
        """The client for periodic refinement (it needs an LLM), or None when off or unconfigured."""
        client = self.llm()
        return client if client is not None and self.s.get("aov_refine", "llm") == "llm" else None

    def numbers(self) -> dict[str, Any]:
        f = self.flow
        return {"mode": self.s.get("aov_mode", "interactive"), "k": min(int(self.s.get("aov_k", f.k)), f.k_max),
                "max_repairs": int(self.s.get("aov_max_repairs", 3)),
                "refine_every": int(self.s.get("aov_refine_every", f.refine_every)),
                "max_refinements": int(self.s.get("aov_max_refinements", f.max_refinements))}

    def _configure(self, ex: Execution) -> None:
        """The current settings onto an execution (they may change between runs)."""
        ex.agent, ex.inspector, ex.repair_llm = self.choices()
        n = self.numbers()
        ex.mode, ex.k, ex.max_repairs = n["mode"], n["k"], n["max_repairs"]
        ex.refine_llm, ex.refine_every, ex.max_refinements = (self.refine_llm(), n["refine_every"],
                                                              n["max_refinements"])
        ex.context_chars = self.flow.context_chars
        ex.choices = self._choices()

    def _set_candidates(self, cands: list[Labeled]) -> None:
        self.s["aov_cands"], self.s["aov_gen"] = cands, self.s.get("aov_gen", 0) + 1

    def use_files(self) -> None:
        uploads = [(f.name, f.getvalue()) for f in self.s.get("aov_upload") or []]
        chosen = example_sets().get(self.s.get("aov_example_set") or "", [])
        named = named_texts(chosen, uploads, self.s.get("aov_paste") or "")
        if not named:
            return self.flash("warning", "Choose an example, upload a file or paste AOV JSON first.")
        cands = candidates_from_texts(named)
        self._set_candidates(cands)
        if mixed_goals(cands):
            self.flash("warning", "These candidates are plans for different goals: the rule ranks them against "
                       "each other all the same. Use one example set, or files for one task.")

    def generate(self) -> None:
        task, client = (self.s.get("aov_task") or "").strip(), self.llm()
        if client is None:
            return self.flash("warning", "No LLM endpoint is configured: candidates cannot be generated.")
        if not task:
            return self.flash("warning", "Describe the task first.")
        k = min(int(self.s.get("aov_gen_k", self.flow.k)), self.flow.k_max)
        got = run_sync(generate_candidates(client, task, k=k))  # K calls at once
        self._set_candidates([Labeled(f"LLM candidate {c.index + 1}", c) for c in got])

    def use_task(self) -> None:
        """The chosen task of the task set becomes the text to generate candidate plans for."""
        from flowcore.aov.tasks import task
        if tid := self.s.get("aov_taskset"):
            self.s["aov_task"] = task(tid).prompt_goal

    def check_acceptance(self) -> None:
        ex: Execution = self.s["aov_ex"]
        try:
            self.s[f"aov_acc_{ex.id}"] = acceptance_rows(ex)
        except (AOVError, RuntimeError) as e:  # SandboxUnavailable is a RuntimeError: nothing was run
            self.flash("error", f"The acceptance checks did not run: {e}")

    def save_flow(self, values: dict[str, int]) -> None:
        try:
            new = FlowSettings.from_dict(values)
        except ValueError as e:
            return self.flash("error", f"Not saved: {e}")
        flow_settings.save(self.ws, new)
        self.flow = new
        self.flash("success", "Flow settings saved in the workspace.")

    def start(self, graph: AOVGraph, note: str = "") -> None:
        try:
            self.s["aov_ex"] = start(self.ws, graph, *self.choices(), refine_llm=self.refine_llm(),
                                     context_chars=self.flow.context_chars, choices=self._choices(),
                                     **self.numbers())
        except AOVError as e:
            return self.flash("error", f"Cannot start: {e}")
        self.s["aov_running"] = False
        if note:
            self.flash("info", note)

    def reset(self) -> None:
        old = self.s["aov_ex"]
        if live(old.id):
            old.request_stop()
        self.start(initial_graph(old), f"Started over as a new execution; the {self._named(old)} stays saved.")

    def _named(self, ex: Execution) -> str:
        """An execution as people name it: its goal and when it started (local time), not its id."""
        goal = " ".join(ex.graph.goal.split()) or "(no goal)"
        return f"execution “{goal[:60] + '…' * (len(goal) > 60)}” ({started_text(self.ws, ex.id)})"

    def reopen(self, eid: str) -> None:
        if (running := live(eid)) is not None:  # still running in this server: the very same object
            self.s["aov_ex"], self.s["aov_running"] = running[1], True
            self._adopt(running[1])
            return self.flash("info", f"The {self._named(running[1])} is running: its live view is below.")
        try:
            ex = load_execution(self.ws, eid)
            self._adopt(ex)  # the agents, inspector, ... it ran with, then those backends
            ex.agent, ex.inspector, ex.repair_llm = self.choices()
            ex.refine_llm = self.refine_llm()
        except AOVError as e:
            return self.flash("error", f"Cannot reopen: {e}")
        self.s["aov_ex"], self.s["aov_running"] = ex, False
        self.flash("info", f"Reopened the {self._named(ex)}: it continues where it stopped.")

    def sync(self) -> None:
        """The execution as the workspace has it: another tab, window or process may have stepped it or taken
        a decision since this session read it (a run going on in this server is that very object)."""
        ex = self.s.get("aov_ex")
        if ex is None:
            return
        if (running := live(ex.id)) is not None:
            if running[1] is not ex:
                self.s["aov_ex"], self.s["aov_running"] = running[1], True
            return
        try:
            if ExecutionStore(self.ws).last_seq(ex.id) == ex.saved_seq:
                return
            self.s["aov_ex"] = load_execution(self.ws, ex.id, *self.choices(), refine_llm=self.refine_llm())
        except AOVError as e:
            return self.flash("error", f"Cannot reload the {self._named(ex)}: {e}")
        self.s["aov_running"] = False
        self.flash("info", f"The {self._named(self.s['aov_ex'])} was changed in another tab, window or process: "
                           "this is its current state.")

    def _fresh(self) -> bool:
        """False (the current state loaded and said) when this session's copy was out of date."""
        before = self.s.get("aov_ex")
        self.sync()
        return self.s.get("aov_ex") is before

    def step(self) -> bool:
        """One lock-step step with the current settings (manual mode: the typed outputs); False when nothing
        ran."""
        if not self._fresh():
            return False
        ex: Execution = self.s["aov_ex"]
        try:
            self._configure(ex)
            outputs = None
            if self.s.get("aov_agents") == "manual":
                outputs = {sid: self.s.get(self.out_key(ex, sid)) or "" for sid in ex.graph.ready()}
                if missing := missing_outputs(ex, outputs):
                    self.flash("warning", f"Type the output of {', '.join(missing)} first (manual mode).")
                    return False
            return run_sync(ex.step(outputs)) is not None
        except AOVError as e:
            self.flash("error", str(e))
            return False

    def run_to_end(self) -> None:
        """Event-driven in the background: every subtask starts when its last parent completes."""
        if not self._fresh():
            return
        ex: Execution = self.s["aov_ex"]
        try:
            self._configure(ex)
        except AOVError as e:
            return self.flash("error", str(e))
        self.s["aov_running"] = True
        run_in_background(ex)

    def job(self) -> jobs.Job | None:
        ex = self.s.get("aov_ex")
        running = live(ex.id) if ex is not None else None
        return running[0] if running else None

    def settle(self) -> None:
        """After the background run ended: say why, and forget "running" unless a decision interrupted it."""
        ex = self.s.get("aov_ex")
        if ex is None or not self.s.get("aov_running") or self.job() is not None:
            return
        if ex.done or ex.status != "paused":
            self.s["aov_running"] = False
        with _LIVE_LOCK:
            entry = _LIVE.pop(ex.id, None)
        if entry is not None and entry[0].error:
            self.s["aov_running"] = False
            self.flash("error", f"The run stopped: {entry[0].error}")

    def pause(self) -> None:
        ex: Execution = self.s["aov_ex"]
        self.s["aov_running"] = False
        ex.request_stop()
        self.flash("info", "Pausing: no new subtask starts; the running ones finish. Step or run on when you like.")

    def _after_decision(self) -> None:
        ex: Execution = self.s["aov_ex"]
        refine_waits = bool(ex.queue) and ex.queue[0].kind == "refine"
        if (job := self.job()) is not None and not ex.loop_running:
            job.wait(30)  # the run was ending when the decision came: it goes on in a new run, below
        if self.s.get("aov_running") and not ex.done and self.job() is None and not refine_waits:
            run_in_background(ex)  # the user had asked to run to the end

    def _stale(self, token: str | None) -> bool:
        """True (and said) when the decision the button was drawn for is no longer the one awaited."""
        self.sync()
        ex: Execution = self.s["aov_ex"]
        if token is None or token == decision_token(ex):
            return False
        now = ex.pending_failure
        what = ("nothing is awaited now" if now is None else f"the decision awaited now is about "
                f"{'a refinement' if now.kind == 'refine' else repr(now.failed)}: read its proposals first")
        self.flash("warning", f"That decision was already taken (here or in another tab); nothing was applied: "
                              f"{what}.")
        return True

    def accept(self, i: int, edit_key: str | None = None, token: str | None = None) -> None:
        if self._stale(token):
            return
        ex: Execution = self.s["aov_ex"]
        kind = ex.pending_failure.kind if ex.pending_failure else "repair"
        try:
            if edit_key is None:
                ex.accept(i)
            else:  # the proposal's edit form (its widgets are keyed by edit_key): the graph with those edits
                base = ex.pending_failure.proposals[i].graph if ex.pending_failure else ex.graph
                ex.accept(i, edited_graph=edited_graph(base, form_edits(self.s, edit_key, base)))
        except ExecutionConflict as e:
            self.sync()
            return self.flash("warning", f"Not applied: {e}")
        except AOVError as e:
            return self.flash("error", f"The edited graph was refused: {e}" if edit_key else f"Not applied: {e}")
        what = "Refinement" if kind == "refine" else "Repair"
        self.flash("success", f"{what} {'edited and ' if edit_key else ''}accepted; the execution goes on.")
        self._after_decision()

    def reject(self, token: str | None = None) -> None:
        if self._stale(token):
            return
        ex: Execution = self.s["aov_ex"]
        kind = ex.pending_failure.kind if ex.pending_failure else "repair"
        try:
            ex.reject()
        except ExecutionConflict as e:
            self.sync()
            return self.flash("warning", f"Not rejected: {e}")
        except AOVError as e:
            return self.flash("error", f"Not rejected: {e}")
        self.flash("warning", "Updates rejected: the plan stays as it is." if kind == "refine" else
                   "Proposals rejected: the subtask stays failed; the subtasks that do not need it go on.")
        self._after_decision()
