"""MermaidFlow Studio engine: workflows as typed Mermaid flowcharts, checked, compiled, run and evolved.

Usable without Streamlit. The command line (``python -m flowcore``) and the pages call these same functions.
"""

from __future__ import annotations

from .catalogue import CATALOGUE
from .checker import check, is_valid
from .mermaid import WorkflowSyntaxError, parse, parse_lenient, to_mermaid
from .model import Diagnostic, Edge, Node, Workflow

__all__ = ["CATALOGUE", "Diagnostic", "Edge", "Node", "Workflow", "WorkflowSyntaxError", "check", "compile",
           "is_valid", "parse", "parse_lenient", "to_mermaid"]


def compile(workflow: Workflow | str) -> str:  # noqa: A001 - the documented name (DESIGN §10)
    """Deterministic Python source for a workflow (no LLM involved)."""
    from .compiler import compile_workflow

    return compile_workflow(parse(workflow) if isinstance(workflow, str) else workflow)
