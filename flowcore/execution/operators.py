"""The operators of DESIGN §3, dispatched by their catalogue name.

Each operator is implemented once, in ``_standalone_ops`` (stdlib + openai only), because compiled workflows
paste that module into themselves: the runtime and an exported workflow then run the very same code. This
module binds it to flowcore: the catalogue's ports, the LLM client and the sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flowcore import catalogue as cat
from flowcore.execution import sandbox
from flowcore.execution._standalone_ops import NOTE_OPS, OPERATORS, SKIPPED, NodeError, Route, Run, Value
from flowcore.llm.client import BudgetExceeded, NotConfigured

__all__ = ["NOTE_OPS", "OPERATORS", "PASSTHROUGH", "SKIPPED", "NodeError", "Route", "Run", "Value",
           "new_run", "required_ports", "run_operator"]

# Errors that stop a run as they are: a spent budget, a missing endpoint or a missing sandbox is no node's fault.
PASSTHROUGH: tuple[type[BaseException], ...] = (BudgetExceeded, NotConfigured, sandbox.SandboxUnavailable)
NON_OPERATORS = (cat.INTERFACE, cat.DECISION)


def required_ports(ops: Sequence[str] | None = None) -> dict[str, tuple[str, ...]]:
    """op -> names of its required (or default) ports, from the catalogue; a node whose required port
    receives only skipped values is itself skipped."""
    names = [o for o in (ops if ops is not None else cat.CATALOGUE) if o not in NON_OPERATORS]
    return {o: tuple(p.name for p in cat.CATALOGUE[o].inputs if p.required or p.default) for o in names}


def _verify_against_catalogue() -> None:
    """Every operator in the catalogue has an implementation reading exactly its ports."""
    for name, spec in cat.CATALOGUE.items():
        if name in NON_OPERATORS:
            continue
        if name not in OPERATORS:
            raise RuntimeError(f"operator {name} is in the catalogue but has no implementation")
        ports = tuple(p.name for p in spec.inputs)
        if OPERATORS[name][1] != ports:
            raise RuntimeError(f"operator {name}: implementation reads ports {OPERATORS[name][1]}, "
                               f"the catalogue declares {ports}")
    extra = set(OPERATORS) - set(cat.CATALOGUE)
    if extra:
        raise RuntimeError(f"implementations without a catalogue entry: {', '.join(sorted(extra))}")


_verify_against_catalogue()


def new_run(llm: Any, problem: str, entry_point: str | None = None, *, public_tests: str = "",
            ops: Sequence[str] | None = None) -> Run:
    """A per-problem executor bound to flowcore's sandbox and the catalogue's required ports."""
    return Run(llm, problem, entry_point, sandbox=sandbox, required=required_ports(ops),
               public_tests=public_tests, passthrough=PASSTHROUGH)


async def run_operator(op: str, ports: Mapping[str, Sequence[Value | str]], *, llm: Any, problem: str = "",
                       entry_point: str | None = None, prompt: str = "", note: str = "",
                       public_tests: str = "", node: str = "N1") -> Value:
    """Run one operator on its own (tests, trying a node in the editor). Strings become Text values; pass
    ``Value(code, "Code")`` for code. Port names are the catalogue's (aliases are resolved)."""
    spec = cat.CATALOGUE.get(cat.resolve(op) or "")
    if spec is None or spec.name in NON_OPERATORS:
        raise ValueError(f"unknown operator {op!r}; operators are {', '.join(OPERATORS)}")
    fed: dict[str, list[Value]] = {}
    for label, values in ports.items():
        port = spec.port(label)
        if port is None:
            raise ValueError(f"{spec.name} has no port {label!r}; its ports are "
                             f"{', '.join(p.name for p in spec.inputs)}")
        kind = port.types[0] if port.types[0] in (cat.PROBLEM, cat.ENTRY_POINT_T) else cat.TEXT
        fed.setdefault(port.name, []).extend(
            v if isinstance(v, Value) else Value(str(v), kind) for v in values)
    if not problem:  # the problem port's text is the run's problem (a TestOp prepends a HumanEval stub)
        problem = next((v.text for vs in fed.values() for v in vs if v.kind == cat.PROBLEM), "")
    run = new_run(llm, problem, entry_point, public_tests=public_tests, ops=[spec.name])
    out = await run.node(node, spec.name, fed, prompt=prompt, note=note)
    assert isinstance(out, Value)  # nothing is skipped without a Decision
    return out
