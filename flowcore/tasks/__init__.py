"""Tasks (DESIGN §11): the four built-in benchmarks (GSM8K, MATH, HumanEval, MBPP) and a user's own tasks
(data + problem template + reference + metric), their loaders, metrics, scorers and the evaluation harness."""
from __future__ import annotations

from flowcore.tasks.data import (
    PAPER_SPLITS,
    DataError,
    read_split_file,
    split_ids,
    write_split_file,
)
from flowcore.tasks.harness import (
    EvalReport,
    ProblemResult,
    Runner,
    bootstrap_ci,
    endpoint_failure,
    evaluate,
    report_of,
)
from flowcore.tasks.problem import BENCHMARKS, TASK_OF, Problem, kind_of_problem
from flowcore.tasks.saved import find, from_file, get, kind_of, known_names, load, read_problems, split_info
from flowcore.tasks.scoring import (
    ScoreResult,
    extract_code,
    extract_number,
    last_boxed,
    math_equal,
    score,
)
from flowcore.tasks.task import BUILTIN, KINDS, Task, read_task

__all__ = ["BENCHMARKS", "BUILTIN", "KINDS", "TASK_OF", "DataError", "EvalReport", "PAPER_SPLITS", "Problem",
           "ProblemResult", "Runner", "ScoreResult", "Task", "bootstrap_ci", "endpoint_failure", "evaluate",
           "extract_code", "extract_number", "find", "from_file", "get", "kind_of", "kind_of_problem",
           "known_names", "last_boxed", "load", "math_equal", "read_problems", "read_split_file", "read_task",
           "report_of", "score", "split_ids", "split_info", "write_split_file"]
