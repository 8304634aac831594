"""Flow's modularity metrics and its selection rule.

Steps are the topological generations S_1..S_T; ``P_avg = (1/T)·Σ|S_t| = |V|/T``; ``C_dependency`` is the
population standard deviation of node degree (in + out). The best graph has the highest P_avg; ties (within
1e-9) go to the lowest C_dependency, then to the lowest index.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from flowcore.aov.model import AOVError, AOVGraph, cycle_message

TIE = 1e-9


@dataclass(frozen=True)
class Metrics:
    P_avg: float
    C_dependency: float
    steps: list[list[str]]

    @property
    def T(self) -> int:
        return len(self.steps)

    def to_dict(self) -> dict:
        return {"P_avg": self.P_avg, "C_dependency": self.C_dependency, "steps": self.steps}


def _as_nx(graph: AOVGraph | nx.DiGraph) -> nx.DiGraph:
    return graph.to_networkx() if isinstance(graph, AOVGraph) else graph


def steps(graph: AOVGraph | nx.DiGraph) -> list[list[str]]:
    """Topological generations; inside a step, nodes keep their file order (deterministic output)."""
    g = _as_nx(graph)
    if g.number_of_nodes() == 0:
        raise AOVError("the graph is empty (no subtasks)")
    order = {n: i for i, n in enumerate(g.nodes)}
    try:  # linear; a cycle surfaces as NetworkXUnfeasible and only then is it looked for and named
        return [sorted(gen, key=order.__getitem__) for gen in nx.topological_generations(g)]
    except nx.NetworkXUnfeasible:
        raise AOVError(cycle_message(g) or "the graph has a cycle") from None


def p_avg(graph: AOVGraph | nx.DiGraph) -> float:
    gens = steps(graph)
    return sum(len(s) for s in gens) / len(gens)


def c_dependency(graph: AOVGraph | nx.DiGraph) -> float:
    g = _as_nx(graph)
    if g.number_of_nodes() == 0:
        raise AOVError("the graph is empty (no subtasks)")
    degs = [d for _, d in g.degree()]
    mean = sum(degs) / len(degs)
    return math.sqrt(sum((d - mean) ** 2 for d in degs) / len(degs))


def compute(graph: AOVGraph | nx.DiGraph) -> Metrics:
    g = _as_nx(graph)  # built once for both metrics
    gens = steps(g)
    return Metrics(sum(len(s) for s in gens) / len(gens), c_dependency(g), gens)


def _compare(a: tuple[int, Metrics], b: tuple[int, Metrics]) -> int:
    (ia, ma), (ib, mb) = a, b
    if abs(ma.P_avg - mb.P_avg) > TIE:
        return -1 if ma.P_avg > mb.P_avg else 1
    if abs(ma.C_dependency - mb.C_dependency) > TIE:
        return -1 if ma.C_dependency < mb.C_dependency else 1
    return -1 if ia < ib else (1 if ia > ib else 0)


def rank(metrics: Sequence[Metrics | None]) -> list[int]:
    """Indices best first under the selection rule; None entries (invalid candidates) are left out."""
    items = [(i, m) for i, m in enumerate(metrics) if m is not None]
    return [i for i, _ in sorted(items, key=functools.cmp_to_key(_compare))]


def choose(metrics: Sequence[Metrics | None]) -> int:
    order = rank(metrics)
    if not order:
        raise AOVError("no valid candidate to choose from")
    return order[0]
