"""The task layer's cost per row beside the built-in GSM8K path, in the same run (issue 26).

    .venv/bin/python benchmarks/task_cost.py [--rows 1319] [--repeats 5]

Both read the same file (assets/datasets/gsm8k_test.jsonl) and score the same canned answers through the same
harness (``evaluate`` with a runner that returns at once: no LLM, so only the engine's own cost is measured):
- anchor: the built-in task ``gsm8k`` (its loader and its scorer);
- product: a task of your own over that file, read from TOML (problem = "question", reference = "answer",
  metric = "number", which takes the last number of the reference: GSM8K's "#### N").
Rows: load (read, check every row, build problems) and evaluate (harness + metric) per row, CPU time, best of
--repeats, product and anchor interleaved. The anchor checks its rows too (a GSM8K answer must hold "#### N"); the
product checks that each reference holds a number, as a task of your own does on every read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from check_speed import load_line

from flowcore.tasks import evaluate, load
from flowcore.tasks.metrics import _short_number
from flowcore.tasks.saved import register
from flowcore.tasks.task import read_task

TOML = """name = "gsm8k-own"
kind = "math"
data = "gsm8k_test.jsonl"
problem = "question"
reference = "answer"
metric = "number"
"""


def cpu_us_per_row(product, anchor, rows: int, repeats: int) -> tuple[float, float]:
    """Best CPU time per row of each, their repeats interleaved (product, anchor, product, ...) so that both see
    the same machine: on 2 shared cores a burst of load otherwise lands on one side only."""
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for i, fn in enumerate((product, anchor)):
            t = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - t)
    return best[0] / rows * 1e6, best[1] / rows * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=None, help="first N rows (default: all 1,319)")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="task-cost-"))
    try:
        shutil.copy(ROOT / "assets" / "datasets" / "gsm8k_test.jsonl", tmp / "gsm8k_test.jsonl")
        (tmp / "gsm8k-own.toml").write_text(TOML)
        def own():  # read afresh each time: no reference parsed by an earlier repeat
            _short_number.cache_clear()
            return register(read_task(tmp / "gsm8k-own.toml"))

        own()
        anchor_problems = load("gsm8k", "all", limit=args.rows)
        product_problems = load("gsm8k-own", "all", limit=args.rows)
        n = len(anchor_problems)
        assert n == len(product_problems)
        answers = {a.id: f"The answer is {a.reference}." for a in anchor_problems}
        answers.update({p.id: answers[a.id] for a, p in zip(anchor_problems, product_problems)})

        async def runner(problem):
            return answers[problem.id], 0.0

        def run(problems):
            rep = asyncio.run(evaluate(runner, problems, concurrency=8))
            assert rep.n == n and rep.score == 1.0, (rep.n, rep.score)  # both score every canned answer right

        print(load_line())
        print(f"rows: {n}; CPU µs per row, best of {args.repeats}")
        print(f"{'step':<10} {'product (own task) µs':>22} {'anchor (built-in gsm8k) µs':>27} {'ratio':>7}  load")
        for step, product, anchor in (
            ("load", lambda: (own(), load("gsm8k-own", "all", limit=args.rows)),
             lambda: load("gsm8k", "all", limit=args.rows)),
            # each reference's number is parsed at its first grading and cached for later rounds (as in use: read
            # once, evaluated every round); the best of the repeats is that of a later round for both
            ("evaluate", lambda: run(product_problems), lambda: run(anchor_problems)),
        ):
            p, a = cpu_us_per_row(product, anchor, n, args.repeats)
            print(f"{step:<10} {p:>22.1f} {a:>27.1f} {p / a:>6.2f}x  {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
