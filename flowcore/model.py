"""The one typed workflow model every part of the engine shares.

Source positions (line, column) ride along for diagnostics but never take part in equality, so
``parse(print(w)) == w`` compares what a workflow *is*, not where it was written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from flowcore import catalogue as cat

# Node shapes written with brackets: key -> closer. The key is the opener, except for the two trapezoids
# (whose openers are those of the leaning shapes): "[/\\" is [/x\] and "[\\/" is [\x/]. "[|" is a rectangle
# with properties ([|field:value|x]). Other shapes are Mermaid 11 shape names written as shape data
# (A@{ shape: cloud }): Node.shape holds the name.
SHAPES = {
    "[": "]", "(": ")", "([": "])", "[[": "]]", "((": "))", "{": "}", "{{": "}}",
    "[(": ")]", ">": "]", "[/": "/]", "[\\": "\\]", "(((": ")))", "[/\\": "\\]", "[\\/": "/]", "(-": "-)",
    "[|": "]",
}
SHAPE_OPENER = {**{k: k for k in SHAPES}, "[/\\": "[/", "[\\/": "[\\"}
# Mermaid's name for each bracket shape (FlowDB vertex type)
SHAPE_TYPE = {"[": "square", "(": "round", "([": "stadium", "[[": "subroutine", "((": "circle", "{": "diamond",
              "{{": "hexagon", "[(": "cylinder", ">": "odd", "[/": "lean_right", "[\\": "lean_left",
              "(((": "doublecircle", "[/\\": "trapezoid", "[\\/": "inv_trapezoid", "(-": "ellipse", "[|": "rect"}
ARROWS = ("-->", "---", "-.->", "-.-", "==>", "===", "--x", "--o", "<-->")


@dataclass(slots=True)
class Node:
    """A workflow node: its Mermaid label and shape, operator type, prompt name, classes and subgraph."""

    id: str
    label: str | None = None  # the label as Mermaid reads it (quotes removed), None for a bare id
    shape: str = ""  # a key of SHAPES, a Mermaid shape name (shape data), or "" for a bare id
    op: str | None = None  # canonical operator type (catalogue name) or None when untyped
    prompt: str | None = None  # the prompt name given as (role: x) / (instruction: x)
    classes: list[str] = field(default_factory=list)  # non-operator (style) classes
    subgraph: str | None = None
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)
    label_type: str = "text"  # "markdown" for a "`...`" label
    op_class: str | None = None  # the class that gave the operator type, as written (ScEnSembleOp)
    props: dict = field(default_factory=dict)  # [|field:value|x]
    data: dict = field(default_factory=dict)  # other shape data (icon, img, form, pos, constraint, w, h)

    @property
    def is_interface(self) -> bool:
        return self.op == cat.INTERFACE


@dataclass(slots=True)
class Edge:
    """A workflow edge: ends, label (the target's input port or a route), arrow, id, data and classes."""

    src: str
    dst: str
    label: str | None = None  # the target's input port, or a Decision route (Passed/Failed)
    arrow: str = "-->"  # head, stroke and length as Mermaid reads them, in one canonical spelling
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)
    label_type: str = "text"
    id: str | None = None  # an edge id written by the user (A e1@--> B)
    data: dict = field(default_factory=dict)  # edge data (e1@{ animate: true })
    classes: list[str] = field(default_factory=list)


@dataclass
class Subgraph:
    """A Mermaid subgraph: id, title, parent, direction and classes."""

    id: str
    title: str | None = None
    parent: str | None = None
    direction: str | None = None
    label_type: str = "text"
    classes: list[str] = field(default_factory=list)


@dataclass
class Workflow:
    """A whole workflow: its nodes, edges, prompts, classDefs, subgraphs and the statements kept as written."""

    direction: str = "TD"
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    class_defs: dict[str, str] = field(default_factory=dict)
    subgraphs: dict[str, Subgraph] = field(default_factory=dict)
    extras: list[str] = field(default_factory=list)  # style / linkStyle / click / directives: kept, ignored
    header: str = "flowchart"  # flowchart, graph, flowchart-elk or swimlane-beta
    front_matter: str | None = None  # YAML between --- lines, kept as written

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
    """One finding of the checker or the reader: code, severity, message and where (line, column, node)."""

    code: str
    severity: str  # "error" | "warning"
    message: str
    line: int | None = None
    column: int | None = None
    node: str | None = None
    # a syntax error moved to the label, bracket or quote left open that caused it: where Mermaid itself stopped
    mermaid_at: tuple[int, int | None] | None = None

    def __init__(self, code: str, severity: str, message: str, line: int | None = None, column: int | None = None,
                 node: str | None = None, mermaid_at: tuple[int, int | None] | None = None) -> None:
        # (dataclass keeps an __init__ the class defines) the fields stored straight into the instance's dict: a
        # frozen dataclass's own __init__ calls object.__setattr__ per field, 4x slower, and a large workflow's
        # check makes a diagnostic per node (tests/checker: equal, hashable, frozen, picklable as before)
        d = self.__dict__
        d["code"], d["severity"], d["message"], d["line"], d["column"], d["node"] = (code, severity, message, line,
                                                                                     column, node)
        if mermaid_at is not None:  # rare (a syntax error moved to its opener): the class's None otherwise
            d["mermaid_at"] = mermaid_at

    def to_dict(self) -> dict:
        out = {"code": self.code, "severity": self.severity, "message": self.message,
               "line": self.line, "column": self.column, "node": self.node}
        if self.mermaid_at is not None:
            out["mermaid_at"] = list(self.mermaid_at)
        return out

    def located(self) -> str:
        """The message led by where it is ('line 3: ...', 'workflow: ...'), saying the line once: a reader's
        message already starts with its line."""
        if not self.line:
            return f"workflow: {self.message}"
        lead = f"line {self.line}:"
        return self.message if self.message.startswith(lead) else f"{lead} {self.message}"

    def __str__(self) -> str:
        where = f"{self.line}:{self.column or 1}: " if self.line else ""
        node = f" [{self.node}]" if self.node else ""
        return f"{where}{self.code} {self.severity}: {self.message}{node}"
