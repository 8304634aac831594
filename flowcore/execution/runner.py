"""The runtime as the benchmark harness's runner: one problem in, (answer, cost) out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowcore.execution.runtime import Plan, execute
from flowcore.tasks import Problem, kind_of_problem


def make_runner(plan: Plan, llm: Any) -> Callable:
    """An async ``(problem) -> (answer, cost)`` running the plan with a child LLM per problem, so each
    problem's cost is its own. Code tasks get the entry point and the problem's *public* examples only."""

    async def runner(problem: Problem) -> tuple[str, float]:
        child = llm.child() if hasattr(llm, "child") else llm
        code = kind_of_problem(problem) == "code"
        try:
            res = await execute(plan, problem.question, llm=child,
                                entry_point=problem.entry_point if code else None,
                                public_tests=problem.public_tests if code else "")
        except Exception as exc:
            exc.cost = getattr(getattr(child, "usage", None), "cost", 0.0)  # the harness records the spend
            raise
        return res.answer, res.cost

    return runner
