"""Evaluate a workflow on benchmark problems, here or on Ray (used by the command line, the Run page and
evolution)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from flowcore.execution.runner import make_runner
from flowcore.execution.runtime import prepare
from flowcore.execution.sandbox import require_sandbox
from flowcore.model import Workflow
from flowcore.tasks import EvalReport, Problem, ProblemResult, evaluate, kind_of
from flowcore.tasks.problem import needs_sandbox

__all__ = ["evaluate_workflow", "make_runner"]  # make_runner: flowcore.execution.runner


async def evaluate_workflow(workflow: Workflow, benchmark: str, problems: list[Problem], *, llm: Any,
                            concurrency: int = 8,
                            progress: Callable[[int, int, ProblemResult], None] | None = None,
                            cancel: threading.Event | None = None,
                            timeout: float | None = None) -> EvalReport:
    """Run ``workflow`` on every problem (at most ``concurrency`` at once) and score the answers.

    The workflow is checked once for the benchmark's task (WorkflowInvalid before anything runs); a problem
    whose run fails (an LLM error, a node failure) is recorded with its error and the evaluation goes on."""
    kind = kind_of(benchmark)
    if kind is None:
        from flowcore.tasks import get

        get(benchmark)  # ValueError naming the tasks there are
    wrong = sorted({p.benchmark for p in problems} - {benchmark})
    if wrong:
        raise ValueError(f"problems of benchmark {', '.join(wrong)} given to an evaluation on {benchmark}")
    plan = prepare(workflow, kind)
    from flowcore.execution import cluster

    if cluster.enabled() and hasattr(llm, "settings"):  # MERMAIDFLOW_RAY: each problem a Ray task
        if any(needs_sandbox(p) for p in problems):
            require_sandbox()
        from flowcore.mermaid.reader import to_mermaid

        return await cluster.evaluate(to_mermaid(workflow), benchmark, problems, llm=llm, concurrency=concurrency,
                                      progress=progress, cancel=cancel, timeout=timeout)
    report = await evaluate(make_runner(plan, llm), problems, concurrency=concurrency, progress=progress,
                            cancel=cancel, timeout=timeout, llm=llm)
    if not problems:
        report.benchmark = benchmark
    return report
