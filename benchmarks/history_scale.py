"""History at scale: the History page's Python work and one evolution round's bookkeeping at 100 / 1,000 / 10,000
stored rounds, through the project's own API, before (the old full-decode path, still in the code base) and after.

    .venv/bin/python benchmarks/history_scale.py [--sizes 100,1000,10000] [--repeat 3]

"page" = every engine call one History view makes (runs overview, run, round summaries, table frame, filters,
curves and both figures, the round picker's labels, the lineage figure, the selected round and its parent);
Streamlit's own serialisation is not included. "round" = one round's bookkeeping in the evolution loop (top-k
pool, parent draw, parents read by key, experience, texts tried, operator record, budget). "reads" counts the SQL
statements one round's bookkeeping sends. Machines are shared: compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flowcore.evolution import historyview as hv  # noqa: E402
from flowcore.evolution import session as evs  # noqa: E402
from flowcore.evolution.history import History, RunBuffer, sample_from_pool, sample_parents  # noqa: E402
from flowcore.storage import Workspace  # noqa: E402

SEED = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text(encoding="utf-8")
OPS = ["insert", "delete", "prompt", "crossover", "optimizer"]


def build(ws: Workspace, n: int) -> int:
    """A run of ``n`` rounds with realistic payloads (4 judged candidates, 50 per-problem results)."""
    rng = random.Random(n)
    h = History(ws)
    run = h.create_run({"rounds": n - 1, "mode": "llm", "top_k": 4}, f"bench{n}", SEED, "gsm8k", "math", False)
    per_problem = [{"id": f"p{i}", "correct": i % 3 == 0, "prediction": "x" * 120, "extracted": "1", "cost": 1e-4,
                    "latency": 0.1, "error": None} for i in range(50)]
    for r in range(n):
        failed = r > 0 and rng.random() < 0.1
        parents = [] if r == 0 else sorted({rng.randrange(r), rng.randrange(r)})[:rng.choice((1, 2))]
        cands = [{"text": SEED + f"%% variant {r}.{k}\n", "operator": rng.choice(OPS), "detail": "d",
                  "scores": {"total": rng.uniform(10, 50)}} for k in range(4)]
        h.add_round(run, {"round": r, "workflow_text": SEED + f"%% round {r}\n", "parents": parents,
                          "operator": "seed" if r == 0 else rng.choice(OPS), "detail": "bench",
                          "candidates": cands, "chosen": None if r == 0 else 0, "judge": "rule",
                          "status": "failed" if failed else "ok", "score": None if failed else rng.random(),
                          "n": 50, "cost": 0.001, "per_problem": per_problem, "pinned": r % 997 == 0})
    return run


def page_new(ws: Workspace, run: int) -> dict:
    h = History(ws)
    evs.runs_overview(ws)
    info, cols = h.run(run), h.summary_columns(run)
    df = hv.summary_frame(cols)
    evs.filter_rounds(df, statuses=["ok"], operators=["insert"], min_score=0.2)
    curve = hv.curve_frame(df)
    hv.score_figure(curve, info.offline)
    hv.cost_figure(curve)
    labels = hv.round_labels(cols)
    pick = list(labels)[-1]
    t = time.perf_counter()
    fig, _ = hv.lineage_figure(cols, pick)
    lineage = time.perf_counter() - t
    row = h.get_round(run, pick)
    if row and row["parents"]:
        h.get_round(run, row["parents"][0])
    return {"lineage": lineage, "lineage_chars": len(fig.to_json())}


def page_old(ws: Workspace, run: int) -> dict:
    """What the page did before: every round decoded, per-option picker scans, Mermaid lineage text."""
    h = History(ws)
    evs.runs_overview(ws)
    h.run(run)
    rows = h.rounds(run)
    df = evs.rounds_frame(rows)
    evs.filter_rounds(df, statuses=["ok"], operators=["insert"], min_score=0.2)
    evs.curve_frame(rows)
    rounds = [r["round"] for r in rows]
    [f"#{r} · {next(x for x in rows if x['round'] == r)['operator']}" for r in rounds[-min(len(rounds), 2000):]]
    t = time.perf_counter()
    text = evs.lineage_mermaid(rows, rounds[-1])
    evs.lineage_height(rows)
    return {"lineage": time.perf_counter() - t, "lineage_chars": len(text), "picker_sampled": min(len(rounds), 2000)}


def round_new(ws: Workspace, run: int, buf: RunBuffer, r: int) -> None:
    h = History(ws)
    rng = random.Random(r)
    drawn, pool, probs = sample_from_pool(buf.top_k(4), rng, n=2)
    parents = [h.get_round(run, p["round"]) for p in drawn]
    h.experience(run, parents[0]["round"])
    _ = "flowchart TD" in buf.texts, buf.record, buf.spent


def round_old(ws: Workspace, run: int, r: int) -> None:
    h = History(ws)
    rng = random.Random(r)
    sum(x["cost"] or 0 for x in h.rounds(run))  # the budget check
    rows = h.rounds(run)
    parents, pool, probs = sample_parents(rows, rng, n=2)
    h.experience(run, parents[0]["round"], rows)
    {x["workflow_text"] for x in rows if x.get("workflow_text")}
    h.operator_record(run, rows)


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{1000 * x:.1f}"


def timed(fn, repeat: int, *args: object) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old-limit", type=int, default=10000, help="skip the old path above this many rounds")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            ws = Workspace(Path(tmp) / f"h{n}.db")
            t0 = time.perf_counter()
            run = build(ws, n)
            built = time.perf_counter() - t0
            History(ws).summary_columns(run)  # warm the page cache of the database file
            page_new(ws, run)  # and the imports (plotly, networkx) the first view pays once per process
            page, extra = timed(page_new, args.repeat, ws, run)
            buf = RunBuffer(History(ws), run)
            statements: list[str] = []
            ws.conn.set_trace_callback(statements.append)
            rnd, _ = timed(round_new, args.repeat, ws, run, buf, n)
            ws.conn.set_trace_callback(None)
            reads = len(statements) / args.repeat
            old_page = old_round = old_extra = None
            if n <= args.old_limit:
                old_page, old_extra = timed(page_old, 1, ws, run)
                old_round, _ = timed(round_old, 1, ws, run, n)
            out.append((n, built, page, extra, rnd, reads, old_page, old_extra, old_round))
            ws.close()
    print(f"History at scale (median of {args.repeat}; the machine is shared and was loaded)\n")
    print("| rounds | History view (ms) | old view (ms) | lineage build (ms) | lineage figure (chars) | old Mermaid "
          "lineage (chars) | round bookkeeping (ms) | SQL per round | old bookkeeping (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, _built, page, extra, rnd, reads, old_page, old_extra, old_round in out:
        print(f"| {n:,} | {1000 * page:.1f} | {fmt(old_page)} | {1000 * extra['lineage']:.1f} | "
              f"{extra['lineage_chars']:,} | {'—' if old_extra is None else format(old_extra['lineage_chars'], ',')} | "
              f"{1000 * rnd:.2f} | {reads:.0f} | {fmt(old_round)} |")
    if len(out) >= 2:
        (n0, _, p0, _, r0, *_), (n1, _, p1, _, r1, *_) = out[0], out[-1]
        import math

        print(f"\ngrowth exponent {n0:,} -> {n1:,} rounds: History view {math.log(p1 / p0) / math.log(n1 / n0):.2f}, "
              f"round bookkeeping {math.log(r1 / r0) / math.log(n1 / n0):.2f} (1 = linear, 0 = constant)")
    print("\n" + json.dumps({"sizes": sizes}))


if __name__ == "__main__":
    main()
