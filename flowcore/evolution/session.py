"""What the Evolve and History pages need from the engine, without any layout: an evolution run started or
resumed as a background job (flowcore.workspace.jobs) with per-round and per-problem progress, a review gate that
pauses a run before evaluation until the page decides, and the tables, figures, lineage and diffs the
pages draw from the history buffer.

Honesty rule: a score is only ever a measured one. Structure-only rounds (no LLM endpoint) have no score;
their curves show the rule judge's structural total instead, labelled as such.
"""

from __future__ import annotations

import difflib
import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from flowcore.checker.check import check
from flowcore.evaluation import store as es
from flowcore.evolution.history import History, RunInfo, run_tag
from flowcore.evolution.judge import CRITERIA, Candidate, Verdict
from flowcore.evolution.lease import holder as lease_holder
from flowcore.evolution.loop import Cancelled, Evolution, EvolutionConfig, Review, run_budget
from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks import kind_of, load
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace

__all__ = ["EVOLVE_JOB", "PendingReview", "ReviewGate", "active_job", "candidates_frame", "continue_run",
           "curve_frame", "filter_rounds", "fork_name", "gate_of", "judge_total", "lineage_edges", "lineage_height",
           "lineage_mermaid", "live_job", "reeval_name", "reevaluations", "resume_run", "rounds_frame",
           "run_label", "run_status", "runs_overview", "sampling_frame", "start_reevaluation", "start_run",
           "text_diff"]

EVOLVE_JOB = "evolution"  # the jobs-registry name of evolution runs
STRUCTURE_ONLY = ("structure-only: no LLM endpoint, so no benchmark score was measured; the curve shows the "
                  "rule judge's structural total (0-50) of each round's chosen candidate")


# -- review: the engine's hook blocks on a gate that the page resolves -----------------------------------------

@dataclass(frozen=True)
class PendingReview:
    round: int
    candidates: list[dict]  # {"text", "operator", "detail", "parents", "source", "scores"}
    chosen: int  # the judge's pick
    judge: str
    dropped: list[dict] = field(default_factory=list)  # the rest of the K: {"operator", "reason", "text"}


class ReviewGate:
    """The review hook of one run. Called by the loop (in a worker thread) with a round's judged candidates,
    it waits until ``decide`` is called from the page, or raises Cancelled when the run is cancelled."""

    def __init__(self, task: str, cancel: threading.Event | None = None, poll: float = 0.2) -> None:
        self.task, self.cancel, self.poll = task, cancel or threading.Event(), poll
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._pending: PendingReview | None = None
        self._decision: Review | None = None

    def __call__(self, rnd: int, cands: list[Candidate], verdict: Verdict, dropped: list[dict] | None = None
                 ) -> Review:
        pending = PendingReview(rnd, [{"text": c.text, "operator": c.operator, "detail": c.detail,
                                       "parents": list(c.parents), "source": c.source, "scores": s}
                                      for c, s in zip(cands, verdict.scores)], verdict.chosen, verdict.judge,
                                [{"operator": d.get("operator") or "—", "reason": d.get("reason") or "dropped",
                                  "text": d.get("text") or ""} for d in dropped or []])
        with self._lock:
            self._pending, self._decision = pending, None
            self._ready.clear()
        try:
            while not self._ready.wait(self.poll):
                if self.cancel.is_set():
                    raise Cancelled
        finally:
            with self._lock:
                self._pending = None
        if self._decision is None:  # withdrawn: the run is being cancelled
            raise Cancelled
        return self._decision

    @property
    def pending(self) -> PendingReview | None:
        with self._lock:
            return self._pending

    def decide(self, rnd: int, review: Review) -> list[str]:
        """Resolve round ``rnd``'s review. An edited workflow is checked first: its errors are returned and
        the round keeps waiting. ValueError when that round is not (or no longer) waiting."""
        with self._lock:
            p = self._pending
            if p is None or p.round != rnd:
                raise ValueError(f"round {rnd} is not waiting for a review")
            if review.index is not None and not 0 <= review.index < len(p.candidates):
                raise ValueError(f"there is no candidate {review.index} (round {rnd} has {len(p.candidates)})")
            if review.action == "edit":
                errors = [f"line {d.line}: {d.code} {d.message}" if d.line else f"{d.code} {d.message}"
                          for d in check(review.text or "", self.task) if d.severity == "error"]
                if errors:
                    return errors
            self._decision, self._pending = review, None  # a rerun right after this sees no pending round
            self._ready.set()
        return []

    def withdraw(self) -> None:
        """Stop waiting without a decision (the run is being cancelled): the hook raises Cancelled."""
        with self._lock:
            self._pending, self._decision = None, None
            self._ready.set()


_gates: dict[str, ReviewGate] = {}  # job id -> gate (a page rerun finds the gate of its job)


def gate_of(job_id: str | None) -> ReviewGate | None:
    return _gates.get(job_id or "")


# -- runs as jobs ------------------------------------------------------------------------------------------------

def _llm(ws: Workspace, settings: LLMSettings, cfg: EvolutionConfig, spent: float, parent: LLM | None = None,
         cache_salt: str = "") -> LLM:
    s = replace(settings, concurrency=max(settings.concurrency, cfg.concurrency))
    if cfg.validation_rounds > 1:  # repeats must reach the endpoint, never the cache
        s = replace(s, cache=False)
    budget = run_budget(cfg, settings)
    if budget is not None:  # what is left of the run's budget caps every call
        s = replace(s, budget_usd=max(0.0, budget - spent))
    llm = LLM(s, ws)
    llm.salt = cache_salt  # every call of the run (and of the clients it derives) is cached under it
    return llm.under(parent) if parent is not None else llm


def start_run(ws: Workspace, settings: LLMSettings, config: EvolutionConfig, *, review: bool = False,
              created_by: str = "local", spend_under: LLM | None = None, cache_salt: str = "") -> jobs.Job:
    """Store a new run and evolve it in a background job. Without an endpoint the run is structure-only
    (programmatic operators, rule judge, no scores). ValueError (naming the field or file) before anything
    is stored when the settings or the data are bad. ``spend_under``: a client whose usage and budget count
    this run's calls too (a server's, so that the runs its MCP tool starts spend from the server's budget).
    ``cache_salt``: the LLM cache the run reads and writes (a server's per-owner salt: a key holder's run never
    reads, nor fills, another owner's cached answers)."""
    cfg = replace(config, operators=list(config.operators), offline=not settings.configured)
    if cfg.offline:
        cfg.mode = "programmatic"
    llm = None if cfg.offline else _llm(ws, settings, cfg, 0.0, spend_under, cache_salt)
    gate = ReviewGate(kind_of(cfg.benchmark, ws)) if review and kind_of(cfg.benchmark, ws) else None
    evo = Evolution(ws, cfg, llm=llm, review=gate)
    evo.prepare()  # a bad data file is reported before a run is stored
    evo.start(resume=False, created_by=created_by)
    return _spawn(evo, llm, gate)


def resume_run(ws: Workspace, settings: LLMSettings, run_id: int, *, review: bool = False) -> jobs.Job:
    """Continue an unfinished run after its last stored round, as a job."""
    h = History(ws)
    info = h.run(run_id)
    if live_job(run_id) is not None:
        raise ValueError(f"run {run_id} is already running")
    if info.status == "finished":
        raise ValueError(f"run {run_id} has finished; start a new run instead")
    busy = lease_holder(ws, run_id)
    if busy is not None:  # e.g. `python -m flowcore evolve` on the same workspace
        raise ValueError(f"{busy.describe()}; try again when it has stopped")
    if not info.offline and not settings.configured:
        raise ValueError(f"run {run_id} was measured against an LLM endpoint; configure one (Settings page) "
                         "to resume it")
    cfg = EvolutionConfig.from_dict(info.config)
    spent = h.spent(run_id)  # one aggregate: a resume decodes no stored round
    llm = None if info.offline else _llm(ws, settings, cfg, spent)
    gate = ReviewGate(info.task) if review else None
    evo = Evolution(ws, cfg, llm=llm, review=gate, run_id=run_id)
    evo.prepare()
    evo.start(resume=True)
    return _spawn(evo, llm, gate)


def continue_run(ws: Workspace, settings: LLMSettings, run_id: int, more: int, *, review: bool = False) -> jobs.Job:
    """Extend a finished run by ``more`` rounds (its history buffer, budget and test re-scoring carry on) and
    evolve them as a job. ValueError naming the problem otherwise."""
    h = History(ws)
    info = h.run(run_id)
    if not isinstance(more, int) or more < 1:
        raise ValueError(f"continue by at least 1 round, got {more!r}")
    if info.status != "finished":
        raise ValueError(f"run {run_id} has not finished ({info.status}): resume it instead")
    if live_job(run_id) is not None:
        raise ValueError(f"run {run_id} is already running")
    if not info.offline and not settings.configured:
        raise ValueError(f"run {run_id} was measured against an LLM endpoint; configure one (Settings page) "
                         "to continue it")
    cfg = EvolutionConfig.from_dict(info.config)
    cfg.rounds = h.last_round(run_id) + more
    spent = h.spent(run_id)  # one aggregate: a resume decodes no stored round
    llm = None if info.offline else _llm(ws, settings, cfg, spent)
    gate = ReviewGate(info.task) if review else None
    evo = Evolution(ws, cfg, llm=llm, review=gate, run_id=run_id)
    evo.prepare()
    evo.start(resume=True)  # stores the new round count
    return _spawn(evo, llm, gate)


def _spawn(evo: Evolution, llm: LLM | None, gate: ReviewGate | None) -> jobs.Job:
    cfg, run_id = evo.config, int(evo.run_id or 0)
    total = cfg.rounds + 1
    if llm is not None:
        llm.run_id = run_tag(run_id)  # LLM call log rows name the run (its budget counts them)

    async def target(ctx: jobs.JobContext) -> dict:
        from flowcore.evaluation.evaluate import evaluate_workflow

        evo.cancel = ctx.cancelled
        if gate is not None:
            gate.cancel = ctx.cancelled
        stored = evo.history.last_round(run_id) + 1
        current = {"round": stored}

        def on_round(s: dict) -> None:
            current["round"] = s["round"] + 1
            score = "structure-only" if s["status"] == "structure-only" else (
                f"{100 * s['score']:.1f}%" if s["score"] is not None else s["status"])
            ctx.progress(s["round"] + 1, total, f"round {s['round']} of {cfg.rounds} stored: "
                         f"{s['operator']} · {score}", data={"round": s["round"], "phase": "stored"})

        async def evaluator(w: Any, problems: list) -> Any:
            r = current["round"]

            def on_problem(done: int, n: int, res: Any) -> None:
                ctx.progress(r, total, f"round {r} of {cfg.rounds}: evaluated {done}/{n} problems",
                             data={"round": r, "phase": "evaluating", "done": done, "n": n})

            return await evaluate_workflow(w, cfg.benchmark, problems, llm=evo.llm, concurrency=cfg.concurrency,
                                           progress=on_problem, cancel=evo.cancel)

        evo.progress = on_round
        evo.test_progress = lambda rnd, done, n: ctx.progress(  # validation -> test, after the last round
            total, total, f"re-scoring round {rnd} on the test split: {done}/{n} runs", data={"phase": "test"})
        if not cfg.offline:
            evo.evaluator = evaluator
        ctx.progress(stored, total, f"resuming after round {stored - 1}" if stored else "starting",
                     data={"round": stored, "phase": "starting"})
        return await evo.arun()

    job = jobs.Job(target, EVOLVE_JOB, meta={"run_id": run_id, "offline": cfg.offline,
                                             "review": gate is not None, "rounds": cfg.rounds})
    for old in [k for k in _gates if jobs.get(k) is None]:  # jobs the registry has forgotten
        del _gates[old]
    if gate is not None:
        _gates[job.id] = gate
    return job.start()


def live_job(run_id: int) -> jobs.Job | None:
    """The active job evolving ``run_id`` in this server, if any."""
    job = jobs.find(EVOLVE_JOB, run_id=run_id)
    return job if job is not None and job.snapshot().active else None


def active_job() -> jobs.Job | None:
    return next((j for j in jobs.jobs(EVOLVE_JOB) if j.snapshot().active), None)


def run_status(info: RunInfo, ws: Workspace | None = None) -> str:
    """The stored status, except for a 'running' run no job in this server is evolving: 'running elsewhere'
    when another live process holds its lease (an app process or worker on the same workspace), else
    'interrupted'."""
    if info.status != "running" or live_job(info.id) is not None:
        return info.status
    return "running elsewhere" if ws is not None and lease_holder(ws, info.id) is not None else "interrupted"


def runs_overview(ws: Workspace) -> list[dict]:
    """Every run, newest first: id, benchmark, status, offline, rounds stored/planned, best measured score."""
    from flowcore.evolution import remote

    h, out = History(ws), []
    remote.reconcile(ws)  # a Ray run whose actor died for good: recorded stopped, with the command that resumes it
    stats = {r["run_id"]: (r["n"], r["best"]) for r in ws.query(  # one query, not every round's JSON
        "SELECT run_id, COUNT(*) AS n, MAX(score) AS best FROM evo_rounds GROUP BY run_id")}
    for info in reversed(h.runs()):
        n, best = stats.get(info.id, (0, None))
        out.append({"id": info.id, "benchmark": info.benchmark, "status": run_status(info, ws),
                    "offline": info.offline, "mode": info.config.get("mode"), "stored": n,
                    "planned": int(info.config.get("rounds", 0)) + 1, "best": best, "by": info.created_by})
    return out


def run_label(o: dict) -> str:
    best = "structure-only" if o["offline"] else ("no score yet" if o["best"] is None else f"best {100 * o['best']:.1f}%")
    by = f" · by {o['by']}" if o.get("by") else ""
    return f"#{o['id']} · {o['benchmark']} · {o['status']} · {o['stored']}/{o['planned']} rounds · {best}{by}"


# -- tables -------------------------------------------------------------------------------------------------------

def judge_total(row: dict) -> float | None:
    """The judge's total (0-50) for the round's chosen candidate (None for the seed or an unjudged round)."""
    cands, i = row.get("candidates") or [], row.get("chosen")
    if i is None or not 0 <= i < len(cands):
        return None
    return (cands[i].get("scores") or {}).get("total")


ROUND_COLUMNS = ["round", "status", "score", "ci_low", "ci_high", "n", "cost", "operator", "parents", "judge",
                 "judge_total", "pinned", "note", "detail", "reason"]


def rounds_frame(rows: list[dict]) -> pd.DataFrame:
    text = {k: "" for k in ("operator", "judge", "note", "detail", "reason")}  # blank, not "None"
    return pd.DataFrame([{**{k: r.get(k) for k in ROUND_COLUMNS}, **{k: r.get(k) or "" for k in text},
                          "parents": ", ".join(map(str, r["parents"] or [])), "judge_total": judge_total(r),
                          "cost": float(r.get("cost") or 0.0)} for r in rows], columns=ROUND_COLUMNS)


def filter_rounds(df: pd.DataFrame, *, statuses: list[str] | None = None, operators: list[str] | None = None,
                  min_score: float | None = None, pinned_only: bool = False) -> pd.DataFrame:
    """``min_score`` is a fraction; a round without a measured score never passes a minimum above 0."""
    keep = pd.Series(True, index=df.index)
    if statuses:
        keep &= df["status"].isin(statuses)
    if operators:
        keep &= df["operator"].isin(operators)
    if min_score:
        keep &= df["score"].notna() & (df["score"].astype(float) >= min_score)
    if pinned_only:
        keep &= df["pinned"].astype(bool)
    return df[keep]


def curve_frame(rows: list[dict]) -> pd.DataFrame:
    """Per round: measured score and best so far (percent, only for rounds that were measured), the judge's
    total, the round's cost and the running cost."""
    out, best, spent = [], None, 0.0
    for r in rows:
        score = 100 * r["score"] if r["status"] == "ok" and r["score"] is not None else None
        if score is not None:
            best = score if best is None else max(best, score)
        spent += float(r.get("cost") or 0.0)
        out.append({"round": r["round"], "status": r["status"], "operator": r.get("operator") or "",
                    "score": score, "best": best, "judge_total": judge_total(r),
                    "cost": float(r.get("cost") or 0.0), "total_cost": spent})
    return pd.DataFrame(out, columns=["round", "status", "operator", "score", "best", "judge_total", "cost",
                                      "total_cost"])


def candidates_frame(row: dict) -> pd.DataFrame:
    """The round's candidates with the judge's five scores; dropped proposals carry their reason."""
    out = []
    for i, c in enumerate(row.get("candidates") or []):
        s = c.get("scores") or {}
        out.append({"#": i, "chosen": i == row.get("chosen"), "operator": c.get("operator"),
                    "detail": c.get("detail") or "", **{k: s.get(k) for k in (*CRITERIA, "total")},
                    "dropped": c.get("reason") or ""})
    return pd.DataFrame(out, columns=["#", "chosen", "operator", "total", *CRITERIA, "detail", "dropped"]).rename(
        columns={k: k.replace("_", " ") for k in CRITERIA})  # 'prompt quality', as people write it


def sampling_frame(row: dict) -> pd.DataFrame:
    """Why the round's parents were drawn: each pool round's score and selection probability."""
    s = row.get("sampling") or {}
    pool, scores, probs = s.get("pool") or [], s.get("scores") or [], s.get("probabilities") or []
    parents = set(row.get("parents") or [])
    return pd.DataFrame([{"round": f"#{p}", "score": None if sc is None else 100 * sc, "probability": pr,
                          "parent": p in parents} for p, sc, pr in zip(pool, scores, probs)],
                        columns=["round", "score", "probability", "parent"])


def lineage_edges(rows: list[dict]) -> list[tuple[int, int]]:
    known = {r["round"] for r in rows}
    return [(p, r["round"]) for r in rows for p in (r["parents"] or []) if p in known]


def _score_text(r: dict) -> str:
    if r["status"] == "failed":
        return "failed"
    if r["score"] is None:
        return "structure-only"
    return f"{100 * r['score']:.1f}%"


def lineage_mermaid(rows: list[dict], selected: int | None = None) -> str:
    """The lineage tree (parents -> child) as a Mermaid flowchart; failed, pinned and selected rounds styled."""
    lines = ["flowchart LR"]
    for r in rows:
        op = "".join(c for c in (r.get("operator") or "?") if c.isalnum() or c in "-_ ")
        lines.append(f'    R{r["round"]}["#{r["round"]} {op}<br/>{_score_text(r)}"]')
    lines += [f"    R{a} --> R{b}" for a, b in lineage_edges(rows)]
    lines += ["    classDef failed fill:#fde2e2,stroke:#c62828,color:#7f0000",
              "    classDef pinned stroke:#ef6c00,stroke-width:3px",
              "    classDef selected fill:#d7f5e3,stroke:#1b5e20,stroke-width:3px"]
    for cls, ids in (("failed", [r["round"] for r in rows if r["status"] == "failed"]),
                     ("pinned", [r["round"] for r in rows if r.get("pinned")]),
                     ("selected", [selected] if selected is not None else [])):
        if ids:
            lines.append(f"    class {','.join(f'R{i}' for i in ids)} {cls}")
    return "\n".join(lines) + "\n"


def lineage_height(rows: list[dict]) -> str:
    """A drawing height for the left-to-right lineage: the widest generation sets it."""
    by_round = {r["round"]: r for r in rows}
    gen: dict[int, int] = {}
    for r in rows:  # rounds are in order, so parents come first
        gen[r["round"]] = 1 + max((gen.get(p, 0) for p in r["parents"] or [] if p in by_round), default=-1)
    widest = max(Counter(gen.values()).values(), default=1)  # linear (was a count per generation)
    return f"{min(100 + 70 * widest, 700)}px"


def text_diff(before: str, after: str, before_name: str = "parent", after_name: str = "child") -> str:
    """A unified diff of two workflow texts ('' when they are the same)."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        before_name, after_name, n=2))


def fork_name(benchmark: str, run_id: int, rnd: int) -> str:
    return f"{benchmark}_run{run_id}_round{rnd}"


# -- re-evaluation ------------------------------------------------------------------------------------------------

def reeval_name(run_id: int, rnd: int) -> str:
    return f"evolution run {run_id} round {rnd}"


def start_reevaluation(ws: Workspace, settings: LLMSettings, run_id: int, rnd: int,
                       concurrency: int = 4) -> jobs.Job:
    """Evaluate a round's workflow again on the run's validation problems (stored as an evaluation, see
    flowcore.evaluation.store, under ``reeval_name``). ValueError without an endpoint or a workflow."""
    if not settings.configured:
        raise ValueError("no LLM endpoint is configured, so nothing can be evaluated")
    info = History(ws).run(run_id)
    row = History(ws).get_round(run_id, rnd)
    if row is None or not row.get("workflow_text"):
        raise ValueError(f"round {rnd} of run {run_id} has no workflow to evaluate")
    cfg = info.config
    kind_of(info.benchmark, ws)  # a task of your own is found in the workspace
    problems = load(info.benchmark, "validation", data_path=cfg.get("data_path"), limit=cfg.get("limit"),
                    split_file=cfg.get("split_file"))
    split = f"file:{cfg['data_path']}" if cfg.get("data_path") else "validation"
    return es.start_evaluation(ws, settings, workflow_text=row["workflow_text"], benchmark=info.benchmark,
                               problems=problems, split=split, workflow_name=reeval_name(run_id, rnd),
                               concurrency=concurrency)


def reevaluations(ws: Workspace, run_id: int, rnd: int) -> list[es.EvalRecord]:
    name = reeval_name(run_id, rnd)
    return [r for r in es.list_evaluations(ws, limit=500) if r.workflow_name == name]
