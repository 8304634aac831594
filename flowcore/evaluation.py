"""Evaluate a workflow on benchmark problems: the runtime as the harness's runner (used by the command line,
the Run page and evolution)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .benchmarks import TASK_OF, EvalReport, Problem, ProblemResult, evaluate
from .benchmarks.harness import CODE_BENCHMARKS
from .model import Workflow
from .runtime import Plan, execute, prepare
from .sandbox import require_sandbox

__all__ = ["evaluate_workflow", "make_runner"]


def make_runner(plan: Plan, llm: Any) -> Callable:
    """An async ``(problem) -> (answer, cost)`` running the plan with a child LLM per problem, so each
    problem's cost is its own. Code tasks get the entry point and the problem's *public* examples only."""

    async def runner(problem: Problem) -> tuple[str, float]:
        child = llm.child() if hasattr(llm, "child") else llm
        code = TASK_OF.get(problem.benchmark) == "code"
        try:
            res = await execute(plan, problem.question, llm=child,
                                entry_point=problem.entry_point if code else None,
                                public_tests=problem.public_tests if code else "")
        except Exception as exc:
            exc.cost = getattr(getattr(child, "usage", None), "cost", 0.0)  # the harness records the spend
            raise
        return res.answer, res.cost

    return runner


async def evaluate_workflow(workflow: Workflow, benchmark: str, problems: list[Problem], *, llm: Any,
                            concurrency: int = 8,
                            progress: Callable[[int, int, ProblemResult], None] | None = None,
                            cancel: threading.Event | None = None,
                            timeout: float | None = None) -> EvalReport:
    """Run ``workflow`` on every problem (at most ``concurrency`` at once) and score the answers.

    The workflow is checked once for the benchmark's task (WorkflowInvalid before anything runs); a problem
    whose run fails (an LLM error, a node failure) is recorded with its error and the evaluation goes on."""
    if benchmark not in TASK_OF:
        raise ValueError(f"unknown benchmark '{benchmark}' (choose from {', '.join(TASK_OF)})")
    wrong = sorted({p.benchmark for p in problems} - {benchmark})
    if wrong:
        raise ValueError(f"problems of benchmark {', '.join(wrong)} given to an evaluation on {benchmark}")
    plan = prepare(workflow, TASK_OF[benchmark])
    from . import cluster

    if cluster.enabled() and hasattr(llm, "settings"):  # MERMAIDFLOW_RAY: each problem a Ray task
        if any(p.benchmark in CODE_BENCHMARKS for p in problems):
            require_sandbox()
        from .mermaid import to_mermaid

        return await cluster.evaluate(to_mermaid(workflow), benchmark, problems, llm=llm, concurrency=concurrency,
                                      progress=progress, cancel=cancel, timeout=timeout)
    report = await evaluate(make_runner(plan, llm), problems, concurrency=concurrency, progress=progress,
                            cancel=cancel, timeout=timeout)
    if not problems:
        report.benchmark = benchmark
    return report
