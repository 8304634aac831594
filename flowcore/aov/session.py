"""What the AOV execution page needs that is not layout: candidates from files, backends from the user's
choices, and the execution's state, steps and verdicts as table rows. No Streamlit here."""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import metrics as M
from .execute import EchoAgent, Execution, LLMAgent, ManualAgent, run_sync
from .generate import Candidate, generate_candidates
from .inspector import LLMInspector, RuleInspector
from .model import AOVError, AOVGraph
from .repair import Proposal
from .store import ExecutionStore, load_execution, save_execution

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "assets" / "aov"
AGENT_MODES = ("manual", "echo", "llm")  # who produces a subtask's output
PREVIEW = 80


@dataclass
class Labeled:
    """A candidate graph and where it came from (an example, a file, the LLM)."""

    label: str
    candidate: Candidate


def examples() -> list[str]:
    return sorted(p.name for p in EXAMPLES_DIR.glob("*.json"))


def example_text(name: str) -> str:
    if name not in examples():
        raise AOVError(f"no example named {name!r} in {EXAMPLES_DIR}")
    return (EXAMPLES_DIR / name).read_text(encoding="utf-8")


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
          mode: str = "interactive", k: int = 3, max_repairs: int = 3) -> Execution:
    """A new execution of ``graph``, saved in the workspace (every later step saves itself)."""
    ex = Execution(graph, agent, inspector, repair_llm=repair_llm, mode=mode, k=k, max_repairs=max_repairs)
    save_execution(ws, ex)
    return ex


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
    like ``coder#2`` when it shared its agent with another subtask of that step)."""
    last = _last_results(ex.events)
    return [{"id": sid, "requirement": st.subtask_requirement, "agent": st.agent,
             "ran as": last.get(sid, {}).get("agent", ""), "status": st.status,
             "parents": ", ".join(st.parents), "data": preview(st.data)}
            for sid, st in ex.graph.subtasks.items()]


def step_rows(events: list[dict]) -> list[dict[str, Any]]:
    """One row per step: the subtasks run concurrently, clones made, failures and repairs."""
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        n, p = e["step"], e["payload"]
        if e["kind"] == "step_start":
            rows[n] = {"step": n, "ran concurrently": ", ".join(p["subtasks"]), "clones": "", "failed": "",
                       "repairs": ""}
        elif n in rows:
            row = rows[n]
            if e["kind"] == "clone":
                row["clones"] = _join(row["clones"], f"{p['clone']} for {p['subtask']}")
            elif e["kind"] == "result" and not p["verdict"]["passed"]:
                row["failed"] = _join(row["failed"], p["subtask"])
            elif e["kind"] == "repair":
                row["repairs"] = _join(row["repairs"], f"{p['how']}: {p['summary']}")
            elif e["kind"] == "reject":
                row["repairs"] = _join(row["repairs"], f"rejected the proposals for {p['subtask']}")
            elif e["kind"] == "give_up":
                row["repairs"] = _join(row["repairs"], f"gave up on {p['subtask']} ({p['reason']})")
    return list(rows.values())


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


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


def diff_lines(p: Proposal, n: int = 400) -> list[str]:
    """The proposal's diff for people: like ``Diff.lines`` but a changed requirement is shown in full on
    old/new lines (a rule edit appends its note at the end, which an 80-character cut would hide)."""
    d, new = p.diff, p.graph
    out = [f"+ subtask {s} ({new.subtasks[s].agent}): {new.subtasks[s].subtask_requirement}"
           for s in d.added if s in new.subtasks]
    out += [f"- subtask {s}" for s in d.removed]
    for sid, fields in d.changed.items():
        for f, (a, b) in fields.items():
            if f == "subtask_requirement":
                out += [f"~ {sid}.{f}", f"    - {preview(a, n)}", f"    + {preview(b, n)}"]
            else:
                out.append(f"~ {sid}.{f}: {preview(a, 60)!r} -> {preview(b, 60)!r}")
    out += [f"+ edge {a} -> {b}" for a, b in d.added_edges]
    out += [f"- edge {a} -> {b}" for a, b in d.removed_edges]
    return out


def named_texts(example_names: Sequence[str], uploads: Sequence[tuple[str, bytes]] = (),
                pasted: str = "") -> list[tuple[str, str]]:
    """(label, text) for the chosen examples, uploaded files and a pasted document, in that order."""
    out = [(n, example_text(n)) for n in example_names]
    out += [(name, data.decode("utf-8", "replace")) for name, data in uploads]
    return out + ([("pasted JSON", pasted)] if pasted.strip() else [])


def metrics_text(m: M.Metrics) -> str:
    """The metrics as one Markdown line."""
    return f"P_avg **{m.P_avg:.2f}** · C_dependency **{m.C_dependency:.2f}** · T **{m.T}** steps"


def md(text: Any) -> str:
    """Plain text for Markdown: no emphasis, links or HTML from graph or model text."""
    return "".join("\\" + c if c in "\\`*_[]<>$~#|" else c for c in str(text))


# ---- the page's actions ------------------------------------------------------------------------------
class Actions:
    """The AOV page's button actions on its key-value state (Streamlit's session state; a dict in tests).

    Keys read: aov_agents, aov_inspector, aov_repairs (``llm``/``rules``), aov_mode, aov_k, aov_max_repairs,
    aov_examples, aov_upload, aov_paste, aov_task, aov_gen_k, aov_max_steps and the manual output
    boxes (``out_key``). Keys written: aov_cands, aov_gen, aov_ex, aov_running, aov_left and aov_flash
    (kind, message), the outcome to show. ``llm`` returns the configured client or None."""

    def __init__(self, state: MutableMapping[str, Any], ws: Any, llm: Callable[[], Any]) -> None:
        self.s, self.ws, self.llm = state, ws, llm

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

    def numbers(self) -> dict[str, Any]:
        return {"mode": self.s.get("aov_mode", "interactive"), "k": int(self.s.get("aov_k", 3)),
                "max_repairs": int(self.s.get("aov_max_repairs", 3))}

    def _set_candidates(self, cands: list[Labeled]) -> None:
        self.s["aov_cands"], self.s["aov_gen"] = cands, self.s.get("aov_gen", 0) + 1

    def use_files(self) -> None:
        uploads = [(f.name, f.getvalue()) for f in self.s.get("aov_upload") or []]
        named = named_texts(self.s.get("aov_examples") or [], uploads, self.s.get("aov_paste") or "")
        if not named:
            return self.flash("warning", "Choose an example, upload a file or paste AOV JSON first.")
        self._set_candidates(candidates_from_texts(named))

    def generate(self) -> None:
        task, client = (self.s.get("aov_task") or "").strip(), self.llm()
        if client is None:
            return self.flash("warning", "No LLM endpoint is configured: candidates cannot be generated.")
        if not task:
            return self.flash("warning", "Describe the task first.")
        got = run_sync(generate_candidates(client, task, k=int(self.s.get("aov_gen_k", 3))))
        self._set_candidates([Labeled(f"LLM candidate {c.index + 1}", c) for c in got])

    def start(self, graph: AOVGraph, note: str = "") -> None:
        try:
            self.s["aov_ex"] = start(self.ws, graph, *self.choices(), **self.numbers())
        except AOVError as e:
            return self.flash("error", f"Cannot start: {e}")
        self.s["aov_running"] = False
        if note:
            self.flash("info", note.format(self.s["aov_ex"].id))

    def reset(self) -> None:
        old = self.s["aov_ex"]
        self.start(initial_graph(old), f"Started over as execution {{}} (execution {old.id} stays saved).")

    def reopen(self, eid: str) -> None:
        try:
            self.s["aov_ex"] = load_execution(self.ws, eid, *self.choices())
        except AOVError as e:
            return self.flash("error", f"Cannot reopen: {e}")
        self.s["aov_running"] = False
        self.flash("info", f"Reopened execution {eid}: it continues where it stopped.")

    def step(self) -> bool:
        """One step with the current settings (manual mode: the typed outputs); False when nothing ran."""
        ex: Execution = self.s["aov_ex"]
        try:
            ex.agent, ex.inspector, ex.repair_llm = self.choices()
            ex.mode, ex.k, ex.max_repairs = self.numbers().values()
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
        self.s["aov_running"], self.s["aov_left"] = True, int(self.s.get("aov_max_steps", 20))

    def tick(self) -> None:
        """While running to the end: one step per call, until done, a decision is needed, or the max."""
        ex = self.s.get("aov_ex")
        if not self.s.get("aov_running") or ex is None:
            return
        if ex.done or ex.status == "paused" or self.s.get("aov_left", 0) <= 0 or not self.step():
            self.s["aov_running"] = False
        self.s["aov_left"] = self.s.get("aov_left", 0) - 1

    def pause(self) -> None:
        self.s["aov_running"] = False
        self.flash("info", f"Paused after step {self.s['aov_ex'].step_index}. Step or run on when you like.")

    def accept(self, i: int, edit_key: str | None = None) -> None:
        ex: Execution = self.s["aov_ex"]
        try:
            ex.accept(i) if edit_key is None else accept_edited(ex, i, self.s.get(edit_key) or "")
        except AOVError as e:
            return self.flash("error", f"The edited graph was refused: {e}")
        self.flash("success", f"Repair {'edited and ' if edit_key else ''}accepted; the execution goes on.")

    def reject(self) -> None:
        self.s["aov_ex"].reject()
        self.flash("warning", "Proposals rejected: the subtask stays failed; the subtasks that do not need "
                              "it go on.")
