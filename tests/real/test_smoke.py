"""Smoke suite against llama.cpp's server with SmolLM2-135M (issue #9): plumbing and robustness, never scores
(the model solves ~0% of GSM8K). Every command goes through the real openai client, streaming, with the
per-role token caps and the 2,048-token context as the budget. The last test prints the call log: per role, the
most prompt tokens and prompt + completion of any call, which must stay within the context."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore import check
from flowcore.evolution.optimizer import instruction_problem

from .conftest import CAPS, N_CTX

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "assets" / "examples"
CODE_PROBLEM = 'def add(a: int, b: int) -> int:\n    """Return a + b.\n    >>> add(2, 3)\n    5\n    """\n'
SEEDS = {"math": EXAMPLES / "math_seed.mmd", "code": EXAMPLES / "code_seed.mmd"}
TASK = {"gsm8k": "math", "math": "math", "humaneval": "code", "mbpp": "code"}
REPORT: list[str] = []


def flowcore(env: dict, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "flowcore", *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return res


def test_run_once_per_seed_workflow(env, ws):
    for task, seed in SEEDS.items():
        extra = ["--entry-point", "add"] if task == "code" else []
        problem = CODE_PROBLEM if task == "code" else "Tom has 3 apples and buys 4 more. How many apples now?"
        res = flowcore(env, "run", str(seed), "--task", task, "--problem", problem, "--json", "--db", str(ws),
                       *extra)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["tokens"]["completion"] > 0 and doc["trace"] and doc["price_known"] is False
        REPORT.append(f"run {seed.name}: {doc['calls']} call(s), {doc['tokens']['prompt']}+"
                      f"{doc['tokens']['completion']} tokens, answer {doc['answer'][:60]!r}")


@pytest.mark.parametrize("benchmark", ["gsm8k", "math", "humaneval", "mbpp"])
def test_a_five_problem_evaluate_per_benchmark(env, ws, benchmark):
    res = flowcore(env, "evaluate", str(SEEDS[TASK[benchmark]]), "--benchmark", benchmark, "--limit", "5",
                   "--concurrency", "1", "--json", "--db", str(ws))
    doc = json.loads(res.stdout)
    assert res.returncode == 0, res.stderr  # no endpoint errors with a healthy server
    assert doc["errors"] == 0 and doc["n"] == 5 and not any(r["errored"] for r in doc["results"])
    REPORT.append(f"evaluate {benchmark}: score {doc['score']:.2f} over {doc['n']} (errors {doc['errors']}), "
                  f"{doc['tokens']['calls']} calls, {doc['tokens']['prompt']}+{doc['tokens']['completion']} tokens")


def test_a_two_round_evolve_with_the_llm_optimizer_and_judge(env, ws):
    res = flowcore(env, "evolve", "--benchmark", "gsm8k", "--rounds", "2", "--candidates", "2", "--limit", "2",
                   "--mode", "llm", "--concurrency", "1", "--json", "--db", str(ws))
    assert res.returncode == 0, res.stderr
    with sqlite3.connect(ws) as c:
        c.row_factory = sqlite3.Row
        rows = [dict(r) for r in c.execute("SELECT * FROM evo_rounds ORDER BY round")]
    assert [r["round"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["status"] == "ok", r["reason"]  # no round lost (to context overflow or anything else)
        assert not [d for d in check(r["workflow_text"], "math") if d.severity == "error"]
        for text in json.loads(r["prompts_json"]).values():
            assert instruction_problem(text, "") is None, text  # no junk prompt stored
        cands = json.loads(r["candidates_json"])
        kept = [c for c in cands if not c.get("reason")]
        assert all(not [d for d in check(c["text"], "math") if d.severity == "error"] for c in kept)
        dropped = [c["reason"][:70] for c in cands if c.get("reason")]
        REPORT.append(f"evolve round {r['round']}: {r['operator']}, judge {str(r['judge'])[:70]!r}, "
                      f"{len(kept)} candidate(s) kept, dropped: {dropped}")


def test_flow_generation_inspection_and_repair(env, ws, tmp_path):
    out = tmp_path / "cands"
    res = flowcore(env, "aov", "generate", "Write a two-line poem about tea, then check its spelling", "--k", "2",
                   "--out", str(out), "--json")
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.strip()]
    REPORT.append(f"aov generate: exit {res.returncode}, {len(list(out.glob('*.json')))} candidate file(s); "
                  f"{(res.stderr.strip().splitlines() or [''])[-1][:120]}")
    assert res.returncode in (0, 1) and (res.returncode == 0 or "error" in res.stderr)
    files = sorted(out.glob("*.json"))
    graph = files[0] if files else ROOT / "assets" / "aov" / "website.json"  # the model's own graph, else ours
    run = flowcore(env, "aov", "run", str(graph), "--auto-repair", "--max-repairs", "1", "--json", "--db", str(ws))
    assert run.returncode in (0, 1), run.stderr
    assert "not a valid" not in run.stderr, run.stderr  # the graph itself was read: execution was exercised
    steps = [json.loads(x) for x in run.stdout.splitlines() if x.strip().startswith("{")]
    sources: dict[str, int] = {}
    for s in steps:
        for v in (s.get("verdicts") or {}).values():
            sources[v.get("source", "?")] = sources.get(v.get("source", "?"), 0) + 1
    REPORT.append(f"aov run {graph.name}: exit {run.returncode}, {len(steps)} step line(s), verdicts by "
                  f"source {sources}, lines {len(lines)}")


def test_compile_and_the_standalone_module(env, tmp_path):
    target = tmp_path / "workflow.py"
    res = flowcore(env, "compile", str(SEEDS["math"]), "-o", str(target))
    assert res.returncode == 0 and target.exists(), res.stderr
    run = subprocess.run([sys.executable, str(target), "--problem", "What is 2 + 3?", "--json"], env=env,
                         capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    doc = json.loads(run.stdout)
    REPORT.append(f"standalone module: {doc['calls']} call(s), answer {doc['answer'][:60]!r}")


def test_the_call_log_stays_within_the_context_and_the_caps(ws, real_server):
    with sqlite3.connect(ws) as c:
        c.row_factory = sqlite3.Row
        rows = [dict(r) for r in c.execute("SELECT role, prompt_tokens, completion_tokens, cached, error "
                                           "FROM llm_calls")]
    paid = [r for r in rows if not r["cached"] and r["error"] is None]
    assert paid
    print("\n\n== make test-real: llama.cpp server, SmolLM2-135M, context", N_CTX, "tokens ==")
    for line in REPORT:
        print(" ", line)
    print(f"\n  {'role':<10} {'calls':>5} {'errors':>6} {'max prompt':>10} {'max prompt+completion':>22} "
          f"{'max completion':>14} {'cap':>5}")
    for role in ("optimizer", "judge", "executor"):
        mine = [r for r in paid if r["role"] == role]
        errs = sum(1 for r in rows if r["role"] == role and r["error"])
        if not mine:
            continue
        top_p = max(r["prompt_tokens"] for r in mine)
        top_t = max(r["prompt_tokens"] + r["completion_tokens"] for r in mine)
        top_c = max(r["completion_tokens"] for r in mine)
        print(f"  {role:<10} {len(mine):>5} {errs:>6} {top_p:>10} {top_t:>22} {top_c:>14} {CAPS[role]:>5}")
        assert top_t <= N_CTX and top_c <= CAPS[role]
    errors = [r["error"] for r in rows if r["error"]]
    print(f"\n  failed calls: {len(errors)}" + (f" (first: {errors[0][:150]})" if errors else ""))
