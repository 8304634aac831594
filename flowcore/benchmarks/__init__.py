"""Benchmarks: GSM8K, MATH, HumanEval, MBPP loaders, scorers and the evaluation harness (DESIGN §7)."""
from __future__ import annotations

from .data import (
           BENCHMARKS,
           PAPER_SPLITS,
           TASK_OF,
           DataError,
           Problem,
           load,
           read_problems,
           read_split_file,
           split_ids,
           split_info,
           write_split_file,
)
from .harness import EvalReport, ProblemResult, Runner, bootstrap_ci, endpoint_failure, evaluate, report_of
from .scoring import ScoreResult, extract_code, extract_number, last_boxed, math_equal, score

__all__ = ["BENCHMARKS", "TASK_OF", "DataError", "EvalReport", "Problem", "ProblemResult", "Runner",
           "PAPER_SPLITS", "ScoreResult", "bootstrap_ci", "endpoint_failure", "evaluate", "extract_code", "extract_number", "last_boxed", "load",
           "math_equal", "read_problems", "read_split_file", "report_of", "score", "split_ids", "split_info",
           "write_split_file"]
