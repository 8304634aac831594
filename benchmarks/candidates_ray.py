"""Would a round's K programmatic candidates gain from running as Ray tasks? Measures what one round's candidate
generation costs in-process and as Ray tasks on a local Ray instance (``ray.init(num_cpus=2)``).

    .venv/bin/python benchmarks/candidates_ray.py [--rounds 20] [--k 4,8]

Both sides run the same attempts: attempt ``i`` of a round draws its operator and its edits from its own
``random.Random(f"{round}:{i}")``, attempts are taken in index order until K distinct valid children (at most 8K
attempts), so both produce the same candidates (checked). In-process, attempts run one after another; on Ray, K
attempts at a time as tasks. This is a measurement for the decision, not the evolution loop's code: the loop
keeps its one random stream per round and generates candidates in-process (see README, "Run on a cluster").
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flowcore.evolution import ops
from flowcore.mermaid.reader import parse, to_mermaid

SEEDS = {"math": ROOT / "assets" / "examples" / "math_case_study.mmd",
         "code": ROOT / "assets" / "examples" / "humaneval_case_study.mmd"}
NAMES = ["insert", "delete", "substitute", "rewire", "subgraph", "prompt"]


def attempt(text: str, task: str, salt: str, i: int) -> tuple[str, str] | None:
    """One candidate attempt from the parent's text alone (what a Ray task would receive)."""
    rng = random.Random(f"{salt}:{i}")
    res = ops.apply(rng.choice(NAMES), [parse(text)], task, rng)
    return None if isinstance(res, ops.Declined) else (res.operator, res.text)


def collect(results: list, k: int, out: list, seen: set) -> None:
    for r in results:
        if r is not None and r[1] not in seen and len(out) < k:
            seen.add(r[1])
            out.append(r)


def local_round(text: str, task: str, salt: str, k: int) -> list:
    out: list = []
    seen = {text}
    for i in range(8 * k):
        if len(out) >= k:
            break
        collect([attempt(text, task, salt, i)], k, out, seen)
    return out


def ray_round(ray, task_fn, text: str, task: str, salt: str, k: int) -> list:  # noqa: ANN001
    out: list = []
    seen = {text}
    for start in range(0, 8 * k, k):
        if len(out) >= k:
            break
        collect(ray.get([task_fn.remote(text, task, salt, i) for i in range(start, start + k)]), k, out, seen)
    return out


def grown(text: str, task: str, nodes: int) -> str:
    """A valid workflow of about ``nodes`` nodes, grown from ``text`` by the insert and subgraph operators."""
    w, rng = parse(text), random.Random(0)
    while len(w.nodes) < nodes:
        res = ops.apply(rng.choice(["insert", "subgraph"]), [w], task, rng)
        if not isinstance(res, ops.Declined):
            w = res.workflow
    return to_mermaid(w)


def timed(fn, rounds: int) -> float:  # noqa: ANN001
    times = []
    for r in range(rounds):
        t = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--k", default="4,8")
    args = ap.parse_args()
    from flowcore.execution import cluster

    t = time.perf_counter()
    ray = cluster.connect("local", num_cpus=2)
    started = time.perf_counter() - t
    task_fn = ray.remote(num_cpus=1, max_retries=0)(attempt)
    ray.get([task_fn.remote(to_mermaid(parse(SEEDS["math"].read_text())), "math", "warm", i) for i in range(8)])
    noop = ray.remote(num_cpus=1)(lambda: None)
    trips = []
    for _ in range(50):
        t = time.perf_counter()
        ray.get(noop.remote())
        trips.append(time.perf_counter() - t)
    load0 = os.getloadavg()[0]
    rows = []
    texts = [(task, to_mermaid(parse(path.read_text(encoding="utf-8")))) for task, path in SEEDS.items()]
    texts.append(("math", grown(texts[0][1], "math", ops.MAX_NODES - 6)))  # near the size cap
    for task, text in texts:
        for k in (int(x) for x in args.k.split(",")):
            for r in range(args.rounds):  # the same candidates either way
                assert ray_round(ray, task_fn, text, task, f"{task}:{r}", k) == local_round(text, task, f"{task}:{r}", k)
            here = timed(lambda r: local_round(text, task, f"{task}:{r}", k), args.rounds)  # noqa: B023
            there = timed(lambda r: ray_round(ray, task_fn, text, task, f"{task}:{r}", k), args.rounds)  # noqa: B023
            rows.append((task, len(parse(text).nodes), k, here, there))
    ray.shutdown()
    print(f"A round's K programmatic candidates, in-process vs Ray tasks (local Ray, 2 CPUs; median of "
          f"{args.rounds} rounds; load average {load0:.1f} -> {os.getloadavg()[0]:.1f}, shared machine)\n")
    print("| seed | nodes | K | in-process (ms) | Ray tasks (ms) | Ray / in-process | same candidates |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for task, nodes, k, here, there in rows:
        print(f"| {task} | {nodes} | {k} | {1000 * here:.1f} | {1000 * there:.1f} | {there / here:.1f}x | yes |")
    print(f"\nRay: no-op task round trip median {1000 * statistics.median(trips):.2f} ms; local instance started in "
          f"{started:.1f} s. Children are capped at {ops.MAX_NODES} nodes (ops.MAX_NODES).")


if __name__ == "__main__":
    main()
