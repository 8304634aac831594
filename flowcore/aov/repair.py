"""Localized repairs of a failed subtask and the diffs shown to the user.

Only five operations exist, and each may touch only the failing subtask, a helper added in front of it, or
(edit/reassign) one of its children that has not run yet: ``rerun`` (reset it), ``edit`` (rewrite its
requirement), ``add`` (insert a helper subtask before it), ``delete`` (remove it and connect its parents to
its children) and ``reassign`` (another agent). Completed subtasks are never changed, so they keep their data.
Proposals are ranked by the same rule as candidate graphs (highest P_avg, then lowest C_dependency, then the
order they were proposed in: the LLM's first, then the rule-made ones in the order edit, reassign, rerun, add,
delete, kinds already tried on this subtask moved last). Deleting a subtask almost always raises P_avg, so
the rules offer ``delete`` only as a last resort (``allow_delete``): otherwise the rule would discard a
deliverable at its first failure. An LLM may propose a deletion at any time.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from flowcore.aov import context
from flowcore.aov import metrics as M
from flowcore.aov.model import AOVError, AOVGraph, Subtask

OPS = ("rerun", "edit", "add", "delete", "reassign")


@dataclass
class Op:
    op: str
    subtask: str
    requirement: str | None = None
    agent: str | None = None
    new_id: str | None = None  # for add

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "subtask": self.subtask}
        for k in ("requirement", "agent", "new_id"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Op:
        if not isinstance(d, dict) or d.get("op") not in OPS:
            raise AOVError(f"operation {d!r}: 'op' must be one of {', '.join(OPS)}")
        target = d.get("subtask", d.get("before"))
        if not isinstance(target, str):
            raise AOVError(f"operation {d['op']!r}: field 'subtask' must name a subtask")
        strs = {k: d.get(k) for k in ("requirement", "agent")}
        new_id = d.get("new_id", d.get("id"))
        for k, v in {**strs, "new_id": new_id}.items():
            if v is not None and not isinstance(v, str):
                raise AOVError(f"operation {d['op']!r}: field {k!r} must be a string")
        return cls(d["op"], target, strs["requirement"], strs["agent"], new_id)

    def describe(self) -> str:
        if self.op == "edit":
            return f"edit {self.subtask}: {self.requirement}"
        if self.op == "reassign":
            return f"reassign {self.subtask} to {self.agent}"
        if self.op == "add":
            return f"add {self.new_id} before {self.subtask} ({self.agent}): {self.requirement}"
        return f"{self.op} {self.subtask}"


# ---- diffs --------------------------------------------------------------------------------------
@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, dict[str, list[Any]]] = field(default_factory=dict)  # sid -> field -> [old, new]
    added_edges: list[tuple[str, str]] = field(default_factory=list)
    removed_edges: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"added": self.added, "removed": self.removed, "changed": self.changed,
                "added_edges": [list(e) for e in self.added_edges],
                "removed_edges": [list(e) for e in self.removed_edges]}

    def lines(self, new: AOVGraph | None = None) -> list[str]:
        out = []
        for sid in self.added:
            st = new.subtasks[sid] if new and sid in new.subtasks else None
            out.append(f"+ subtask {sid}" + (f" ({st.agent}): {st.subtask_requirement}" if st else ""))
        out += [f"- subtask {sid}" for sid in self.removed]
        for sid, fields in self.changed.items():
            for f, (a, b) in fields.items():
                out.append(f"~ {sid}.{f}: {_short(a)} -> {_short(b)}")
        out += [f"+ edge {p} -> {c}" for p, c in self.added_edges]
        out += [f"- edge {p} -> {c}" for p, c in self.removed_edges]
        return out


def _short(v: Any, n: int = 80) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    s = " ".join(s.split())
    return repr(s[: n - 1] + "…" if len(s) > n else s)


def diff(old: AOVGraph, new: AOVGraph) -> Diff:
    d = Diff([s for s in new.subtasks if s not in old.subtasks],
             [s for s in old.subtasks if s not in new.subtasks])
    for sid, a in old.subtasks.items():
        b = new.subtasks.get(sid)
        if b is None:
            continue
        ch = {f: [getattr(a, f), getattr(b, f)] for f in ("subtask_requirement", "agent", "status", "data")
              if getattr(a, f) != getattr(b, f)}
        if ch:
            d.changed[sid] = ch
    oe, ne = old.edges(), new.edges()
    d.added_edges = [e for e in ne if e not in set(oe)]
    d.removed_edges = [e for e in oe if e not in set(ne)]
    return d


# ---- applying operations ------------------------------------------------------------------------
def _reset(st: Subtask) -> None:
    st.status, st.data = "pending", ""


def apply_ops(graph: AOVGraph, ops: list[Op], failed: str) -> AOVGraph:
    """A new graph with ``ops`` applied around ``failed``; AOVError when an op is not local or not valid."""
    if failed not in graph.subtasks:
        raise AOVError(f"subtask {failed!r} does not exist")
    if not ops:
        raise AOVError("a repair needs at least one operation")
    g = graph.copy()
    # The neighbourhood: the failed subtask, its children that have not run, and helpers added here.
    near = {failed} | {c for c in g.subtasks[failed].child if g.subtasks[c].status == "pending"}
    for op in ops:
        if op.subtask not in g.subtasks:
            raise AOVError(f"{op.op}: subtask {op.subtask!r} does not exist")
        st = g.subtasks[op.subtask]
        if op.subtask not in near:
            raise AOVError(f"{op.op} {op.subtask!r} is not local to the failed subtask {failed!r}")
        if op.op in ("rerun", "add", "delete") and op.subtask != failed:
            raise AOVError(f"{op.op} {op.subtask!r}: only the failed subtask {failed!r} may be the target")
        if op.op == "edit":
            if not op.requirement or not op.requirement.strip():
                raise AOVError(f"edit {op.subtask!r}: field 'requirement' must be a non-empty string")
            st.subtask_requirement = op.requirement.strip()
            if st.status == "failed":
                _reset(st)
        elif op.op == "reassign":
            if op.agent not in g.agent_ids():
                raise AOVError(f"reassign {op.subtask!r}: unknown agent {op.agent!r}")
            if op.agent == st.agent:
                raise AOVError(f"reassign {op.subtask!r}: it already uses agent {op.agent!r}")
            st.agent = op.agent
            if st.status == "failed":
                _reset(st)
        elif op.op == "rerun":
            _reset(st)
        elif op.op == "add":
            if not op.requirement or not op.requirement.strip():
                raise AOVError("add: field 'requirement' must be a non-empty string")
            agent = op.agent or st.agent
            if agent not in g.agent_ids():
                raise AOVError(f"add: unknown agent {agent!r}")
            op.new_id = g.fresh_id(op.new_id or f"{failed}_prep")
            g.subtasks[op.new_id] = Subtask(op.new_id, op.requirement.strip(), agent)
            for p in st.parents:
                g.add_edge(p, op.new_id)
            g.add_edge(op.new_id, failed)
            near.add(op.new_id)
            _reset(st)
        elif op.op == "delete":
            if len(g.subtasks) == 1:
                raise AOVError(f"delete {failed!r}: it is the only subtask")
            parents, children = list(st.parents), list(st.child)
            g.remove_subtask(failed)
            for p in parents:
                for c in children:
                    g.add_edge(p, c)
            near.discard(failed)
            failed = ""  # nothing else may target the deleted subtask
    if failed in g.subtasks and g.subtasks[failed].status == "failed":
        _reset(g.subtasks[failed])  # e.g. only a child was edited: the failed subtask still runs again
    g.validate()
    check_completed_kept(graph, g)
    return g


def check_completed_kept(old: AOVGraph, new: AOVGraph) -> None:
    """Completed work outside a repair must survive it unchanged (status, data and requirement)."""
    for sid, st in old.subtasks.items():
        if st.status == "completed":
            n = new.subtasks.get(sid)
            if n is None or (n.status, n.data, n.subtask_requirement) != ("completed", st.data,
                                                                          st.subtask_requirement):
                raise AOVError(f"the repair would change completed subtask {sid!r}")


# ---- proposals ----------------------------------------------------------------------------------
@dataclass
class Proposal:
    ops: list[Op]
    graph: AOVGraph
    diff: Diff
    metrics: M.Metrics
    source: str  # llm | rules | edited
    label: str = ""  # what a proposal without operations does (a refinement of the plan)

    @property
    def summary(self) -> str:
        return "; ".join(op.describe() for op in self.ops) or self.label

    def to_dict(self, with_graph: bool = True) -> dict[str, Any]:
        d = {"ops": [o.to_dict() for o in self.ops], "summary": self.summary, "source": self.source,
             "P_avg": self.metrics.P_avg, "C_dependency": self.metrics.C_dependency,
             "diff": self.diff.to_dict(), "diff_text": self.diff.lines(self.graph)}
        if with_graph:
            d["graph"] = self.graph.to_dict()
        return d

    @classmethod
    def build(cls, graph: AOVGraph, ops: list[Op], failed: str, source: str) -> Proposal:
        new = apply_ops(graph, ops, failed)
        return cls(ops, new, diff(graph, new), M.compute(new), source)


@dataclass
class RepairSet:
    """Proposals awaiting a decision: the repairs of one failed subtask, or (``kind == "refine"``, with
    ``failed == ""``) the updates of a periodic refinement of the plan."""

    failed: str
    reason: str
    proposals: list[Proposal]
    dropped: list[str] = field(default_factory=list)  # why LLM proposals were refused
    kind: str = "repair"  # repair | refine


def rule_ops(graph: AOVGraph, failed: str, reason: str, allow_delete: bool = True,
             tried: tuple[str, ...] | list[str] = ()) -> list[list[Op]]:
    st = graph.subtasks[failed]
    req = re.sub(r"\s*\(Previous attempt failed:.*\)\s*$", "", st.subtask_requirement, flags=re.DOTALL)
    out = [[Op("edit", failed, f"{req} (Previous attempt failed: {reason}. Address this.)")]]
    others = [a for a in graph.agent_ids() if a != st.agent]
    if others:
        out.append([Op("reassign", failed, agent=others[0])])
    out.append([Op("rerun", failed)])
    helper = f"Find out why {failed!r} failed ({reason}) and prepare what it needs: {req}"
    out.append([Op("add", failed, helper, st.agent, f"{failed}_prep")])
    if allow_delete and len(graph.subtasks) > 1:
        out.append([Op("delete", failed)])
    return sorted(out, key=lambda ops: ops[0].op in tried)  # stable: untried kinds first


REPAIR_PROMPT = """You repair a multi-agent workflow (an AOV graph, JSON below) while it runs.
Subtask {failed!r} failed: {reason}
The execution log so far (oldest first):
{log}
Graph:
{graph}
Propose ONE localized repair as JSON {{"operations": [...]}} (or the whole repaired graph, with the same
changes) using only these operations on {failed!r}
(edit/reassign may also target one of its pending children):
{{"op": "edit", "subtask": ID, "requirement": TEXT}}, {{"op": "reassign", "subtask": ID, "agent": AGENT_ID}},
{{"op": "rerun", "subtask": ID}}, {{"op": "add", "subtask": ID, "new_id": NEW_ID, "requirement": TEXT,
"agent": AGENT_ID}} (a helper run before ID), {{"op": "delete", "subtask": ID}}.
Agents: {agents}. Completed subtasks must not change.
(This is proposal {number} of {k}: independent proposals are ranked by the resulting graph's parallelism.)"""


def _reply_json(text: str) -> Any:
    m = re.search(r"[\[{].*[\]}]", text, re.DOTALL)
    if not m:
        raise AOVError("the reply holds no JSON")
    try:
        return json.loads(m.group(0))
    except json.JSONDecodeError as e:
        raise AOVError(f"the reply is not valid JSON: {e.msg}") from None


def parse_ops(text: str) -> list[Op]:
    doc = _reply_json(text)
    ops = doc.get("operations") if isinstance(doc, dict) else doc
    if isinstance(doc, dict) and ops is None and "op" in doc:
        ops = [doc]
    if not isinstance(ops, list) or not ops:
        raise AOVError("the reply needs a non-empty 'operations' list")
    return [Op.from_dict(o) for o in ops]


def ops_from_graph(old: AOVGraph, doc: Any, failed: str) -> list[Op]:
    """The localized operations that turn ``old`` into a whole proposed graph (as Flow's optimizer writes
    them); AOVError when the proposal changes more than those operations can. Statuses and data in the
    proposal are ignored: completed work always keeps its own."""
    from flowcore.aov.generate import (
        repair_document,  # a model's usual slips (one-sided links, list of records)
    )

    doc, notes = repair_document(doc, [a.to_dict() for a in old.agents])
    unknown = [n for n in notes if "unknown agent" in n]
    if unknown:
        raise AOVError(unknown[0].split(" replaced by")[0])
    new = AOVGraph.from_dict({**doc, "goal": old.goal}, lenient=True)
    removed = [s for s in old.subtasks if s not in new.subtasks]
    added = [s for s in new.subtasks if s not in old.subtasks]
    if [s for s in removed if s != failed]:
        raise AOVError(f"the proposed graph removes {', '.join(s for s in removed if s != failed)}; "
                       f"only the failed subtask {failed!r} may go")
    if removed and added:
        raise AOVError(f"the proposed graph both deletes {failed!r} and adds subtasks")
    ops = [Op("add", failed, new.subtasks[s].subtask_requirement, new.subtasks[s].agent, s) for s in added]
    ops += [Op("delete", failed)] if removed else []
    for sid in old.subtasks:
        if sid in new.subtasks:
            a, b = old.subtasks[sid], new.subtasks[sid]
            if a.subtask_requirement != b.subtask_requirement:
                ops.append(Op("edit", sid, b.subtask_requirement))
            if a.agent != b.agent:
                ops.append(Op("reassign", sid, agent=b.agent))
    ops = ops or [Op("rerun", failed)]
    applied = apply_ops(old, ops, failed)
    # helpers take the failed subtask's parents whatever the proposal said; every other edge must match
    mine = {e for e in applied.edges() if e[1] not in added}
    theirs = {e for e in new.edges() if e[1] not in added}
    if mine != theirs:
        extra = sorted(theirs - mine)[:3] + sorted(mine - theirs)[:3]
        raise AOVError("the proposed graph rewires edges beyond localized operations: "
                       + ", ".join(f"{p} -> {c}" for p, c in extra))
    return ops


def parse_proposal(text: str, graph: AOVGraph, failed: str) -> list[Op]:
    """Operations from a reply holding either ``{"operations": [...]}`` or a whole repaired graph."""
    doc = _reply_json(text)
    if isinstance(doc, dict) and "subtasks" in doc:
        return ops_from_graph(graph, doc, failed)
    return parse_ops(text)


def _signature(g: AOVGraph) -> str:
    return json.dumps([(s, st.subtask_requirement, st.agent, st.status, st.parents)
                       for s, st in g.subtasks.items()])


async def propose_repairs(graph: AOVGraph, failed: str, reason: str, k: int = 3, llm: Any = None,
                          log: list[dict] | None = None, attempt: int = 0, allow_delete: bool = True,
                          tried: tuple[str, ...] | list[str] = (),
                          budget: int = context.DEFAULT_BUDGET) -> RepairSet:
    """Up to ``k`` ranked proposals: the LLM's (k calls, made concurrently) when one is given, topped up by
    the rules. The prompt holds the whole log fitted into ``budget`` characters."""
    result = RepairSet(failed, reason, [])
    candidates: list[Proposal] = []
    if llm is not None:
        log_text = context.log_text(log or [], budget)
        agents = ", ".join(f"{a.id} ({a.role})" for a in graph.agents)
        graph_json = context.graph_text(graph)

        async def one(i: int) -> Proposal | str:
            prompt = REPAIR_PROMPT.format(failed=failed, reason=reason, graph=graph_json, log=log_text,
                                          agents=agents, number=i + 1, k=k)
            try:
                reply = await llm.chat(prompt, role="optimizer", json_mode=True,
                                       cache_salt=f"repair:{failed}:{attempt}:{i}")
                return Proposal.build(graph, parse_proposal(reply.text, graph, failed), failed, "llm")
            except AOVError as e:
                return f"LLM proposal {i + 1}: {e}"
            except Exception as e:  # noqa: BLE001 - LLM unreachable: the rules still give proposals
                return f"LLM proposal {i + 1}: {type(e).__name__}: {e}"

        for got in await asyncio.gather(*(one(i) for i in range(k))):
            if isinstance(got, str):
                result.dropped.append(got)
            else:
                candidates.append(got)
    for ops in rule_ops(graph, failed, reason, allow_delete, tried):
        try:
            candidates.append(Proposal.build(graph, ops, failed, "rules"))
        except AOVError as e:
            result.dropped.append(f"rule proposal {ops[0].describe()}: {e}")
    unique: list[Proposal] = []
    seen: set[str] = set()
    for p in candidates:
        sig = _signature(p.graph)
        if sig not in seen:
            seen.add(sig)
            unique.append(p)
    result.proposals = [unique[i] for i in M.rank([p.metrics for p in unique])][:k]
    return result
