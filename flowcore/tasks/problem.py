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
