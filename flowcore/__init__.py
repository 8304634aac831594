"""MermaidFlow Studio engine: workflows as typed Mermaid flowcharts, checked, compiled, run and evolved.

Usable without Streamlit. The command line (``python -m flowcore``) and the pages call these same functions.
The public names below are imported on first use (module ``__getattr__``), so ``import flowcore`` or a
command that needs only part of the engine does not pay for the rest at start-up.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing costs ~3 ms of every start-up
if TYPE_CHECKING:
    from flowcore.catalogue import CATALOGUE
    from flowcore.checker.check import check, is_valid
    from flowcore.mermaid.reader import WorkflowSyntaxError, parse, parse_lenient, to_mermaid
    from flowcore.model import Diagnostic, Edge, Node, Workflow

__all__ = ["CATALOGUE", "Diagnostic", "Edge", "Node", "Workflow", "WorkflowSyntaxError", "check", "compile",
           "is_valid", "parse", "parse_lenient", "to_mermaid"]

# public name -> the module that defines it
_LAZY = {"CATALOGUE": "catalogue", "check": "checker.check", "is_valid": "checker.check",
         "WorkflowSyntaxError": "mermaid.reader", "parse": "mermaid.reader", "parse_lenient": "mermaid.reader",
         "to_mermaid": "mermaid.reader", "Diagnostic": "model",
         "Edge": "model", "Node": "model", "Workflow": "model"}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flowcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def compile(workflow: Workflow | str) -> str:  # noqa: A001 - the documented name (DESIGN §10)
    """Deterministic Python source for a workflow (no LLM involved)."""
    from flowcore.execution.compiler import compile_workflow
    from flowcore.mermaid.reader import parse

    return compile_workflow(parse(workflow) if isinstance(workflow, str) else workflow)
