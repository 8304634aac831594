"""History at scale: the incremental bookkeeping gives exactly what the full-read functions give, the light
summaries match the full rounds, the lineage collapses for long runs, and old workspaces are backfilled."""

from __future__ import annotations

import random

from flowcore.evolution import historyview as hv
from flowcore.evolution.history import History, RunBuffer, sample_from_pool, sample_parents, top_k
from flowcore.storage import Workspace

OPS = ["insert", "delete", "prompt", "crossover"]


def _fill(ws: Workspace, n: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    h = History(ws)
    run = h.create_run({"rounds": n}, f"k{seed}", "x", "gsm8k", "math", False)
    for r in range(n):
        status = "ok" if r == 0 else rng.choice(["ok", "ok", "structure-only", "failed"])
        score = None if status != "ok" or rng.random() < 0.1 else round(rng.random(), 3)
        parents = [] if r == 0 else sorted({rng.randrange(r) for _ in range(rng.choice((1, 2)))})
        cands = [{"text": f"t{r}.{k}", "scores": {"total": float(k + r % 7)}} for k in range(3)]
        h.add_round(run, {"round": r, "workflow_text": f"w{r % (n // 2 or 1)}", "parents": parents, "status": status,
                          "operator": "seed" if r == 0 else rng.choice(OPS), "score": score, "cost": 0.01 * (r % 3),
                          "candidates": cands, "chosen": None if r == 0 else r % 3, "pinned": r % 50 == 7})
    return run


def test_run_buffer_matches_the_full_read_functions(ws):
    run = _fill(ws, 240, seed=1)
    h = History(ws)
    rows = h.rounds(run)
    buf = RunBuffer(h, run)
    for k in (1, 2, 4, 9):
        assert [r["round"] for r in buf.top_k(k)] == [r["round"] for r in top_k(rows, k)]
    a = sample_from_pool(buf.top_k(4), random.Random(5), n=2)
    b = sample_parents(rows, random.Random(5), n=2)
    assert [r["round"] for r in a[0]] == [r["round"] for r in b[0]] and a[2] == b[2]
    assert buf.record == h.operator_record(run, rows)
    assert abs(buf.spent - sum(r["cost"] for r in rows)) < 1e-9 and abs(h.spent(run) - buf.spent) < 1e-9
    assert buf.texts == {r["workflow_text"] for r in rows}
    for parent in (0, 3, 17, 100):
        assert h.experience(run, parent) == h.experience(run, parent, rows)  # lineage index == full scan
    # adding a round keeps the buffer equal to a fresh load
    rec = {"round": 240, "workflow_text": "new", "parents": [3], "status": "ok", "operator": "insert",
           "score": 0.99, "cost": 0.5}
    h.add_round(run, rec)
    buf.add(rec)
    fresh = RunBuffer(h, run)
    assert buf.top_k(4) == fresh.top_k(4) and buf.record == fresh.record and buf.texts == fresh.texts
    assert [r["round"] for r in buf.top_k(2)] == [r["round"] for r in top_k(h.rounds(run), 2)] == [240, 0]


def test_summaries_are_the_rounds_without_their_json(ws):
    run = _fill(ws, 60, seed=2)
    h = History(ws)
    full = {r["round"]: r for r in h.rounds(run)}
    light = h.summaries(run)
    assert [r["round"] for r in light] == sorted(full)
    for r in light:
        f = full[r["round"]]
        assert (r["score"], r["parents"], r["status"], r["pinned"]) == (f["score"], f["parents"], f["status"],
                                                                        f["pinned"])
        chosen = f["chosen"]
        assert r["judge_total"] == (None if chosen is None else f["candidates"][chosen]["scores"]["total"])
    df = hv.summary_frame(h.summary_columns(run))
    assert list(df["round"]) == sorted(full) and df["parents"].iloc[1] == ", ".join(map(str, full[1]["parents"]))
    assert hv.summary_frame(h.summary_columns(999)).empty  # a run without rounds


def test_lineage_collapses_for_long_runs(ws):
    run = _fill(ws, 700, seed=3)
    cols = History(ws).summary_columns(run)
    nodes, what = hv.lineage_nodes(cols, selected=650, top=5, limit=120)
    assert len(nodes) <= 120 and 650 in nodes and 0 in nodes or len(nodes) == 120
    best = max((s, -r) for r, s, st in zip(cols["round"], cols["score"], cols["status"])
               if s is not None and st == "ok")
    assert -best[1] in nodes and "of 700 rounds" in what
    fig, caption = hv.lineage_figure(cols, 650)
    points = fig.data[1]
    assert len(points.x) <= hv.MAX_NODES and "the ancestry of the" in caption
    small = History(ws).summary_columns(_fill(ws, 12, seed=4))
    assert hv.lineage_nodes(small)[0] == list(range(12))
    fig, caption = hv.lineage_figure(small, 11)
    assert "all 12 rounds" in caption and list(fig.data[1].marker.color).count("#2e7d32") == 1


def test_old_workspace_is_backfilled(tmp_path):
    ws = Workspace(tmp_path / "old.db")
    run = _fill(ws, 30, seed=5)
    with ws.transaction() as c:  # as a workspace written before the scale columns
        c.execute("DELETE FROM evo_lineage")
        c.execute("UPDATE evo_rounds SET judge_total = NULL")
    ws.close_all()
    again = Workspace(tmp_path / "old.db")
    h = History(again)
    rows = h.rounds(run)
    assert h.experience(run, 0) == h.experience(run, 0, rows) and h.experience(run, 0)
    assert all(r["judge_total"] is not None for r in h.summaries(run)[1:])
    again.close_all()
