"""The operator catalogue (DESIGN §3): the one table that parser, checker, compiler, runtime and evolution read.

Nothing else in the code base restates an operator's ports, types or task restrictions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

# Port types. A Code is also a Text; a Problem is not a Text.
PROBLEM, ENTRY_POINT_T, TEXT, CODE, VERDICT = "Problem", "EntryPoint", "Text", "Code", "Verdict"
SUBTYPES: dict[str, frozenset[str]] = {
    PROBLEM: frozenset({PROBLEM}),
    ENTRY_POINT_T: frozenset({ENTRY_POINT_T}),
    TEXT: frozenset({TEXT}),
    CODE: frozenset({CODE, TEXT}),
    VERDICT: frozenset({VERDICT}),
}

TASKS = ("math", "code", "text")  # text: a task of your own that is neither (DESIGN §11)
INTERFACE = "Interface"
DECISION = "Decision"
ROUTES = ("Passed", "Failed")
# Output-type rules that depend on the inputs.
SAME_AS_SOLUTIONS = "same-as-solutions"
SAME_AS_SOLUTION = "same-as-solution"


def is_assignable(source_type: str, port_types: tuple[str, ...]) -> bool:
    """True when a value of ``source_type`` may flow into a port accepting ``port_types``."""
    return any(t in SUBTYPES.get(source_type, frozenset({source_type})) for t in port_types)


@functools.lru_cache(maxsize=1024)
def compatible(source_types: tuple[str, ...], port_types: tuple[str, ...]) -> bool:
    """True when any of a node's output types may flow into a port (cached: the table is tiny)."""
    return any(is_assignable(t, port_types) for t in source_types)


@dataclass(frozen=True)
class Port:
    """An operator input: its name, the types it takes and how many inputs it needs."""

    name: str
    types: tuple[str, ...]
    default: bool = False  # the port an unlabelled edge feeds
    required: bool = False
    min_inputs: int = 0  # ScEnsemble needs two solutions
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpSpec:
    """An operator of the catalogue: its inputs, output, tasks, aliases and colour."""

    name: str  # canonical class name, e.g. "CustomOp"
    inputs: tuple[Port, ...]
    output: tuple[str, ...] | str  # output types, or a rule name (SAME_AS_*)
    tasks: tuple[str, ...] = TASKS
    aliases: tuple[str, ...] = ()
    uses_prompt: bool = False  # the node's (role: x) prompt is its instruction
    llm: bool = True  # calls the executor LLM
    description: str = ""
    color: str = "#e8f0fe"
    interfaces: tuple[str, ...] = field(default=())  # for Interface: the node ids it may take

    @property
    def default_port(self) -> Port | None:
        return next((p for p in self.inputs if p.default), None)

    def port(self, label: str | None) -> Port | None:
        """The port an edge label names (case-insensitive, aliases allowed); None label -> default port."""
        if label is None or not label.strip():
            return self.default_port
        key = _norm(label)
        for p in self.inputs:
            if key == _norm(p.name) or key in {_norm(a) for a in p.aliases}:
                return p
        return None


def _norm(s: str) -> str:
    return s.strip().lower().replace(" ", "_").replace("-", "_")


# Interface nodes are distinguished by id; their ports/outputs are listed per id below.
INTERFACE_NODES: dict[str, tuple[tuple[Port, ...], tuple[str, ...], tuple[str, ...]]] = {
    # id: (inputs, output types, tasks)
    "PROBLEM": ((), (PROBLEM,), TASKS),
    "ENTRY_POINT": ((), (ENTRY_POINT_T,), ("code",)),
    "RETURN": ((Port("response", (TEXT,), default=True, required=True),), (), TASKS),
}

_solution = Port("solution", (TEXT,), default=True, required=True)
_problem = Port("problem", (PROBLEM,))

CATALOGUE: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec(INTERFACE, (), (), aliases=("Interfaces", "InterfaceOp"), llm=False, color="#fff4dd",
               description="Workflow input (PROBLEM, ENTRY_POINT) or output (RETURN)."),
        OpSpec("CustomOp",
               (Port("input", (TEXT, PROBLEM), default=True, required=True, aliases=("inputs",)),),
               (TEXT,), aliases=("Custom",), uses_prompt=True, color="#e3f2fd",
               description="One LLM call: the node's prompt, then its inputs joined."),
        OpSpec("AnswerGenerateOp",
               (Port("input", (TEXT, PROBLEM), default=True, required=True, aliases=("inputs",)),),
               (TEXT,), aliases=("AnswerGenerate",), color="#e3f2fd",
               description="Think step by step, then give the answer."),
        OpSpec("ProgrammerOp",
               (Port("problem", (PROBLEM,), default=True, required=True), Port("analysis", (TEXT,))),
               (TEXT,), tasks=("math", "text"), aliases=("Programmer", "ProgramOp"), color="#ede7f6",
               description="Writes a solve() program, runs it in the sandbox, retries on errors (3 tries)."),
        OpSpec("ScEnsembleOp",
               (Port("solutions", (TEXT,), default=True, required=True, min_inputs=2,
                     aliases=("solution", "input", "inputs")), _problem),
               SAME_AS_SOLUTIONS, aliases=("ScEnsemble", "ScEnSembleOp", "ScEnSemble", "Ensemble"),
               color="#fce4ec",
               description="Asks which lettered solution is most consistent with the others; returns it."),
        OpSpec("CustomCodeGenerateOp",
               (Port("problem", (PROBLEM,), default=True, required=True),
                Port("entry_point", (ENTRY_POINT_T,), required=True, aliases=("entrypoint",))),
               (CODE,), tasks=("code",), aliases=("CustomCodeGenerate", "CodeGenerate"), uses_prompt=True,
               color="#e8f5e9", description="Generates a function named by the entry point."),
        OpSpec("TestOp",
               (Port("solution", (CODE,), default=True, required=True), _problem,
                Port("entry_point", (ENTRY_POINT_T,), aliases=("entrypoint",))),
               (CODE, VERDICT), tasks=("code",), aliases=("Test",), color="#fff3e0",
               description="Runs the public examples; asks for a fix on failure (up to 3 loops)."),
        OpSpec("ReviewOp", (_solution, _problem), (TEXT,), aliases=("Review",), color="#f3e5f5",
               description="Reviews a solution and returns feedback."),
        OpSpec("ReviseOp",
               (_solution, Port("feedback", (TEXT,)), _problem),
               SAME_AS_SOLUTION, aliases=("Revise",), color="#f3e5f5",
               description="Revises a solution using feedback."),
        OpSpec("FormatOp", (_solution, _problem), (TEXT,), tasks=("math", "text"), aliases=("Format",),
               color="#eceff1", description="Extracts the final answer in the expected format."),
        OpSpec(DECISION, (Port("verdict", (VERDICT,), default=True, required=True),), (),
               tasks=("code",), aliases=("Condition", "DecisionOp", "ConditionOp"), llm=False, color="#fffde7",
               description="Routes the tested solution along 'Passed' / 'Failed' edges."),
    )
}

_LOOKUP: dict[str, str] = {}
for _op in CATALOGUE.values():
    for _n in (_op.name, *_op.aliases):
        _LOOKUP[_n.lower()] = _op.name
        if _n.lower().endswith("op"):
            _LOOKUP.setdefault(_n.lower()[:-2], _op.name)


def resolve(name: str | None) -> str | None:
    """Canonical operator name for a class name, alias or label word; None when unknown."""
    if not name:
        return None
    return _LOOKUP.get(name.strip().lower())


def suggest(name: str) -> str | None:
    """The nearest known operator name, for 'did you mean' messages."""
    import difflib  # here: only a misspelt name needs it, and `check` starts faster without

    hits = difflib.get_close_matches(name.lower(), list(_LOOKUP), n=1, cutoff=0.6)
    return _LOOKUP[hits[0]] if hits else None


def spec(op: str) -> OpSpec:
    return CATALOGUE[op]


def inputs_of(op: str, node_id: str) -> tuple[Port, ...]:
    if op == INTERFACE:
        return INTERFACE_NODES.get(node_id, ((), (), TASKS))[0]
    return CATALOGUE[op].inputs


@functools.lru_cache(maxsize=8192)
def port_of(op: str, node_id: str, label: str | None) -> Port | None:
    if op == INTERFACE:
        ports = inputs_of(op, node_id)
        if label is None or not label.strip():
            return next((p for p in ports if p.default), None)
        return next((p for p in ports if _norm(p.name) == _norm(label)), None)
    return CATALOGUE[op].port(label)


def tasks_of(op: str, node_id: str) -> tuple[str, ...]:
    if op == INTERFACE:
        return INTERFACE_NODES.get(node_id, ((), (), TASKS))[2]
    return CATALOGUE[op].tasks


def operators_for(task: str | None) -> list[str]:
    """Non-interface operators allowed for a task (all when task is None)."""
    return [n for n, s in CATALOGUE.items() if n != INTERFACE and (task is None or task in s.tasks)]
