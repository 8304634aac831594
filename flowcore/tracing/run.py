"""A workflow run with its trace: the runtime's own ``run_workflow`` (nothing copied), watched from outside.

``TracedLLM`` stands between the run and its LLM: every operator call passes the node id as ``cache_salt``
(flowcore.execution._standalone_ops.NodeContext.ask), so each call is attributed to its node with its model,
tokens, cost, start and latency. The runtime's per-node record (operator, latency, skipped, output) completes
the span; a node starts when the last node it depends on ends, which is how the runtime schedules it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from flowcore.execution.runtime import NodeError, Plan, RunResult, execute, prepare
from flowcore.model import Workflow
from flowcore.workspace.traces import Span, Trace

__all__ = ["Call", "TracedLLM", "TracedRun", "mark_cached", "new_trace_id", "traced_run"]


def new_trace_id() -> str:
    """32 hex digits: an OpenTelemetry trace id (never all zeros)."""
    while (tid := secrets.token_hex(16)) == "0" * 32:  # pragma: no cover - 1 in 2**128
        pass
    return tid


@dataclass
class Call:
    node: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    start: float  # seconds after the run began
    latency: float
    cached: bool
    error: str | None = None
    first_cost: float | None = None  # a cache hit: what the call cost and took when first made (None: unknown)
    first_latency: float | None = None
    estimated: bool = False  # its cost (a hit's: its first cost) counted from estimated tokens (no usage reported)


class TracedLLM:
    """Delegates to ``llm`` (an LLM or its child) and records each ``chat`` call."""

    def __init__(self, llm: Any, t0: float | None = None) -> None:
        self._llm = llm
        self.t0 = time.perf_counter() if t0 is None else t0
        self.calls: list[Call] = []

    def __getattr__(self, name: str) -> Any:  # settings, usage, workspace...: the wrapped client's
        return getattr(self._llm, name)

    async def chat(self, messages: Any, *, role: str = "executor", cache_salt: str = "", **kw: Any) -> Any:
        start = time.perf_counter()
        model = self._llm.settings.model_for(role)
        try:
            reply = await self._llm.chat(messages, role=role, cache_salt=cache_salt, **kw)
        except asyncio.CancelledError:
            self.calls.append(Call(cache_salt, model, 0, 0, 0.0, start - self.t0, time.perf_counter() - start,
                                   False, "cancelled"))
            raise
        except Exception as exc:
            self.calls.append(Call(cache_salt, model, 0, 0, 0.0, start - self.t0, time.perf_counter() - start,
                                   False, f"{type(exc).__name__}: {exc}"))
            raise
        self.calls.append(Call(cache_salt, getattr(reply, "model", model), int(reply.prompt_tokens),
                               int(reply.completion_tokens), float(reply.cost), start - self.t0,
                               time.perf_counter() - start, bool(reply.cached),
                               first_cost=getattr(reply, "first_cost", None),
                               first_latency=getattr(reply, "first_latency", None),
                               estimated=bool(getattr(reply, "first_estimated" if reply.cached else "estimated",
                                                      False))))
        return reply

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.calls)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.calls)


def mark_cached(trace: list[dict], calls: list[Call]) -> list[dict]:
    """The runtime's per-node records with the cache's part said: a node whose calls the cache answered gets
    ``cached`` (how many) and, in ``cost`` and ``latency``, what those calls cost and took when they were first
    made (nothing was paid now, and a replay takes no time: its own figures would read $0 and 0 s).
    ``first_known`` is False when an older cache row did not record them (the figures are then what it cost now).
    ``estimated``: how many of the node's calls (a hit's first call) were counted from estimated tokens."""
    by_node: dict[str, list[Call]] = {}
    for c in calls:
        by_node.setdefault(c.node, []).append(c)
    out = []
    for rec in trace:
        mine = by_node.get(rec.get("node", ""), [])
        hits = [c for c in mine if c.cached and not c.error]
        rec = dict(rec)
        if guessed := sum(1 for c in mine if c.estimated and not c.error):
            rec["estimated"] = guessed
        if hits:
            known = all(c.first_cost is not None and c.first_latency is not None for c in hits)
            rec["cached"] = len(hits)
            rec["first_known"] = known
            if known:
                rec["cost"] = float(rec.get("cost") or 0.0) + sum(c.first_cost or 0.0 for c in hits)
                rec["latency"] = round(float(rec.get("latency") or 0.0) + sum(c.first_latency or 0.0 for c in hits), 4)
        out.append(rec)
    return out


@dataclass
class TracedRun:
    """What a traced run gives back: the result (None when it failed), the error, and the trace."""

    result: RunResult | None
    error: BaseException | None
    trace: Trace
    calls: list[Call] = field(default_factory=list)


def _spans(plan: Plan, result: RunResult | None, calls: list[Call], failed: NodeError | None,
           elapsed: float) -> list[Span]:
    by_node: dict[str, list[Call]] = {}
    for c in calls:
        by_node.setdefault(c.node, []).append(c)
    records = {r["node"]: r for r in (result.trace if result else [])}
    ends: dict[str, float] = {}
    spans: list[Span] = []
    for np in plan.nodes:  # topological order: a node's sources have their ends already
        rec, mine = records.get(np.id), by_node.get(np.id, [])
        if rec is None and not mine and (failed is None or failed.node != np.id):
            continue  # never reached (the run stopped before it)
        start = max([ends.get(s, 0.0) for s in np.sources] + [0.0])
        if rec is None and mine:  # a node cut short: it began with its first call
            start = min(c.start for c in mine)
        if rec is not None:
            latency = float(rec.get("latency") or 0.0)
        else:
            latency = max((c.start + c.latency for c in mine), default=elapsed) - start
        ends[np.id] = start + latency
        error = None
        if failed is not None and failed.node == np.id:
            error = str(failed)
        elif any(c.error for c in mine) and rec is None:
            error = next(c.error for c in mine if c.error)
        models = list(dict.fromkeys(c.model for c in mine))
        spans.append(Span(np.id, np.op, ", ".join(models) or None, sum(c.prompt_tokens for c in mine),
                          sum(c.completion_tokens for c in mine), sum(c.cost for c in mine), len(mine),
                          round(start, 6), round(latency, 6), error,
                          bool(rec.get("skipped")) if rec else False, rec.get("output") if rec else None))
    return spans


async def traced_run(workflow: Workflow, problem: str, *, llm: Any, task: str | None = None,
                     entry_point: str | None = None, public_tests: str = "", source: str = "api",
                     created_by: str = "local", name: str | None = None, version: int | None = None,
                     trace_id: str | None = None, plan: Plan | None = None) -> TracedRun:
    """Run ``workflow`` once with ``flowcore.execution.runtime.execute`` (checked by ``prepare`` first, as
    ``run_workflow`` does), recording its trace. Errors (and cancellation) are re-raised by the caller's choice:
    they come back in ``TracedRun.error``, with the trace of what ran up to then."""
    plan = plan or prepare(workflow, task)
    traced = TracedLLM(llm)
    created = time.time()
    result: RunResult | None = None
    error: BaseException | None = None
    try:
        result = await execute(plan, problem, llm=traced, entry_point=entry_point, public_tests=public_tests)
    except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - returned to the caller with its trace
        error = exc
    elapsed = time.perf_counter() - traced.t0
    failed = error if isinstance(error, NodeError) else None
    status = "ok" if error is None else ("cancelled" if isinstance(error, asyncio.CancelledError) else "error")
    trace = Trace(trace_id or new_trace_id(), created, source, name, version, created_by, status,
                  None if error is None else (str(error) or type(error).__name__), round(elapsed, 6),
                  sum(c.cost for c in traced.calls), len([c for c in traced.calls if not c.error]),
                  traced.prompt_tokens, traced.completion_tokens, problem,
                  result.answer if result else None, _spans(plan, result, traced.calls, failed, elapsed))
    return TracedRun(result, error, trace, traced.calls)
