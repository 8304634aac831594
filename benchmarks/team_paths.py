"""The same evolution run three ways, timed in one run: in the foreground, through the work queue (submit + a
worker claiming it) and as a detached Ray actor (issue 19). Every path evolves the same config against the scripted
OpenAI-compatible server on 127.0.0.1 (a fixed latency per reply), each in a workspace of its own, so each makes its
own calls; the rounds must be identical. Goals: queue <= 1.1x and Ray <= 1.25x the foreground's time per round.
Ray's start-up is timed apart (once per process, before the run).

    .venv/bin/python benchmarks/team_paths.py [--rounds 3] [--limit 8] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flowcore.evolution import queued, remote
from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.execution import cluster
from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks import load
from flowcore.workspace import queue
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text


def rounds(ws: Workspace) -> list[tuple]:
    return [(r["round"], r["status"], r["score"], r["workflow_text"]) for r in History(ws).rounds(1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.05)
    args = ap.parse_args()
    problems = load("gsm8k", "validation", limit=args.limit)
    right = {p.question[:60]: p.reference for p in problems[::2]}

    def reply(request: dict) -> str:
        text = message_text(request)
        return next((f"The answer is \\boxed{{{ref}}}." for q, ref in right.items() if q in text), "\\boxed{-7}")

    cfg = EvolutionConfig(benchmark="gsm8k", rounds=args.rounds, limit=args.limit, candidates=2, seed=5)
    tmp = Path(tempfile.mkdtemp(prefix="team-paths-"))
    with FakeLLMServer(reply, latency=args.latency) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="sk-bench")
        os.environ.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-bench")  # what a worker reads
        t = time.perf_counter()
        cluster.connect("local", num_cpus=2)
        ray_start = time.perf_counter() - t
        load_before = os.getloadavg()[0]
        times, results = {}, {}
        for path in ("foreground", "queue", "ray", "foreground again"):
            ws = Workspace(tmp / f"{path.replace(' ', '_')}.db")
            t = time.perf_counter()
            if path.startswith("foreground"):
                Evolution(ws, cfg, llm=LLM(settings, ws)).run()
            elif path == "queue":
                queued.submit_evolution(ws, cfg)
                assert queue.work_one(ws) is not None
            else:
                _, ref = remote.submit_evolution(ws, cfg, settings)
                cluster.connect().get(ref, timeout=600)
            times[path] = (time.perf_counter() - t) / (args.rounds + 1)  # the seed round counts
            results[path] = rounds(ws)
            ws.close_all()
        load_after = os.getloadavg()[0]
    same = all(results[p] == results["foreground"] for p in results)
    base = (times["foreground"] + times["foreground again"]) / 2  # before and after the others: load drifts
    print(f"{args.rounds} rounds + seed, {args.limit} problems, K=2, endpoint latency {args.latency:g} s; "
          f"load {load_before:.1f} -> {load_after:.1f}; Ray start-up {ray_start:.1f} s (not counted)")
    print(f"{'path':<18} {'s per round':>11} {'x foreground':>13}  goal")
    for path, goal in (("foreground", None), ("foreground again", None), ("queue", 1.1), ("ray", 1.25)):
        ratio = times[path] / base
        verdict = "" if goal is None else f"<= {goal}x: {'met' if ratio <= goal else 'NOT met'}"
        print(f"{path:<18} {times[path]:>11.3f} {ratio:>13.2f}  {verdict}")
    print(f"rounds identical on every path: {same}")


if __name__ == "__main__":
    main()
