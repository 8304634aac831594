"""The history buffer (DESIGN §5, §9): evolution runs and their rounds in the workspace database, parent
sampling over the top-k rounds, and per-parent experience (what was tried and whether it helped).

Round 0 of a run is its seed workflow. Scores are stored as fractions (0..1); sampling uses percent.
A round's row is written in one transaction, so a crash never leaves half a round behind.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import time
from dataclasses import dataclass
from typing import Any

from flowcore.llm.client import estimated_times, run_usage
from flowcore.workspace.store import Workspace

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
# Scale (10,000-round runs): parent -> child edges for O(children) experience look-ups, an index for the top-k
# query, and each round's judge total as a column so a History view never decodes every round's candidates.
SCALE_DDL = """
CREATE TABLE IF NOT EXISTS evo_lineage(
    run_id INTEGER NOT NULL,
    parent INTEGER NOT NULL,
    child INTEGER NOT NULL,
    PRIMARY KEY (run_id, parent, child)
);
CREATE INDEX IF NOT EXISTS evo_lineage_child ON evo_lineage(run_id, child);
CREATE INDEX IF NOT EXISTS evo_rounds_score ON evo_rounds(run_id, score);
CREATE INDEX IF NOT EXISTS evo_rounds_summary ON evo_rounds(run_id, round, status, score, ci_low, ci_high, n, cost,
    operator, parents_json, judge, judge_total, pinned, note, detail, reason);
"""  # evo_rounds_summary covers History.summaries: the rounds' large JSON (stored inline) is never touched
SUMMARY_COLUMNS = ("round", "status", "score", "ci_low", "ci_high", "n", "cost", "operator", "parents_json", "judge",
                   "judge_total", "pinned", "note", "detail", "reason")
STATUSES = ("ok", "structure-only", "failed")
JUDGE_WINDOW = 256  # the latest rounds the judge compares a candidate with (plus the top-k pool)
# scores a round stores; one that is not finite (NaN, ±inf: a shared PostgreSQL workspace's row can hold anything)
# is read as not measured. Every reader goes through _finite, so no best, top-k, curve or outcome sees one. (A cost
# is read as stored: the cost chart leaves a non-finite one off, and a sum of them says what was stored.)
NUMBER_COLS = ("score", "ci_low", "ci_high", "judge_total")
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
    return sample_from_pool(top_k(rows, k), rng, n, alpha=alpha, lam=lam)


def sample_from_pool(pool: list[dict], rng: random.Random, n: int = 1, *, alpha: float = 0.2,
                     lam: float = 0.3) -> tuple[list[dict], list[dict], list[float]]:
    """``sample_parents`` once the top-k pool is known (``RunBuffer.top_k`` gives it without reading a run)."""
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

def run_tag(run_id: int | str) -> str:
    """The run's name in the workspace's LLM call log (``llm_calls.run_id``): every client evolving it logs so."""
    return f"evo-{run_id}"


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
    updated: float = 0.0  # last write (a round stored, a status, pin or note set): how a change is told
    created_by: str = "local"  # who started it: the logged-in member, a key's owner, or "local"


class History:
    def __init__(self, ws: Workspace):
        self.ws = ws
        # Called first inside every write of a round or a status (an evolution run sets its lease's check here:
        # a process whose lease was taken over writes nothing; see lease.py).
        self.guard: Any = None
        ws.ensure_schema("evolution", DDL)
        if "evolution-scale" not in ws._schemas:
            ws.add_columns("evo_rounds", {"judge_total": "REAL"})  # before the index that covers it
            ws.ensure_schema("evolution-scale", SCALE_DDL)
            if not ws.query("SELECT 1 FROM mf_schema WHERE name = ?", (BACKFILLED,)) and not ws.read_only:
                _backfill(ws)  # once per workspace, not per process
        if "evolution-who" not in ws._schemas:  # who made each run and round (added later: additive columns)
            ws.add_columns("evo_runs", {"created_by": "TEXT"})
            ws.add_columns("evo_rounds", {"created_by": "TEXT"})
            ws.ensure_schema("evolution-who", "")
        if "evolution-unstored" not in ws._schemas:  # paid calls of a round not stored yet (keep_unstored)
            ws.add_columns("evo_runs", {"unstored_cost": "REAL"})
            ws.ensure_schema("evolution-unstored", "")

    # -- runs ----------------------------------------------------------------------------------------------
    def create_run(self, config: dict, config_key: str, seed_workflow: str, benchmark: str, task: str,
                   offline: bool, created_by: str = "local") -> int:
        now = time.time()
        with self.ws.transaction() as c:
            cur = c.execute("INSERT INTO evo_runs(created, updated, config_json, config_key, seed_workflow, "
                            "benchmark, task, offline, created_by) VALUES (?,?,?,?,?,?,?,?,?)",
                            (now, now, json.dumps(config, sort_keys=True), config_key, seed_workflow, benchmark,
                             task, int(offline), created_by or "local"))
            return int(cur.lastrowid)

    def run(self, run_id: int) -> RunInfo:
        rows = self.ws.query("SELECT * FROM evo_runs WHERE id = ?", (run_id,))
        if not rows:
            raise KeyError(f"no evolution run {run_id} in {self.ws.path}")
        r = rows[0]
        return RunInfo(r["id"], r["created"], json.loads(r["config_json"]), r["config_key"], r["status"],
                       r["reason"], r["seed_workflow"], r["benchmark"], r["task"], bool(r["offline"]),
                       float(r["updated"] or 0.0), r["created_by"] or "local")

    def runs(self) -> list[RunInfo]:
        return [self.run(r["id"]) for r in self.ws.query("SELECT id FROM evo_runs ORDER BY id")]

    def find_finished(self, config_key: str) -> int | None:
        """The latest finished run with this config key, if any."""
        rows = self.ws.query("SELECT id FROM evo_runs WHERE config_key = ? AND status = 'finished' ORDER BY id DESC "
                             "LIMIT 1", (config_key,))
        return int(rows[0]["id"]) if rows else None

    def find_unfinished(self, config_key: str) -> int | None:
        rows = self.ws.query("SELECT id FROM evo_runs WHERE config_key = ? AND status != 'finished' "
                             "ORDER BY id DESC LIMIT 1", (config_key,))
        return int(rows[0]["id"]) if rows else None

    def set_status(self, run_id: int, status: str, reason: str | None = None) -> None:
        with self.ws.transaction() as c:
            if self.guard is not None:
                self.guard(c)
            c.execute("UPDATE evo_runs SET status = ?, reason = ? WHERE id = ?", (status, reason, run_id))
            _touch(c, run_id)

    # -- rounds --------------------------------------------------------------------------------------------
    def add_round(self, run_id: int, rec: dict[str, Any]) -> None:
        """Store one round (all of it, in one transaction). ``rec`` uses the column names; *_json columns
        may be given as Python values under the name without the suffix (``candidates=[...]``). The run's
        unstored cost (``keep_unstored``) is added to ``rec["cost"]`` and cleared in the same transaction."""
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
        row["judge_total"] = _judge_total(rec.get("candidates"), rec.get("chosen"))
        parents = rec.get("parents") or []
        with self.ws.transaction() as c:
            if self.guard is not None:
                self.guard(c)
            run = c.execute("SELECT created_by, unstored_cost FROM evo_runs WHERE id = ?", (run_id,)).fetchone()
            if "created_by" not in row:  # a round is made by whoever runs its run (a reviewer may say otherwise)
                row["created_by"] = (run["created_by"] if run else None) or "local"
            carried = float((run["unstored_cost"] if run else None) or 0.0)
            if carried:  # the paid calls of an earlier, unstored try of this round: charged here, once
                row["cost"] = float(row.get("cost") or 0.0) + carried
                c.execute("UPDATE evo_runs SET unstored_cost = 0 WHERE id = ?", (run_id,))
            cols, marks = ", ".join(row), ", ".join("?" * len(row))
            c.execute(f"INSERT INTO evo_rounds({cols}) VALUES ({marks})", tuple(row.values()))
            for p in dict.fromkeys(parents):
                c.execute("INSERT INTO evo_lineage(run_id, parent, child) VALUES (?,?,?)", (run_id, int(p),
                                                                                             int(rec["round"])))
            _touch(c, run_id)
        if carried:  # told only once it is committed (a failed write is tried again with ``rec`` as it was)
            rec["cost"] = row["cost"]
        self.ws.checkpoint()  # each round's log folded in: the SQLite WAL stays bounded over a long run

    def rounds(self, run_id: int) -> list[dict]:
        return [_decode(r) for r in self.ws.query("SELECT * FROM evo_rounds WHERE run_id = ? ORDER BY round",
                                                  (run_id,))]

    def get_round(self, run_id: int, rnd: int) -> dict | None:
        rows = self.ws.query("SELECT * FROM evo_rounds WHERE run_id = ? AND round = ?", (run_id, rnd))
        return _decode(rows[0]) if rows else None

    def summaries(self, run_id: int, rounds: list[int] | None = None) -> list[dict]:
        """Every round (or only ``rounds``) without its large JSON (candidates, per-problem results, prompts):
        what a History view lists. One indexed query; only the small parents list is decoded."""
        cols = self.summary_columns(run_id, rounds)
        return [dict(zip(cols, values)) for values in zip(*cols.values())]

    def summary_columns(self, run_id: int, rounds: list[int] | None = None,
                        columns: tuple[str, ...] = SUMMARY_COLUMNS) -> dict[str, list]:
        """``summaries`` column by column (what the History view builds its table and lineage from): one
        query (of ``columns``, a part of ``SUMMARY_COLUMNS``), and every round's parents decoded by a single
        JSON parse (as "parents")."""
        if unknown := set(columns) - set(SUMMARY_COLUMNS):
            raise ValueError(f"not a summary column: {', '.join(sorted(unknown))}")
        where, params = "run_id = ?", (run_id,)
        if rounds is not None:
            where += f" AND round IN ({', '.join('?' * len(rounds))})" if rounds else " AND 0 = 1"
            params += tuple(int(r) for r in rounds)
        values = self.ws.query_columns(f"SELECT {', '.join(columns)} FROM evo_rounds WHERE {where} ORDER BY round",
                                       params, len(columns))
        cols = dict(zip(columns, values))
        if "parents_json" in cols:
            cols["parents"] = json.loads("[" + ",".join(p or "[]" for p in cols.pop("parents_json")) + "]")
        if "pinned" in cols:
            cols["pinned"] = [bool(p) for p in cols["pinned"]]
        for col in NUMBER_COLS:
            if col in cols:
                cols[col] = [_number(v) for v in cols[col]]
        return cols

    def spent(self, run_id: int) -> float:
        """The run's cost so far as its budget counts it: what its rounds and unstored calls were charged, or what
        the call log says its calls cost when that is more (``charged_spent``, ``logged``; one aggregate each)."""
        return max(self.charged_spent(run_id), self.logged(run_id))

    def charged_spent(self, run_id: int) -> float:
        """The stored rounds' costs plus the unstored calls (``keep_unstored``)."""
        row = self.ws.query("SELECT SUM(cost) AS s FROM evo_rounds WHERE run_id = ?", (run_id,))[0]
        return float(row["s"] or 0.0) + self.unstored(run_id)

    def logged(self, run_id: int) -> float:
        """What the workspace's call log says the run's paid calls cost (every call of the run's client is logged
        under ``run_tag`` as it is answered, before any round is stored).

        Why the budget takes the larger of this and ``charged_spent`` (rather than adding what the log has past
        some mark): both count the same calls, and a call can be logged yet charged nowhere (a SIGKILL or power
        loss mid-round, a round dropped by an error that kept no unstored cost), never charged twice. So the
        maximum counts each call once whichever record has it, and nothing recovered is written back, so asking
        again never adds it twice; it needs no mark that a delayed log row (kept in memory through a database
        outage) could fall on the wrong side of. Costs the log lacks (an injected evaluator's own) are in the
        charged total. What the log holds past the charged total stays counted for the rest of the run."""
        return float(run_usage(self.ws, run_tag(run_id)).cost or 0.0)

    def estimated_calls(self, run_id: int) -> int:
        """How many of the run's paid calls had no usage from the endpoint (their cost is an estimate)."""
        return int(run_usage(self.ws, run_tag(run_id)).estimated or 0)

    def estimated_by_round(self, run_id: int) -> dict[int, int]:
        """Per round, how many of the calls its cost counts had no usage from the endpoint. A round's cost is
        what was paid after the round before it was stored, up to its own storing (calls of a round left unstored
        count in the next stored one, as ``add_round`` charges them), so a call belongs to the first round stored
        at or after it; calls after the last round (the test split's re-scoring) belong to none."""
        times = estimated_times(self.ws, run_tag(run_id))
        if not times:
            return {}
        stored = sorted((float(r["created"]), int(r["round"])) for r in
                        self.ws.query("SELECT round, created FROM evo_rounds WHERE run_id = ?", (run_id,)))
        ends = [t for t, _ in stored]
        out: dict[int, int] = {}
        for ts in times:
            if (i := bisect.bisect_left(ends, ts)) < len(stored):
                out[stored[i][1]] = out.get(stored[i][1], 0) + 1
        return out

    def unstored(self, run_id: int) -> float:
        """What the run paid for calls of a round it could not store (kept by ``keep_unstored``)."""
        rows = self.ws.query("SELECT unstored_cost FROM evo_runs WHERE id = ?", (run_id,))
        return float((rows[0]["unstored_cost"] if rows else None) or 0.0)

    def keep_unstored(self, run_id: int, cost: float) -> None:
        """Keep the cost of a round that ends unstored (the endpoint stayed away, the run was cancelled): the
        budget counts it from now on, and ``add_round`` charges it to the round stored next (the same round
        made again on resume, its earlier answers then coming from the cache for free)."""
        with self.ws.transaction() as c:
            if self.guard is not None:
                self.guard(c)
            c.execute("UPDATE evo_runs SET unstored_cost = COALESCE(unstored_cost, 0) + ? WHERE id = ?",
                      (float(cost), run_id))

    def children(self, run_id: int, parent_round: int) -> list[dict]:
        """The rounds drawn from ``parent_round`` (light columns), by round; O(children) with the lineage index."""
        rows = self.ws.query(
            "SELECT r.round, r.operator, r.detail, r.status, r.reason, r.score FROM evo_lineage l JOIN evo_rounds r "
            "ON r.run_id = l.run_id AND r.round = l.child WHERE l.run_id = ? AND l.parent = ? ORDER BY r.round",
            (run_id, parent_round))
        return [dict(r) for r in rows]

    def last_round(self, run_id: int) -> int:
        """The last committed round (-1 when none)."""
        row = self.ws.query("SELECT MAX(round) AS r FROM evo_rounds WHERE run_id = ?", (run_id,))[0]
        return -1 if row["r"] is None else int(row["r"])

    def pin(self, run_id: int, rnd: int, pinned: bool = True) -> None:
        with self.ws.transaction() as c:
            c.execute("UPDATE evo_rounds SET pinned = ? WHERE run_id = ? AND round = ?",
                      (int(pinned), run_id, rnd))
            _touch(c, run_id)

    def set_note(self, run_id: int, rnd: int, note: str | None) -> None:
        with self.ws.transaction() as c:
            c.execute("UPDATE evo_rounds SET note = ? WHERE run_id = ? AND round = ?", (note, run_id, rnd))
            _touch(c, run_id)

    # -- experience ----------------------------------------------------------------------------------------
    def experience(self, run_id: int, parent_round: int, rows: list[dict] | None = None) -> list[dict]:
        """What was tried from a parent: one entry per child round, with the score change when both have one.
        Without ``rows`` it reads only the parent and its children (lineage index), not the whole run."""
        if rows is None:
            parent_rows = self.ws.query("SELECT score FROM evo_rounds WHERE run_id = ? AND round = ?",
                                        (run_id, parent_round))
            parent = dict(parent_rows[0]) if parent_rows else None
            candidates = [r for r in self.children(run_id, parent_round) if r["round"] != 0]
        else:
            parent = next((r for r in rows if r["round"] == parent_round), None)
            candidates = [r for r in rows if r["round"] != 0 and parent_round in (r["parents"] or [])]
        out = []
        for r in candidates:
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


def _touch(c: Any, run_id: int) -> None:
    """Record a write to the run: ``RunInfo.updated`` moves on every change of the run or its rounds (how a
    run going in another process is noticed, and what cached History views are keyed by). Never backwards,
    and always forward, even when two writes fall within the clock's resolution."""
    now = time.time()
    c.execute("UPDATE evo_runs SET updated = CASE WHEN updated >= ? THEN updated + 0.000001 ELSE ? END "
              "WHERE id = ?", (now, now, run_id))


def _judge_total(candidates: Any, chosen: Any) -> float | None:
    """The judge's total (0-50) for the chosen candidate, None when there is none."""
    if isinstance(candidates, str):
        try:
            candidates = json.loads(candidates)
        except ValueError:
            return None
    if not isinstance(candidates, list) or not isinstance(chosen, int) or not 0 <= chosen < len(candidates):
        return None
    scores = candidates[chosen].get("scores") if isinstance(candidates[chosen], dict) else None
    total = (scores or {}).get("total") if isinstance(scores, dict) else None
    return float(total) if isinstance(total, (int, float)) else None


BACKFILLED = "evolution-backfill"  # mf_schema row: the scale columns of older rounds are filled in


def _backfill(ws: Workspace) -> None:
    """Runs stored before the scale columns: fill the judge totals and lineage edges, once per workspace (its
    mf_schema row says it is done); the lineage look-up goes through evo_lineage_child, one probe per round."""
    todo = ws.query("SELECT run_id, round, candidates_json, chosen FROM evo_rounds WHERE judge_total IS NULL "
                    "AND chosen IS NOT NULL")
    edges = ws.query("SELECT run_id, round, parents_json FROM evo_rounds r WHERE round > 0 AND parents_json != '[]' "
                     "AND NOT EXISTS (SELECT 1 FROM evo_lineage l WHERE l.run_id = r.run_id AND l.child = r.round)")
    with ws.transaction() as c:
        c.execute("INSERT OR REPLACE INTO mf_schema(name, ddl_hash, applied) VALUES (?,?,?)", (BACKFILLED, "1",
                                                                                            time.time()))
        if not todo and not edges:
            return
        for run_id in {r["run_id"] for r in todo} | {r["run_id"] for r in edges}:
            _touch(c, run_id)
        for r in todo:
            total = _judge_total(r["candidates_json"], r["chosen"])
            if total is not None:
                c.execute("UPDATE evo_rounds SET judge_total = ? WHERE run_id = ? AND round = ?",
                          (total, r["run_id"], r["round"]))
        for r in edges:
            try:
                parents = json.loads(r["parents_json"] or "[]")
            except ValueError:
                continue
            for p in dict.fromkeys(parents):
                c.execute("INSERT OR IGNORE INTO evo_lineage(run_id, parent, child) VALUES (?,?,?)",
                          (r["run_id"], int(p), r["round"]))


class RunBuffer:
    """What the evolution loop needs from its history each round, kept up to date in memory: the top-k pool,
    the texts already tried, the judge's operator record and the money spent. Loaded with one light query when
    a run starts (or resumes), then updated from each stored round, so a round costs O(1) reads however long
    the run is (the chosen parents are then read by primary key, their experience through the lineage index)."""

    def __init__(self, history: History, run_id: int) -> None:
        self.history, self.run_id = history, run_id
        self.rows: dict[int, dict] = {}  # round -> light row (round, status, score, ci, operator, detail, parents)
        self._ranked: list[tuple[float, int]] = []  # usable rounds by (-score or 1, -round): top-k order
        self.texts: set[str] = set()
        self.text_rounds: list[int] = []  # rounds with a workflow, in order (the judge's history)
        self.text_of: dict[int, str] = {}
        self.unstored = history.unstored(run_id)  # in ``spent`` until the next stored round carries it
        self.spent = self.unstored
        self.record: dict[str, list[float]] = {}
        for r in history.ws.query("SELECT round, status, score, ci_low, ci_high, cost, operator, detail, parents_json, "
                                  "workflow_text FROM evo_rounds WHERE run_id = ? ORDER BY round", (run_id,)):
            d = _finite(dict(r))
            d["parents"] = json.loads(d.pop("parents_json") or "[]")
            self._add(d)
        # Paid calls in the call log that no round or unstored cost holds (a process killed mid-round; see
        # History.logged): counted from now on; each round stored later adds its own cost to both records alike.
        self.recovered = max(0.0, history.logged(run_id) - self.spent)
        self.spent += self.recovered

    def add(self, rec: dict) -> None:
        """Account for a round just stored (the loop's record, with Python values; its cost carries what was
        unstored)."""
        self.spent, self.unstored = self.spent - self.unstored, 0.0
        self._add({"round": rec["round"], "status": rec.get("status"), "score": rec.get("score"),
                   "ci_low": rec.get("ci_low"), "ci_high": rec.get("ci_high"), "cost": rec.get("cost"),
                   "operator": rec.get("operator"), "detail": rec.get("detail"), "parents": rec.get("parents") or [],
                   "workflow_text": rec.get("workflow_text")})

    def _add(self, d: dict) -> None:
        text = d.pop("workflow_text", None)
        rnd = d["round"]
        self.rows[rnd] = d
        self.spent += float(d.get("cost") or 0.0)
        if text:
            self.texts.add(text)
            self.text_rounds.append(rnd)
            self.text_of[rnd] = text
        if rnd == 0 or d["status"] in ("ok", "structure-only"):
            bisect.insort(self._ranked, (-(d["score"] if d["score"] is not None else -1.0), -rnd))
        parents = d["parents"] or []
        p = self.rows.get(parents[0]) if parents else None
        if rnd != 0 and d["operator"]:  # operator_record's rule, one round at a time
            if d["status"] == "failed":
                self.record.setdefault(d["operator"], []).append(-1.0)
            elif p and p["score"] is not None and d["score"] is not None:
                self.record.setdefault(d["operator"], []).append(d["score"] - p["score"])

    def judge_history(self, k: int = 4, window: int = JUDGE_WINDOW) -> list[int]:
        """The rounds the judge compares candidates with (its "innovation"): the latest ``window`` rounds with a
        workflow and the top-k pool, oldest first. Bounded, so a round's judging costs the same at round 20,000
        as at round 200 (and a resume parses at most these, never every stored workflow). Candidates already
        tried anywhere in the run are dropped before judging (``texts``), so none of them reaches the judge."""
        picked = set(self.text_rounds[-window:]) | {r["round"] for r in self.top_k(k) if r["round"] in self.text_of}
        return sorted(picked)

    def best_score(self) -> float | None:
        """The highest validation score of a measured round so far (None before any)."""
        return -self._ranked[0][0] if self._ranked and self._ranked[0][0] <= 0 else None

    def top_k(self, k: int = 4) -> list[dict]:
        """``top_k`` over the stored rounds (same order, seed always included) without reading them."""
        pool = [self.rows[-neg_round] for _, neg_round in self._ranked[:max(1, k)]]
        if 0 in self.rows and all(r["round"] != 0 for r in pool) and self._usable(self.rows[0]):
            pool = pool[:max(0, k - 1)] + [self.rows[0]]
        return pool

    @staticmethod
    def _usable(r: dict) -> bool:
        return r["round"] == 0 or r["status"] in ("ok", "structure-only")


def _number(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _finite(d: dict) -> dict:
    for col in NUMBER_COLS:
        if col in d:
            d[col] = _number(d[col])
    return d


def _decode(row: Any) -> dict:
    d = _finite(dict(row))
    for col in _JSON_COLS:
        try:
            d[col.removesuffix("_json")] = json.loads(d.pop(col) or "null")
        except ValueError:
            d[col.removesuffix("_json")] = None
    d["pinned"] = bool(d.get("pinned"))
    return d
