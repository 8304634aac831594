"""The evolution loop (DESIGN §5): rounds of sample parents -> K candidates -> judge -> (review) -> evaluate
-> store, resumable after a crash.

Round 0 is the seed workflow. Each round is stored in one transaction; a round that fails (an exception,
the budget) is stored with its reason and the run goes on. A round that failed because the endpoint did
(no connection, 5xx, garbled replies) is not a result: it is tried again after a back-off
(``outage_waits``), and if the endpoint stays away the run stops *without* storing that round, so running
the same command again resumes it. The seed must be measured: a run whose seed round failed stops.
One process evolves a run at a time (``lease.Lease``). With no LLM endpoint (offline) evolution still
runs with the programmatic operators and the rule judge, and every stored score is NULL with status
'structure-only': no benchmark score is ever made up. Each round draws from ``Random(f"{seed}:{round}")``,
so a resumed run makes the same choices an uninterrupted one would have.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from flowcore.checker.check import check
from flowcore.evolution import ops, probe, search
from flowcore.evolution.history import History, RunBuffer, run_tag, sample_from_pool
from flowcore.evolution.judge import Candidate, GuidedJudge, LLMJudge, RuleJudge, Verdict
from flowcore.evolution.lease import STALE_AFTER, Lease, LeaseLost
from flowcore.evolution.optimizer import Optimizer, rewrite_prompt
from flowcore.llm.client import BudgetExceeded, budget_refused
from flowcore.mermaid.reader import WorkflowSyntaxError, parse, to_mermaid
from flowcore.model import Workflow
from flowcore.workspace import health
from flowcore.workspace.store import Workspace

log = logging.getLogger(__name__)
EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"
MODES = ("llm", "programmatic")
TASK_OF = {"gsm8k": "math", "math": "math", "humaneval": "code", "mbpp": "code"}  # the built-in tasks' kinds
Evaluator = Callable[[Workflow, list], Awaitable[Any]]  # (workflow, problems) -> EvalReport-like


# Seconds to wait before each new try of a round that the endpoint failed (about a minute in all).
OUTAGE_WAITS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


def run_budget(config: EvolutionConfig, settings: Any) -> float | None:
    """The run's budget in USD: its own (``--budget``, the Evolve page), else the LLM settings' budget per run
    (the Settings page, MERMAIDFLOW_BUDGET_USD). Either is the whole run's, across every resume and every process
    that evolves it: a client's cap is what is left of it (a client is made per process, so its own cap alone
    gave each resume the whole budget again)."""
    return config.budget if config.budget is not None else getattr(settings, "budget_usd", None)


class Cancelled(Exception):
    pass


class EndpointDown(Exception):
    """The endpoint kept failing a round through every back-off: the run stops, resumable."""


class StorageStop(Exception):
    """The workspace cannot keep what the run makes (a full disk, a damaged or read-only file): the run stops at
    once, saying so by name (waiting would only repeat paid calls whose results cannot be stored)."""


def _transient(exc: BaseException | None) -> bool:
    """Did the endpoint or the workspace database fail (anywhere in the exception's chain) for a reason that
    may pass? A database that went away (a PostgreSQL restart, a locked SQLite file) is ridden out as an
    endpoint outage is."""
    from flowcore.tasks import endpoint_failure

    return endpoint_failure(exc)[1] or health.is_outage(exc)


def _storage_fault(exc: BaseException | None) -> str | None:
    """The storage failure (full, damaged, readonly, io) in the exception's chain that no waiting cures."""
    kind = health.fault_of(exc)
    return None if kind in (None, "outage") else kind


@dataclass
class EvolutionConfig:
    benchmark: str
    rounds: int = 5
    candidates: int = 4
    seed: int = 0
    workflow: str | None = None  # the seed workflow's text; None: the task's seed example
    alpha: float = 0.2
    lam: float = 0.3
    top_k: int = 4
    operators: list[str] = field(default_factory=lambda: list(ops.OPERATORS))
    budget: float | None = None  # USD for the whole run
    data_path: str | None = None
    limit: int | None = None
    mode: str = "llm"  # llm: the optimizer LLM proposes candidates; programmatic: the graph operators do
    concurrency: int = 8
    offline: bool = False  # structure-only: no evaluation
    max_error_rate: float = 0.1  # a round fails when more problems than this could not be run (LLM errors)
    # The evaluation protocol (flowcore.evaluation.compare, .testsplit): repeats of each validation evaluation (AFlow's
    # validation_rounds; the cache is bypassed), the top-N re-scored on the held-out test split at the end.
    validation_rounds: int = 1
    test_top: int = 0
    test_limit: int | None = None
    test_data: str | None = None  # test rows of a run evolved on its own --data
    split_file: str | None = None  # the user's validation/test split instead of ours
    # guided: the paper's loop plus per-candidate parents and distinct operators, the history buffer's evidence
    # in the rule judge, and confidence-aware acceptance (flowcore.evolution.search); paper: DESIGN §5 as written.
    search: str = "guided"
    remeasure: int = 2  # guided: extra fresh measurements of a round that could be the run's best
    task_digest: str | None = None  # a task of your own: its content, so a changed task is another run

    @property
    def task(self) -> str:
        from flowcore.tasks import kind_of

        return kind_of(self.benchmark) or "math"

    def validate(self) -> None:
        """ValueError naming the first bad field."""
        from flowcore.tasks import kind_of

        if kind_of(self.benchmark) is None:
            raise ValueError(f"benchmark must be one of {', '.join(TASK_OF)} or a task of your own (--task-file, "
                             f"or saved in the workspace), got '{self.benchmark}'")
        for name, low in (("rounds", 0), ("candidates", 1), ("top_k", 1), ("concurrency", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        for name in ("alpha", "lam", "budget"):  # nan passes every comparison below and breaks sampling later
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise ValueError(f"{'lambda' if name == 'lam' else name} must be a finite number, got {v}")
        if self.alpha < 0 or not 0 <= self.lam <= 1:
            raise ValueError(f"alpha must be >= 0 and lambda in [0, 1] (got {self.alpha}, {self.lam})")
        if self.search not in search.SEARCHES:
            raise ValueError(f"search must be one of {', '.join(search.SEARCHES)}, got '{self.search}'")
        if not isinstance(self.remeasure, int) or self.remeasure < 0:
            raise ValueError(f"remeasure must be an integer >= 0, got {self.remeasure!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got '{self.mode}'")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")
        if not 0 <= self.max_error_rate <= 1:
            raise ValueError(f"max_error_rate must be in [0, 1], got {self.max_error_rate}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if not isinstance(self.validation_rounds, int) or self.validation_rounds < 1:
            raise ValueError(f"validation_rounds must be an integer >= 1, got {self.validation_rounds!r}")
        if not isinstance(self.test_top, int) or self.test_top < 0:
            raise ValueError(f"test_top must be an integer >= 0, got {self.test_top!r}")
        if self.test_limit is not None and self.test_limit < 1:
            raise ValueError(f"test_limit must be >= 1, got {self.test_limit}")
        ops.parse_operator_list(",".join(self.operators))  # names known
        if self.workflow is not None:
            errors = [d for d in check(self.workflow, self.task) if d.severity == "error"]
            if errors:
                raise ValueError(f"the seed workflow is invalid for {self.task} tasks: {errors[0]}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EvolutionConfig:
        known = set(cls.__dataclass_fields__)
        d = {"search": "paper", **d}  # a run stored before the guided search resumes as it started
        return cls(**{k: v for k, v in d.items() if k in known})

    def key(self) -> str:
        """What identifies 'the same run' for resuming (everything but the round count)."""
        d = self.to_dict()
        d.pop("rounds")
        for name in ("test_top", "test_limit", "test_data"):  # re-scoring on test does not change the run
            d.pop(name)
        if d["search"] == "paper":  # keys of older runs stay valid (remeasure means nothing to a paper run)
            d.pop("search")
            d.pop("remeasure")
        for name, default in (("validation_rounds", 1), ("split_file", None), ("task_digest", None)):  # keys of older runs stay valid
            if d[name] == default:
                d.pop(name)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:32]


@dataclass
class Review:
    """A reviewer's decision on a round's candidates (the page's human-in-the-loop hook)."""

    action: str = "approve"  # approve | choose | edit | veto
    index: int | None = None  # choose/edit: which candidate
    text: str | None = None  # edit: the edited workflow
    reason: str = ""


# (round, the judged candidates, the verdict, the candidates dropped before judging with their reasons)
ReviewHook = Callable[[int, list[Candidate], Verdict, list[dict]], "Review | None"]


def _missing(n: int, repeats: int, declined: int) -> list[dict]:
    """Entries for the ``n`` of K candidates the operators could not make, saying why (never a silent gap)."""
    why = []
    if repeats:
        why.append(f"{repeats} attempt{'s' * (repeats != 1)} gave the same workflow as an earlier round")
    if declined:
        why.append(f"{declined} {'were' if declined != 1 else 'was'} declined by the operator (nothing it "
                   "could change)")
    reason = "no new workflow" + (": " + "; ".join(why) if why else " from the operators for this parent")
    return [{"text": "", "operator": "operators", "source": "operator", "reason": reason} for _ in range(max(0, n))]


def _bind_task(cfg: EvolutionConfig, ws: Workspace) -> None:
    """Find a task of your own in the workspace (so every path that evolves it, a worker's or a Ray actor's,
    reads the same rows) and pin its content: a task changed since the run started is refused, not mixed."""
    if cfg.benchmark in TASK_OF:
        return
    from flowcore.tasks import find

    task = find(cfg.benchmark, ws)
    if task is None:
        return  # validate() says the task is unknown
    if cfg.task_digest is None:
        cfg.task_digest = task.digest
    elif cfg.task_digest != task.digest:
        raise ValueError(f"task '{cfg.benchmark}' has changed since this run started (its rows, template or metric "
                         "differ): start a new run (--new-run) to evolve on the changed task")


def default_seed(task: str) -> str:
    return to_mermaid(parse((EXAMPLES / f"{task}_seed.mmd").read_text(encoding="utf-8")))


class Vetoed(Exception):
    """The reviewer vetoed the round: stored as failed, in the reviewer's words (no exception name)."""


class Evolution:
    def __init__(self, workspace: Workspace, config: EvolutionConfig, *, llm: Any = None,
                 evaluator: Evaluator | None = None, progress: Callable[[dict], None] | None = None,
                 cancel: threading.Event | None = None, review: ReviewHook | None = None,
                 run_id: int | None = None, lease_stale_after: float | None = None):
        self.ws, self.history = workspace, History(workspace)
        cfg = replace(config, operators=list(config.operators))
        _bind_task(cfg, workspace)
        if cfg.workflow is None and cfg.task:
            cfg.workflow = default_seed(cfg.task)
        cfg.validate()
        self._settings = None
        if llm is None and not cfg.offline:
            # The same settings on every path that evolves (the command, a queue worker, a Ray actor, the page):
            # the environment overlaid by the workspace's saved settings, which never hold the key.
            from flowcore.workspace.settings import effective_llm_settings

            settings, problems = effective_llm_settings(workspace)
            if settings.configured:
                self._settings = settings
            elif problems:  # an endpoint was set but could not be read: never a silent structure-only run
                raise ValueError("; ".join(problems) + " (fix it, or ask for a structure-only run: --offline)")
        self.llm = llm
        if self.llm is None and self._settings is None and evaluator is None:
            cfg.offline = True  # nothing could evaluate a workflow: structure-only
        if cfg.offline:
            cfg.mode = "programmatic"
        if cfg.mode == "llm" and self.llm is None and self._settings is None:
            cfg.mode = "programmatic"
        self.config, self.evaluator = cfg, evaluator
        self.progress, self.cancel, self.review = progress, cancel or threading.Event(), review
        self.run_id = run_id
        self._problems: list | None = None
        self._parsed: dict[int, Workflow] = {}
        self.outage_waits: tuple[float, ...] = OUTAGE_WAITS
        self.probe_window = probe.PROBE_WINDOW  # how long a probe that gets no answer in time is asked again
        self._lease: Lease | None = None
        self._lease_stale = lease_stale_after or STALE_AFTER
        self.lost: str | None = None  # why this process lost the run to another (its lease was taken over)
        self._buf: RunBuffer | None = None
        self._started = False

    # -- runs ----------------------------------------------------------------------------------------------
    @classmethod
    def resume(cls, workspace: Workspace, run_id: int, **kw: Any) -> Evolution:
        """Continue a stored run after its last committed round."""
        info = History(workspace).run(run_id)
        return cls(workspace, EvolutionConfig.from_dict(info.config), run_id=run_id, **kw)

    def find_resumable(self) -> int | None:
        """The latest unfinished run with this config, else a finished one that asked for fewer rounds than
        now (``evolve`` with more rounds continues it rather than starting again)."""
        found = self.history.find_unfinished(self.config.key())
        if found is not None:
            return found
        rows = self.ws.query("SELECT id FROM evo_runs WHERE config_key = ? AND status = 'finished' ORDER BY id DESC"
                             " LIMIT 1", (self.config.key(),))
        if rows and self.history.last_round(int(rows[0]["id"])) < self.config.rounds:
            return int(rows[0]["id"])
        return None

    def start(self, *, resume: bool = True, created_by: str = "local") -> int:
        """Attach to the latest unfinished run with this config (resume) or create a new one (by ``created_by``)."""
        if self.run_id is None and resume:
            self.run_id = self.find_resumable()
        if self.run_id is not None:
            info = self.history.run(self.run_id)
            self.lease()  # RunBusy (naming the process) before anything about the run changes
            if info.offline != self.config.offline:
                was, how = ("structure-only", "resume it offline") if info.offline else \
                    ("evaluated", "configure the LLM endpoint (OPENAI_BASE_URL) to resume it")
                raise ValueError(f"run {self.run_id} was {was}; {how}")
            stored = info.config
            if stored.get("rounds") != self.config.rounds:  # a resumed run may be extended or shortened
                with self.ws.transaction() as c:
                    self.history.guard(c)
                    c.execute("UPDATE evo_runs SET config_json = ? WHERE id = ?",
                              (json.dumps(self.config.to_dict(), sort_keys=True), self.run_id))
        else:
            cfg = self.config
            self.run_id = self.history.create_run(cfg.to_dict(), cfg.key(), cfg.workflow or "", cfg.benchmark,
                                                  cfg.task, cfg.offline, created_by)
        self.lease()
        if self.llm is None and self._settings is not None:
            from flowcore.llm.client import LLM

            spent = self.history.spent(self.run_id)
            settings = self._settings
            if self.config.validation_rounds > 1:  # every repeat must reach the endpoint
                settings = replace(settings, cache=False)
            budget = run_budget(self.config, settings)
            if budget is not None:
                settings = replace(settings, budget_usd=max(0.0, budget - spent))
            self.llm = LLM(settings, self.ws, run_id=run_tag(self.run_id))
            self.llm.guard = self._lease.verify if self._lease is not None else None
        self._started = True
        return self.run_id

    def lease(self) -> None:
        """Take the run's lease (RunBusy naming the other process when one is evolving it). From then on every
        write of the run checks the lease's fencing token, and every paid LLM call first checks the lease."""
        if self._lease is None or self._lease.run_id != self.run_id:
            self._lease = Lease(self.ws, int(self.run_id or 0), stale_after=self._lease_stale, on_lost=self._on_lost)
        self._lease.acquire()
        self.history.guard = self._lease.check
        if self.llm is not None:
            self.llm.guard = self._lease.verify

    def _on_lost(self, why: str) -> None:
        """Another process took the run over (this one was paused or cut off): stop, writing nothing more."""
        self.lost = why
        self.cancel.set()

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()

    def prepare(self) -> None:
        """Load the validation problems now (online runs), so a bad data file is reported before round 0."""
        if not self.config.offline:
            self._load_problems()

    def run(self) -> dict:
        return asyncio.run(self.arun())

    async def arun(self) -> dict:
        # A run handed over by id (a queue worker, a Ray actor, Resume) is attached here too, so it gets the same
        # checks and the same LLM client as one started by this process.
        run_id = self.run_id if self._started else self.start()
        try:
            self.lease()
            return await self._arun(run_id)
        finally:
            self._write_call_log()
            self.release()

    def _write_call_log(self) -> None:
        """Write the call-log rows a database outage left in memory before this process lets the run go: the
        log is what a resume counts the paid calls of a round that was never stored by (History.logged)."""
        if self.llm is None or not hasattr(self.llm, "flush"):
            return
        try:
            self.llm.flush()
        except Exception as exc:  # noqa: BLE001 - the run's end is what matters now: say what was not written
            log.warning("run %s: %s LLM call-log rows could not be written: %s", self.run_id,
                        getattr(self.llm, "unwritten", "some"), exc)

    async def _arun(self, run_id: int) -> dict:
        cfg = self.config
        try:
            self.prepare()
        except Exception as exc:
            self.history.set_status(run_id, "stopped", f"cannot load the problems: {exc}")
            raise
        records: list[dict] = []
        try:
            self.history.set_status(run_id, "running")
        except LeaseLost as exc:
            return self._lost_result(run_id, exc, records)
        status, reason = "finished", None
        self._buf = RunBuffer(self.history, run_id)  # the stored rounds, read once; then kept current below
        db_waits, nxt = list(self.outage_waits), -1
        try:
            # The next round is read back every time: what is stored is the truth (a resume never repeats one).
            while True:
                try:
                    nxt = self.history.last_round(run_id) + 1
                    if nxt > cfg.rounds:
                        break
                    outcome = await self._one_round(run_id, nxt, records)
                    db_waits = list(self.outage_waits)
                except sqlite3.Error as exc:  # the workspace went away: wait for it, as for an endpoint
                    if not health.is_outage(exc):
                        raise StorageStop(health.describe(exc, self.ws.path)) from exc
                    if not db_waits:
                        status, reason = "stopped", (f"the workspace database stayed unreachable ({exc}); run the "
                                                     "same command again to resume once it is back")
                        break
                    wait = db_waits.pop(0)
                    log.warning("round %s: the workspace database failed (%s); trying again in %g s", nxt, exc, wait)
                    await asyncio.sleep(wait)
                    self._buf = RunBuffer(self.history, run_id) if self._db_ok() else self._buf
                    continue
                if outcome is not None:
                    status, reason = outcome
                    break
            evolved = [r for r in records if r.get("round", 0) > 0]
            if status == "finished" and evolved and not cfg.offline and all(r.get("status") == "failed"
                                                                              for r in evolved):
                status, reason = "stopped", (f"every round failed, so nothing was evolved (last: "
                                             f"{evolved[-1].get('reason') or evolved[-1].get('detail')})")
            if status == "finished" and cfg.test_top and not cfg.offline:
                status, reason = await self._rescore_on_test()
        except LeaseLost as exc:
            return self._lost_result(run_id, exc, records)
        except Cancelled:
            if self.lost is not None:
                return self._lost_result(run_id, LeaseLost(self.lost), records)
            status, reason = "cancelled", "cancelled by the user"
        except (EndpointDown, StorageStop) as exc:
            status, reason = "stopped", str(exc)
        for wait in (*OUTAGE_WAITS, None):  # the outcome is stored once the database is back (up to a minute)
            try:
                self.history.set_status(run_id, status, reason)
                break
            except LeaseLost as exc:
                return self._lost_result(run_id, exc, records)
            except sqlite3.Error as exc:
                if health.fault_of(exc) == "full" and self.ws.release_reserve():
                    continue  # the room set aside for this: the run is recorded stopped, not left "running"
                if wait is None or not health.is_outage(exc):
                    log.error("run %s ended %s but the workspace could not record it: %s", run_id, status, exc)
                    break
                await asyncio.sleep(wait)
        return {"run_id": run_id, "status": status, "reason": reason, "rounds": records}

    def _lost_result(self, run_id: int, exc: BaseException, records: list[dict]) -> dict:
        """Another process holds the run now: say so and write nothing (its status is the new holder's to set)."""
        self.lost = self.lost or str(exc)
        log.warning("%s", self.lost)
        return {"run_id": run_id, "status": "lost", "reason": self.lost, "rounds": records}

    async def _one_round(self, run_id: int, nxt: int, records: list[dict]) -> tuple[str, str] | None:
        """Make, judge, evaluate and store round ``nxt``; a (status, reason) that ends the run, else None."""
        cfg = self.config
        if self.cancel.is_set():
            raise Cancelled
        left = self._budget_left()
        if left is not None and left <= 0:
            return "stopped", f"budget of ${run_budget(cfg, self._settings):g} used up"
        spent0 = self._spent()
        try:
            rec = await self._attempts(nxt)
        except (EndpointDown, Cancelled):
            self._keep_unstored(run_id, self._spent() - spent0)
            raise
        if nxt == 0 and rec["status"] == "failed":
            self._keep_unstored(run_id, float(rec.get("cost") or 0.0))
            return "stopped", f"the seed round failed, so there is nothing to evolve: {rec.get('reason')}"
        budget = rec.pop("_budget", False)  # the run's budget refused the round's calls (by type, not by words)
        await self._store(run_id, rec)
        self._buffer().add(rec)
        summary = self.summary(rec)
        records.append(summary)
        if self.progress is not None:
            try:
                self.progress(summary)
            except Exception:  # a broken display must not stop the run (the round is stored)
                log.exception("evolution progress callback failed")
        if rec["status"] == "failed" and budget:
            return "stopped", rec["reason"]
        return None

    async def _store(self, run_id: int, rec: dict) -> None:
        """Store a finished round (with the LLM replies an outage left in memory), riding out a database outage
        with the back-offs: the round is kept and stored once the database is back, never made again."""
        waits = list(self.outage_waits)
        while True:
            try:
                if self.llm is not None and hasattr(self.llm, "flush"):
                    self.llm.flush()
                self.history.add_round(run_id, rec)
                return
            except sqlite3.Error as exc:
                if not health.is_outage(exc) or not waits:
                    raise
                wait = waits.pop(0)
                log.warning("round %s: the workspace database failed while storing it (%s); trying again in %g s",
                            rec["round"], exc, wait)
                await self._pause(wait)

    def _keep_unstored(self, run_id: int, cost: float) -> None:
        """The paid calls of a round that ends unstored stay in the run's spend (History.keep_unstored): a resume
        gets their answers from the cache for free, and the budget must still count them."""
        if cost <= 0:
            return
        try:
            self.history.keep_unstored(run_id, cost)
        except (LeaseLost, sqlite3.Error) as exc:  # the run's stop is what matters now: say what was not kept
            log.warning("run %s: $%.6f of calls of an unstored round could not be kept in its spend: %s", run_id,
                        cost, exc)

    async def _probe(self) -> float | None:
        """Seconds a one-word call took, or None when it failed (or there is no client): is the endpoint up?"""
        return None if self.llm is None else (await probe.ask(self.llm)).seconds

    async def _endpoint_answers(self, rec: dict) -> tuple[bool, str]:
        """Does the endpoint answer, now, calls like the ones round ``rec`` failed (see probe.py)? (yes or no, what
        showed it, in words that follow "while")."""
        if self.llm is None:
            return False, "there was no LLM client to probe the endpoint with"
        waited = await probe.answered_within(self.llm, self.probe_window, self._pause)
        if waited is None:
            return False, "the endpoint did not answer a short probe either"
        ref = next((p for p in rec.get("parents") or [] if p in self._buffer().text_of), 0)
        before = (self.history.get_round(int(self.run_id or 0), ref) or {}).get("per_problem") or []
        problem = probe.reference_problem(rec.get("per_problem") or [], before, self._load_problems())
        said = f"the endpoint answered a short probe in {waited:.2f} s"
        start = asyncio.get_running_loop().time()
        while True:  # asked again while it times out: the candidate's own abandoned generations may still run
            try:
                res = (await self._measure(self._parsed_round(ref), [problem], fresh=True)).results[0]
                error = res.error if _errored(res) else None
                refused = bool(getattr(res, "budget", False))
            except (Cancelled, LeaseLost, BudgetExceeded):
                raise
            except Exception as exc:  # noqa: BLE001 - not shown to answer: the endpoint's, never the candidate's
                error, refused = f"{type(exc).__name__}: {exc}", False
            if refused:  # the run's budget refused the call: no word on the endpoint
                raise BudgetExceeded((error or "").rpartition(_BUDGET)[2] or "the run's budget is used up")
            if error is None or "timed out" not in error or \
                    asyncio.get_running_loop().time() - start >= self.probe_window:
                break
            await self._pause(probe.PROBE_PAUSE)
        if error is not None:
            return False, (f"{said} but not round {ref}'s workflow (measured before) on problem {getattr(problem, 'id', '?')}"
                           f" with the same timeout ({error}): every call of normal length fails there now")
        return True, (f"{said} and round {ref}'s workflow (measured before) answered problem {problem.id} in "
                      f"{res.latency:.2f} s with the same timeout")

    async def _pause(self, seconds: float) -> None:
        """Sleep, but stop at once when the run is cancelled (or lost to another process)."""
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            if self.cancel.is_set():
                raise Cancelled
            await asyncio.sleep(min(0.2, seconds))

    def _db_ok(self) -> bool:
        try:
            self.history.last_round(int(self.run_id or 0))
            return True
        except sqlite3.OperationalError:
            return False

    async def _rescore_on_test(self) -> tuple[str, str | None]:
        """Validation → test: the top-N rounds re-scored on the held-out test split (stored per run)."""
        from flowcore.evolution.testsplit import rescore_top

        cfg = self.config
        if self.llm is None:
            return "finished", "not re-scored on the test split: no LLM client"
        try:
            await rescore_top(self.ws, int(self.run_id or 0), cfg.test_top, llm=self.llm, limit=cfg.test_limit,
                              repeats=cfg.validation_rounds, concurrency=cfg.concurrency, cancel=self.cancel,
                              progress=getattr(self, "test_progress", None))  # (round, done, total)
        except Exception as exc:  # noqa: BLE001 - the evolved rounds are stored; say why test is missing
            return "finished", f"test re-scoring failed: {type(exc).__name__}: {exc}"
        if self.cancel.is_set():
            raise Cancelled
        return "finished", None

    async def _attempts(self, r: int) -> dict:
        """Round ``r``, tried again after each back-off while the endpoint is what failed it. Each try draws
        from the same ``Random(seed:round)`` and the replies that succeeded are cached, so a retried round
        makes the choices an undisturbed one would have. EndpointDown when the back-offs run out."""
        waits, cost = list(self.outage_waits), 0.0
        while True:
            rec = await (self._seed_round() if r == 0 else self._round(r))
            cost += float(rec.get("cost") or 0.0)
            fault = rec.pop("_fault", None)
            if fault is not None:  # the workspace cannot keep what this round makes: stop now, by name
                raise StorageStop(fault)
            if not rec.pop("_transient", False):
                rec["cost"] = cost
                return rec
            if not waits:
                return await self._settle(r, rec, cost)
            wait = waits.pop(0)
            log.warning("round %s: the endpoint or the workspace database failed (%s); trying again in %g s", r,
                        rec.get("reason"), wait)
            await self._pause(wait)

    async def _settle(self, r: int, rec: dict, cost: float) -> dict:
        """A round still failing after every back-off: the candidate's own failure when the endpoint answers calls
        like its failed ones (stored failed by name, the run goes on: stopping would halt it for good, as a resumed
        run draws the same cached proposal); else the endpoint's: EndpointDown (the run stops, resumable), or for a
        measured round whose few errored problems it failed, its score on the rest with those shown as not run."""
        spent = self._spent()
        if r == 0:  # the seed has no reference: the probe only hints
            rec["cost"] = cost
            if rec["status"] == "ok":
                return rec
            try:
                took = await self._probe()
            except BudgetExceeded as exc:
                return _budget_spent(rec, exc, cost + self._spent() - spent)
            hint = "" if took is None else (f"; the endpoint answered a short probe in {took:.2f} s, so the seed's "
                                            "own calls fail: if its answers need longer, raise the LLM timeout")
            raise EndpointDown(f"the LLM endpoint or the workspace kept failing round 0 ({rec.get('reason')}){hint}; "
                               "the round was not stored: run the same command again to resume once it is back")
        try:
            answers, why = await self._endpoint_answers(rec)
        except BudgetExceeded as exc:
            return _budget_spent(rec, exc, cost + self._spent() - spent)
        rec["cost"] = cost + self._spent() - spent
        if not answers:
            if rec["status"] == "ok":
                return rec
            raise EndpointDown(f"the LLM endpoint or the workspace kept failing round {r} ({rec.get('reason')}); "
                               f"{why}; the round was not stored: run the same command again to resume once it is "
                               "back")
        raise_timeout = "if its answers need longer, raise the LLM timeout in Settings"
        if rec["status"] == "ok":
            # Left out, its errored problems would score it on the ones it could answer (a prompt that runs past
            # the timeout on the problems it gets wrong), so the round has no score. They stay errored, never wrong.
            left = sum(1 for x in rec.get("per_problem") or [] if x.get("errored"))
            for k in ("score", "ci_low", "ci_high", "n"):
                rec.pop(k, None)
            rec.update(status="failed", reason=(
                f"{left} of {len(rec.get('per_problem') or [])} problems failed on every try while {why}, so this "
                f"candidate's own calls fail there and a score of the rest would flatter it ({raise_timeout})"))
        else:
            rec["reason"] = (f"{rec.get('reason')}; every try failed while {why}, so this candidate's own calls fail "
                             f"({raise_timeout})")
        return rec

    def summary(self, rec: dict) -> dict:
        return {"run": self.run_id, "round": rec["round"], "status": rec["status"], "score": rec.get("score"),
                "ci_low": rec.get("ci_low"), "ci_high": rec.get("ci_high"), "n": rec.get("n"),
                "cost": round(rec.get("cost") or 0.0, 6), "operator": rec.get("operator"),
                "detail": rec.get("detail"), "parents": rec.get("parents", []), "judge": rec.get("judge"),
                "reason": rec.get("reason")}

    # -- rounds --------------------------------------------------------------------------------------------
    def _spent(self) -> float:
        usage = getattr(self.llm, "usage", None)
        return float(getattr(usage, "cost", 0.0) or 0.0)

    def _budget_left(self) -> float | None:
        budget = run_budget(self.config, self._settings)
        return None if budget is None else budget - self._buffer().spent

    async def _seed_round(self) -> dict:
        w = parse(self.config.workflow or "")
        rec: dict[str, Any] = {"round": 0, "workflow_text": to_mermaid(w), "prompts": w.prompts, "parents": [],
                               "operator": "seed", "detail": "the seed workflow", "status": "failed"}
        return await self._evaluate_into(rec, w, self._spent())

    async def _round(self, r: int) -> dict:
        cfg, rng = self.config, random.Random(f"{self.config.seed}:{r}")
        rec: dict[str, Any] = {"round": r, "status": "failed"}
        spent0 = self._spent()
        try:
            if not cfg.offline:
                self._load_problems()  # the optimizer is shown failed problems of the parent
            buf = self._buffer()  # O(1) reads per round: no stored round is re-read or decoded here
            drawn, pool, probs = sample_from_pool(buf.top_k(cfg.top_k), rng, n=2, alpha=cfg.alpha, lam=cfg.lam)
            parents = [self.history.get_round(self.run_id, p["round"]) or p for p in drawn]  # type: ignore[arg-type]
            rec["parents"] = [p["round"] for p in parents]
            rec["sampling"] = {"pool": [p["round"] for p in pool], "scores": [p["score"] for p in pool],
                               "probabilities": probs}
            pws = [self._workflow(p) for p in parents]
            experience = self.history.experience(self.run_id or 0, parents[0]["round"])
            rec["experience"] = experience
            if cfg.search == "guided" and not (cfg.mode == "llm" and self.llm is not None):
                candidates, dropped = await self._guided_candidates(r, rng, pool, buf.texts)
            else:
                candidates, dropped = await self._candidates(r, rng, parents, pws, buf.texts, experience)
            rec["candidates"] = [_cand_json(c) for c in candidates] + dropped  # kept if judging fails
            if not candidates:
                reasons = "; ".join(d.get("reason") or "" for d in dropped[:3])
                raise RuntimeError(f"no valid candidate ({reasons})")
            verdict = await self._judge(r, candidates, pws[0], parents[0], buf, experience)
            rec["judge"], rec["chosen"] = verdict.judge, verdict.chosen
            rec["candidates"] = [{**_cand_json(c), "scores": s} for c, s in zip(candidates, verdict.scores)]
            rec["candidates"] += dropped
            child = await self._reviewed(r, candidates, verdict, rec, dropped)
            rec.update(workflow_text=child.text, prompts=child.workflow.prompts, operator=child.operator,
                       detail=child.detail, parents=child.parents)
            return await self._evaluate_into(rec, child.workflow, spent0)
        except (Cancelled, LeaseLost):
            raise
        except Exception as exc:  # noqa: BLE001 - a failed round is stored with its reason; the run goes on
            rec["status"], rec["reason"] = "failed", str(exc) if isinstance(exc, Vetoed) else \
                f"{type(exc).__name__}: {exc}"
            rec["cost"] = self._spent() - spent0
            rec["_transient"] = _transient(exc)
            rec["_budget"] = rec.get("_budget") or budget_refused(exc)
            if _storage_fault(exc):
                rec["_fault"] = health.describe(exc, self.ws.path)
            return rec

    def _buffer(self) -> RunBuffer:
        """The run's bookkeeping, loaded once (one light query) and kept current by ``arun``."""
        if self._buf is None or self._buf.run_id != self.run_id:
            self._buf = RunBuffer(self.history, self.run_id)  # type: ignore[arg-type]
        return self._buf

    def _parsed_round(self, rnd: int) -> Workflow:
        if rnd not in self._parsed:
            self._parsed[rnd] = parse(self._buffer().text_of[rnd])
        return self._parsed[rnd]

    def _workflow(self, row: dict) -> Workflow:
        if row["round"] not in self._parsed:
            self._parsed[row["round"]] = parse(row["workflow_text"])
        return self._parsed[row["round"]]

    async def _candidates(self, r: int, rng: random.Random, parents: list[dict], pws: list[Workflow],
                          tried: set[str], experience: list[dict]) -> tuple[list[Candidate], list[dict]]:
        """K candidates: the optimizer LLM's valid proposals (mode llm) or the graph operators'; a mode-llm
        round whose proposals are all invalid falls back to the operators (recorded in the candidates)."""
        cfg = self.config
        dropped: list[dict] = []
        cands: list[Candidate] = []
        seen = _Seen(tried)  # the run's texts (not copied) plus this round's
        if cfg.mode == "llm" and self.llm is not None:
            opt = Optimizer(self.llm, cfg.task)
            pairs = [(w, p["score"]) for w, p in zip(pws, parents, strict=True)]
            proposals = await opt.propose_many(pairs, cfg.candidates, experience=experience,
                                               failures=self._failures(parents[0], rng),
                                               salt=f"run{self.run_id}:r{r}")
            for p in proposals:
                if p.workflow is None:
                    dropped.append({"text": p.text, "operator": "optimizer", "source": "optimizer",
                                    "rationale": p.rationale, "attempts": p.attempts, "reason": p.reason,
                                    "diagnostics": [d.to_dict() for d in p.diagnostics]})
                elif to_mermaid(p.workflow) not in seen:
                    seen.add(to_mermaid(p.workflow))
                    cands.append(Candidate(p.workflow, "optimizer", p.rationale[:160] or "optimizer proposal",
                                           [x["round"] for x in parents], "optimizer", p.rationale, p.attempts))
                else:
                    dropped.append({"text": p.text, "operator": "optimizer", "source": "optimizer",
                                    "reason": "the same workflow as an earlier round"})
            if cands:
                return cands, dropped
        distinct = len({to_mermaid(w) for w in pws}) > 1
        names = [n for n in cfg.operators if n != "crossover" or distinct] or ["insert"]
        repeats, declined = 0, 0
        for attempt in range(cfg.candidates * 8):
            if len(cands) >= cfg.candidates:
                break
            name = rng.choice(names)
            res = await self._apply(name, pws, rng, f"run{self.run_id}:r{r}:{attempt}")
            if isinstance(res, ops.Declined):
                declined += 1
                continue
            text = res.text
            if text in seen:
                repeats += 1
                continue
            seen.add(text)
            prounds = [parents[i]["round"] for i in res.parents]
            cands.append(Candidate(res.workflow, res.operator, res.detail, prounds, "operator"))
        return cands, dropped + _missing(cfg.candidates - len(cands) - len(dropped), repeats, declined)

    async def _guided_candidates(self, r: int, rng: random.Random, pool: list[dict],
                           tried: set[str]) -> tuple[list[Candidate], list[dict]]:
        """Guided search: each candidate from its own parents and, while there are enough, its own operator."""
        cfg, seen, cands, used = self.config, _Seen(tried), [], set()
        plan = search.candidate_plan(pool, rng, cfg.candidates, list(cfg.operators), alpha=cfg.alpha, lam=cfg.lam)
        for i, (drawn, names) in enumerate(plan):
            pws = [self._parsed_round(p["round"]) for p in drawn]
            usable = search.usable_operators(names, cfg.task, len({to_mermaid(w) for w in pws}) > 1)
            usable = [n for n in usable if n not in used] + [n for n in usable if n in used]  # unused ones first
            for j, name in enumerate([*usable, *usable]):  # operators are randomised: a second pass finds others
                res = await self._apply(name, pws, rng, f"run{self.run_id}:r{r}:c{i}:{j}")
                if isinstance(res, ops.Declined) or res.text in seen:
                    continue
                seen.add(res.text)
                used.add(name)
                cands.append(Candidate(res.workflow, res.operator, res.detail,
                                       [drawn[k]["round"] for k in res.parents], "operator"))
                break
        return cands, _missing(cfg.candidates - len(cands), 0, 0)

    async def _apply(self, name: str, pws: list[Workflow], rng: random.Random,
                     salt: str) -> ops.Child | ops.Declined:
        """One graph operator; with an LLM at hand the prompt operator lets the optimizer write the prompt."""
        if name == "prompt" and self.llm is not None and not self.config.offline:
            from flowcore.llm.client import LLMError

            try:
                return await rewrite_prompt(self.llm, pws[0], self.config.task, rng, salt=salt)
            except (ops.Declined, LLMError) as exc:
                if isinstance(exc, LLMError) and exc.transient:
                    raise  # the endpoint is away: retry the round rather than make a different child
                # otherwise the library's variants still work
        return ops.apply(name, pws, self.config.task, rng)

    def _failures(self, parent: dict, rng: random.Random, k: int = 3) -> list[dict]:
        wrong = [x for x in parent.get("per_problem") or [] if not x.get("correct")]
        by_id = {p.id: p for p in self._problems or []}
        wrong = [x for x in wrong if x.get("id") in by_id]
        picked = rng.sample(wrong, min(k, len(wrong)))
        return [{"question": by_id[x["id"]].question, "prediction": x.get("prediction", "")} for x in picked]

    async def _judge(self, r: int, cands: list[Candidate], parent: Workflow, prow: dict, buf: RunBuffer,
                     experience: list[dict]) -> Verdict:
        history = [self._parsed_round(x) for x in buf.judge_history(self.config.top_k)]  # bounded: see RunBuffer
        record = buf.record
        if self.config.mode == "llm" and self.llm is not None:
            return await LLMJudge(self.llm, self.config.task).ascore(
                cands, parent, parent_score=prow["score"], experience=experience, history=history,
                operator_record=record, cache_salt=f"run{self.run_id}:r{r}")
        if self.config.search == "guided":
            parents = {p: self._parsed_round(p) for c in cands for p in c.parents[:1] if p in buf.text_of}
            return GuidedJudge(self.config.task).score(cands, parent, history=history, operator_record=record,
                                                       kind_record=search.kind_record(buf.rows.values()),
                                                       parents=parents)
        return RuleJudge(self.config.task).score(cands, parent, history=history, operator_record=record)

    async def _reviewed(self, r: int, cands: list[Candidate], verdict: Verdict, rec: dict,
                        dropped: list[dict] | None = None) -> Candidate:
        """Apply the review hook: approve, choose another candidate, edit one, or veto the round. The reviewer
        also sees the candidates dropped before judging, with why (all K, not only the usable ones)."""
        chosen = cands[verdict.chosen]
        if self.review is None:
            return chosen
        decision = await asyncio.to_thread(self.review, r, cands, verdict, list(dropped or []))
        if decision is None or decision.action == "approve":
            return chosen
        idx = verdict.chosen if decision.index is None else decision.index
        if not 0 <= idx < len(cands):
            raise ValueError(f"the reviewer chose candidate {idx}, but there are {len(cands)}")
        rec["chosen"] = idx
        if decision.action == "choose":
            return cands[idx]
        if decision.action == "veto":
            raise Vetoed(f"vetoed by you{': ' + decision.reason if decision.reason else ''}")
        if decision.action == "edit":
            errors = [d for d in check(decision.text or "", self.config.task) if d.severity == "error"]
            if errors:
                raise ValueError(f"the reviewer's edit is invalid: {errors[0]}")
            base = cands[idx]
            return replace(base, workflow=parse(decision.text or ""),
                           detail=f"{base.detail} (edited by the reviewer)")
        raise ValueError(f"unknown review action '{decision.action}' (approve, choose, edit, veto)")

    def _load_problems(self) -> list:
        if self._problems is None:
            from flowcore.tasks import load

            cfg = self.config
            self._problems = load(cfg.benchmark, "validation", data_path=cfg.data_path, limit=cfg.limit,
                                  split_file=cfg.split_file)
        return self._problems

    async def _measure(self, w: Workflow, problems: list, *, repeat: int = 0, fresh: bool = False) -> Any:
        """One validation evaluation. A ``repeat`` > 0 draws fresh samples: its calls are cached under their own
        salt, so they reach the endpoint once and a round retried after an outage gets the same answers. ``fresh``:
        no call is read from or written to the cache (a probe of the endpoint now)."""
        if self.evaluator is not None:
            report = await self.evaluator(w, problems)
        else:
            from flowcore.evaluation.compare import uncached
            from flowcore.evaluation.evaluate import evaluate_workflow
            from flowcore.execution import cluster

            llm = uncached(self.llm) if fresh else self.llm
            if repeat and hasattr(llm, "salted"):  # Ray tasks rebuild the client from settings: bypass the cache
                llm = uncached(llm) if cluster.enabled() else llm.salted(f"repeat{repeat}")
            report = await evaluate_workflow(w, self.config.benchmark, problems, llm=llm,
                                             concurrency=self.config.concurrency, cancel=self.cancel)
        if getattr(report, "cancelled", False):
            raise Cancelled
        return report

    async def _remeasured(self, w: Workflow, problems: list, reports: list) -> Any:
        """Guided search: a round that could be the run's best is measured again with fresh samples (up to
        ``remeasure`` times) and scored on all its measurements, so one lucky draw does not crown it."""
        from flowcore.evaluation.compare import pool_reports

        def pooled() -> Any:
            return pool_reports(reports) if len(reports) > 1 else reports[0]

        cfg, report = self.config, pooled()
        # A measurement an outage broke (errored problems that may pass) is retried whole after a back-off: its
        # score is not the workflow's, and measuring again on it would pay for samples the retry discards.
        def broke() -> bool:
            return any(_errored(x) and getattr(x, "transient", False) for rep in reports for x in rep.results)

        if cfg.search == "guided":
            buf = self._buffer()
            result = search.chosen(list(buf.rows.values()))
            best, low = buf.best_score(), (result or {}).get("ci_low")
            for _ in range(cfg.remeasure):
                if broke() or not search.close_call(report.score, report.ci_low, best, low):
                    break
                reports.append(await self._measure(w, problems, repeat=len(reports)))
                report = pooled()
        return report

    async def _evaluate_into(self, rec: dict, w: Workflow, spent0: float) -> dict:
        """Evaluate the chosen workflow on the validation split (or mark it structure-only offline)."""
        if self.config.offline:
            rec.update(status="structure-only", score=None, reason="offline: no LLM endpoint, not evaluated")
            rec["cost"] = self._spent() - spent0
            return rec
        try:
            problems = self._load_problems()
            reports = []
            for _ in range(self.config.validation_rounds):  # repeats: the LLM's cache is off (see start)
                reports.append(await self._measure(w, problems))
            report = await self._remeasured(w, problems, reports)
            results = list(report.results)
            infra = [x for x in results if _errored(x)]
            if infra and any(getattr(x, "transient", False) for x in infra):
                rec["_transient"] = True  # retried after a back-off: an outage is not the workflow's score
            if results and len(infra) > self.config.max_error_rate * len(results):
                rec["per_problem"] = [_result_json(x) for x in results]  # kept for diagnosis
                rec["_budget"] = any(getattr(x, "budget", False) for x in infra)
                raise RuntimeError(f"{len(infra)} of {len(results)} problems could not be run, so the score "
                                   f"would be wrong ({infra[0].error})")

            extra = float(report.cost or 0.0) if self.llm is None else 0.0  # an injected evaluator's own cost
            rec.update(status="ok", score=report.score, ci_low=report.ci_low, ci_high=report.ci_high,
                       n=report.n, per_problem=[{**_result_json(x), **({"repeat": i} if len(reports) > 1 else {})}
                                                for i, rep in enumerate(reports) for x in rep.results])
        except (Cancelled, LeaseLost):
            raise
        except Exception as exc:  # noqa: BLE001 - stored as the round's reason
            rec.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
            rec["_transient"] = rec.get("_transient") or _transient(exc)
            rec["_budget"] = rec.get("_budget") or budget_refused(exc)
            if _storage_fault(exc):
                rec["_fault"] = str(exc) if type(exc).__name__ == "ResultNotStored" else \
                    health.describe(exc, self.ws.path)
            extra = 0.0
        rec["cost"] = self._spent() - spent0 + extra
        return rec


# Errors of the endpoint rather than of the workflow (the harness records "<ExceptionType>: message", a
# failing node wraps its cause: "NodeError: node C1 (CustomOp) failed: LLMError: ..."). An injected evaluator
# may return results without the harness's ``errored`` flag: their message says it.
_INFRA_ERRORS = ("LLMError", "BudgetExceeded", "NotConfigured")


_BUDGET = "BudgetExceeded: "  # how a call the run's budget refused reads in a round's reason (words only)


def _budget_spent(rec: dict, exc: BudgetExceeded, cost: float) -> dict:
    """Round ``rec`` failed on every try and the run's budget refused the calls that would tell whose failure it
    was (the probe, the reference run): the budget is spent, not the endpoint down. The round is stored failed as
    a round whose own call the budget refused is, by the same reason (its cost charged), and the run stops so."""
    for k in ("score", "ci_low", "ci_high", "n"):
        rec.pop(k, None)
    rec.update(status="failed", cost=cost, _budget=True,
               reason=f"{_BUDGET}{exc} (round {rec['round']} had failed on every try: {rec.get('reason')})")
    return rec


def _errored(x: Any) -> bool:
    flag = getattr(x, "errored", None)
    return bool(flag) if flag is not None else any(f"{k}:" in (x.error or "") for k in _INFRA_ERRORS)


class _Seen:
    """Membership in the run's stored texts or this round's new ones, without copying the run's set."""

    def __init__(self, stored: set[str]) -> None:
        self.stored, self.new = stored, set()

    def __contains__(self, text: object) -> bool:
        return text in self.new or text in self.stored

    def add(self, text: str) -> None:
        self.new.add(text)


def _cand_json(c: Candidate) -> dict:
    return {"text": c.text, "operator": c.operator, "detail": c.detail, "source": c.source,
            "rationale": c.rationale, "attempts": c.attempts, "parents": c.parents}


def _result_json(x: Any) -> dict:
    return {"id": x.id, "correct": bool(x.correct), "prediction": (x.prediction or "")[:2000],
            "extracted": x.extracted, "cost": x.cost, "latency": round(x.latency or 0.0, 4), "error": x.error,
            "errored": _errored(x),
            # a task's fractional score and a judge's grade (model, reason): kept so every page can say so
            **({"score": x.score} if getattr(x, "score", None) is not None else {}),
            **({"grade": x.grade} if getattr(x, "grade", None) else {})}


def load_seed(path: str, task: str) -> str:
    """A seed workflow file as canonical text; ValueError naming the problem."""
    try:
        w = parse(Path(path).read_text(encoding="utf-8"))
    except WorkflowSyntaxError as exc:
        raise ValueError(f"{path}: {exc}") from None
    errors = [d for d in check(w, task) if d.severity == "error"]
    if errors:
        raise ValueError(f"{path}: {errors[0]}")
    return to_mermaid(w)
