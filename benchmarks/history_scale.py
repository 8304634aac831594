"""History at scale: the History page's Python work and one evolution round's bookkeeping at 1,000 / 10,000 / 20,000
stored rounds, through the project's own API, before (the old full-decode path, still in the code base) and after.

    .venv/bin/python benchmarks/history_scale.py [--sizes 1000,10000,20000] [--repeat 5] [--no-page]

"engine" = every engine call one History view makes (runs overview, the run's view: filters and the table's
last page, with and without a filter; curves and both figures, the round picker's labels, the lineage figure; the selected round and
its parent; validation vs test). "first" is a view after the run changed (nothing cached: ``run_view`` rebuilds
it), "rerun" the same page again (a widget touched: one small read finds the run unchanged).
"page script" = the History page itself run by Streamlit (AppTest, in this process), timed around the page's
script only, so Streamlit's own work is included (dataframe to Arrow, figures to JSON, widgets) but not
AppTest's polling; Streamlit's script cache is kept between runs as the server keeps it. "round" = one round's
bookkeeping in the evolution loop (top-k pool, parent draw, parents read by key, experience, texts tried,
operator record, budget, and the rule judge's comparison of a candidate with the run's history). "reads" counts the
SQL statements one round's bookkeeping sends. "open" is a new process's first ``History()`` on the workspace (what
every page and command pays once), "resume" what an evolution run does before its first round after a restart
(its RunBuffer, and parsing the workflows its judge compares with). Machines are shared: the load average is
printed; compare the ratios within one run.
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

from flowcore.evolution import session as evs
from flowcore.evolution.history import History, RunBuffer, sample_from_pool, sample_parents
from flowcore.evolution.judge import Candidate, RuleJudge
from flowcore.evolution.testsplit import validation_vs_test
from flowcore.mermaid.reader import parse
from flowcore.ui import history as hv
from flowcore.workspace.store import Workspace

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


def page_new(ws: Workspace, run: int, cold: bool = True) -> dict:
    if cold:
        hv._VIEWS.clear()  # as after a write to the run
    h = History(ws)
    evs.runs_overview(ws)
    view = hv.run_view(h, run)
    view.statuses(), view.operators()
    rows = view.rows(statuses=["ok"], operators=["insert"], min_score=0.2)
    view.table(rows, hv.page_count(len(rows)))
    rows = view.rows()
    view.table(rows, hv.page_count(len(rows)))
    view.score_figure()
    view.cost_figure()
    pick = list(view.labels)[-1]
    t = time.perf_counter()
    fig, _ = view.lineage(pick)
    lineage = time.perf_counter() - t
    row = h.get_round(run, pick)
    if row and row["parents"]:
        h.get_round(run, row["parents"][0])
    validation_vs_test(ws, run)
    return {"lineage": lineage, "lineage_chars": len(fig.to_json())}


def page_script(db: Path, repeat: int) -> tuple[float, float]:
    """(first, rerun): the History page's script time, median of ``repeat``, under Streamlit's AppTest."""
    import os

    from streamlit import config as st_config
    from streamlit.navigation import page as stpage
    from streamlit.runtime.scriptrunner import script_cache
    from streamlit.testing.v1 import AppTest

    os.environ["MERMAIDFLOW_DB"] = str(db)
    st_config.set_option("server.address", "127.0.0.1")  # as `make run` serves it: no login screen
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        os.environ.pop(k, None)
    compiled: dict[str, object] = {}
    get_bytecode, run_page = script_cache.ScriptCache.get_bytecode, stpage.StreamlitPage.run
    depth, times = [0], []

    def cached(self, path):  # noqa: ANN001, ANN202 - the server keeps one script cache; AppTest makes one a run
        if path not in compiled:
            compiled[path] = get_bytecode(self, path)
        return compiled[path]

    def timed_run(self):  # noqa: ANN001, ANN202 - app.py runs the page inside its navigation: time that one
        depth[0] += 1
        try:
            if depth[0] != 2:
                return run_page(self)
            t = time.perf_counter()
            try:
                return run_page(self)
            finally:
                times.append(time.perf_counter() - t)
        finally:
            depth[0] -= 1

    script_cache.ScriptCache.get_bytecode, stpage.StreamlitPage.run = cached, timed_run
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
        at.run()
        at.switch_page("pages/history.py").run()
        assert not at.exception, [e.value for e in at.exception]
        first, rerun = [], []
        for _ in range(repeat):
            hv._VIEWS.clear()
            at.run()
            first.append(times[-1])
            at.run()
            rerun.append(times[-1])
        assert not at.exception, [e.value for e in at.exception]
        return statistics.median(first), statistics.median(rerun)
    finally:
        script_cache.ScriptCache.get_bytecode, stpage.StreamlitPage.run = get_bytecode, run_page


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


PARSED: dict[int, object] = {}  # as the loop keeps them: each round's workflow parsed once per process
CANDIDATES = [Candidate(parse(SEED + f"%% candidate {k}\n"), "insert", "bench") for k in range(4)]


def judged_rounds(buf: RunBuffer) -> list[int]:
    """The rounds the judge compares with (all of them before the bounded window)."""
    return buf.judge_history(4) if hasattr(buf, "judge_history") else buf.text_rounds


def parsed(buf: RunBuffer, rnd: int) -> object:
    if rnd not in PARSED:
        PARSED[rnd] = parse(buf.text_of[rnd])
    return PARSED[rnd]


def round_new(ws: Workspace, run: int, buf: RunBuffer, r: int) -> None:
    h = History(ws)
    rng = random.Random(r)
    drawn, pool, probs = sample_from_pool(buf.top_k(4), rng, n=2)
    parents = [h.get_round(run, p["round"]) for p in drawn]
    h.experience(run, parents[0]["round"])
    _ = "flowchart TD" in buf.texts, buf.record, buf.spent
    history = [parsed(buf, x) for x in judged_rounds(buf)]
    RuleJudge("math").score(CANDIDATES, parse(parents[0]["workflow_text"]), history=history, operator_record=buf.record)


def resume(ws: Workspace, run: int) -> None:
    """What an evolution run does before its first round after a restart."""
    PARSED.clear()
    buf = RunBuffer(History(ws), run)
    [parsed(buf, x) for x in judged_rounds(buf)]


def open_fresh(db: Path, repeat: int) -> float:
    """A new process's first History() on the workspace (median of ``repeat`` processes), imports excluded."""
    import subprocess

    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); from flowcore.evolution.history import History; "
            "from flowcore.workspace.store import Workspace; ws = Workspace(sys.argv[1]); ws.query('SELECT 1'); "
            "t = time.perf_counter(); History(ws); print(time.perf_counter() - t)")
    times = [float(subprocess.run([sys.executable, "-c", code, str(db), str(ROOT)], capture_output=True, text=True,
                                  check=True).stdout) for _ in range(repeat)]
    return statistics.median(times)


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
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,20000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old-limit", type=int, default=1000, help="skip the old path above this many rounds")
    ap.add_argument("--no-page", action="store_true", help="skip the page script (Streamlit AppTest) timings")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            db = Path(tmp) / f"h{n}.db"
            ws = Workspace(db)
            run = build(ws, n)
            History(ws).summary_columns(run)  # warm the page cache of the database file
            page_new(ws, run)  # and the imports (plotly, networkx) the first view pays once per process
            page, extra = timed(page_new, args.repeat, ws, run)
            rerun, _ = timed(page_new, args.repeat, ws, run, False)
            script = (None, None) if args.no_page else page_script(db, args.repeat)
            opened = open_fresh(db, args.repeat)
            resumed, _ = timed(resume, 1, ws, run)
            buf = RunBuffer(History(ws), run)
            round_new(ws, run, buf, n)  # the loop parses each round once: warm its cache as a running loop has it
            statements: list[str] = []
            ws.conn.set_trace_callback(statements.append)
            rnd, _ = timed(round_new, args.repeat, ws, run, buf, n)
            ws.conn.set_trace_callback(None)
            reads = len(statements) / args.repeat
            old_page = old_round = old_extra = None
            if n <= args.old_limit:
                old_page, old_extra = timed(page_old, 1, ws, run)
                old_round, _ = timed(round_old, 1, ws, run, n)
            out.append((n, page, rerun, script, extra, rnd, reads, old_page, old_extra, old_round, opened, resumed))
            ws.close()
    print(f"History at scale (median of {args.repeat}; load average {load0:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs shared)\n")
    print("| rounds | open: first History() (ms) | resume (ms) | view, engine: first (ms) | view, engine: rerun (ms) | "
          "page script: first (ms) | page script: rerun (ms) | old view, engine (ms) | lineage build (ms) | lineage "
          "figure (chars) | old Mermaid lineage (chars) | round bookkeeping (ms) | SQL per round | old bookkeeping "
          "(ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, page, rerun, script, extra, rnd, reads, old_page, old_extra, old_round, opened, resumed in out:
        print(f"| {n:,} | {1000 * opened:.1f} | {1000 * resumed:.1f} | {1000 * page:.1f} | {1000 * rerun:.1f} | "
              f"{fmt(script[0])} | {fmt(script[1])} | "
              f"{fmt(old_page)} | {1000 * extra['lineage']:.1f} | {extra['lineage_chars']:,} | "
              f"{'—' if old_extra is None else format(old_extra['lineage_chars'], ',')} | {1000 * rnd:.2f} | "
              f"{reads:.0f} | {fmt(old_round)} |")
    if len(out) >= 2:
        import math

        (n0, p0, _, s0, _, r0, *_), (n1, p1, _, s1, _, r1, *_) = out[0], out[-1]
        i10 = next((i for i, o in enumerate(out) if o[0] == 10 * n0), None)
        if i10 is not None:
            print(f"round bookkeeping, {out[i10][0]:,} vs {n0:,} rounds: {out[i10][5] / r0:.2f}x (goal <= 2x)")
        growth = f"History view (engine, first) {math.log(p1 / p0) / math.log(n1 / n0):.2f}"
        if s0[0] and s1[0]:
            growth += f", page script (first) {math.log(s1[0] / s0[0]) / math.log(n1 / n0):.2f}"
        print(f"\ngrowth exponent {n0:,} -> {n1:,} rounds: {growth}, round bookkeeping "
              f"{math.log(r1 / r0) / math.log(n1 / n0):.2f} (1 = linear, 0 = constant)")
    print("\n" + json.dumps({"sizes": sizes}))


if __name__ == "__main__":
    main()
