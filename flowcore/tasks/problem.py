"""A benchmark problem, and the benchmarks there are: what the loaders make and the scorers judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BENCHMARKS = ("gsm8k", "math", "humaneval", "mbpp")
TASK_OF = {"gsm8k": "math", "math": "math", "humaneval": "code", "mbpp": "code"}


@dataclass
class Problem:
    id: str
    benchmark: str
    question: str  # the text given to a workflow as PROBLEM
    reference: str  # math: final answer string; code: canonical solution
    entry_point: str | None = None
    tests: str = ""  # hidden benchmark tests: only the scorer may run them
    public_tests: str = ""  # asserts taken from the problem statement: all a TestOp may use
    meta: dict[str, Any] = field(default_factory=dict)
    metric: Any = None  # a user task's Metric (flowcore.tasks.metrics); None: the benchmark's own scorer


def kind_of_problem(problem: Problem) -> str | None:
    """math, code or text: the kind of the task this problem belongs to."""
    if problem.metric is not None:
        return problem.metric.kind
    return TASK_OF.get(problem.benchmark)


def needs_sandbox(problem: Problem) -> bool:
    """Scoring runs code (hidden tests, a python metric): it can only run in the sandbox."""
    if problem.metric is not None:
        return problem.metric.name in ("python", "tests")
    return TASK_OF.get(problem.benchmark) == "code"
