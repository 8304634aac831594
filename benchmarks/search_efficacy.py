"""Search efficacy: does evolution find the structure that helps? Measured on a simulated executor
(tests/helpers/simexecutor.py) whose best structure is known from theory: each sample is right with
probability p, wrong answers scatter, its ensembler votes, Review judges right with probability p, Test's fix
requests are new samples.

For each benchmark and p it prints, on the test split: IO and every bundled hand-made baseline (the best one is
the anchor); then per seed the evolved round the product picks (``testsplit.chosen_round``: best by validation,
or its confidence-aware choice), with its validation score, its test score and interval, the rounds and the
executor calls the search took; and the share of the anchor's gain over IO that evolution captured
((evolved − IO) / (best baseline − IO)), median over the seeds.

    .venv/bin/python benchmarks/search_efficacy.py [--benchmarks gsm8k,mbpp] [--p 0.6,0.7] [--seeds 3]
        [--rounds 20] [--candidates 4] [--validation 50] [--test 300] [--modes programmatic] [--json]

A benchmark is a built-in one, ``letters`` (a generated task of your own: tests/helpers/simtask.py, 400 rows of
kind text, metric exact, written as CSV + TOML as a user writes one; 80 validation and 320 test rows) or a
task file (``assets/tasks/capitals/capitals.toml``). ``--modes programmatic,llm`` adds, per configuration, the
same seeds evolved in LLM mode by the scripted optimizer (``scripted_optimizer`` in tests/helpers/simexecutor.py:
it proposes a 5-sample CoT-SC, review + revise or a prompt rewrite of its first parent, in turn, and its judge
prefers more samples), through the real optimizer, repair and LLM-judge code.

Defaults: 3 seeds x 20 rounds x 4 candidates on 50 validation problems, every structure scored on the first 300
test problems; the whole table took 41 min on 2 shared cores at load 11-19 (GSM8K runs ~3 min a seed, MBPP more:
its hidden tests run in the sandbox). HumanEval's validation split has only 33 problems, so code is MBPP's.

Evolution starts from the IO baseline in programmatic mode (the graph operators and the rule judge, no LLM
optimizer), as `python -m flowcore evolve --mode programmatic --workflow assets/baselines/math_io.mmd` would.
Each evolution run gets its own server (seeded by the run's seed) and workspace, so seeds are independent;
the baselines share one server but each its own workspace (no cached call is shared between structures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowcore import parse
from flowcore.evaluation.compare import baseline_title, baselines
from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.evolution import testsplit
from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks import from_file, kind_of, load
from flowcore.workspace.store import Workspace
from tests.helpers.simexecutor import scripted_optimizer, simulated_server
from tests.helpers.simtask import write_letters_task

BASELINE_SEED = 10_000  # the baselines' server: a seed no evolution run uses


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _llm(base_url: str, ws: Workspace) -> LLM:
    return LLM(LLMSettings(base_url=base_url, api_key="sim", max_retries=0, concurrency=8), ws)


def task_name(entry: str, tmp: Path) -> str:
    """A --benchmarks entry as the name evolution and evaluation know it (a task file is read and registered)."""
    if entry == "letters":
        return from_file(write_letters_task(tmp / "letters")).name
    if entry.endswith(".toml"):
        return from_file(entry).name
    return entry


def measure_baselines(bench: str, p: float, test: list, tmp: Path) -> list[dict]:
    task = kind_of(bench)
    rows = []
    with simulated_server(test, p, seed=BASELINE_SEED) as srv:
        for name, _, text in baselines(task):
            ws = Workspace(tmp / f"{bench}-{p}-{name}.db")
            before = len(srv.requests)
            rep = asyncio.run(evaluate_workflow(parse(text), bench, test, llm=_llm(srv.base_url, ws)))
            rows.append({"name": name, "title": baseline_title(name), "test": rep.score, "low": rep.ci_low,
                         "high": rep.ci_high, "n": rep.n, "calls_per_problem": (len(srv.requests) - before) / len(test)})
    return rows


def evolve_one(bench: str, p: float, seed: int, args: argparse.Namespace, val: list, test: list, tmp: Path,
               mode: str = "programmatic") -> dict:
    task = kind_of(bench)
    seed_text = (ROOT / "assets" / "baselines" / f"{task}_io.mmd").read_text(encoding="utf-8")
    meta = scripted_optimizer(task) if mode == "llm" else None
    with simulated_server(val + test, p, seed=seed, meta=meta) as srv:
        ws = Workspace(tmp / f"{bench}-{p}-{mode}-evo{seed}.db")
        llm = _llm(srv.base_url, ws)
        cfg = EvolutionConfig(benchmark=bench, rounds=args.rounds, candidates=args.candidates, seed=seed,
                              workflow=seed_text, mode=mode, limit=args.validation,
                              **json.loads(args.config or "{}"))
        evo = Evolution(ws, cfg, llm=llm)
        start = time.perf_counter()
        result = evo.run()
        took = time.perf_counter() - start
        meta_calls = srv.sim.calls["meta"]  # the scripted optimizer's and judge's replies (LLM mode)
        calls = len(srv.requests) - meta_calls
        run_id = result["run_id"]
        chosen = testsplit.chosen_round(History(ws).summaries(run_id), evo.config.search)
        # A client of its own: the run's client keeps the run's lease check (flowcore/evolution/lease.py), which
        # fails every call once the finished run has released the lease (LeaseLost), leaving most problems errored
        llm = _llm(srv.base_url, ws)
        asyncio.run(testsplit.rescore_top(ws, run_id, 1, llm=llm, limit=args.test, rounds=[chosen["round"]]))
        t = next(r for r in testsplit.stored_test_scores(ws, run_id) if r["round"] == chosen["round"])
        # whose rounds they were: in LLM mode a round whose proposals all repeat earlier rounds falls back to the
        # graph operators (as the product does), so the optimizer's share is worth stating
        by = Counter(r["operator"] for r in History(ws).summaries(run_id) if r["round"] > 0)
    return {"seed": seed, "mode": mode, "meta_calls": meta_calls, "status": result["status"], "round": chosen["round"], "operator": chosen["operator"],
            "validation": chosen["score"], "val_low": chosen["ci_low"], "val_high": chosen["ci_high"],
            "val_n": chosen["n"], "test": t["score"], "low": t["ci_low"], "high": t["ci_high"], "test_n": t["n"],
            "test_errors": t["errors"], "optimizer_rounds": by.get("optimizer", 0),
            "rounds": evo.history.last_round(run_id), "calls": calls, "seconds": round(took, 1),
            "text": (History(ws).get_round(run_id, chosen["round"]) or {}).get("workflow_text")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default="gsm8k,mbpp")
    ap.add_argument("--p", default="0.6,0.7")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed .. first-seed + seeds - 1")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--validation", type=int, default=50, help="validation problems evolution scores on")
    ap.add_argument("--test", type=int, default=300, help="test problems every structure is scored on")
    ap.add_argument("--config", help="extra EvolutionConfig fields as JSON (e.g. '{\"search\": \"paper\"}')")
    ap.add_argument("--modes", default="programmatic", help="programmatic, llm (the scripted optimizer) or both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_start = load_avg()
    print(f"load {load_start} · {args.rounds} rounds x {args.candidates} candidates, {args.validation} validation "
          f"and {args.test} test problems, {args.seeds} seeds{' · ' + args.config if args.config else ''}",
          flush=True)
    report = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for entry in args.benchmarks.split(","):
            bench = task_name(entry, tmp)
            val = load(bench, "validation", limit=args.validation)
            test = load(bench, "test", limit=args.test)
            for p in (float(x) for x in args.p.split(",")):
                base = measure_baselines(bench, p, test, tmp)
                io = next(b for b in base if b["name"].endswith("_io"))
                best = max((b for b in base if b is not io), key=lambda b: b["test"])
                modes = args.modes.split(",")
                runs = [evolve_one(bench, p, s, args, val, test, tmp, mode)
                        for mode in modes for s in range(args.first_seed, args.first_seed + args.seeds)]
                gain = best["test"] - io["test"]
                for r in runs:
                    r["captured"] = (r["test"] - io["test"]) / gain if gain > 0 else float("nan")
                med = {m: statistics.median(r["captured"] for r in runs if r["mode"] == m) for m in modes}
                report.append({"benchmark": bench, "p": p, "baselines": base, "io": io["name"], "test_n": len(test),
                               "val_n": len(val), "best": best["name"], "runs": runs, "median_captured": med,
                               "load": load_avg()})
                print_block(report[-1], args)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    print(f"load at the start {load_start}, at the end {load_avg()}")


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def print_block(b: dict, args: argparse.Namespace) -> None:
    print(f"\n{b['benchmark']} · p = {b['p']} · validation n = {b['val_n']} · test n = {b['test_n']}")
    print("| structure | validation | test [95% CI] | rounds | executor calls | captured |")
    print("|---|---:|---:|---:|---:|---:|")
    for x in b["baselines"]:
        mark = " (IO)" if x["name"] == b["io"] else " (best baseline)" if x["name"] == b["best"] else ""
        print(f"| {x['title']}{mark} | — | {_pct(x['test'])} [{_pct(x['low'])}, {_pct(x['high'])}] | — | "
              f"{x['calls_per_problem']:.1f}/problem | — |")
    for mode, med in b["median_captured"].items():
        runs = [r for r in b["runs"] if r["mode"] == mode]
        how = "evolved" if mode == "programmatic" else "evolved by the LLM optimizer (scripted)"
        for r in runs:
            meta = (f" + {r['meta_calls']} optimizer/judge; {r['optimizer_rounds']} rounds the optimizer's"
                    if r["meta_calls"] else "")
            short = f" (n = {r['test_n']}, {r['test_errors']} errored)" if r["test_n"] != b["test_n"] else ""
            print(f"| {how}, seed {r['seed']} (round {r['round']}, {r['operator']}) | {_pct(r['validation'])} "
                  f"[{_pct(r['val_low'])}, {_pct(r['val_high'])}] | {_pct(r['test'])} [{_pct(r['low'])}, "
                  f"{_pct(r['high'])}]{short} | {r['rounds']} | {r['calls']}{meta} | {100 * r['captured']:.0f}% |")
        print(f"| **median of {len(runs)} seeds, {mode}** | | | | | **{100 * med:.0f}%** |")
    print(f"(load {b['load']})", flush=True)


if __name__ == "__main__":
    main()
