"""Execution of an AOV graph: event-driven (as Flow's authors run it) or in lock-step steps (for people).

**Event-driven** (``run()``, the default schedule): every subtask starts the moment its last parent
completes, on one asyncio loop; nobody waits for the slowest subtask of a "step". The step of a subtask is
kept as a view (1 + the highest step of its parents): the tables and reports group by it. When a subtask
starts while its agent is busy with another, it gets a clone (``coder#2``), recorded in the log.

**Lock-step** (``step()``, and ``run(schedule="steps")``): a step runs every ready subtask concurrently
and waits for all of them; manual outputs can be supplied per step.

Each result is inspected; a failure yields up to K repair proposals (requested concurrently). In ``auto``
mode the best is applied (at most ``max_repairs`` per subtask, then the subtask stays failed). In
``interactive`` mode the proposals wait in ``queue`` for ``accept(i, edited_graph=None)`` or ``reject()``;
meanwhile the subtasks that do not depend on the failure go on, and the execution is ``paused`` once
nothing else can run. A rejected (or given-up) subtask stays failed and the execution ends ``failed``.

**Periodic refinement** (with a ``refine_llm``): after every ``refine_every`` completed subtasks (at most
``max_refinements`` times) no new subtask starts; once the running ones have finished, K updates of the
not-yet-started part are requested and ranked by the selection rule. ``auto`` applies the best one;
``interactive`` queues them as a decision like a repair. Completed work is never changed (refine.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect as _inspect
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from flowcore.aov import context
from flowcore.aov import metrics as M
from flowcore.aov.inspector import Inspector, RuleInspector, Verdict
from flowcore.aov.model import AOVError, AOVGraph, Subtask
from flowcore.aov.refine import check_frozen_kept, propose_refinements
from flowcore.aov.repair import Op, Proposal, RepairSet, check_completed_kept, diff, propose_repairs, rule_ops

MODES = ("auto", "interactive")
SCHEDULES = ("event", "steps")
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
# Seconds between retries of a subtask whose agent could not reach the LLM endpoint (connection, 5xx): an
# outage is retried, never "repaired" by rewriting the subtask's requirement with the error text.
ENDPOINT_WAITS = (1.0, 2.0, 4.0, 8.0)
ENDPOINT_ERROR = "endpoint error: "


def _endpoint_down(exc: BaseException) -> bool:
    from flowcore.tasks import endpoint_failure

    return endpoint_failure(exc)[1]


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
    refinements: list[dict[str, Any]] = field(default_factory=list)  # applied automatically

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.index, "subtasks": self.subtasks, "agents": self.agents, "clones": self.clones,
                "outputs": self.outputs, "verdicts": {k: v.to_dict() for k, v in self.verdicts.items()},
                "repairs": self.repairs, "refinements": self.refinements, "given_up": self.given_up,
                "proposals": [p.to_dict(with_graph=False) for p in self.proposals], "status": self.status}


def step_view(events: list[dict[str, Any]], status: str = "ready") -> list[StepReport]:
    """The log grouped by step (the view an event-driven run keeps for people), steps in order."""
    reps: dict[int, StepReport] = {}
    for e in events:
        n, p, kind = e["step"], e["payload"], e["kind"]
        if kind in ("subtask_start", "step_start"):
            rep = reps.setdefault(n, StepReport(n, [], {}, [], {}, {}))
            pairs = [(p["subtask"], p["agent"])] if kind == "subtask_start" else list(p["agents"].items())
            for sid, inst in pairs:
                if sid not in rep.subtasks:
                    rep.subtasks.append(sid)
                rep.agents[sid] = inst
        elif n in reps:
            rep = reps[n]
            if kind == "clone":
                rep.clones.append(p)
            elif kind == "result":
                rep.outputs[p["subtask"]] = p["output"]
                v = p["verdict"]
                rep.verdicts[p["subtask"]] = Verdict(v["passed"], v["reason"], v.get("source", "rules"))
            elif kind == "repair" and p.get("how") == "auto":
                rep.repairs.append({k: v for k, v in p.items() if k != "how"})
            elif kind == "refine" and p.get("how") == "auto":
                rep.refinements.append(p)
            elif kind == "give_up":
                rep.given_up.append(p["subtask"])
    out = [reps[n] for n in sorted(reps)]
    for r in out:
        r.status = status
    return out


# ---- the execution ------------------------------------------------------------------------------
class Execution:
    def __init__(self, graph: AOVGraph, agent: AgentBackend, inspector: Inspector | None = None, *,
                 repair_llm: Any = None, mode: str = "auto", k: int = 3, max_repairs: int = 3,
                 store: Any = None, execution_id: str | None = None, schedule: str = "event",
                 refine_llm: Any = None, refine_every: int = 3, max_refinements: int = 5,
                 context_chars: int = context.DEFAULT_BUDGET) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
        graph.validate()
        self.graph = graph.copy()  # the caller's graph stays as it was; ``self.graph`` is the live one
        self.agent = agent
        self.inspector: Inspector = inspector or RuleInspector()
        self.repair_llm, self.mode, self.k, self.max_repairs = repair_llm, mode, k, max_repairs
        self.schedule = schedule
        self.refine_llm, self.refine_every, self.max_refinements = refine_llm, refine_every, max_refinements
        self.context_chars = context_chars
        self.endpoint_waits: tuple[float, ...] = ENDPOINT_WAITS  # back-off when the LLM endpoint is away
        self.store = store
        self.choices: dict[str, Any] = {}  # how the page ran it (agents, inspector, ...): set again on reopening
        self.saved_seq = 0  # the last event this copy knows to be in the store (a newer one: changed elsewhere)
        self.id = execution_id or uuid.uuid4().hex[:12]
        self.step_index = 0
        self.status = "ready"  # ready | running | paused | completed | failed
        self.events: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self.repairs_done: dict[str, int] = {}
        self.refinements_done = 0
        self.completed_since_refine = 0
        self.step_of: dict[str, int] = {}  # the step view of each subtask's latest start
        self.queue: list[RepairSet] = []  # decisions awaited (interactive mode), oldest first
        self.on_event: Callable[[dict[str, Any]], None] | None = None  # e.g. the CLI printing live
        self._loop: asyncio.AbstractEventLoop | None = None  # while run() drives the event loop
        self._idle = threading.Event()  # clear from the event loop's start until its last save is done
        self._idle.set()
        self._loop_thread: int | None = None
        self._wake: asyncio.Event | None = None
        self._stop = False
        self._busy: dict[str, set[int]] = {}  # agent -> instance numbers in use (1 = the agent, 2+ clones)
        for st in self.graph.subtasks.values():  # a crash mid-run leaves "running": it never finished
            if st.status == "running":
                st.status = "pending"
        self._log(0, "start", {"goal": graph.goal, "mode": mode, "schedule": schedule,
                               "graph": graph.to_dict()})
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
        """The decision awaited first: a failed subtask's repairs or (``kind == "refine"``) a refinement."""
        return self.queue[0] if self.queue else None

    def running_now(self) -> list[str]:
        g = self.graph
        return [sid for sid, st in g.subtasks.items() if st.status == "running"]

    def _log(self, step: int, kind: str, payload: dict[str, Any]) -> None:
        e = {"seq": len(self.events) + 1, "step": step, "kind": kind, "payload": payload}
        self.events.append(e)
        if self.on_event is not None:
            self.on_event(e)

    def save(self) -> None:
        if self.store is not None:
            self.store.save(self)

    def state(self) -> dict[str, Any]:
        def entry(rs: RepairSet) -> dict[str, Any]:
            d: dict[str, Any] = {"failed": rs.failed, "reason": rs.reason, "dropped": rs.dropped, "kind": rs.kind,
                                 "proposals": [{"ops": [o.to_dict() for o in p.ops], "source": p.source,
                                                "label": p.label} for p in rs.proposals]}
            if rs.kind == "refine":  # a refinement is a whole graph, not operations to replay
                for q, p in zip(d["proposals"], rs.proposals, strict=True):
                    q["graph"] = p.graph.to_dict()
            return d

        return {"step_index": self.step_index, "status": self.status, "mode": self.mode, "k": self.k,
                "max_repairs": self.max_repairs, "attempts": self.attempts, "repairs_done": self.repairs_done,
                "schedule": self.schedule, "refine_every": self.refine_every,
                "max_refinements": self.max_refinements, "refinements_done": self.refinements_done,
                "completed_since_refine": self.completed_since_refine, "step_of": self.step_of,
                "context_chars": self.context_chars, "queue": [entry(rs) for rs in self.queue],
                "choices": self.choices}

    def restore(self, state: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.step_index = int(state.get("step_index", 0))
        self.status = state.get("status", "ready")
        if self.status == "running":  # the process that ran it is gone
            self.status = "ready"
        self.attempts = dict(state.get("attempts", {}))
        self.repairs_done = dict(state.get("repairs_done", {}))
        self.refinements_done = int(state.get("refinements_done", 0))
        self.completed_since_refine = int(state.get("completed_since_refine", 0))
        self.step_of = {k: int(v) for k, v in state.get("step_of", {}).items()}
        self.choices = dict(state.get("choices") or {})
        self.events = list(events)
        self.queue = []
        for q in state.get("queue", []):
            rs = RepairSet(q["failed"], q["reason"], [], list(q.get("dropped", [])), q.get("kind", "repair"))
            if rs.kind == "refine":
                for p in q["proposals"]:
                    new = AOVGraph.from_dict(p["graph"])
                    rs.proposals.append(Proposal([], new, diff(self.graph, new), M.compute(new), p["source"],
                                                 p.get("label", "")))
            else:
                rs.proposals = self._rebuild([[Op.from_dict(o) for o in p["ops"]] for p in q["proposals"]],
                                             [p["source"] for p in q["proposals"]], rs)
            self.queue.append(rs)
        if self.queue and self.status not in ("completed", "failed"):
            self.status = "paused"

    # ---- running: the schedules -------------------------------------------------------------
    async def run(self, until_done: bool = True, max_steps: int | None = None,
                  schedule: str | None = None) -> list[StepReport]:
        """Run until done, paused for a decision, or stopped. Event-driven by default (returns the step view
        of what ran); lock-step with ``schedule="steps"`` (``max_steps``, or one step when not
        ``until_done``)."""
        if (schedule or self.schedule) == "event":
            return await self._run_events()
        reports: list[StepReport] = []
        limit = max_steps if max_steps is not None else (None if until_done else 1)
        while not self.done and self.status != "paused" and (limit is None or len(reports) < limit):
            rep = await self.step()
            if rep is None:
                break
            reports.append(rep)
        return reports

    def request_stop(self) -> None:
        """Start no new subtask; the running ones finish and ``run()`` returns (Pause). Any thread."""
        self._stop = True
        self._poke()

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop has just closed
                pass

    async def _run_events(self) -> list[StepReport]:
        if self.done or (self.queue and self.queue[0].kind == "refine"):
            return []
        if self._loop is not None:
            raise AOVError("the execution is already running")
        first = len(self.events)
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._wake, self._stop = asyncio.Event(), False
        self._idle.clear()
        self.status = "running"
        running: dict[str, asyncio.Task] = {}
        waker: asyncio.Task | None = None
        try:
            while True:
                if not self._stop and not self._refine_due() and not self._refine_queued():
                    for sid in self.graph.ready():  # launched together: distinct agent instances
                        if sid not in running:
                            running[sid] = asyncio.create_task(self._lifecycle(sid, *self._launch(sid)))
                if not running:
                    if not self._stop and await self._maybe_refine():
                        continue  # the plan changed (or stayed): look for ready subtasks again
                    break
                if waker is None or waker.done():
                    waker = asyncio.create_task(self._wake.wait())
                await asyncio.wait([*running.values(), waker], return_when=asyncio.FIRST_COMPLETED)
                self._wake.clear()
                for sid in [s for s, t in running.items() if t.done()]:
                    running.pop(sid).result()  # a lifecycle never raises; if it did, it is a bug: surface it
        finally:
            for t in running.values():  # cancelled (the caller gave up): those subtasks never finished
                t.cancel()
            if running:
                await asyncio.gather(*running.values(), return_exceptions=True)
                for sid in running:
                    st = self.graph.subtasks.get(sid)
                    if st is not None and st.status == "running":
                        st.status = "pending"
            if waker is not None:
                waker.cancel()
            self._loop = self._wake = self._loop_thread = None
            self._busy.clear()
            try:
                self._settle_status()
                self.save()
            finally:
                self._idle.set()
        reports = step_view(self.events[first:], self.status)
        if reports and self.queue:
            reports[-1].proposals = self.pending_proposals
        return reports

    def _settle_status(self) -> None:
        if self.queue:
            self.status = "paused"
            self._refresh_head()  # made while others ran: show them on the graph as it is now
        elif self.graph.ready() or self._stop:
            self.status = "ready"
        elif self.status not in ("completed", "failed"):
            self._finish()

    def _instance(self, agent: str) -> tuple[str, int]:
        """The agent itself when idle, else the lowest free clone number (``coder#2``)."""
        used = self._busy.setdefault(agent, set())
        n = 1
        while n in used:
            n += 1
        used.add(n)
        return (agent if n == 1 else f"{agent}#{n}"), n

    def _launch(self, sid: str) -> tuple[int, str, int]:
        """Mark a subtask running: its step (the view), its agent instance, logged."""
        st = self.graph.subtasks[sid]
        step = 1 + max((self.step_of.get(p, 0) for p in st.parents), default=0)
        self.step_of[sid] = step
        self.step_index = max(self.step_index, step)
        instance, n = self._instance(st.agent)
        st.status = "running"
        self._log(step, "subtask_start", {"subtask": sid, "agent": instance,
                                          "attempt": self.attempts.get(sid, 0) + 1, "t": time.time()})
        if n > 1:
            self._log(step, "clone", {"agent": st.agent, "clone": instance, "subtask": sid})
        return step, instance, n

    async def _lifecycle(self, sid: str, step: int, instance: str, n: int) -> None:
        """One subtask from start to settled: run, inspect, and on failure the repair proposals."""
        agent = self.graph.subtasks[sid].agent
        try:
            output, verdict = await self._run_one(sid, instance, None)
        finally:
            self._busy[agent].discard(n)
        failed = self._record(step, sid, instance, output, verdict)
        self.save()
        if failed:
            await self._handle_failures(step, [sid], None)
            self.save()

    def _record(self, step: int, sid: str, instance: str, output: str, verdict: Verdict) -> bool:
        """Store a result on the live graph (it may have been swapped by a repair meanwhile)."""
        st = self.graph.subtasks[sid]
        self.attempts[sid] = self.attempts.get(sid, 0) + 1
        st.status, st.data = ("completed" if verdict.passed else "failed"), output
        if verdict.passed:
            self.completed_since_refine += 1
        self._log(step, "result", {"subtask": sid, "agent": instance, "attempt": self.attempts[sid],
                                   "output": output, "verdict": verdict.to_dict(), "t": time.time()})
        return not verdict.passed

    async def step(self, outputs: Mapping[str, str] | None = None) -> StepReport | None:
        """Lock-step: run every ready subtask and wait for all of them; ``outputs`` supplies some results by
        hand (manual mode for this step)."""
        if self.status == "paused":
            raise AOVError("the execution waits for a decision: accept or reject the proposals")
        if self._loop is not None:
            raise AOVError("the execution is running: pause it before stepping")
        if self.done:
            return None
        if await self._maybe_refine() and self.status == "paused":  # due since an earlier run or decision
            return None  # the refinement now awaits a decision
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
            self.step_of[sid] = n
        self._log(n, "step_start", {"subtasks": ready, "agents": instances, "t": time.time()})
        for c in clones:
            self._log(n, "clone", c)
        results = await asyncio.gather(*(self._run_one(sid, instances[sid], outputs) for sid in ready))
        report = StepReport(n, ready, instances, clones, {}, {})
        failed: list[str] = []
        for sid, (output, verdict) in zip(ready, results, strict=True):
            if self._record(n, sid, instances[sid], output, verdict):
                failed.append(sid)
            report.outputs[sid], report.verdicts[sid] = output, verdict
        await self._handle_failures(n, failed, report)
        if not self.queue:
            await self._maybe_refine(report)
        if self.queue:
            self.status = "paused"
            report.proposals = self.pending_proposals
        elif not self.graph.ready():
            self._finish()
        else:
            self.status = "ready"
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
                output = await self._agent_run(st, agent_id, sid)
        # An agent (or inspector) that cannot answer is a failed subtask, not a crashed run.
        except Exception as e:  # noqa: BLE001
            if _endpoint_down(e):
                return "", Verdict(False, f"{ENDPOINT_ERROR}{type(e).__name__}: {e}", "agent")
            return "", Verdict(False, f"agent error: {type(e).__name__}: {e}", "agent")
        try:
            return output, await self.inspector.inspect(self.graph, st, output)
        except Exception as e:  # noqa: BLE001
            return output, Verdict(False, f"inspector error: {type(e).__name__}: {e}", "inspector")

    async def _agent_run(self, st: Subtask, agent_id: str, sid: str) -> str:
        """The agent's run, tried again after a back-off while the LLM endpoint is unreachable."""
        waits = list(self.endpoint_waits)
        while True:
            try:
                return await self.agent.run(self.graph, st, agent_id, self.attempts.get(sid, 0))
            except Exception as e:
                if not waits or not _endpoint_down(e):
                    raise
                await asyncio.sleep(waits.pop(0))

    # ---- failures and repairs ---------------------------------------------------------------
    async def _handle_failures(self, n: int, failed: list[str], report: StepReport | None) -> None:
        for sid in failed:
            reason = self._last_reason(sid)
            if reason.startswith(ENDPOINT_ERROR):  # nothing in the graph to repair: the server was away
                self._give_up(n, sid, f"the LLM endpoint kept failing, so it was not repaired ({reason})", report)
                continue
            if self.repairs_done.get(sid, 0) >= self.max_repairs:
                self._give_up(n, sid, f"repair limit ({self.max_repairs}) reached", report)
                continue
            rs = await propose_repairs(self.graph, sid, reason, self.k, self.repair_llm, self.events,
                                       budget=self.context_chars, **self._repair_context(sid))
            self._log(n, "proposals", {"subtask": sid, "reason": reason, "dropped": rs.dropped,
                                       "proposals": [p.to_dict(with_graph=False) for p in rs.proposals]})
            if not rs.proposals:
                self._give_up(n, sid, "no valid repair proposal", report)
            elif self.mode == "auto":
                applied = self._apply_first(n, rs)
                if applied is None:
                    self._give_up(n, sid, "no proposal applies to the graph any more", report)
                elif report is not None:
                    report.repairs.append({"subtask": sid, **applied.to_dict(with_graph=False)})
            else:
                self.queue.append(rs)

    def _last_reason(self, sid: str) -> str:
        for e in reversed(self.events):
            if e["kind"] == "result" and e["payload"]["subtask"] == sid:
                return e["payload"]["verdict"]["reason"]
        return "failed"

    def _repair_context(self, sid: str) -> dict[str, Any]:
        """Attempt number, whether deletion is allowed yet (last resort) and the kinds already tried."""
        done = self.repairs_done.get(sid, 0)
        tried = [op["op"] for e in self.events if e["kind"] == "repair" and e["payload"]["subtask"] == sid
                 for op in e["payload"]["ops"]]
        return {"attempt": done, "allow_delete": done >= self.max_repairs - 1, "tried": tried}

    def _give_up(self, n: int, sid: str, why: str, report: StepReport | None) -> None:
        self._log(n, "give_up", {"subtask": sid, "reason": why})
        if report is not None:
            report.given_up.append(sid)

    def _apply_first(self, n: int, rs: RepairSet) -> Proposal | None:
        """Auto mode: the best proposal that still applies to the live graph (others may have completed
        while the proposals were being made: they are rebuilt on the graph as it is now)."""
        for p in rs.proposals:
            try:
                fresh = Proposal.build(self.graph, p.ops, rs.failed, p.source)
            except AOVError:
                continue
            self._apply(n, rs, fresh, "auto")
            return fresh
        return None

    def _apply(self, n: int, rs: RepairSet, proposal: Proposal, how: str) -> None:
        self.graph = proposal.graph.copy()
        self.repairs_done[rs.failed] = self.repairs_done.get(rs.failed, 0) + 1
        self._log(n, "repair", {"subtask": rs.failed, "how": how, **proposal.to_dict(with_graph=False)})
        self._poke()

    def _finish(self) -> None:
        left = [s for s, st in self.graph.subtasks.items() if st.status != "completed"]
        self.status = "failed" if left else "completed"
        self._log(self.step_index, "done", {"status": self.status, "not_completed": left})

    # ---- periodic refinement ----------------------------------------------------------------
    def _refine_due(self) -> bool:
        return (self.refine_llm is not None and self.refine_every > 0
                and self.refinements_done < self.max_refinements
                and self.completed_since_refine >= self.refine_every and not self.queue
                and any(st.status == "pending" for st in self.graph.subtasks.values()))

    def _refine_queued(self) -> bool:
        return any(rs.kind == "refine" for rs in self.queue)

    async def _maybe_refine(self, report: StepReport | None = None) -> bool:
        """When due and nothing runs: K updates of the pending part. True when a refinement took place
        (applied, found nothing better, or queued for a decision)."""
        if not self._refine_due() or self.running_now():
            return False
        self.completed_since_refine = 0
        self.refinements_done += 1
        n = self.step_index
        rs = await propose_refinements(self.graph, self.k, self.refine_llm, self.events, self.refinements_done,
                                       self.context_chars)
        self._log(n, "refine_proposals", {"number": self.refinements_done, "reason": rs.reason,
                                          "dropped": rs.dropped,
                                          "proposals": [p.to_dict(with_graph=False) for p in rs.proposals]})
        if not rs.proposals:
            self._log(n, "refine", {"how": "none", "number": self.refinements_done,
                                    "summary": "no usable update: the plan stays as it is"})
        elif self.mode == "auto":
            self._apply_refinement(n, rs.proposals[0], "auto", report)
        else:
            self.queue.append(rs)
            self.status = "paused"
        self.save()
        return True

    def _apply_refinement(self, n: int, p: Proposal, how: str, report: StepReport | None = None) -> None:
        check_frozen_kept(self.graph, p.graph)
        self.graph = p.graph.copy()
        entry = {"how": how, "number": self.refinements_done, **p.to_dict(with_graph=False)}
        self._log(n, "refine", entry)
        if report is not None:
            report.refinements.append(entry)
        self._poke()

    # ---- human in the loop ------------------------------------------------------------------
    def _on_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn`` where the graph is changed: on the running event loop when another thread drives it
        (the page's buttons while a run goes on), else right here."""
        loop = self._loop
        if self._loop_thread == threading.get_ident():
            return fn(*args)
        if loop is not None:
            async def call() -> T:
                return fn(*args)

            try:
                return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=60)
            except concurrent.futures.CancelledError:  # the loop ended before it got to the call
                pass
        self._idle.wait(60)  # a run that is ending: its last save first, then the change (never interleaved)
        return fn(*args)

    @property
    def loop_running(self) -> bool:
        """Whether an event-driven run is going on (a decision taken now is applied on its loop)."""
        return self._loop is not None

    def accept(self, index: int = 0, edited_graph: AOVGraph | dict | None = None) -> None:
        """Apply proposal ``index`` (or the user's edited version of it) of the decision awaited first."""
        self._on_loop(self._accept, index, edited_graph)

    def reject(self) -> None:
        """Refuse all proposals: a failed subtask stays failed (independent subtasks still run); a
        refinement leaves the plan as it is."""
        self._on_loop(self._reject)

    def _accept(self, index: int, edited_graph: AOVGraph | dict | None) -> None:
        if not self.queue:
            raise AOVError("there is no proposal to accept")
        rs = self.queue[0]
        if not 0 <= index < len(rs.proposals):
            raise AOVError(f"proposal {index} does not exist (there are {len(rs.proposals)})")
        chosen = rs.proposals[index]
        if edited_graph is not None:
            new = edited_graph if isinstance(edited_graph, AOVGraph) else AOVGraph.from_dict(edited_graph)
            new = keep_progress(self.graph, new.copy())
            new.validate()
            check_completed_kept(self.graph, new)
            if rs.kind == "refine":
                check_frozen_kept(self.graph, new)
            chosen = Proposal(chosen.ops, new, diff(self.graph, new), M.compute(new), "edited", chosen.label)
        elif rs.kind == "repair" and chosen.ops:  # made on an older graph: others may have finished since
            chosen = Proposal.build(self.graph, chosen.ops, rs.failed, chosen.source)
        self.queue.pop(0)
        how = "accepted" if edited_graph is None else "edited"
        if rs.kind == "refine":
            self._apply_refinement(self.step_index, chosen, how)
        else:
            self._apply(self.step_index, rs, chosen, how)
        self._next_decision()

    def _reject(self) -> None:
        if not self.queue:
            raise AOVError("there is no proposal to reject")
        rs = self.queue.pop(0)
        self._log(self.step_index, "reject", {"subtask": rs.failed, "reason": rs.reason, "kind": rs.kind})
        self._next_decision()

    def _next_decision(self) -> None:
        def settled(rs: RepairSet) -> bool:  # an edited graph may already have dealt with this failure
            if rs.kind == "refine":
                return False
            st = self.graph.subtasks.get(rs.failed)
            return st is None or st.status != "failed"

        while self.queue and settled(self.queue[0]):
            rs = self.queue.pop(0)
            self._log(self.step_index, "resolved", {"subtask": rs.failed})
        self._refresh_head()
        if self._loop is not None:
            self.status = "running"  # the event loop goes on; it settles the status when it stops
        else:
            self.status = "paused" if self.queue else "ready"
            if not self.queue and not self.graph.ready():
                self._finish()
        self.save()
        self._poke()

    def _refresh_head(self) -> None:
        """The repair proposals awaited first, rebuilt on the live graph (they were made on an older one);
        the rules' proposals when none applies any more."""
        if not self.queue or self.queue[0].kind != "repair":
            return
        rs = self.queue[0]
        rs.proposals = self._rebuild([p.ops for p in rs.proposals], [p.source for p in rs.proposals], rs)
        if not rs.proposals:
            ctx = self._repair_context(rs.failed)
            rs.proposals = self._rebuild(rule_ops(self.graph, rs.failed, rs.reason, ctx["allow_delete"],
                                                  ctx["tried"]), None, rs)

    def _rebuild(self, ops_list: list[list[Op]], sources: list[str] | None, rs: RepairSet) -> list[Proposal]:
        out: list[Proposal] = []
        for i, ops in enumerate(ops_list):
            try:
                out.append(Proposal.build(self.graph, ops, rs.failed, sources[i] if sources else "rules"))
            except AOVError as e:
                rs.dropped.append(f"proposal no longer applies: {e}")
        return [out[i] for i in M.rank([p.metrics for p in out])][: self.k]


def keep_progress(current: AOVGraph, new: AOVGraph) -> AOVGraph:
    """A graph the user edited from an older snapshot, brought up to date: subtasks that have completed or
    started since keep their progress when the edit left them as they were; a subtask running now may not
    be changed or removed."""
    for sid, cur in current.subtasks.items():
        n = new.subtasks.get(sid)
        same = n is not None and (n.subtask_requirement, n.agent, n.parents) == (
            cur.subtask_requirement, cur.agent, cur.parents)
        if cur.status == "running" and not same:
            raise AOVError(f"subtask {sid!r} is running now: it cannot be changed or removed")
        if same and n is not None and cur.status in ("completed", "running") and n.status != cur.status:
            n.status, n.data = cur.status, cur.data  # progress made since the snapshot the user edited
    for sid, n in new.subtasks.items():
        if n.status == "running" and current.subtasks.get(sid, n).status != "running":
            n.status = "pending"  # only the execution starts subtasks
    return new
