"""Periodic refinement (Flow): after every M completed subtasks the part of the plan that has not started is
re-planned from the whole log; K updates are requested concurrently and ranked by the selection rule.

An update may edit, add, delete or rewire *pending* subtasks and reassign their agents. Everything else is
frozen: a completed (or failed, or running) subtask keeps its record byte for byte — requirement, agent,
status, data, parents and extra fields — whatever the model wrote about it; only its ``child`` list
follows the pending subtasks that now depend on it (kept in its old order, new children after). A reply
that would change frozen work is not refused for it: the frozen records are simply kept, and a note says so.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from flowcore.aov import context
from flowcore.aov import metrics as M
from flowcore.aov.generate import extract_json
from flowcore.aov.model import AOVError, AOVGraph, Subtask
from flowcore.aov.repair import Proposal, RepairSet, diff

REFINE_PROMPT = """You supervise a multi-agent workflow, an Activity-on-Vertex graph of subtasks (JSON below),
while it runs. {done} of its {total} subtasks are completed. Re-plan the part that has NOT started yet
(status "pending") so that the goal is reached, using what the execution log shows: you may edit, add,
delete or rewire pending subtasks and reassign their agents. Completed and failed subtasks are fixed: keep
them as they are (new pending subtasks may depend on them). Prefer independent subtasks that can run in
parallel and few dependencies.
Goal: {goal}
The execution log so far (oldest first):
{log}
Current graph:
{graph}
Reply with JSON only: the whole updated graph, {{"subtasks": {{id: {{"subtask_requirement": ..., "agent": ...,
"parents": [...]}}}}}}. Agents: {agents}.
(This is update {number} of {k}: independent updates are ranked by the resulting graph's parallelism.)"""


def frozen(graph: AOVGraph) -> set[str]:
    """Subtasks a refinement may not change: everything that is not pending."""
    return {sid for sid, st in graph.subtasks.items() if st.status != "pending"}


def check_frozen_kept(old: AOVGraph, new: AOVGraph) -> None:
    """Every non-pending subtask of ``old`` is in ``new`` with the same record (``child`` aside)."""
    for sid in frozen(old):
        a, b = old.subtasks[sid], new.subtasks.get(sid)
        if b is None or _record(a) != _record(b):
            raise AOVError(f"the update would change {a.status} subtask {sid!r}")


def _record(st: Subtask) -> str:
    return json.dumps([st.subtask_requirement, st.agent, st.status, st.data, st.parents, st.expect, st.extra],
                      ensure_ascii=False, sort_keys=True)


def merge_update(current: AOVGraph, doc: Any) -> tuple[AOVGraph, list[str]]:
    """The current graph with its pending part replaced by the reply's; notes on what was set aside."""
    if not isinstance(doc, dict):
        raise AOVError("the reply is not a JSON object")
    subs = doc.get("subtasks")
    if isinstance(subs, list):  # a list of records carrying their ids
        subs = {r["id"]: r for r in subs if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"]}
    if not isinstance(subs, dict) or not subs:
        raise AOVError("the reply holds no 'subtasks' object")
    fixed, notes = frozen(current), []
    agents = set(current.agent_ids())
    records: dict[str, dict[str, Any]] = {}
    for sid, st in current.subtasks.items():  # file order: existing subtasks first
        if sid in fixed:
            records[sid] = {"subtask_requirement": st.subtask_requirement, "agent": st.agent,
                            "status": st.status, "data": st.data, "parents": list(st.parents),
                            "expect": list(st.expect), **st.extra}
            given = subs.get(sid)
            if isinstance(given, dict) and (given.get("subtask_requirement", st.subtask_requirement)
                                            != st.subtask_requirement or given.get("agent", st.agent) != st.agent):
                notes.append(f"{st.status} subtask {sid!r} kept as it was")
    for sid, rec in subs.items():
        if sid in fixed:
            continue
        if not isinstance(sid, str) or not sid or not isinstance(rec, dict):
            raise AOVError(f"subtask {sid!r}: the record must be an object under a non-empty id")
        old = current.subtasks.get(sid)
        req = rec.get("subtask_requirement", old.subtask_requirement if old else None)
        agent = rec.get("agent", old.agent if old else None)
        if agent not in agents:
            raise AOVError(f"subtask {sid!r}: unknown agent {agent!r} (agents: {', '.join(sorted(agents))})")
        parents = rec.get("parents")
        if parents is None:  # only children given: derive below from the other records' 'child' lists
            parents = [p for p, r in subs.items() if isinstance(r, dict) and sid in (r.get("child") or [])]
        if not isinstance(parents, list):
            raise AOVError(f"subtask {sid!r}: field 'parents' must be a list of subtask ids")
        kept = [p for p in parents if p in subs or p in fixed]
        notes += [f"subtask {sid!r}: dropped parent {p!r} (no such subtask)" for p in parents if p not in kept]
        records[sid] = {"subtask_requirement": req, "agent": agent, "parents": kept,
                        "expect": rec.get("expect", old.expect if old else [])}
    new = AOVGraph.from_dict({"goal": current.goal, "agents": [a.to_dict() for a in current.agents],
                              "subtasks": records})
    for sid in fixed:  # children of frozen subtasks: the old order first, new children after
        old_children = [c for c in current.subtasks[sid].child if c in new.subtasks[sid].child]
        new.subtasks[sid].child = old_children + [c for c in new.subtasks[sid].child if c not in old_children]
    check_frozen_kept(current, new)
    return new, notes


def label(d_lines: list[str]) -> str:
    added = sum(1 for x in d_lines if x.startswith("+ subtask"))
    removed = sum(1 for x in d_lines if x.startswith("- subtask"))
    changed = len({x.split(".")[0] for x in d_lines if x.startswith("~ ")})
    rewired = sum(1 for x in d_lines if x.startswith(("+ edge", "- edge")))
    return f"re-plan: {added} added, {removed} removed, {changed} changed, {rewired} edges rewired"


def _signature(g: AOVGraph) -> str:
    return json.dumps([(s, st.subtask_requirement, st.agent, st.status, st.parents)
                       for s, st in g.subtasks.items()])


async def propose_refinements(graph: AOVGraph, k: int, llm: Any, log: list[dict] | None = None,
                              number: int = 1, budget: int = context.DEFAULT_BUDGET) -> RepairSet:
    """Up to ``k`` updates of the pending part, ranked best first by the selection rule; updates that change
    nothing, or that cannot be read, are left out (with the reason in ``dropped``)."""
    done = sum(1 for st in graph.subtasks.values() if st.status == "completed")
    result = RepairSet("", f"periodic refinement {number} after {done} completed subtasks", [], kind="refine")
    log_text, graph_json = context.log_text(log or [], budget), context.graph_text(graph)
    agents = ", ".join(f"{a.id} ({a.role})" for a in graph.agents)

    async def one(i: int) -> Proposal | str:
        prompt = REFINE_PROMPT.format(done=done, total=len(graph.subtasks), goal=graph.goal, log=log_text,
                                      graph=graph_json, agents=agents, number=i + 1, k=k)
        try:
            reply = await llm.chat(prompt, role="optimizer", json_mode=True, cache_salt=f"refine:{number}:{i}")
            new, notes = merge_update(graph, extract_json(reply.text))
        except AOVError as e:
            return f"update {i + 1}: {e}"
        except Exception as e:  # noqa: BLE001 - LLM unreachable: this update only
            return f"update {i + 1}: {type(e).__name__}: {e}"
        d = diff(graph, new)
        p = Proposal([], new, d, M.compute(new), "llm", label(d.lines(new)))
        return p if not notes else _with_notes(p, notes)

    seen = {_signature(graph)}
    got: list[Proposal] = []
    for item in await asyncio.gather(*(one(i) for i in range(k))):
        if isinstance(item, str):
            result.dropped.append(item)
        elif _signature(item.graph) in seen:
            result.dropped.append("an update that changes nothing (or repeats another)")
        else:
            seen.add(_signature(item.graph))
            got.append(item)
    result.proposals = [got[i] for i in M.rank([p.metrics for p in got])]
    return result


def _with_notes(p: Proposal, notes: list[str]) -> Proposal:
    p.label = f"{p.label} ({'; '.join(notes[:3])}{'; …' if len(notes) > 3 else ''})"
    return p
