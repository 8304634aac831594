"""Step-by-step execution of an AOV graph with agent cloning, the inspector and localized repairs.

A step runs every ready subtask (pending, all parents completed) concurrently. When two subtasks of one step
need the same agent, the second gets a clone (``coder#2``), recorded in the log. Each result is inspected; a
failure yields up to K repair proposals. In ``auto`` mode the best one is applied (at most ``max_repairs``
per subtask, then the subtask stays failed). In ``interactive`` mode the execution pauses with
``pending_proposals`` until ``accept(i, edited_graph=None)`` or ``reject()``. A rejected (or given-up)
subtask stays failed: the execution goes on with the subtasks that do not depend on it and ends ``failed``.
"""

from __future__ import annotations

import asyncio
import inspect as _inspect
import uuid
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from . import metrics as M
from .inspector import Inspector, RuleInspector, Verdict
from .model import AOVError, AOVGraph, Subtask
from .repair import (
    Op,
    Proposal,
    RepairSet,
    check_completed_kept,
    diff,
    propose_repairs,
    rule_ops,
)

MODES = ("auto", "interactive")
T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from synchronous code (CLI, pages), even where this thread already runs an event
    loop (Playwright's sync API, notebooks): then it runs on a worker thread with a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# ---- agents -------------------------------------------------------------------------------------
class AgentBackend(Protocol):
    async def run(self, graph: AOVGraph, subtask: Subtask, agent_id: str, attempt: int) -> str: ...


class MissingOutput(LookupError):
    """Manual mode: no output was supplied for a subtask."""


def build_prompt(graph: AOVGraph, subtask: Subtask, agent_id: str) -> list[dict[str, str]]:
    role = graph.agent(subtask.agent).role
    system = (f"You are agent {agent_id}, whose role is: {role}. You work in a team on this goal: "
              f"{graph.goal}\nDo only your own subtask and reply with its result.")
    parts = [f"Your subtask ({subtask.id}): {subtask.subtask_requirement}"]
    for p in subtask.parents:
        ps = graph.subtasks[p]
        parts.append(f"### Result of {p} ({ps.subtask_requirement})\n{ps.data}")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


class LLMAgent:
    def __init__(self, llm: Any, temperature: float = 0.0) -> None:
        self.llm, self.temperature = llm, temperature

    async def run(self, graph: AOVGraph, subtask: Subtask, agent_id: str, attempt: int) -> str:
        # The attempt number salts the cache: a rerun must not replay a cached failure.
        reply = await self.llm.chat(build_prompt(graph, subtask, agent_id), role="executor",
                                    temperature=self.temperature, cache_salt=f"{subtask.id}:{attempt}")
        return reply.text


class ManualAgent:
    """Outputs supplied by a person or a test: ``{subtask_id: text or [text per attempt]}`` or a callback
    ``(graph, subtask, agent_id, attempt) -> text`` (may be async)."""

    def __init__(self, outputs: Mapping[str, Any] | Callable[..., Any]) -> None:
        self.outputs = outputs

    async def run(self, graph: AOVGraph, subtask: Subtask, agent_id: str, attempt: int) -> str:
        if callable(self.outputs):
            out = self.outputs(graph, subtask, agent_id, attempt)
            return str(await out if _inspect.isawaitable(out) else out)
        value = self.outputs.get(subtask.id)
        if isinstance(value, list) and value:
            value = value[min(attempt, len(value) - 1)]
        if value is None:
            raise MissingOutput(f"no manual output supplied for subtask {subtask.id!r}")
        return str(value)


class EchoAgent:
    """Offline stand-in when no LLM is configured: a deterministic completion text."""

    async def run(self, graph: AOVGraph, subtask: Subtask, agent_id: str, attempt: int) -> str:
        return f"[{agent_id}, offline] done: {subtask.subtask_requirement}"


# ---- reports ------------------------------------------------------------------------------------
@dataclass
class StepReport:
    index: int
    subtasks: list[str]
    agents: dict[str, str]  # subtask -> agent instance (a clone id like "coder#2" when cloned)
    clones: list[dict[str, str]]
    outputs: dict[str, str]
    verdicts: dict[str, Verdict]
    repairs: list[dict[str, Any]] = field(default_factory=list)  # applied automatically
    proposals: list[Proposal] = field(default_factory=list)  # awaiting a decision
    given_up: list[str] = field(default_factory=list)
    status: str = "ready"

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.index, "subtasks": self.subtasks, "agents": self.agents, "clones": self.clones,
                "outputs": self.outputs, "verdicts": {k: v.to_dict() for k, v in self.verdicts.items()},
                "repairs": self.repairs, "given_up": self.given_up,
                "proposals": [p.to_dict(with_graph=False) for p in self.proposals], "status": self.status}


# ---- the execution ------------------------------------------------------------------------------
class Execution:
    def __init__(self, graph: AOVGraph, agent: AgentBackend, inspector: Inspector | None = None, *,
                 repair_llm: Any = None, mode: str = "auto", k: int = 3, max_repairs: int = 3,
                 store: Any = None, execution_id: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        graph.validate()
        self.graph = graph.copy()  # the caller's graph stays as it was; ``self.graph`` is the live one
        self.agent = agent
        self.inspector: Inspector = inspector or RuleInspector()
        self.repair_llm, self.mode, self.k, self.max_repairs = repair_llm, mode, k, max_repairs
        self.store = store
        self.id = execution_id or uuid.uuid4().hex[:12]
        self.step_index = 0
        self.status = "ready"  # ready | paused | completed | failed
        self.events: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self.repairs_done: dict[str, int] = {}
        self.queue: list[RepairSet] = []  # failures awaiting a decision (interactive mode)
        for st in graph.subtasks.values():  # a crash mid-step leaves "running": it never finished
            if st.status == "running":
                st.status = "pending"
        self._log(0, "start", {"goal": graph.goal, "mode": mode, "graph": graph.to_dict()})
        self.save()

    # ---- state ------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.status in ("completed", "failed")

    @property
    def pending_proposals(self) -> list[Proposal]:
        return self.queue[0].proposals if self.queue else []

    @property
    def pending_failure(self) -> RepairSet | None:
        return self.queue[0] if self.queue else None

    def _log(self, step: int, kind: str, payload: dict[str, Any]) -> None:
        self.events.append({"seq": len(self.events) + 1, "step": step, "kind": kind, "payload": payload})

    def save(self) -> None:
        if self.store is not None:
            self.store.save(self)

    def state(self) -> dict[str, Any]:
        return {"step_index": self.step_index, "status": self.status, "mode": self.mode, "k": self.k,
                "max_repairs": self.max_repairs, "attempts": self.attempts, "repairs_done": self.repairs_done,
                "queue": [{"failed": rs.failed, "reason": rs.reason, "dropped": rs.dropped,
                           "proposals": [{"ops": [o.to_dict() for o in p.ops], "source": p.source}
                                         for p in rs.proposals]} for rs in self.queue]}

    def restore(self, state: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.step_index = int(state.get("step_index", 0))
        self.status = state.get("status", "ready")
        self.attempts = dict(state.get("attempts", {}))
        self.repairs_done = dict(state.get("repairs_done", {}))
        self.events = list(events)
        self.queue = []
        for q in state.get("queue", []):
            rs = RepairSet(q["failed"], q["reason"], [], list(q.get("dropped", [])))
            rs.proposals = self._rebuild([[Op.from_dict(o) for o in p["ops"]] for p in q["proposals"]],
                                         [p["source"] for p in q["proposals"]], rs)
            self.queue.append(rs)

    # ---- running ----------------------------------------------------------------------------
    async def run(self, until_done: bool = True, max_steps: int | None = None) -> list[StepReport]:
        """Steps until done, paused for a decision, or ``max_steps`` (one step when not ``until_done``)."""
        reports: list[StepReport] = []
        limit = max_steps if max_steps is not None else (None if until_done else 1)
        while not self.done and self.status != "paused" and (limit is None or len(reports) < limit):
            rep = await self.step()
            if rep is None:
                break
            reports.append(rep)
        return reports

    async def step(self, outputs: Mapping[str, str] | None = None) -> StepReport | None:
        """Run the next step; ``outputs`` supplies some results by hand (manual mode for this step)."""
        if self.status == "paused":
            raise AOVError("the execution waits for a decision: accept or reject the repair proposals")
        if self.done:
            return None
        ready = self.graph.ready()
        if not ready:
            self._finish()
            self.save()
            return None
        self.step_index += 1
        n = self.step_index
        instances, clones, seen = {}, [], {}
        for sid in ready:
            agent = self.graph.subtasks[sid].agent
            seen[agent] = seen.get(agent, 0) + 1
            instances[sid] = agent if seen[agent] == 1 else f"{agent}#{seen[agent]}"
            if seen[agent] > 1:
                clones.append({"agent": agent, "clone": instances[sid], "subtask": sid})
            self.graph.subtasks[sid].status = "running"
        self._log(n, "step_start", {"subtasks": ready, "agents": instances})
        for c in clones:
            self._log(n, "clone", c)
        results = await asyncio.gather(*(self._run_one(sid, instances[sid], outputs) for sid in ready))
        report = StepReport(n, ready, instances, clones, {}, {})
        failed: list[str] = []
        for sid, (output, verdict) in zip(ready, results, strict=True):
            st = self.graph.subtasks[sid]
            self.attempts[sid] = self.attempts.get(sid, 0) + 1
            st.status, st.data = ("completed" if verdict.passed else "failed"), output
            report.outputs[sid], report.verdicts[sid] = output, verdict
            self._log(n, "result", {"subtask": sid, "agent": instances[sid], "attempt": self.attempts[sid],
                                    "output": output, "verdict": verdict.to_dict()})
            if not verdict.passed:
                failed.append(sid)
        await self._handle_failures(n, failed, report)
        if not self.queue and not self.graph.ready():
            self._finish()
        report.status = self.status
        self.save()
        return report

    async def _run_one(self, sid: str, agent_id: str,
                       outputs: Mapping[str, str] | None) -> tuple[str, Verdict]:
        st = self.graph.subtasks[sid]
        try:
            if outputs is not None and sid in outputs:
                output = str(outputs[sid])
            else:
                output = await self.agent.run(self.graph, st, agent_id, self.attempts.get(sid, 0))
        # An agent (or inspector) that cannot answer is a failed subtask, not a crashed run.
        except Exception as e:  # noqa: BLE001
            return "", Verdict(False, f"agent error: {type(e).__name__}: {e}", "agent")
        try:
            return output, await self.inspector.inspect(self.graph, st, output)
        except Exception as e:  # noqa: BLE001
            return output, Verdict(False, f"inspector error: {type(e).__name__}: {e}", "inspector")

    async def _handle_failures(self, n: int, failed: list[str], report: StepReport) -> None:
        for sid in failed:
            reason = report.verdicts[sid].reason
            if self.repairs_done.get(sid, 0) >= self.max_repairs:
                self._give_up(n, sid, f"repair limit ({self.max_repairs}) reached", report)
                continue
            rs = await propose_repairs(self.graph, sid, reason, self.k, self.repair_llm, self.events,
                                       **self._repair_context(sid))
            self._log(n, "proposals", {"subtask": sid, "reason": reason, "dropped": rs.dropped,
                                       "proposals": [p.to_dict(with_graph=False) for p in rs.proposals]})
            if not rs.proposals:
                self._give_up(n, sid, "no valid repair proposal", report)
            elif self.mode == "auto":
                self._apply(n, rs, rs.proposals[0], "auto")
                report.repairs.append({"subtask": sid, **rs.proposals[0].to_dict(with_graph=False)})
            else:
                self.queue.append(rs)
        if self.queue:
            self.status = "paused"
            report.proposals = self.pending_proposals

    def _repair_context(self, sid: str) -> dict[str, Any]:
        """Attempt number, whether deletion is allowed yet (last resort) and the kinds already tried."""
        done = self.repairs_done.get(sid, 0)
        tried = [op["op"] for e in self.events if e["kind"] == "repair" and e["payload"]["subtask"] == sid
                 for op in e["payload"]["ops"]]
        return {"attempt": done, "allow_delete": done >= self.max_repairs - 1, "tried": tried}

    def _give_up(self, n: int, sid: str, why: str, report: StepReport) -> None:
        self._log(n, "give_up", {"subtask": sid, "reason": why})
        report.given_up.append(sid)

    def _apply(self, n: int, rs: RepairSet, proposal: Proposal, how: str) -> None:
        self.graph = proposal.graph.copy()
        self.repairs_done[rs.failed] = self.repairs_done.get(rs.failed, 0) + 1
        self._log(n, "repair", {"subtask": rs.failed, "how": how, **proposal.to_dict(with_graph=False)})

    def _finish(self) -> None:
        left = [s for s, st in self.graph.subtasks.items() if st.status != "completed"]
        self.status = "failed" if left else "completed"
        self._log(self.step_index, "done", {"status": self.status, "not_completed": left})

    # ---- human in the loop ------------------------------------------------------------------
    def accept(self, index: int = 0, edited_graph: AOVGraph | dict | None = None) -> None:
        """Apply proposal ``index`` (or the user's edited version of it) for the pending failure."""
        if not self.queue:
            raise AOVError("there is no repair proposal to accept")
        rs = self.queue[0]
        if not 0 <= index < len(rs.proposals):
            raise AOVError(f"proposal {index} does not exist (there are {len(rs.proposals)})")
        chosen = rs.proposals[index]
        if edited_graph is not None:
            new = edited_graph if isinstance(edited_graph, AOVGraph) else AOVGraph.from_dict(edited_graph)
            new = new.copy()
            new.validate()
            check_completed_kept(self.graph, new)
            chosen = Proposal(chosen.ops, new, diff(self.graph, new), M.compute(new), "edited")
        self.queue.pop(0)
        self._apply(self.step_index, rs, chosen, "accepted" if edited_graph is None else "edited")
        self._next_decision()

    def reject(self) -> None:
        """Refuse all proposals: the subtask stays failed; independent subtasks still run."""
        if not self.queue:
            raise AOVError("there is no repair proposal to reject")
        rs = self.queue.pop(0)
        self._log(self.step_index, "reject", {"subtask": rs.failed, "reason": rs.reason})
        self._next_decision()

    def _next_decision(self) -> None:
        def settled(sid: str) -> bool:  # an edited graph may already have dealt with this failure
            st = self.graph.subtasks.get(sid)
            return st is None or st.status != "failed"

        while self.queue and settled(self.queue[0].failed):
            rs = self.queue.pop(0)
            self._log(self.step_index, "resolved", {"subtask": rs.failed})
        if self.queue:  # proposals for the next failure were made on the older graph: rebuild them
            rs = self.queue[0]
            rs.proposals = self._rebuild([p.ops for p in rs.proposals], [p.source for p in rs.proposals], rs)
            if not rs.proposals:
                ctx = self._repair_context(rs.failed)
                rs.proposals = self._rebuild(rule_ops(self.graph, rs.failed, rs.reason, ctx["allow_delete"],
                                                      ctx["tried"]), None, rs)
        self.status = "paused" if self.queue else "ready"
        if not self.queue and not self.graph.ready():
            self._finish()
        self.save()

    def _rebuild(self, ops_list: list[list[Op]], sources: list[str] | None, rs: RepairSet) -> list[Proposal]:
        out: list[Proposal] = []
        for i, ops in enumerate(ops_list):
            try:
                out.append(Proposal.build(self.graph, ops, rs.failed, sources[i] if sources else "rules"))
            except AOVError as e:
                rs.dropped.append(f"proposal no longer applies: {e}")
        return [out[i] for i in M.rank([p.metrics for p in out])][: self.k]
