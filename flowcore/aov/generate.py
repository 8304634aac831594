"""Candidate AOV graphs from a task description, and the selection among them.

The optimizer LLM proposes one AOV JSON per call: K calls made concurrently (the authors use up to 10), each
prompt naming its number ("candidate 2 of 5") so that the calls differ and a reply maps to its candidate
whatever order they finish in. Replies are read leniently; simple faults are
repaired (edges to missing subtasks dropped, one-sided links completed, unknown agents replaced by the
default agent) and every repair is noted; a candidate that is still invalid is kept with its reason and never
chosen.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from flowcore.aov import metrics as M
from flowcore.aov.model import AOVError, AOVGraph

DEFAULT_AGENTS = [{"id": "planner", "role": "breaks work down and writes plans"},
                  {"id": "worker", "role": "carries out a subtask and reports the result"},
                  {"id": "reviewer", "role": "checks and integrates results"}]


@dataclass
class Candidate:
    index: int
    graph: AOVGraph | None
    metrics: M.Metrics | None
    error: str | None = None
    repairs: list[str] = field(default_factory=list)
    raw: str = ""

    @property
    def valid(self) -> bool:
        return self.graph is not None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "valid": self.valid, "error": self.error,
                             "repairs": self.repairs}
        if self.metrics:
            d.update(self.metrics.to_dict())
        if self.graph:
            d["graph"] = self.graph.to_dict()
        return d


PROMPT = """Split the task below into subtasks for a team of agents, as an Activity-on-Vertex graph: a DAG in
which an edge p -> c means c needs p's result. Prefer independent subtasks that can run in parallel and few
dependencies. Reply with JSON only, in this shape:
{{"goal": "...", "agents": [{{"id": "...", "role": "..."}}],
 "subtasks": {{"s1": {{"subtask_requirement": "...", "parents": [], "child": ["s2"], "agent": "..."}},
              "s2": {{"subtask_requirement": "...", "parents": ["s1"], "child": [], "agent": "..."}}}}}}
Use only these agents: {agents}
Task: {task}
(This is candidate {number} of {k}: independent proposals are compared by their parallelism.)"""


def extract_json(text: str) -> Any:
    """The first JSON object in a reply, ignoring ```json fences and prose around it."""
    text = re.sub(r"```(?:json)?", "", text)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise AOVError("the reply holds no JSON object")
    try:
        return json.loads(text[start: end + 1])
    except json.JSONDecodeError as e:
        raise AOVError(f"the reply is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


def repair_document(doc: Any, agents: list[dict] | None = None) -> tuple[Any, list[str]]:
    """Fix what a model typically gets wrong; returns the document and notes on what was changed."""
    notes: list[str] = []
    if not isinstance(doc, dict):
        return doc, notes
    doc = json.loads(json.dumps(doc))  # private deep copy
    subs = doc.get("subtasks")
    if isinstance(subs, list):
        subs = {r["id"]: r for r in subs if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"]}
        doc["subtasks"] = subs
    if not isinstance(subs, dict):
        return doc, notes
    if agents is not None:
        doc["agents"] = agents
    elif not isinstance(doc.get("agents"), list):
        names = list(dict.fromkeys(r.get("agent") for r in subs.values()
                                   if isinstance(r, dict) and isinstance(r.get("agent"), str) and r["agent"]))
        doc["agents"] = [{"id": n, "role": n} for n in names] or DEFAULT_AGENTS
        notes.append("agents derived from the subtasks")
    known = [a["id"] if isinstance(a, dict) else a for a in doc["agents"]]
    default = known[0] if known else None
    edges: dict[tuple[str, str], None] = {}  # ordered set
    for sid, rec in subs.items():
        if not isinstance(rec, dict):
            continue
        rec.pop("id", None)
        rec["status"], rec["data"] = "pending", ""  # a fresh plan has run nothing
        rec.pop("num_parents_not_completed", None)
        if default is not None and rec.get("agent") not in known:
            notes.append(f"subtask {sid!r}: unknown agent {rec.get('agent')!r} replaced by {default!r}")
            rec["agent"] = default
        for fld, outward in (("parents", False), ("child", True)):
            vals = rec.get(fld) or []
            if not isinstance(vals, list):
                continue
            for v in vals:
                if v in subs and v != sid:
                    edges[(sid, v) if outward else (v, sid)] = None
                else:
                    notes.append(f"subtask {sid!r}: dropped {fld} entry {v!r} (no such subtask)")
    for sid, rec in subs.items():  # rewrite both sides from the union of edges: one-sided links become links
        if isinstance(rec, dict):
            rec["parents"] = [p for p, c in edges if c == sid]
            rec["child"] = [c for p, c in edges if p == sid]
    return doc, notes


def parse_candidate(index: int, text: str, agents: list[dict] | None = None) -> Candidate:
    try:
        doc, notes = repair_document(extract_json(text), agents)
        graph = AOVGraph.from_dict(doc)
        return Candidate(index, graph, M.compute(graph), None, notes, text)
    except AOVError as e:
        return Candidate(index, None, None, str(e), [], text)


async def generate_candidates(llm: Any, task: str, k: int = 3, agents: list | None = None,
                              temperature: float = 0.7) -> list[Candidate]:
    """K candidates, requested concurrently; a failed call costs one candidate, not the batch."""
    if k < 1:
        raise AOVError(f"K must be at least 1 (got {k})")
    norm = None
    if agents is not None:
        norm = [{"id": a, "role": a} if isinstance(a, str) else dict(a) for a in agents]
    listing = ", ".join(f"{a['id']} ({a.get('role', a['id'])})" for a in (norm or DEFAULT_AGENTS))

    async def one(i: int) -> Candidate:
        prompt = PROMPT.format(agents=listing, task=task, number=i + 1, k=k)
        try:
            reply = await llm.chat(prompt, role="optimizer", temperature=temperature, json_mode=True,
                                   cache_salt=str(i))
        except Exception as e:  # noqa: BLE001 - LLMError, NotConfigured, budget: this candidate only
            return Candidate(i, None, None, f"LLM call failed: {e}")
        cand = parse_candidate(i, reply.text, norm)
        if cand.graph is not None and not cand.graph.goal:
            cand.graph.goal = task
        return cand

    return list(await asyncio.gather(*(one(i) for i in range(k))))


def select(candidates: list[Candidate]) -> tuple[int, M.Metrics]:
    """The chosen candidate's index (into ``candidates``) and its metrics; AOVError when none is valid."""
    idx = M.choose([c.metrics for c in candidates])
    return idx, candidates[idx].metrics  # type: ignore[return-value]
