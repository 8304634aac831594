"""The same evaluation locally and on a local Ray instance: per-problem results must be identical; the overhead
Ray adds per problem is printed (goal <= 5 ms).

    .venv/bin/python benchmarks/eval_ray.py [--problems 40] [--latency 0.05] [--cpus 2]

The LLM is the scripted OpenAI-compatible server of the tests on 127.0.0.1 (right for every other problem, with
``--latency`` seconds per reply, as a real endpoint has), so both runs make the same calls through the real
``openai`` client. "overhead per problem" = (Ray wall time - local wall time) / problems at the same
concurrency; "task round trip" = a no-op Ray task submitted and awaited, the floor of that overhead. Ray start-up
is timed apart (once per process). The machine is shared and was loaded: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.evolution.loop import default_seed
from flowcore.execution import cluster
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks import load
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer


def fields(report) -> list[tuple]:
    return [(r.id, r.correct, r.prediction, r.extracted, round(r.cost, 9), r.error) for r in report.results]


def _noop() -> int:
    return 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    problems = load("gsm8k", "validation", limit=args.problems)
    right = {p.question[:60]: p.reference for p in problems[::2]}

    def respond(request: dict) -> str:
        time.sleep(args.latency)
        text = str(request.get("messages"))
        return next((f"The answer is {ref}." for q, ref in right.items() if q in text), "The answer is -7.")

    w = parse(default_seed("math"))
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(respond) as srv:
        ws = Workspace(Path(tmp) / "bench.db")
        settings = LLMSettings(base_url=srv.base_url, api_key="sk-bench", cache=False,
                               models={r: "m" for r in ("optimizer", "judge", "executor")})
        os.environ.pop(cluster.ENV, None)
        t = time.perf_counter()
        local = asyncio.run(evaluate_workflow(w, "gsm8k", problems, llm=LLM(settings, ws),
                                              concurrency=args.concurrency))
        t_local = time.perf_counter() - t
        t = time.perf_counter()
        ray = cluster.connect("local", num_cpus=args.cpus)
        t_start = time.perf_counter() - t
        os.environ[cluster.ENV] = "local"
        noop = ray.remote(_noop)
        ray.get([noop.remote() for _ in range(args.cpus * 2)])  # workers up
        trips = []
        for _ in range(30):
            t = time.perf_counter()
            ray.get(noop.remote())
            trips.append(time.perf_counter() - t)
        asyncio.run(evaluate_workflow(w, "gsm8k", problems[:args.cpus], llm=LLM(settings, ws),
                                      concurrency=args.concurrency))  # import flowcore in the workers once
        t = time.perf_counter()
        remote = asyncio.run(evaluate_workflow(w, "gsm8k", problems, llm=LLM(settings, ws),
                                               concurrency=args.concurrency))
        t_ray = time.perf_counter() - t
        ray.shutdown()
        ws.close_all()
    same = fields(local) == fields(remote)
    n = len(problems)
    print(f"Evaluation locally vs on local Ray (gsm8k, {n} problems, concurrency {args.concurrency}, "
          f"{args.cpus} Ray CPUs, {1000 * args.latency:.0f} ms per LLM reply; the machine is shared and was "
          "loaded)\n")
    print("| run | wall (s) | per problem (ms) | score | identical per-problem results |")
    print("|---|---:|---:|---:|---|")
    print(f"| local | {t_local:.2f} | {1000 * t_local / n:.1f} | {100 * local.score:.1f}% | — |")
    print(f"| Ray | {t_ray:.2f} | {1000 * t_ray / n:.1f} | {100 * remote.score:.1f}% | {'yes' if same else 'NO'} |")
    print(f"\nRay overhead per problem: {1000 * (t_ray - t_local) / n:.1f} ms (goal <= 5 ms); no-op task round "
          f"trip: median {1000 * statistics.median(trips):.2f} ms, min {1000 * min(trips):.2f} ms; "
          f"Ray start-up (once per process): {t_start:.1f} s")
    if not same:
        for a, b in zip(fields(local), fields(remote)):
            if a != b:
                print("differs:", a, b)
        sys.exit(1)


if __name__ == "__main__":
    main()
