"""Validation → test: re-score a run's top-N workflows (by validation score) on the held-out test split, and
keep the test scores per run beside the validation ones (the papers' protocol: evolve on validation, report
test). A test problem is never a validation problem: the two sets are checked to be disjoint (by id and by
question text) before anything runs.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd

from flowcore.evolution.history import History
from flowcore.mermaid.reader import parse
from flowcore.tasks import load, split_info
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace

__all__ = ["TEST_JOB", "chosen_round", "disjoint", "held_out_problems", "ranked_rounds", "start_test_rescore",
           "stored_test_scores", "top_rounds", "validation_vs_test"]

TEST_JOB = "test-rescore"
_DDL = """
CREATE TABLE IF NOT EXISTS evo_test_scores(
    run_id INTEGER NOT NULL, round INTEGER NOT NULL, split TEXT NOT NULL, score REAL, ci_low REAL, ci_high REAL,
    n INTEGER NOT NULL, repeats INTEGER NOT NULL DEFAULT 1, sd REAL, errors INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0, split_json TEXT NOT NULL, per_problem_json TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL, PRIMARY KEY (run_id, round, split));
"""


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("evo_test_scores", _DDL)


def top_rounds(rows: list[dict], n: int) -> list[dict]:
    """The n best measured rounds by validation score (ties: the earlier round); ``rows`` may be summaries."""
    scored = [r for r in rows if r["status"] == "ok" and r["score"] is not None]
    return sorted(scored, key=lambda r: (-r["score"], r["round"]))[:max(0, n)]


def chosen_round(rows: list[dict], search: str = "paper") -> dict | None:
    """The round a run offers as its result (re-scored on test first): a guided run's highest lower confidence
    bound, a paper run's best validation score (``flowcore.evolution.search.chosen``)."""
    from flowcore.evolution.search import chosen

    return chosen(rows, search)


def ranked_rounds(rows: list[dict], n: int, search: str = "paper") -> list[dict]:
    """The n rounds to re-score on test: the chosen round first, then the best by validation score."""
    first = chosen_round(rows, search)
    rest = [r for r in top_rounds(rows, n) if first is None or r["round"] != first["round"]]
    return ([first] if first is not None and n > 0 else []) + rest[:max(0, n - 1)]


def disjoint(validation: list, test: list) -> None:
    """ValueError naming the first problem that is in both sets."""
    val_ids = {p.id for p in validation}
    val_q = {p.question.strip() for p in validation}
    for p in test:
        if p.id in val_ids or p.question.strip() in val_q:
            raise ValueError(f"test problem {p.id} is also a validation problem: the test split must be held out")


def held_out_problems(config: dict, *, limit: int | None = None) -> tuple[list, dict, str]:
    """(problems, split record, split key) of a run's test split: the bundled test split (or the run's split
    file). A run evolved on its own --data rows has no test split unless ``test_data`` names one."""
    bench = config["benchmark"]
    split_file, test_data = config.get("split_file"), config.get("test_data")
    if config.get("data_path") and not test_data:
        raise ValueError("this run was evolved on its own data file (--data): give its test rows with "
                         "--test-data FILE")
    problems = load(bench, "test", data_path=test_data, limit=limit, split_file=split_file)
    info = split_info(bench, "test", data_path=test_data, split_file=split_file, limit=limit)
    validation = load(bench, "validation", data_path=config.get("data_path"), limit=config.get("limit"),
                      split_file=split_file)
    disjoint(validation, problems)
    key = f"file:{test_data}" if test_data else ("test" if split_file is None else f"test:{split_file}")
    return problems, info, key


async def rescore_top(ws: Workspace, run_id: int, top: int, *, llm: Any, limit: int | None = None,
                      repeats: int = 1, concurrency: int = 8, cancel: Any = None,
                      progress: Any = None, rounds: list[int] | None = None) -> list[dict]:
    """Evaluate the run's top-``top`` rounds (or the given ``rounds``) on the test split and store each score (a
    round already scored on that split is kept, so a resumed or repeated call finishes what is missing). Returns
    the stored rows."""
    from flowcore.evaluation.compare import measure

    h = History(ws)
    info = h.run(run_id)
    from flowcore.tasks import kind_of

    kind_of(info.config["benchmark"], ws)  # a task of your own is read from the workspace
    problems, split, key = held_out_problems(info.config, limit=limit)
    _schema(ws)
    done = {r["round"] for r in stored_test_scores(ws, run_id) if r["split"] == key}
    rows = h.summaries(run_id)  # light rows; only the chosen rounds are read in full
    mode = info.config.get("search", "paper")
    picked = [r for r in rows if r["round"] in rounds] if rounds is not None else ranked_rounds(rows, top, mode)
    for best in picked:
        row = h.get_round(run_id, best["round"])
        if row is None or row["round"] in done or not row.get("workflow_text"):
            continue
        m = await measure(parse(row["workflow_text"]), info.benchmark, problems, llm=llm, repeats=repeats,
                          name=f"round {row['round']}", concurrency=concurrency, cancel=cancel,
                          progress=None if progress is None else
                          (lambda d, t, r, rnd=row["round"]: progress(rnd, d, t)))
        if m.pooled.cancelled:
            break
        p = m.pooled
        per = [{"id": r.id, "correct": bool(r.correct), "error": r.error, "repeat": i}
               for i, rep in enumerate(p.reports) for r in rep.results]
        with ws.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO evo_test_scores(run_id, round, split, score, ci_low, ci_high, n,"
                         " repeats, sd, errors, cost, split_json, per_problem_json, created)"
                         " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         (run_id, row["round"], key, p.score, p.ci_low, p.ci_high, p.n, m.repeats, p.sd,
                          len(m.errored), m.paid, json.dumps(split), json.dumps(per), time.time()))
    return stored_test_scores(ws, run_id)


def stored_test_scores(ws: Workspace, run_id: int) -> list[dict]:
    _schema(ws)
    rows = ws.query("SELECT * FROM evo_test_scores WHERE run_id = ? ORDER BY round", (run_id,))
    out = []
    for r in rows:
        d = dict(r)
        d["split_info"] = json.loads(d.pop("split_json") or "{}")
        d["per_problem"] = json.loads(d.pop("per_problem_json") or "[]")
        out.append(d)
    return out


def validation_vs_test(ws: Workspace, run_id: int) -> pd.DataFrame:
    """Validation and test side by side, with intervals (fractions), one row per test-scored round."""
    cols = ["round", "operator", "validation", "val_low", "val_high", "val_n", "test", "test_low", "test_high",
            "test_n", "repeats", "test_sd", "errors", "test_cost", "split"]
    tests = stored_test_scores(ws, run_id)
    # only the test-scored rounds are read (a History view of a 10,000-round run calls this on every rerun)
    rounds = {r["round"]: r for r in History(ws).summaries(run_id, [t["round"] for t in tests])} if tests else {}
    out = []
    for t in tests:
        v = rounds.get(t["round"], {})
        out.append({"round": t["round"], "operator": v.get("operator") or "", "validation": v.get("score"),
                    "val_low": v.get("ci_low"), "val_high": v.get("ci_high"), "val_n": v.get("n"),
                    "test": t["score"], "test_low": t["ci_low"], "test_high": t["ci_high"], "test_n": t["n"],
                    "repeats": t["repeats"], "test_sd": t["sd"], "errors": t["errors"], "test_cost": t["cost"],
                    "split": t["split_info"].get("source", t["split"])})
    return pd.DataFrame(out, columns=cols)


def start_test_rescore(ws: Workspace, settings: Any, run_id: int, top: int, *, limit: int | None = None,
                       repeats: int = 1, concurrency: int = 4) -> jobs.Job:
    """Re-score a run's top-N on the test split as a background job (History's on-demand button)."""
    from dataclasses import replace

    from flowcore.llm.client import LLM

    if not settings.configured:
        raise ValueError("no LLM endpoint is configured, so nothing can be evaluated")
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    info = History(ws).run(run_id)
    if info.offline:
        raise ValueError(f"run {run_id} is structure-only: it has no validation scores to rank")
    if not top_rounds(History(ws).summaries(run_id), top):
        raise ValueError(f"run {run_id} has no measured round to re-score")
    from flowcore.tasks import kind_of

    kind_of(info.config["benchmark"], ws)  # a task of your own is read from the workspace
    held_out_problems(info.config, limit=limit)  # a missing test split or an overlap is reported now

    async def target(ctx: jobs.JobContext) -> list[dict]:
        llm = LLM(replace(settings, concurrency=max(settings.concurrency, concurrency)), ws,
                  run_id=f"evo-{run_id}-test")
        return await rescore_top(ws, run_id, top, llm=llm, limit=limit, repeats=repeats, concurrency=concurrency,
                                 cancel=ctx.cancelled,
                                 progress=lambda rnd, d, t: ctx.progress(d, t, f"round {rnd}: {d}/{t} test runs"))

    return jobs.Job(target, TEST_JOB, meta={"run_id": run_id}).start()
