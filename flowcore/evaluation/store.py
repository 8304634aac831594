"""Evaluations from the Run page: started as background jobs, stored in the workspace so a finished,
cancelled or failed evaluation (and one still running) survives a page reload.

Also the small helpers the Run page needs (one problem, an uploaded data file, a default benchmark), so the
page only lays out widgets.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.execution.runtime import RunResult, prepare
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks import (
    BENCHMARKS,
    KINDS,
    TASK_OF,
    EvalReport,
    Problem,
    ProblemResult,
    kind_of,
    read_problems,
)
from flowcore.tasks.harness import report_of
from flowcore.tracing import otel
from flowcore.tracing.run import mark_cached, traced_run
from flowcore.workspace import jobs, traces
from flowcore.workspace.store import Workspace

__all__ = ["KINDS", "kind_of", "EVAL_JOB", "EvalRecord", "benchmarks_for", "create_evaluation", "default_benchmark",
           "finish_evaluation", "list_evaluations", "load_evaluation", "problems_from_upload", "reconcile",
           "run_problem", "start_evaluation"]

EVAL_JOB = "evaluation"  # the jobs-registry name of evaluation jobs
INTERRUPTED = "the app stopped before this evaluation finished"

_DDL = """
CREATE TABLE IF NOT EXISTS evaluations(
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, workflow_name TEXT, workflow_text TEXT NOT NULL,
    benchmark TEXT NOT NULL, split TEXT, n INTEGER NOT NULL DEFAULT 0, score REAL, ci_low REAL, ci_high REAL,
    cost REAL NOT NULL DEFAULT 0, results_json TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL, error TEXT,
    job_id TEXT, total INTEGER NOT NULL DEFAULT 0, finished REAL);
CREATE INDEX IF NOT EXISTS evaluations_created ON evaluations(created);
"""
STATUSES = ("running", "done", "cancelled", "failed", "interrupted")


@dataclass
class EvalRecord:
    id: int
    created: float
    workflow_name: str | None
    workflow_text: str
    benchmark: str
    split: str | None  # "validation", "test", or "file:<name>" for uploaded rows
    total: int  # problems requested
    n: int  # problems that finished
    score: float | None
    ci_low: float | None
    ci_high: float | None
    cost: float
    status: str
    error: str | None
    job_id: str | None
    finished: float | None
    results: list[dict] = field(default_factory=list)  # ProblemResult fields; empty in list_evaluations()


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("eval_store", _DDL)


def create_evaluation(ws: Workspace, *, workflow_text: str, benchmark: str, split: str | None, total: int,
                      workflow_name: str | None = None, job_id: str | None = None) -> int:
    """A new evaluation in status 'running'; returns its id."""
    if kind_of(benchmark, ws) is None:
        raise ValueError(f"unknown benchmark or task '{benchmark}' (choose from {', '.join(BENCHMARKS)} or a task "
                         "saved in the workspace)")
    _schema(ws)
    with ws.transaction() as conn:
        cur = conn.execute(
            "INSERT INTO evaluations(created, workflow_name, workflow_text, benchmark, split, total, status, job_id)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (time.time(), workflow_name, workflow_text, benchmark, split, int(total), "running", job_id))
        return int(cur.lastrowid)


def finish_evaluation(ws: Workspace, eval_id: int, report: EvalReport | None, *, status: str,
                      error: str | None = None, cost: float | None = None,
                      references: dict[str, str] | None = None) -> None:
    """Store the outcome. ``cost``: everything paid for (defaults to the report's sum over problems);
    ``references``: each problem's reference answer by id, kept beside its result for the Run page."""
    if status not in STATUSES:
        raise ValueError(f"unknown evaluation status {status!r} (one of {', '.join(STATUSES)})")
    _schema(ws)
    if report is None:  # failed: keep the problems already saved by save_progress
        with ws.transaction() as conn:
            c = float(cost or 0.0)  # (CASE, not SQLite's two-argument MAX: the same SQL runs on PostgreSQL)
            conn.execute("UPDATE evaluations SET cost=CASE WHEN cost > ? THEN cost ELSE ? END, status=?, error=?,"
                         " finished=? WHERE id=?", (c, c, status, error, time.time(), int(eval_id)))
        return
    results = [asdict(r) for r in report.results] if report else []
    for r in results if references else []:
        r["reference"] = references.get(r["id"])
    n = report.n if report else 0
    score = report.score if report and n else None
    lo, hi = (report.ci_low, report.ci_high) if report and n else (None, None)
    total_cost = cost if cost is not None else (report.cost if report else 0.0)
    with ws.transaction() as conn:
        conn.execute("UPDATE evaluations SET n=?, score=?, ci_low=?, ci_high=?, cost=?, results_json=?, status=?,"
                     " error=?, finished=? WHERE id=?",
                     (n, score, lo, hi, float(total_cost or 0.0), json.dumps(results), status, error, time.time(),
                      int(eval_id)))


def _record(row: Any, with_results: bool) -> EvalRecord:
    results = json.loads(row["results_json"] or "[]") if with_results else []
    return EvalRecord(int(row["id"]), float(row["created"]), row["workflow_name"], row["workflow_text"],
                      row["benchmark"], row["split"], int(row["total"] or 0), int(row["n"] or 0), row["score"],
                      row["ci_low"], row["ci_high"], float(row["cost"] or 0.0), row["status"], row["error"],
                      row["job_id"], row["finished"], results)


def list_evaluations(ws: Workspace, limit: int = 50) -> list[EvalRecord]:
    """The latest evaluations, newest first (without their per-problem results)."""
    _schema(ws)
    rows = ws.query("SELECT * FROM evaluations ORDER BY created DESC, id DESC LIMIT ?", (int(limit),))
    return [_record(r, False) for r in rows]


def load_evaluation(ws: Workspace, eval_id: int) -> EvalRecord:
    """One evaluation with its per-problem results; KeyError naming the id if there is none."""
    _schema(ws)
    rows = ws.query("SELECT * FROM evaluations WHERE id=?", (int(eval_id),))
    if not rows:
        raise KeyError(f"evaluation #{eval_id} is not in the workspace {ws.path}")
    return _record(rows[0], True)


def save_progress(ws: Workspace, eval_id: int, results: list[ProblemResult], cost: float) -> None:
    """Store the problems finished so far (in problem order), so an evaluation whose server is stopped
    mid-run keeps them: ``reconcile`` later marks it interrupted with these results and their score."""
    part = report_of("", results)  # an endpoint failure is no wrong answer; fractional scores count as such
    n = part.n
    score = part.score if n else None
    lo, hi = (part.ci_low, part.ci_high) if n else (None, None)
    with ws.transaction() as conn:
        conn.execute("UPDATE evaluations SET n=?, score=?, ci_low=?, ci_high=?, cost=?, results_json=? "
                     "WHERE id=? AND status='running'",
                     (n, score, lo, hi, float(cost or 0.0), json.dumps([asdict(r) for r in results]),
                      int(eval_id)))


def running_job(ws: Workspace) -> jobs.Job | None:
    """The evaluation still running in this server, found from the workspace (a reloaded page or a second
    tab has no memory of the job it started)."""
    _schema(ws)
    for r in ws.query("SELECT job_id FROM evaluations WHERE status='running' ORDER BY id DESC"):
        job = jobs.get(r["job_id"])
        if job is not None and job.snapshot().active:
            return job
    return None


def running_score(data: dict, done: int) -> float | None:
    """The live score of a running evaluation: solved over the problems scored so far (endpoint failures
    are not wrong answers); None before the first one."""
    scored = data.get("scored", done)
    return data.get("solved", 0) / scored if scored else None


def reconcile(ws: Workspace) -> int:
    """Mark 'running' evaluations whose job is not alive in this process as interrupted; returns how many."""
    _schema(ws)
    stale = [int(r["id"]) for r in ws.query("SELECT id, job_id FROM evaluations WHERE status='running'")
             if jobs.get(r["job_id"]) is None]
    for eval_id in stale:
        with ws.transaction() as conn:
            conn.execute("UPDATE evaluations SET status='interrupted', error=?, finished=? WHERE id=? AND"
                         " status='running'", (INTERRUPTED, time.time(), eval_id))
    return len(stale)


# -- running ----------------------------------------------------------------------------------------------------

def benchmarks_for(task: str | None, ws: Workspace | None = None) -> list[str]:
    """The built-in benchmarks of a kind (math, code, text), then the tasks saved in ``ws`` of that kind."""
    from flowcore.tasks.saved import saved

    own = [t["name"] for t in saved(ws, task)] if ws is not None else []
    return [b for b in BENCHMARKS if task is None or TASK_OF[b] == task] + own


def default_benchmark(task: str | None, workflow_name: str | None = None, ws: Workspace | None = None) -> str:
    """A benchmark named in the workflow's name (``gsm8k_case_study``), else the task's first one."""
    options = benchmarks_for(task, ws) or list(BENCHMARKS)
    name = (workflow_name or "").lower()
    named = [b for b in options if b in name and b != task]  # "math" names a task as well as a benchmark
    return named[0] if named else options[0]


def problems_from_upload(benchmark: str, filename: str, data: bytes) -> list[Problem]:
    """Problems from an uploaded file in the benchmark's own row format (.jsonl, .json or .jsonl.gz).
    Raises DataError/ValueError naming the file and line."""
    name = Path(filename or "upload.jsonl").name
    suffix = ".jsonl.gz" if name.endswith(".gz") else (Path(name).suffix or ".jsonl")
    fd, tmp = tempfile.mkstemp(prefix="upload-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            return read_problems(benchmark, tmp)
        except ValueError as exc:  # DataError is a ValueError; show the user's file name, not the temp path
            raise type(exc)(str(exc).replace(tmp, name)) from None
    finally:
        os.unlink(tmp)


def _llm_for(settings: LLMSettings, ws: Workspace | None, run_id: str, concurrency: int = 1) -> LLM:
    # N problems at once need N calls in flight; a copy so the caller's settings stay as they were.
    settings = replace(settings, concurrency=max(settings.concurrency, concurrency))
    return LLM(settings, workspace=ws, run_id=run_id)


def run_problem(settings: LLMSettings, ws: Workspace | None, workflow_text: str, task: str | None,
                problem: str, entry_point: str | None = None, public_tests: str = "", *,
                trace_by: str | None = None, workflow_name: str | None = None) -> RunResult:
    """Run the workflow once (blocking). Raises WorkflowSyntaxError/WorkflowInvalid before any LLM call,
    NodeError or LLMError when the run fails. ``trace_by`` (who ran it): the run's trace is stored in ``ws``
    (and sent over OTLP when configured), failed runs included; ``res.trace_id`` names it."""
    w = parse(workflow_text)
    llm = _llm_for(settings, ws, f"run-{time.time_ns()}")
    traced = asyncio.run(traced_run(w, problem, llm=llm, task=task, entry_point=(entry_point or None),
                                    public_tests=public_tests, source="run-page", created_by=trace_by or "local",
                                    name=workflow_name))
    if trace_by is not None:
        if ws is not None:
            traces.save_trace(ws, traced.trace)
        otel.export(traced.trace)
    if traced.error is not None:
        raise traced.error
    assert traced.result is not None
    res = traced.result
    res.trace = mark_cached(res.trace, traced.calls)  # a replayed call: its first cost and time, said to be cached
    if trace_by is not None:
        res.trace_id = traced.trace.id  # type: ignore[attr-defined] - the Traces page opens it
    res.tokens_per_s = llm.usage.tokens_per_s  # type: ignore[attr-defined] - a slow local model shows here
    res.cached_calls = llm.usage.cached  # type: ignore[attr-defined] - answered from the workspace's cache
    res.estimated_calls = llm.usage.estimated  # type: ignore[attr-defined] - paid without usage: cost estimated
    res.price_known = settings.price_known(settings.model_for("executor"))  # type: ignore[attr-defined]
    return res


def start_evaluation(ws: Workspace, settings: LLMSettings, *, workflow_text: str, benchmark: str,
                     problems: list[Problem], split: str | None, workflow_name: str | None = None,
                     concurrency: int = 4) -> jobs.Job:
    """Check the workflow for the benchmark's task (WorkflowInvalid/WorkflowSyntaxError raised here, before
    anything starts), store a 'running' evaluation and start the job that runs, scores and stores it.

    The job's progress data: {"solved", "errors", "cost"} so far; its meta: {"eval_id", "form": {"benchmark",
    "split", "total", "concurrency"}}; its result: the
    EvalReport (partial when cancelled)."""
    w = parse(workflow_text)
    prepare(w, kind_of(benchmark, ws))
    if not problems:
        raise ValueError("no problems to evaluate: choose a split, a file with rows, or a limit above 0")
    concurrency = max(1, int(concurrency))

    async def target(ctx: jobs.JobContext) -> EvalReport:
        eval_id = job.meta["eval_id"]
        llm = _llm_for(settings, ws, f"eval-{eval_id}", concurrency)
        # scored: problems with a verdict (endpoint failures left out), what the running score divides by
        tally = {"solved": 0, "scored": 0, "errors": 0, "cost": 0.0}
        order = {p.id: i for i, p in enumerate(problems)}
        finished: dict[int, ProblemResult] = {}

        def progress(done: int, total: int, r: ProblemResult) -> None:
            finished[order.get(r.id, len(order) + len(finished))] = r
            save_progress(ws, eval_id, [finished[i] for i in sorted(finished)], llm.usage.cost)
            tally["solved"] += bool(r.correct)
            tally["scored"] += not r.errored
            tally["errors"] += r.errored
            tally["cost"] = llm.usage.cost
            verdict = "correct" if r.correct else ("error" if r.errored else "wrong")
            ctx.progress(done, total, f"{r.id}: {verdict}", data=dict(tally))

        ctx.progress(0, len(problems), f"{len(problems)} problems, {concurrency} at a time", data=dict(tally))
        try:
            report = await evaluate_workflow(w, benchmark, problems, llm=llm, concurrency=concurrency,
                                             progress=progress, cancel=ctx.cancelled)
        except Exception as exc:
            finish_evaluation(ws, eval_id, None, status="failed", error=jobs.error_message(exc), cost=llm.usage.cost)
            raise
        finish_evaluation(ws, eval_id, report, status="cancelled" if report.cancelled else "done",
                          references={p.id: p.reference for p in problems if kind_of(benchmark) != "code"},
                          cost=llm.usage.cost)
        return report

    job = jobs.Job(target, EVAL_JOB)
    eval_id = create_evaluation(ws, workflow_text=workflow_text, benchmark=benchmark, split=split,
                                total=len(problems), workflow_name=workflow_name, job_id=job.id)
    job.meta["eval_id"] = eval_id
    # what it was started with: a reloaded Run page shows these in its form, not the defaults
    job.meta["form"] = {"benchmark": benchmark, "split": split, "total": len(problems), "concurrency": concurrency}
    return job.start()
