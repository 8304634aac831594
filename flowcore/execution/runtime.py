"""Execute a workflow on one problem (DESIGN §3, §6).

``prepare`` turns a checked workflow into a plan (which values feed which port, Decision routes, topological
steps); the compiler unrolls the same plan into Python, so the runtime and a compiled module issue the same
operator calls. Here every node starts as soon as the nodes it depends on are done, so independent branches
run concurrently.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from flowcore import catalogue as cat
from flowcore.checker.check import check
from flowcore.execution import waits
from flowcore.execution.operators import NOTE_OPS, NodeError, Route, Run, new_run
from flowcore.execution.sandbox import require_sandbox
from flowcore.mermaid.reader import label_type_word
from flowcore.model import Diagnostic, Workflow

__all__ = ["NodeError", "NodePlan", "Plan", "RunResult", "WorkflowInvalid", "execute", "prepare",
           "run_workflow"]

INPUTS = ("PROBLEM", "ENTRY_POINT")
CODE_OPS = frozenset({"ProgrammerOp", "TestOp"})  # operators that run generated code in the sandbox


class WorkflowInvalid(ValueError):
    """The checker found errors; nothing was run."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = diagnostics
        lines = "\n".join(f"  {d}" for d in diagnostics)
        n = len(diagnostics)
        super().__init__(f"the workflow is invalid ({n} error(s)); fix it before running:\n{lines}")


@dataclass
class RunResult:
    answer: str
    cost: float
    calls: int
    trace: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class NodePlan:
    id: str
    op: str
    ports: tuple[tuple[str, tuple[str, ...]], ...]  # (port name, source node ids in edge order)
    routes: tuple[tuple[str, str], ...] = ()  # (Decision id, Passed|Failed) routes into this node
    prompt_name: str | None = None
    prompt: str = ""
    note: str = ""

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys([s for _, srcs in self.ports for s in srcs] + [d for d, _ in self.routes]))


@dataclass(frozen=True)
class Plan:
    workflow: Workflow
    task: str | None
    steps: tuple[tuple[NodePlan, ...], ...]  # topological generations: each step's nodes are independent
    returns: tuple[tuple[str, str | None], ...]  # RETURN's inputs: (source id, route label or None)

    @property
    def nodes(self) -> list[NodePlan]:
        return [n for step in self.steps for n in step]

    @property
    def ops(self) -> list[str]:
        return sorted({n.op for n in self.nodes if n.op != cat.DECISION})

    def uses(self, interface: str) -> bool:
        return any(interface in n.sources for n in self.nodes) or any(s == interface for s, _ in self.returns)


def _route_label(label: str | None) -> str:
    return "Passed" if (label or "").strip().lower() == "passed" else "Failed"


def note_of(node: Any) -> str:
    """The free text of a label after its operator word and (role: x): 'Programmer<br/>edge cases' ->
    'edge cases'. Operators that take no prompt use it as a hint."""
    text = re.sub(r"<br\s*/?>", " ", node.label or "", flags=re.I)
    text = re.sub(r"\(\s*(?:role|instruction)\s*:[^)]*\)", " ", text, flags=re.I)
    word = label_type_word(text.strip())
    if word and cat.resolve(word) == node.op:
        text = text.strip()[len(word):]
    return " ".join(text.split()).strip(" :-")


def prepare(workflow: Workflow, task: str | None = None) -> Plan:
    """Check the workflow (raising WorkflowInvalid on any error) and lay out its execution plan."""
    errors = [d for d in check(workflow, task) if d.severity == "error"]
    if errors:
        raise WorkflowInvalid(errors)
    w = workflow
    g = nx.DiGraph()
    order = {nid: i for i, nid in enumerate(w.nodes)}
    inner = [nid for nid, n in w.nodes.items() if n.op != cat.INTERFACE]
    g.add_nodes_from(inner)
    plans: dict[str, NodePlan] = {}
    returns: list[tuple[str, str | None]] = []
    into = w.edges_into()
    for nid in inner:
        node = w.nodes[nid]
        ports: dict[str, list[str]] = {}
        routes: list[tuple[str, str]] = []
        for e in into[nid]:
            if w.nodes[e.src].op == cat.DECISION:
                routes.append((e.src, _route_label(e.label)))
            else:
                port = cat.port_of(node.op, nid, e.label)
                assert port is not None, f"checked workflow has an edge into an unknown port: {e}"
                ports.setdefault(port.name, []).append(e.src)
            if e.src in g:
                g.add_edge(e.src, nid)
        prompt = w.prompts.get(node.prompt, "") if node.prompt else ""
        plans[nid] = NodePlan(nid, node.op, tuple((p, tuple(s)) for p, s in ports.items()), tuple(routes),
                              node.prompt if node.prompt in w.prompts else None, prompt,
                              note_of(node) if node.op in NOTE_OPS else "")
    for e in into.get("RETURN", []):
        returns.append((e.src, _route_label(e.label) if w.nodes[e.src].op == cat.DECISION else None))
    steps = tuple(tuple(plans[n] for n in sorted(gen, key=order.__getitem__))
                  for gen in nx.topological_generations(g))
    return Plan(w, task, steps, tuple(returns))


async def execute(plan: Plan, problem: str, *, llm: Any, entry_point: str | None = None,
                  public_tests: str = "") -> RunResult:
    """Run a prepared plan on one problem. A failing node raises NodeError naming it."""
    if CODE_OPS & set(plan.ops):
        require_sandbox()  # before any LLM call: this workflow's code could only be refused later
    run: Run = new_run(llm, problem, entry_point, public_tests=public_tests, ops=plan.ops)
    tasks: dict[str, asyncio.Task] = {}

    def value(src: str) -> Any:
        if src == "PROBLEM":
            return run.problem
        if src == "ENTRY_POINT":
            return run.entry
        return tasks[src].result()

    async def step(np: NodePlan) -> Any:
        for src in np.sources:
            if src in tasks:
                await tasks[src]  # re-raises the dependency's failure
        ports = {name: [value(s) for s in srcs] for name, srcs in np.ports}
        with waits.node(np.id, np.sources):  # own time is taken along the longest chain of nodes
            if np.op == cat.DECISION:
                return run.decide(np.id, ports)
            routes = [(value(d), label) for d, label in np.routes]
            return await run.node(np.id, np.op, ports, prompt=np.prompt, note=np.note, routes=routes)

    for np in plan.nodes:  # topological order: dependencies get their tasks first
        tasks[np.id] = asyncio.create_task(step(np), name=f"node {np.id}")
    try:
        await asyncio.gather(*tasks.values())
    except BaseException:
        for t in tasks.values():
            t.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        raise
    inputs: list[Any] = []
    for src, label in plan.returns:
        v = value(src)
        inputs.append((v, label) if isinstance(v, Route) else v)
    answer = run.finish(inputs)
    rank = {n.id: i for i, n in enumerate(plan.nodes)}
    trace = sorted(run.trace, key=lambda r: rank.get(r["node"], len(rank)))
    return RunResult(answer, run.cost, run.calls, trace)


async def run_workflow(workflow: Workflow, problem: str, *, entry_point: str | None = None, llm: Any,
                       public_tests: str = "", task: str | None = None) -> RunResult:
    """Check, then execute ``workflow`` on one problem with ``llm`` (a flowcore.llm.client.LLM or compatible).

    Raises WorkflowInvalid before any call when the checker reports errors, NodeError when a node fails."""
    return await execute(prepare(workflow, task), problem, llm=llm, entry_point=entry_point,
                         public_tests=public_tests)
