"""The papers' evaluation protocol: measure workflows on the same problems (optionally R times with the cache
bypassed), compare them with paired tests against the best, and keep the comparisons in the workspace.

Used by ``python -m flowcore compare`` / ``evaluate --repeats`` and by the Compare page. Every result carries
what its problems were (``split``: whose split, sizes, the papers' sizes), because our 1:4 split is not the
papers' files.

Conventions. A run the endpoint failed (the harness's ``errored``) is not a wrong answer: it is left out of the
score (as the harness does) and counted in ``errors``; the paired tests use only problems where neither
workflow errored, and say how many were left out. With repeats a
problem's score is its solve rate over the R runs; McNemar's test then compares the per-problem majority
outcome (solved in more than half the runs) and the bootstrap the rates. "Cost per problem" prices every call
the workflow made, cache hits included (what a run costs uncached); "paid" is what this measurement spent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from flowcore.evaluation.stats import (
    McNemar,
    Wilcoxon,
    is_binary,
    mcnemar_exact,
    mean_sd,
    paired_bootstrap,
    pareto_front,
    problem_bootstrap,
    wilcoxon_paired,
)
from flowcore.mermaid.reader import parse
from flowcore.model import Workflow
from flowcore.tasks import EvalReport, Problem, ProblemResult, kind_of
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace

__all__ = ["BASELINES_DIR", "COMPARE_JOB", "Comparison", "Measurement", "PairTest", "baselines", "compare",
           "list_comparisons", "load_comparison", "measure", "pool_reports", "start_comparison", "uncached"]

BASELINES_DIR = Path(__file__).resolve().parents[2] / "assets" / "baselines"
BASELINE_TITLES = {"io": "IO", "cot": "CoT", "cot_sc": "CoT-SC (5 samples)", "self_refine": "Self-Refine",
                   "multipersona": "MultiPersona debate", "medprompt": "MedPrompt-style ensemble"}
COMPARE_JOB = "comparison"
ProgressFn = Callable[[str, int, int, ProblemResult], None]  # (workflow name, done, total, result)


# -- baselines ----------------------------------------------------------------------------------------------------

def baselines(task: str | None = None) -> list[tuple[str, str, str]]:
    """(name, task, text) of the bundled baseline workflows, in the papers' table order."""
    order = list(BASELINE_TITLES)
    out = []
    for path in sorted(BASELINES_DIR.glob("*.mmd")):
        t, _, kind = path.stem.partition("_")
        if task is None or t == task:
            out.append((path.stem, t, path.read_text(encoding="utf-8"), order.index(kind) if kind in order else 99))
    return [(n, t, x) for n, t, x, _ in sorted(out, key=lambda e: (e[1], e[3]))]


def baseline_title(name: str) -> str:
    task, _, kind = name.partition("_")
    return f"{BASELINE_TITLES.get(kind, kind)} ({task})"


# -- repeats --------------------------------------------------------------------------------------------------------

def uncached(llm: Any) -> Any:
    """A child of ``llm`` that never reads (or writes) the response cache, so every repeat is a real call;
    it shares the parent's budget, concurrency limit and usage totals."""
    if not hasattr(llm, "child"):
        return llm
    child = llm.child()
    child.settings = replace(llm.settings, cache=False)
    return child


@dataclass
class PooledReport:
    """R evaluations of one workflow on the same problems as one report: ``score`` is the mean per-problem
    solve rate, the interval resamples problems (their R outcomes together); ``results`` has all R×n."""

    benchmark: str
    reports: list[EvalReport]
    score: float = 0.0
    ci_low: float = 0.0
    ci_high: float = 0.0
    n: int = 0
    cost: float = 0.0
    cancelled: bool = False
    results: list[ProblemResult] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    mean: float = 0.0
    sd: float | None = None
    rates: dict[str, float] = field(default_factory=dict)
    errors: int = 0  # runs the endpoint failed (not in the score)

    @property
    def error_rate(self) -> float:
        return self.errors / len(self.results) if self.results else 0.0


def _errored(r: ProblemResult) -> bool:
    return bool(getattr(r, "errored", False))


def _value(r: ProblemResult) -> float:
    """A problem's score in [0, 1]: a task metric's fraction, else 1 for solved."""
    score = getattr(r, "score", None)
    return float(score) if score is not None else float(bool(r.correct))


def graded_by(results: list[ProblemResult]) -> list[str]:
    """The judge models whose grades these results hold (empty: no score here was made by a model)."""
    return sorted({str(r.grade["model"]) for r in results if getattr(r, "grade", None) and r.grade.get("model")})


def pool_reports(reports: list[EvalReport]) -> PooledReport:
    """One report of R: a problem's rate is over its runs the endpoint did not fail; a problem every run of
    which errored has no rate (and is not in ``n``)."""
    if not reports:
        raise ValueError("no evaluation to pool")
    ids: list[str] = list(dict.fromkeys(r.id for rep in reports for r in rep.results))
    solved: dict[str, list[float]] = {i: [] for i in ids}
    for rep in reports:
        for r in rep.results:
            if not _errored(r):
                solved[r.id].append(_value(r))
    rates = {i: sum(v) / len(v) for i, v in solved.items() if v}
    scores = [rep.score for rep in reports if rep.n]
    mean, sd = mean_sd(scores)
    if len(reports) == 1:
        lo, hi = reports[0].ci_low, reports[0].ci_high
    else:
        lo, hi = problem_bootstrap(list(rates.values()))
    score = sum(rates.values()) / len(rates) if rates else 0.0
    results = [r for rep in reports for r in rep.results]
    return PooledReport(reports[0].benchmark, reports, score, lo, hi, len(rates), sum(r.cost for r in reports),
                        any(r.cancelled for r in reports), results, scores, mean, sd, rates,
                        sum(_errored(r) for r in results))


@dataclass
class Measurement:
    """One workflow measured on a set of problems, R times."""

    name: str
    text: str
    pooled: PooledReport
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    paid: float = 0.0
    priced: float = 0.0

    @property
    def repeats(self) -> int:
        return len(self.pooled.reports)

    @property
    def errored(self) -> set[str]:
        """Problems with a run the endpoint failed: left out of the paired tests."""
        return {r.id for r in self.pooled.results if _errored(r)}

    @property
    def cost_per_problem(self) -> float:
        runs = self.pooled.n * self.repeats
        return self.priced / runs if runs else 0.0

    @property
    def graded_by(self) -> list[str]:
        return graded_by(self.pooled.results)

    def to_json(self) -> dict:
        p = self.pooled
        return {"name": self.name, "text": self.text, "score": p.score, "ci": [p.ci_low, p.ci_high], "n": p.n,
                "repeats": self.repeats, "scores": p.scores, "mean": p.mean, "sd": p.sd,
                "errors": p.errors, "error_rate": p.error_rate, "cost_per_problem": self.cost_per_problem, "cost_priced": self.priced,
                "cost_paid": self.paid, "tokens": self.prompt_tokens + self.completion_tokens,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "calls": self.calls, "cached_calls": self.cached, "cancelled": p.cancelled, "rates": p.rates,
                "graded_by": self.graded_by,
                "results": [{**asdict(r), "repeat": i} for i, rep in enumerate(p.reports) for r in rep.results]}

    @classmethod
    def from_json(cls, d: dict) -> Measurement:
        """Rebuilt from ``to_json`` (a stored comparison): per-repeat reports from the results."""
        by_rep: dict[int, list[ProblemResult]] = {}
        for r in d.get("results") or []:
            fields = {k: r[k] for k in ProblemResult.__dataclass_fields__ if k in r}
            by_rep.setdefault(int(r.get("repeat") or 0), []).append(ProblemResult(**fields))
        reports = [EvalReport("", len(rs), s, 0.0, 0.0, sum(r.cost or 0 for r in rs), rs)
                   for rs, s in zip((by_rep[k] for k in sorted(by_rep)), d.get("scores") or [])]
        pooled = PooledReport("", reports, d["score"], d["ci"][0], d["ci"][1], d["n"], d.get("cost_paid", 0.0),
                              bool(d.get("cancelled")), [r for rep in reports for r in rep.results],
                              list(d.get("scores") or []), d.get("mean", d["score"]), d.get("sd"),
                              dict(d.get("rates") or {}), int(d.get("errors") or 0))
        return cls(d["name"], d.get("text", ""), pooled, d.get("calls", 0), d.get("cached_calls", 0),
                   d.get("prompt_tokens", 0), d.get("completion_tokens", 0), d.get("cost_paid", 0.0),
                   d.get("cost_priced", 0.0))


def _priced(llm: Any) -> tuple[float, int, int, int]:
    """(priced cost, prompt tokens, completion tokens, cache hits) over every call ``llm`` recorded. The cost prices
    the attempts that failed too (a body cut off on its way, a garbled one: charged for what came, as ``paid``
    counts them; an uncached run pays them again); the tokens are the usable replies', as the call log totals."""
    cost, pt, ct, hits = 0.0, 0, 0, 0
    settings = getattr(llm, "settings", None)
    for c in getattr(llm, "calls", []) or []:
        p, q = int(c.get("prompt_tokens") or 0), int(c.get("completion_tokens") or 0)
        if settings is not None:
            cost += settings.cost(c.get("model") or "", p, q)
        if c.get("error"):
            continue
        pt, ct, hits = pt + p, ct + q, hits + bool(c.get("cached"))
    return cost, pt, ct, hits


async def measure(workflow: Workflow, benchmark: str, problems: list[Problem], *, llm: Any, repeats: int = 1,
                  name: str = "workflow", text: str = "", concurrency: int = 8,
                  progress: Callable[[int, int, ProblemResult], None] | None = None,
                  cancel: Any = None, timeout: float | None = None) -> Measurement:
    """Evaluate ``workflow`` R times on ``problems``. With R > 1 the response cache is bypassed, so each repeat
    makes its own calls (R × n for a one-call workflow). Progress counts over all R × n runs."""
    from flowcore.evaluation.evaluate import evaluate_workflow

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    base = llm.child() if hasattr(llm, "child") else llm
    run_llm = uncached(base) if repeats > 1 else base
    reports: list[EvalReport] = []
    n = len(problems)
    for rep in range(repeats):
        def on_problem(done: int, _total: int, res: ProblemResult, rep: int = rep) -> None:
            if progress is not None:
                progress(rep * n + done, repeats * n, res)

        report = await evaluate_workflow(workflow, benchmark, problems, llm=run_llm, concurrency=concurrency,
                                         progress=on_problem, cancel=cancel, timeout=timeout)
        reports.append(report)
        if report.cancelled:
            break
    usage = getattr(base, "usage", None)
    priced, pt, ct, hits = _priced(base)
    return Measurement(name, text, pool_reports(reports), calls=int(getattr(usage, "calls", 0) or 0),
                       cached=hits, prompt_tokens=pt, completion_tokens=ct,
                       paid=float(getattr(usage, "cost", 0.0) or 0.0), priced=priced)


# -- comparisons ------------------------------------------------------------------------------------------------------

@dataclass
class PairTest:
    """One workflow against the best on the problems where neither errored."""

    name: str
    best: str
    n: int  # problems paired
    excluded: int  # problems left out because one of the two errored
    diff: float  # score(name) − score(best) on those problems
    ci_low: float
    ci_high: float
    mcnemar: McNemar
    wilcoxon: Wilcoxon | None = None  # fractional scores: the signed-rank test instead of McNemar's

    @property
    def p_value(self) -> float:
        return self.wilcoxon.p_value if self.wilcoxon is not None else self.mcnemar.p_value

    @property
    def test(self) -> str:
        return "Wilcoxon" if self.wilcoxon is not None else "McNemar"

    def to_json(self) -> dict:
        out = {"name": self.name, "best": self.best, "n": self.n, "excluded": self.excluded, "diff": self.diff,
               "ci": [self.ci_low, self.ci_high], "mcnemar": self.mcnemar.to_json()}
        if self.wilcoxon is not None:
            out["wilcoxon"] = self.wilcoxon.to_json()
        return out


def pair_test(m: Measurement, best: Measurement, seed: int = 0) -> PairTest:
    skip = m.errored | best.errored
    ids = [i for i in best.pooled.rates if i in m.pooled.rates and i not in skip]
    a = [m.pooled.rates[i] for i in ids]
    b = [best.pooled.rates[i] for i in ids]
    diff, lo, hi = paired_bootstrap(a, b, seed=seed)
    test = mcnemar_exact([x > 0.5 for x in a], [y > 0.5 for y in b])
    # Fractional scores (a task's f1/json/python/judge metric) are not solved/unsolved: the signed-rank test
    # compares them as they are. 0/1 outcomes (and solve rates over repeats) keep McNemar.
    fractional = not is_binary([_value(r) for r in m.pooled.results + best.pooled.results if not _errored(r)])
    signed = wilcoxon_paired(a, b) if fractional else None
    every = {r.id for r in m.pooled.results} | {r.id for r in best.pooled.results}
    excluded = len(every) - len(ids)
    return PairTest(m.name, best.name, len(ids), excluded, diff, lo, hi, test, signed)


@dataclass
class Comparison:
    benchmark: str
    split: dict  # flowcore.tasks.split_info: whose split, sizes, the papers' sizes
    repeats: int
    measurements: list[Measurement]
    best: int = 0
    tests: list[PairTest | None] = field(default_factory=list)

    def rank(self) -> None:
        """The best: highest score, then the cheaper; every other workflow is tested against it."""
        ms = self.measurements
        if not ms:
            return
        # a workflow with no problem scored (the endpoint failed every run) has no score: never the best
        scored = [i for i, m in enumerate(ms) if m.pooled.n] or list(range(len(ms)))
        self.best = max(scored, key=lambda i: (ms[i].pooled.score, -ms[i].cost_per_problem, -i))
        self.tests = [None if i == self.best else pair_test(m, ms[self.best]) for i, m in enumerate(ms)]

    def pareto(self) -> list[int]:
        nan = float("nan")  # nothing scored costs $0 per problem: it would always sit on the front
        return pareto_front([(m.cost_per_problem, m.pooled.score) if m.pooled.n else (nan, nan)
                             for m in self.measurements])

    def rows(self) -> list[dict]:
        """The stakeholder table, one row per workflow (scores as fractions, p-values as numbers)."""
        front = set(self.pareto())
        out = []
        for i, (m, t) in enumerate(zip(self.measurements, self.tests or [None] * len(self.measurements))):
            p = m.pooled
            if t is not None and not t.n:  # no problem both solved or failed: no difference measured
                t = None
            measured = bool(p.n)  # else every run errored: no score, which is not 0%
            out.append({"workflow": m.name, "best": i == self.best and measured,
                        "score": p.score if measured else None, "ci_low": p.ci_low if measured else None,
                        "ci_high": p.ci_high if measured else None, "sd": p.sd, "n": p.n, "repeats": m.repeats,
                        "errors": p.errors, "error_rate": p.error_rate, "cost_per_problem": m.cost_per_problem,
                        "tokens": m.prompt_tokens + m.completion_tokens, "calls": m.calls,
                        "diff_vs_best": None if t is None else t.diff,
                        "diff_low": None if t is None else t.ci_low, "diff_high": None if t is None else t.ci_high,
                        "mcnemar_p": None if t is None or t.wilcoxon is not None else t.mcnemar.p_value,
                        "wilcoxon_p": None if t is None or t.wilcoxon is None else t.wilcoxon.p_value,
                        "test": None if t is None else t.test, "p_value": None if t is None else t.p_value,
                        "graded_by": m.graded_by, "pareto": i in front})
        return out

    def agreement(self) -> list[dict]:
        """Per problem: each workflow's solve rate (1/0 without repeats), and whether they all agree."""
        ids = list(dict.fromkeys(i for m in self.measurements for i in m.pooled.rates))
        out = []
        for pid in ids:
            row: dict[str, Any] = {"problem": pid}
            vals = []
            for m in self.measurements:
                v = m.pooled.rates.get(pid)
                row[m.name] = v
                vals.append(v)
            row["agree"] = len({v for v in vals if v is not None}) <= 1
            out.append(row)
        return out

    def to_json(self) -> dict:
        models = sorted({g for m in self.measurements for g in m.graded_by})
        return {"benchmark": self.benchmark, "split": self.split, "repeats": self.repeats, "graded_by": models,
                "best": self.measurements[self.best].name if self.measurements else None,
                "pareto": [self.measurements[i].name for i in self.pareto()],
                "table": self.rows(), "tests": [t.to_json() for t in self.tests if t is not None],
                "workflows": [m.to_json() for m in self.measurements]}

    @classmethod
    def from_json(cls, d: dict) -> Comparison:
        c = cls(d["benchmark"], d.get("split") or {}, int(d.get("repeats") or 1),
                [Measurement.from_json(w) for w in d.get("workflows") or []])
        c.rank()
        return c


def unique_names(names: list[str]) -> list[str]:
    """Names made distinct ('cot', 'cot (2)'), so table columns and paired tests never mix two workflows."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out


async def compare(entries: list[tuple[str, str]], benchmark: str, problems: list[Problem], *, llm: Any,
                  split: dict, repeats: int = 1, concurrency: int = 8, progress: ProgressFn | None = None,
                  cancel: Any = None, timeout: float | None = None) -> Comparison:
    """Measure every (name, workflow text) on the same problems, then test each against the best. Every
    workflow is checked for the benchmark's task before anything runs (ValueError naming it)."""
    from flowcore.execution.runtime import prepare

    if len(entries) < 2:
        raise ValueError("compare needs at least two workflows")
    if not problems:
        raise ValueError("no problems to compare on")
    names = unique_names([n for n, _ in entries])
    parsed = []
    for name, (_, text) in zip(names, entries):
        try:
            w = parse(text)
            prepare(w, kind_of(benchmark))
        except ValueError as exc:
            raise ValueError(f"workflow '{name}': {exc}") from None
        parsed.append(w)
    out = Comparison(benchmark, split, repeats, [])
    for name, (_, text), w in zip(names, entries, parsed):
        def on_problem(done: int, total: int, res: ProblemResult, name: str = name) -> None:
            if progress is not None:
                progress(name, done, total, res)

        m = await measure(w, benchmark, problems, llm=llm, repeats=repeats, name=name, text=text,
                          concurrency=concurrency, progress=on_problem, cancel=cancel, timeout=timeout)
        if m.pooled.cancelled:  # measured on only some problems: its score is not comparable, left out
            break
        out.measurements.append(m)
    out.rank()
    return out


# -- stored comparisons (the Compare page) -----------------------------------------------------------------------------

_DDL = """
CREATE TABLE IF NOT EXISTS comparisons(
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, benchmark TEXT NOT NULL, split_json TEXT NOT NULL,
    repeats INTEGER NOT NULL, names_json TEXT NOT NULL, status TEXT NOT NULL, error TEXT, job_id TEXT,
    result_json TEXT, finished REAL);
"""


@dataclass
class StoredComparison:
    id: int
    created: float
    benchmark: str
    split: dict
    repeats: int
    names: list[str]
    status: str  # running | done | cancelled | failed | interrupted
    error: str | None
    job_id: str | None
    result: Comparison | None
    created_by: str = "local"  # who started it: the logged-in member, or "local"


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("compare", _DDL)
    if "compare-who" not in ws._schemas:  # who made each comparison (added later: an additive column)
        ws.add_columns("comparisons", {"created_by": "TEXT"})
        ws.ensure_schema("compare-who", "")


def save_comparison(ws: Workspace, comparison: Comparison, status: str = "done", created_by: str = "local") -> int:
    _schema(ws)
    with ws.transaction() as conn:
        cur = conn.execute(
            "INSERT INTO comparisons(created, benchmark, split_json, repeats, names_json, status, result_json,"
            " finished, created_by) VALUES (?,?,?,?,?,?,?,?,?)",
            (time.time(), comparison.benchmark, json.dumps(comparison.split), comparison.repeats,
             json.dumps([m.name for m in comparison.measurements]), status, json.dumps(comparison.to_json()),
             time.time(), created_by))
        return int(cur.lastrowid)


def _row(r: Any, with_result: bool) -> StoredComparison:
    result = Comparison.from_json(json.loads(r["result_json"])) if with_result and r["result_json"] else None
    return StoredComparison(int(r["id"]), float(r["created"]), r["benchmark"], json.loads(r["split_json"]),
                            int(r["repeats"]), json.loads(r["names_json"]), r["status"], r["error"], r["job_id"],
                            result, dict(r).get("created_by") or "local")


def list_comparisons(ws: Workspace, limit: int = 50) -> list[StoredComparison]:
    """Newest first, without their results; a 'running' one whose job is gone is reported as interrupted."""
    _schema(ws)
    rows = ws.query("SELECT id, created, benchmark, split_json, repeats, names_json, status, error, job_id,"
                    " NULL AS result_json, created_by FROM comparisons ORDER BY id DESC LIMIT ?", (int(limit),))
    out = [_row(r, False) for r in rows]
    for c in out:
        if c.status == "running" and jobs.get(c.job_id) is None:
            c.status, c.error = "interrupted", "the app stopped before this comparison finished"
    return out


def load_comparison(ws: Workspace, comparison_id: int) -> StoredComparison:
    _schema(ws)
    rows = ws.query("SELECT * FROM comparisons WHERE id = ?", (int(comparison_id),))
    if not rows:
        raise KeyError(f"comparison #{comparison_id} is not in the workspace {ws.path}")
    return _row(rows[0], True)


def start_comparison(ws: Workspace, settings: Any, entries: list[tuple[str, str]], benchmark: str,
                     problems: list[Problem], split: dict, *, repeats: int = 1, concurrency: int = 4,
                     created_by: str = "local") -> jobs.Job:
    """Check the inputs (ValueError naming what is wrong, before anything is stored), store a 'running'
    comparison and run it as a background job; its progress data: {"workflow", "done", "total"}."""
    from flowcore.llm.client import LLM

    if not settings.configured:
        raise ValueError("no LLM endpoint is configured, so nothing can be measured")
    if len(entries) < 2:
        raise ValueError("pick at least two workflows to compare")
    if not problems:
        raise ValueError("no problems: choose a split or a limit above 0")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    from flowcore.execution.runtime import prepare

    for name, text in entries:
        try:
            prepare(parse(text), kind_of(benchmark))
        except ValueError as exc:
            raise ValueError(f"workflow '{name}': {exc}") from None
    names = unique_names([n for n, _ in entries])
    total = len(entries) * len(problems) * repeats
    _schema(ws)

    async def target(ctx: jobs.JobContext) -> Comparison:
        cid = job.meta["comparison_id"]
        llm = LLM(replace(settings, concurrency=max(settings.concurrency, concurrency)), ws, run_id=f"compare-{cid}")
        finished: dict[str, int] = {}

        def progress(name: str, done: int, per: int, res: ProblemResult) -> None:
            finished[name] = done
            ctx.progress(sum(finished.values()), total, f"{name}: {done}/{per}",
                         data={"workflow": name, "done": done, "total": per})

        try:
            result = await compare(entries, benchmark, problems, llm=llm, split=split, repeats=repeats,
                                   concurrency=concurrency, progress=progress, cancel=ctx.cancelled)
        except Exception as exc:
            _finish(ws, cid, None, "failed", jobs.error_message(exc))
            raise
        cancelled = any(m.pooled.cancelled for m in result.measurements) or len(result.measurements) < len(entries)
        _finish(ws, cid, result, "cancelled" if cancelled else "done", None)
        return result

    job = jobs.Job(target, COMPARE_JOB)
    with ws.transaction() as conn:
        cur = conn.execute("INSERT INTO comparisons(created, benchmark, split_json, repeats, names_json, status,"
                           " job_id, created_by) VALUES (?,?,?,?,?,?,?,?)",
                           (time.time(), benchmark, json.dumps(split), repeats, json.dumps(names), "running", job.id,
                            created_by))
        job.meta["comparison_id"] = int(cur.lastrowid)
    return job.start()


def _finish(ws: Workspace, cid: int, result: Comparison | None, status: str, error: str | None) -> None:
    with ws.transaction() as conn:
        conn.execute("UPDATE comparisons SET status=?, error=?, result_json=?, finished=? WHERE id=?",
                     (status, error, json.dumps(result.to_json()) if result else None, time.time(), cid))


def run_compare(entries: list[tuple[str, str]], benchmark: str, problems: list[Problem], *, llm: Any,
                split: dict, repeats: int = 1, concurrency: int = 8, progress: ProgressFn | None = None,
                timeout: float | None = None, cancel: Any = None) -> Comparison:
    """``compare`` for synchronous callers (the command line)."""
    return asyncio.run(compare(entries, benchmark, problems, llm=llm, split=split, repeats=repeats,
                               concurrency=concurrency, progress=progress, timeout=timeout, cancel=cancel))
