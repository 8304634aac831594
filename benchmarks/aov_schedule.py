"""AOV scheduling: makespan of event-driven execution against lock-step steps, next to the physical floor
(the critical path: the longest chain of subtask durations), on graphs with uneven durations.

Run: .venv/bin/python benchmarks/aov_schedule.py [--scale 2.0]
Goal (issue #12): event-driven within 1.1x of the critical-path floor.

Every subtask is one real LLM call through the openai client to the scripted server on 127.0.0.1, which
delays the answer by the subtask's duration (its per-prompt delay, keyed on "Your subtask (id)"); the rule
inspector checks each result. Lock-step waits, in every step, for the slowest subtask of that step.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowcore.aov import AOVGraph, Execution, LLMAgent, RuleInspector, run_sync
from flowcore.aov import metrics as M
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer


def doc(parents: dict[str, list[str]]) -> AOVGraph:
    return AOVGraph.from_dict({"goal": "benchmark", "agents": [{"id": "w", "role": "worker"}],
                               "subtasks": {s: {"subtask_requirement": f"do {s}", "agent": "w", "parents": ps}
                                            for s, ps in parents.items()}})


def fork_join() -> tuple[AOVGraph, dict[str, float]]:
    """A plan, six branches of two subtasks (long-short and short-long mixed), a merge."""
    parents: dict[str, list[str]] = {"plan": []}
    dur = {"plan": 0.2, "merge": 0.2}
    pairs = [(1.2, 0.2), (0.2, 1.2), (0.8, 0.5), (0.5, 0.8), (0.3, 0.3), (1.0, 0.1)]
    for i, (a, b) in enumerate(pairs):
        parents[f"b{i}"], parents[f"c{i}"] = ["plan"], [f"b{i}"]
        dur[f"b{i}"], dur[f"c{i}"] = a, b
    parents["merge"] = [f"c{i}" for i in range(len(pairs))]
    return doc(parents), dur


def chains() -> tuple[AOVGraph, dict[str, float]]:
    """Three independent chains whose long and short subtasks alternate out of phase, then one report."""
    pattern = {"x": [1.0, 0.2, 1.0, 0.2], "y": [0.2, 1.0, 0.2, 1.0], "z": [0.6, 0.6, 0.1, 0.6]}
    parents: dict[str, list[str]] = {}
    dur: dict[str, float] = {}
    for name, ds in pattern.items():
        for i, d in enumerate(ds):
            parents[f"{name}{i}"] = [f"{name}{i - 1}"] if i else []
            dur[f"{name}{i}"] = d
    parents["report"] = [f"{n}{len(ds) - 1}" for n, ds in pattern.items()]
    dur["report"] = 0.2
    return doc(parents), dur


def layered(seed: int = 7) -> tuple[AOVGraph, dict[str, float]]:
    """Four layers of five; each subtask needs one or two of the layer before; durations 0.1-1.2 s."""
    rng = random.Random(seed)
    parents: dict[str, list[str]] = {}
    dur: dict[str, float] = {}
    for layer in range(4):
        for i in range(5):
            sid = f"l{layer}_{i}"
            prev = [f"l{layer - 1}_{j}" for j in range(5)]
            parents[sid] = sorted(rng.sample(prev, rng.choice((1, 2)))) if layer else []
            dur[sid] = round(rng.uniform(0.1, 1.2), 2)
    return doc(parents), dur


def gobang() -> tuple[AOVGraph, dict[str, float]]:
    """The bundled Gobang example with plausible uneven durations."""
    g = AOVGraph.load(Path(__file__).resolve().parent.parent / "assets" / "aov" / "gobang.json")
    d = {"design": 0.4, "board": 0.5, "win": 1.4, "ui": 0.3, "tests": 0.6, "assemble": 0.4}
    return g, {s: d.get(s, 0.3) for s in g.subtasks}


def critical_path(g: AOVGraph, dur: dict[str, float]) -> float:
    finish: dict[str, float] = {}
    for step in M.steps(g):
        for sid in step:
            finish[sid] = dur[sid] + max((finish[p] for p in g.subtasks[sid].parents), default=0.0)
    return max(finish.values())


def lock_step_model(g: AOVGraph, dur: dict[str, float]) -> float:
    return sum(max(dur[s] for s in step) for step in M.steps(g))


def makespan(srv: FakeLLMServer, g: AOVGraph, schedule: str) -> tuple[float, float]:
    """(wall seconds of the run, the engine's own scheduling delay in ms: the median time from a parent's
    last result to its child's start, which excludes the HTTP calls)."""
    llm = LLM(LLMSettings(base_url=srv.base_url, api_key="bench", max_retries=0, timeout=60, concurrency=64,
                          cache=False))
    ex = Execution(g, LLMAgent(llm), RuleInspector(), schedule=schedule)
    t0 = time.perf_counter()
    run_sync(ex.run())
    took = time.perf_counter() - t0
    assert ex.status == "completed", ex.status
    done = {e["payload"]["subtask"]: e["payload"]["t"] for e in ex.events if e["kind"] == "result"}
    gaps = [(e["payload"]["t"] - max(done[p] for p in g.subtasks[e["payload"]["subtask"]].parents)) * 1000
            for e in ex.events if e["kind"] == "subtask_start" and g.subtasks[e["payload"]["subtask"]].parents]
    return took, statistics.median(gaps) if gaps else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=2.0, help="multiply every duration (default 2: subtasks of "
                    "0.2 to 2.8 s, short for LLM calls)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores shared with other jobs (load average {os.getloadavg()[0]:.1f}); every subtask is a real HTTP call to 127.0.0.1")
    head = (f"{'graph':>10} {'subtasks':>8} {'steps':>5} | {'floor s':>7} | {'event s':>7} {'/floor':>6} "
            f"{'start delay ms':>14} | {'lock-step s':>11} {'/floor':>6} {'(model s)':>9} | {'lock-step/event':>15}")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for name, build in (("fork-join", fork_join), ("chains", chains), ("layered", layered),
                        ("gobang", gobang)):
        g, dur = build()
        dur = {s: d * args.scale for s, d in dur.items()}
        floor, model = critical_path(g, dur), lock_step_model(g, dur)

        with FakeLLMServer("done", delays={f"Your subtask ({s})": d for s, d in dur.items()}) as srv:
            makespan(srv, doc({"warm": []}), "event")  # imports, the client's first connection
            ev, delay = makespan(srv, g, "event")
            ls, _ = makespan(srv, g, "steps")
        worst = max(worst, ev / floor)
        print(f"{name:>10} {len(g.subtasks):>8} {len(M.steps(g)):>5} | {floor:>7.2f} | {ev:>7.2f} "
              f"{ev / floor:>6.3f} {delay:>14.1f} | {ls:>11.2f} {ls / floor:>6.3f} {model:>9.2f} | {ls / ev:>14.2f}x")
    print(f"\nworst event-driven makespan / critical-path floor: {worst:.3f} (goal: <= 1.1)")


if __name__ == "__main__":
    main()
