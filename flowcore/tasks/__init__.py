"""Benchmarks: GSM8K, MATH, HumanEval, MBPP loaders, scorers and the evaluation harness (DESIGN §7)."""
from __future__ import annotations

from flowcore.tasks.data import (
    PAPER_SPLITS,
    DataError,
    load,
    read_problems,
    read_split_file,
    split_ids,
    split_info,
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
from flowcore.tasks.problem import BENCHMARKS, TASK_OF, Problem
from flowcore.tasks.scoring import (
    ScoreResult,
    extract_code,
    extract_number,
    last_boxed,
    math_equal,
    score,
)

__all__ = ["BENCHMARKS", "TASK_OF", "DataError", "EvalReport", "Problem", "ProblemResult", "Runner",
           "PAPER_SPLITS", "ScoreResult", "bootstrap_ci", "endpoint_failure", "evaluate", "extract_code", "extract_number", "last_boxed", "load",
           "math_equal", "read_problems", "read_split_file", "report_of", "score", "split_ids", "split_info",
           "write_split_file"]
