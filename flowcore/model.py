"""The one typed workflow model every part of the engine shares.

Source positions (line, column) ride along for diagnostics but never take part in equality, so
``parse(print(w)) == w`` compares what a workflow *is*, not where it was written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from . import catalogue as cat

SHAPES = {  # canonical opener -> closer
    "[": "]", "(": ")", "([": "])", "[[": "]]", "((": "))", "{": "}", "{{": "}}",
    "[(": ")]", ">": "]", "[/": "/]", "[\\": "\\]", "(((": ")))",
}
ARROWS = ("-->", "---", "-.->", "-.-", "==>", "===", "--x", "--o", "<-->")


@dataclass
class Node:
    id: str
    label: str | None = None  # raw label text between the brackets (quotes removed)
    shape: str = ""  # opener from SHAPES, "" for a bare id
    op: str | None = None  # canonical operator type (catalogue name) or None when untyped
    prompt: str | None = None  # the prompt name given as (role: x) / (instruction: x)
    classes: list[str] = field(default_factory=list)  # non-operator (style) classes
    subgraph: str | None = None
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    @property
    def is_interface(self) -> bool:
        return self.op == cat.INTERFACE


@dataclass
class Edge:
    src: str
    dst: str
    label: str | None = None  # the target's input port, or a Decision route (Passed/Failed)
    arrow: str = "-->"
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)


@dataclass
class Subgraph:
    id: str
    title: str | None = None
    parent: str | None = None
    direction: str | None = None


@dataclass
class Workflow:
    direction: str = "TD"
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    class_defs: dict[str, str] = field(default_factory=dict)
    subgraphs: dict[str, Subgraph] = field(default_factory=dict)
    extras: list[str] = field(default_factory=list)  # style / linkStyle / click / directives: kept, ignored

    def copy(self) -> Workflow:
        return copy.deepcopy(self)

    def in_edges(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.dst == node_id]

    def out_edges(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.src == node_id]

    def edges_into(self) -> dict[str, list[Edge]]:
        """Node id -> its incoming edges in edge order, for all nodes in one pass (``in_edges`` per node in a
        loop would be quadratic)."""
        index: dict[str, list[Edge]] = {nid: [] for nid in self.nodes}
        for e in self.edges:
            index.setdefault(e.dst, []).append(e)
        return index

    def to_networkx(self):  # noqa: ANN201 - networkx is imported lazily to keep `import flowcore` light
        import networkx as nx

        g = nx.MultiDiGraph()
        g.add_nodes_from(self.nodes)
        for i, e in enumerate(self.edges):
            g.add_edge(e.src, e.dst, key=i, label=e.label)
        return g

    def new_id(self, prefix: str) -> str:
        """A fresh node id such as C3 (prefix + smallest unused number)."""
        i = 1
        while f"{prefix}{i}" in self.nodes or f"{prefix}{i}" in self.subgraphs:
            i += 1
        return f"{prefix}{i}"


@dataclass(frozen=True)
class Diagnostic:
    code: str
    severity: str  # "error" | "warning"
    message: str
    line: int | None = None
    column: int | None = None
    node: str | None = None

    def to_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "line": self.line, "column": self.column, "node": self.node}

    def __str__(self) -> str:
        where = f"{self.line}:{self.column or 1}: " if self.line else ""
        node = f" [{self.node}]" if self.node else ""
        return f"{where}{self.code} {self.severity}: {self.message}{node}"
