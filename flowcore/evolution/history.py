"""The history buffer (DESIGN §5, §9): evolution runs and their rounds in the workspace database, parent
sampling over the top-k rounds, and per-parent experience (what was tried and whether it helped).

Round 0 of a run is its seed workflow. Scores are stored as fractions (0..1); sampling uses percent.
A round's row is written in one transaction, so a crash never leaves half a round behind.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from typing import Any

from ..storage import Workspace

DDL = """
CREATE TABLE IF NOT EXISTS evo_runs(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    config_json TEXT NOT NULL,
    config_key TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'running',  -- running | finished | cancelled | stopped
    reason TEXT,
    seed_workflow TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    task TEXT NOT NULL,
    offline INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS evo_runs_key ON evo_runs(config_key, status);
CREATE TABLE IF NOT EXISTS evo_rounds(
    run_id INTEGER NOT NULL REFERENCES evo_runs(id) ON DELETE CASCADE,
    round INTEGER NOT NULL,
    workflow_text TEXT,
    prompts_json TEXT NOT NULL DEFAULT '{}',
    parents_json TEXT NOT NULL DEFAULT '[]',
    operator TEXT,
    detail TEXT,
    candidates_json TEXT NOT NULL DEFAULT '[]',
    chosen INTEGER,
    judge TEXT,
    score REAL,
    ci_low REAL,
    ci_high REAL,
    n INTEGER,
    cost REAL NOT NULL DEFAULT 0,
    per_problem_json TEXT NOT NULL DEFAULT '[]',
    experience_json TEXT NOT NULL DEFAULT '[]',
    sampling_json TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,  -- ok | structure-only | failed
    reason TEXT,
    pinned INTEGER NOT NULL DEFAULT 0,
    note TEXT,
    created REAL NOT NULL,
    PRIMARY KEY (run_id, round)
);
"""
STATUSES = ("ok", "structure-only", "failed")
_JSON_COLS = ("prompts_json", "parents_json", "candidates_json", "per_problem_json", "experience_json",
              "sampling_json")


# ----------------------------------------------------------------------------------------------- sampling

def selection_probabilities(scores: list[float], alpha: float = 0.2, lam: float = 0.3) -> list[float]:
    """``p_i = λ/n + (1-λ)·softmax(α·(s_i − s_max))`` with scores in percent."""
    if not scores:
        return []
    n, top = len(scores), max(scores)
    weights = [math.exp(alpha * (s - top)) for s in scores]
    total = sum(weights)
    return [lam / n + (1 - lam) * w / total for w in weights]


def top_k(rows: list[dict], k: int = 4) -> list[dict]:
    """The k best-scoring usable rounds, best first, the seed round (round 0) always among them.
    Unscored rounds (offline) rank by recency."""
    usable = [r for r in rows if r["round"] == 0 or r["status"] in ("ok", "structure-only")]
    usable.sort(key=lambda r: (-(r["score"] if r["score"] is not None else -1.0), -r["round"]))
    pool = usable[:max(1, k)]
    seed = next((r for r in usable if r["round"] == 0), None)
    if seed is not None and seed not in pool:
        pool = pool[:max(0, k - 1)] + [seed]
    return pool


def percent(row: dict, pool: list[dict]) -> float:
    """A round's score in percent; an unscored round counts as the worst scored one (or 0)."""
    if row["score"] is not None:
        return 100.0 * row["score"]
    known = [r["score"] for r in pool if r["score"] is not None]
    return 100.0 * min(known) if known else 0.0


def sample_parents(rows: list[dict], rng: random.Random, n: int = 1, *, alpha: float = 0.2, lam: float = 0.3,
                   k: int = 4) -> tuple[list[dict], list[dict], list[float]]:
    """Draw ``n`` distinct parents (fewer if the pool is smaller) from the top-k rounds.

    Returns (parents, pool, probabilities of the pool) so pages can show why a parent was chosen."""
    pool = top_k(rows, k)
    probs = selection_probabilities([percent(r, pool) for r in pool], alpha, lam)
    chosen: list[dict] = []
    left = list(range(len(pool)))
    for _ in range(min(n, len(pool))):
        weights = [probs[i] for i in left]
        i = rng.choices(left, weights=weights)[0]
        chosen.append(pool[i])
        left.remove(i)
    return chosen, pool, probs


# ------------------------------------------------------------------------------------------------ storage

@dataclass
class RunInfo:
    id: int
    created: float
    config: dict
    config_key: str
    status: str
    reason: str | None
    seed_workflow: str
    benchmark: str
    task: str
    offline: bool


class History:
    def __init__(self, ws: Workspace):
        self.ws = ws
        ws.ensure_schema("evolution", DDL)

    # -- runs ----------------------------------------------------------------------------------------------
    def create_run(self, config: dict, config_key: str, seed_workflow: str, benchmark: str, task: str,
                   offline: bool) -> int:
        now = time.time()
        with self.ws.transaction() as c:
            cur = c.execute("INSERT INTO evo_runs(created, updated, config_json, config_key, seed_workflow, "
                            "benchmark, task, offline) VALUES (?,?,?,?,?,?,?,?)",
                            (now, now, json.dumps(config, sort_keys=True), config_key, seed_workflow, benchmark,
                             task, int(offline)))
            return int(cur.lastrowid)

    def run(self, run_id: int) -> RunInfo:
        rows = self.ws.query("SELECT * FROM evo_runs WHERE id = ?", (run_id,))
        if not rows:
            raise KeyError(f"no evolution run {run_id} in {self.ws.path}")
        r = rows[0]
        return RunInfo(r["id"], r["created"], json.loads(r["config_json"]), r["config_key"], r["status"],
                       r["reason"], r["seed_workflow"], r["benchmark"], r["task"], bool(r["offline"]))

    def runs(self) -> list[RunInfo]:
        return [self.run(r["id"]) for r in self.ws.query("SELECT id FROM evo_runs ORDER BY id")]

    def find_unfinished(self, config_key: str) -> int | None:
        rows = self.ws.query("SELECT id FROM evo_runs WHERE config_key = ? AND status != 'finished' "
                             "ORDER BY id DESC LIMIT 1", (config_key,))
        return int(rows[0]["id"]) if rows else None

    def set_status(self, run_id: int, status: str, reason: str | None = None) -> None:
        with self.ws.transaction() as c:
            c.execute("UPDATE evo_runs SET status = ?, reason = ?, updated = ? WHERE id = ?",
                      (status, reason, time.time(), run_id))

    # -- rounds --------------------------------------------------------------------------------------------
    def add_round(self, run_id: int, rec: dict[str, Any]) -> None:
        """Store one round (all of it, in one transaction). ``rec`` uses the column names; *_json columns
        may be given as Python values under the name without the suffix (``candidates=[...]``)."""
        if rec.get("status") not in STATUSES:
            raise ValueError(f"round status must be one of {', '.join(STATUSES)}, got {rec.get('status')!r}")
        row = {k: v for k, v in rec.items() if not k.endswith("_json")}
        for col in _JSON_COLS:
            key = col.removesuffix("_json")
            value = rec.get(col, row.pop(key, None))
            row.pop(key, None)
            row[col] = value if isinstance(value, str) else json.dumps(value if value is not None else (
                {} if col in ("prompts_json", "sampling_json") else []), ensure_ascii=False)
        row["run_id"], row["created"] = run_id, time.time()
        cols = ", ".join(row)
        with self.ws.transaction() as c:
            marks = ", ".join("?" * len(row))
            c.execute(f"INSERT INTO evo_rounds({cols}) VALUES ({marks})", tuple(row.values()))
            c.execute("UPDATE evo_runs SET updated = ? WHERE id = ?", (time.time(), run_id))

    def rounds(self, run_id: int) -> list[dict]:
        return [_decode(r) for r in self.ws.query("SELECT * FROM evo_rounds WHERE run_id = ? ORDER BY round",
                                                  (run_id,))]

    def get_round(self, run_id: int, rnd: int) -> dict | None:
        rows = self.ws.query("SELECT * FROM evo_rounds WHERE run_id = ? AND round = ?", (run_id, rnd))
        return _decode(rows[0]) if rows else None

    def last_round(self, run_id: int) -> int:
        """The last committed round (-1 when none)."""
        row = self.ws.query("SELECT MAX(round) AS r FROM evo_rounds WHERE run_id = ?", (run_id,))[0]
        return -1 if row["r"] is None else int(row["r"])

    def pin(self, run_id: int, rnd: int, pinned: bool = True) -> None:
        with self.ws.transaction() as c:
            c.execute("UPDATE evo_rounds SET pinned = ? WHERE run_id = ? AND round = ?",
                      (int(pinned), run_id, rnd))

    def set_note(self, run_id: int, rnd: int, note: str | None) -> None:
        with self.ws.transaction() as c:
            c.execute("UPDATE evo_rounds SET note = ? WHERE run_id = ? AND round = ?", (note, run_id, rnd))

    # -- experience ----------------------------------------------------------------------------------------
    def experience(self, run_id: int, parent_round: int, rows: list[dict] | None = None) -> list[dict]:
        """What was tried from a parent: one entry per child round, with the score change when both have one."""
        rows = self.rounds(run_id) if rows is None else rows
        by_round = {r["round"]: r for r in rows}
        parent = by_round.get(parent_round)
        out = []
        for r in rows:
            if r["round"] == 0 or parent_round not in (r["parents"] or []):
                continue
            delta = None
            if parent and parent["score"] is not None and r["score"] is not None:
                delta = round(r["score"] - parent["score"], 6)
            out.append({"round": r["round"], "operator": r["operator"], "detail": r["detail"],
                        "status": r["status"], "reason": r["reason"], "score": r["score"], "delta": delta,
                        "helped": None if delta is None else delta > 0})
        return out

    def operator_record(self, run_id: int, rows: list[dict] | None = None) -> dict[str, list[float]]:
        """Score changes (child − first parent) per operator over the run: the judge's prior."""
        rows = self.rounds(run_id) if rows is None else rows
        by_round = {r["round"]: r for r in rows}
        out: dict[str, list[float]] = {}
        for r in rows:
            parents = r["parents"] or []
            p = by_round.get(parents[0]) if parents else None
            if r["round"] == 0 or not r["operator"]:
                continue
            if r["status"] == "failed":
                out.setdefault(r["operator"], []).append(-1.0)  # a failure counts against the operator
            elif p and p["score"] is not None and r["score"] is not None:
                out.setdefault(r["operator"], []).append(r["score"] - p["score"])
        return out


def _decode(row: Any) -> dict:
    d = dict(row)
    for col in _JSON_COLS:
        try:
            d[col.removesuffix("_json")] = json.loads(d.pop(col) or "null")
        except ValueError:
            d[col.removesuffix("_json")] = None
    d["pinned"] = bool(d.get("pinned"))
    return d
