"""One problem, as the Run page runs it: the next sample problem of a task, and one run's outcome as a plain
dict (the answer with its cost and trace, or the error in words) that a page keeps in its session and shows."""

from __future__ import annotations

from typing import Any

from flowcore.evaluation import store as es
from flowcore.execution.runtime import NodeError, WorkflowInvalid
from flowcore.execution.sandbox import SandboxUnavailable
from flowcore.llm.client import LLMError, LLMSettings
from flowcore.mermaid.reader import WorkflowSyntaxError
from flowcore.tasks import load
from flowcore.workspace.store import Workspace

# What a run can fail with that is the workflow's, the endpoint's or the sandbox's, said in words on the page.
RUN_ERRORS = (WorkflowSyntaxError, WorkflowInvalid, NodeError, LLMError, ValueError, SandboxUnavailable)


def sample_problem(benchmark: str, used: int) -> dict[str, str]:
    """The validation problem after the ``used`` already shown (round robin): question, entry point, and the
    reference when it is an answer (a code task's reference is its tests, not something to type)."""
    problems = load(benchmark, "validation", limit=used + 1)
    p = problems[used % len(problems)]
    return {"id": p.id, "question": p.question, "entry": p.entry_point or "",
            "reference": "" if es.kind_of(benchmark) == "code" else p.reference}


def run_one(settings: LLMSettings, ws: Workspace | None, text: str, task: str, problem: str, entry: str | None,
            *, benchmark: str, reference: str, sample: dict | None, trace_by: str,
            workflow_name: str | None) -> dict[str, Any]:
    """Run ``text`` once on ``problem``: {"answer", "cost", "calls", "trace", ...} or {"error"}; either way with
    the workflow ``text`` it belongs to."""
    try:
        res = es.run_problem(settings, ws, text, task, problem, entry, trace_by=trace_by,
                             workflow_name=workflow_name)
    except RUN_ERRORS as e:
        return {"error": str(e), "text": text}
    return {"answer": res.answer, "cost": res.cost, "calls": res.calls, "trace": res.trace, "task": task,
            "text": text, "benchmark": benchmark, "problem": problem, "reference": reference, "sample": sample,
            "tps": res.tokens_per_s, "priced": res.price_known, "cached": res.cached_calls,
            "estimated": res.estimated_calls}


def problems_for(benchmark: str, source: str, limit: int, upload_name: str | None = None,
                 upload_data: bytes | None = None) -> tuple[list, str]:
    """The problems of an evaluation and the name of where they came from: a split, or an uploaded file."""
    if source == "file":
        if upload_name is None or upload_data is None:
            raise ValueError("choose a .jsonl file to upload first")
        problems = es.problems_from_upload(benchmark, upload_name, upload_data)
        return (problems[:limit] if limit else problems), f"file:{upload_name}"
    return load(benchmark, source, limit=limit or None), source
