"""Evolution engine speed: valid children per second and validity rate per operator (all examples, many
seeds), and the engine's own overhead per round with LLM time excluded (programmatic mode, zero-latency fake
evaluation, real workspace database).

    .venv/bin/python benchmarks/evolve_speed.py [--seeds 30] [--rounds 20] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowcore import check, parse, to_mermaid
from flowcore.evolution import ops
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.workspace.store import Workspace

try:
    from tests.helpers import independent_checker
except ImportError:  # the benchmark also runs from an install without the tests
    independent_checker = None

TASK = {"math_seed": "math", "math_case_study": "math", "gsm8k_case_study": "math",
        "code_seed": "code", "humaneval_case_study": "code", "mbpp_case_study": "code"}


def operator_table(seeds: int) -> list[dict]:
    wf = {n: parse((ROOT / "assets" / "examples" / f"{n}.mmd").read_text()) for n in TASK}
    rows = []
    for op in ops.OPERATORS:
        attempts = children = verified = 0
        elapsed = 0.0
        for name, w in wf.items():
            task = TASK[name]
            partners = [wf[n] for n in TASK if TASK[n] == task and n != name]
            for seed in range(seeds):
                rng = random.Random(seed)
                start = time.perf_counter()
                res = ops.apply(op, [w, partners[seed % len(partners)]], task, rng)
                elapsed += time.perf_counter() - start
                attempts += 1
                if isinstance(res, ops.Child):
                    children += 1
                    text = to_mermaid(res.workflow)
                    ok = not [d for d in check(text, task) if d.severity == "error"]
                    if independent_checker is not None:
                        ok = ok and not independent_checker.errors(text, task)
                    verified += ok
        rows.append({"operator": op, "attempts": attempts, "children": children,
                     "yield": children / attempts, "valid": verified / children if children else 1.0,
                     "children_per_s": children / elapsed if elapsed else 0.0,
                     "ms_per_call": 1000 * elapsed / attempts})
    return rows


def _zero_latency_evaluator():
    async def evaluate(w, problems):
        k = sum(1 for n in w.nodes.values() if not n.is_interface)
        results = [SimpleNamespace(id=p.id, correct=(i % 6) < min(k, 6), prediction="42", extracted="42",
                                   cost=0.0, latency=0.0, error=None) for i, p in enumerate(problems)]
        score = sum(r.correct for r in results) / max(1, len(results))
        return SimpleNamespace(score=score, ci_low=score, ci_high=score, n=len(results), cost=0.0,
                               results=results, cancelled=False)
    return evaluate


def round_overhead(rounds: int) -> dict:
    """Seconds per round of everything but the LLM: sampling, K candidates, judge, storage."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "d.jsonl"
        rows = (json.dumps({"question": f"Q{i}", "answer": f"#### {i}"}) for i in range(20))
        data.write_text("".join(r + "\n" for r in rows))
        seed = to_mermaid(parse((ROOT / "assets" / "examples" / "math_case_study.mmd").read_text()))
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=rounds, workflow=seed, data_path=str(data),
                              mode="programmatic", seed=1)
        times: list[float] = []
        last = [time.perf_counter()]

        def tick(rec: dict) -> None:
            now = time.perf_counter()
            if rec["round"] > 0:
                times.append(now - last[0])
            last[0] = now

        ws = Workspace(Path(tmp) / "speed.db")
        evo = Evolution(ws, cfg, evaluator=_zero_latency_evaluator(), progress=tick)
        evo.start()
        asyncio.run(evo.arun())
        ws.close()
    return {"rounds": len(times), "candidates": cfg.candidates, "mean_ms": 1000 * statistics.mean(times),
            "median_ms": 1000 * statistics.median(times), "max_ms": 1000 * max(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    table = operator_table(args.seeds)
    overhead = round_overhead(args.rounds)
    if args.json:
        print(json.dumps({"operators": table, "round_overhead": overhead}, indent=2))
        return
    print(f"Operators over {len(TASK)} examples x {args.seeds} seeds "
          f"(valid = passes the checker{' and the independent checker' if independent_checker else ''})")
    print("| operator | attempts | children | yield | valid | children/s | ms/call |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in table:
        print(f"| {r['operator']} | {r['attempts']} | {r['children']} | {100 * r['yield']:.0f}% | "
              f"{100 * r['valid']:.0f}% | {r['children_per_s']:.0f} | {r['ms_per_call']:.1f} |")
    o = overhead
    print(f"\nEngine overhead per round (programmatic, K={o['candidates']}, zero-latency evaluation, "
          f"{o['rounds']} rounds): mean {o['mean_ms']:.0f} ms, median {o['median_ms']:.0f} ms, "
          f"max {o['max_ms']:.0f} ms")


if __name__ == "__main__":
    main()
