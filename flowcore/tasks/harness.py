"""Evaluation harness: run a workflow over problems with bounded concurrency, score each answer, report the
solve rate with a bootstrap confidence interval. A failing problem never aborts the run.

A problem that has no answer to judge is *errored*, not wrong: the LLM endpoint failed (an LLMError anywhere in
its exception's chain: no connection, HTTP errors, garbled replies, the budget), the problem ran out of time
waiting for others (``BusyTimeout``), the engine raised (a bug), or the hidden tests could not reach a verdict
(the sandbox ran out of wall-clock time while the code had little CPU: the machine was too busy), or a task's
metric could give no verdict for a reason of its own (flowcore.tasks.pymetric, flowcore.tasks.judging). What
the workflow itself does is never an error: its own timeout, a node its wiring left with nothing to work with,
a prompt too long for the model or one it refuses is a wrong answer (``by_workflow``). It is left out of the score, counted in
``errors`` and shown as "N not run" beside every score (``not_run_text``), so an outage, a bug of ours or a
loaded machine never reads as a bad workflow. Nothing an answer does makes its row errored: what an answer
breaks, it fails (docs/evaluation.md, "Errored rows")."""
from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from flowcore.evaluation.stats import exact_all_same, mean_ci
from flowcore.execution import waits
from flowcore.execution.sandbox import LOAD_GRACE, SandboxUnavailable, require_sandbox
from flowcore.tasks.judging import judge
from flowcore.tasks.metrics import Grade, grade_text
from flowcore.tasks.problem import Problem, needs_sandbox
from flowcore.tasks.pymetric import PythonBatcher
from flowcore.tasks.scoring import score
from flowcore.workspace import health

log = logging.getLogger(__name__)

CODE_BENCHMARKS = ("humaneval", "mbpp")  # scored by running hidden tests in the sandbox
Runner = Callable[[Problem], Awaitable[tuple[str, float]]]  # returns (answer, cost)


@dataclass
class ProblemResult:
    id: str
    correct: bool
    prediction: str
    extracted: str | None
    cost: float
    latency: float
    error: str | None
    errored: bool = False  # no answer to judge (endpoint, engine or sandbox failed): not in the score
    transient: bool = False  # ... and for a reason that may pass (connection, 5xx, garbling)
    score: float | None = None  # a task metric's score in [0, 1] (None: 0/1 from ``correct``)
    grade: dict | None = None  # a judge's grade: {"model", "reason"} ("graded by a model")
    budget: bool = False  # ... because the run's budget refused a call (by the error's type, never its words)

    @property
    def value(self) -> float:
        """This problem's score in [0, 1]."""
        return float(self.score) if self.score is not None else float(bool(self.correct))


@dataclass
class EvalReport:
    benchmark: str
    n: int
    score: float  # fraction solved, 0..1
    ci_low: float
    ci_high: float
    cost: float
    results: list[ProblemResult] = field(default_factory=list)
    cancelled: bool = False
    errors: int = 0  # problems the endpoint failed (not in n, not in the score)
    graded_by: list[str] = field(default_factory=list)  # judge models that made these scores (if any)

    @property
    def error_rate(self) -> float:
        total = self.n + self.errors
        return self.errors / total if total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "score": self.score, "n": self.n, "errors": self.errors,
                "cost": self.cost, "ci": [self.ci_low, self.ci_high], "cancelled": self.cancelled,
                "graded_by": self.graded_by, "results": [asdict(r) for r in self.results]}


def endpoint_failure(exc: BaseException | None) -> tuple[bool, bool]:
    """(errored, transient) for a problem's exception: is an LLMError in its cause/context chain?"""
    from flowcore.llm.client import LLMError

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, LLMError):
            return True, bool(exc.transient)
        exc = exc.__cause__ or exc.__context__
    return False, False


def bootstrap_ci(values: list[bool], *, resamples: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of 0/1 outcomes (exact when they all agree).

    Resampling n bools with replacement and counting the ones is a Binomial(n, p̂) draw, so each resample is
    drawn from that distribution's CDF: the same interval as the naive loop, in O(n + resamples·log n)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    k = sum(1 for v in values if v)
    p = k / n
    if k in (0, n):  # every resample is the same: give the exact (Clopper-Pearson) interval, never "0-0%"
        return exact_all_same(k == n, n, alpha)
    logp, logq = math.log(p), math.log1p(-p)
    cdf, total = [], 0.0
    for j in range(n + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                          + j * logp + (n - j) * logq)
        cdf.append(total)
    rng = random.Random(seed)
    means = sorted(min(bisect_left(cdf, rng.random() * total), n) / n for _ in range(max(resamples, 1)))
    lo = means[math.floor(alpha / 2 * (len(means) - 1))]
    hi = means[math.ceil((1 - alpha / 2) * (len(means) - 1))]
    return lo, hi


class Scorer:
    """Grades answers by each problem's metric: a benchmark's own scorer, a task's deterministic metric, its
    python metric (rows batched into few sandbox runs) or its judge (``llm``'s judge model)."""

    def __init__(self, llm: Any = None) -> None:
        self.llm = llm
        self._batchers: dict[int, PythonBatcher] = {}

    async def grade(self, problem: Problem, answer: str) -> Grade:
        m = problem.metric
        if m.name == "python":
            batcher = self._batchers.setdefault(id(m), PythonBatcher(m))
            return await batcher.grade(answer, problem.meta.get("row") or {}, problem.reference, problem.id)
        if m.name == "judge":
            return await judge(self.llm, m, problem.question, answer, problem.reference)
        if m.name == "tests":
            res = await asyncio.to_thread(score, "mbpp", answer, problem)
            return Grade(None, res.extracted, res.detail, transient=True) if res.errored else \
                Grade(float(res.correct), res.extracted, res.detail)
        return await asyncio.to_thread(grade_text, m, answer, problem.reference)


class OwnTimeout(TimeoutError):
    """The workflow used up the problem's timeout in its own work (execution.waits): a wrong answer."""


class BusyTimeout(TimeoutError):
    """The problem ran out of time waiting for others (slots, the endpoint's failures, the host's CPU):
    errored, never wrong."""


async def _within(out: Awaitable, timeout: float, clock: waits.ProblemClock) -> Any:
    """``out``'s result, given ``timeout`` seconds of the problem's own time (execution.waits): what others
    took is given back, up to LOAD_GRACE times the timeout (the sandbox's rule for code, for the whole
    workflow). When its own time runs out while an HTTP attempt is in flight, that attempt may yet turn out to
    be the endpoint's (a late 504, a refused connection's backoff): it is waited for, up to the grace again,
    and the verdict is taken on what it was."""
    clock.limit = timeout
    task = asyncio.ensure_future(out)
    start = clock.start
    grace = timeout * LOAD_GRACE
    overtime = False
    try:
        while True:
            own, sure = clock.own()
            # waiting for the same evaluation's own problems is paused time: it does not run the cap
            cap = start + grace + clock.paused()
            last = cap + grace
            left = (last - time.monotonic()) if overtime else min(timeout - own, cap - time.monotonic())
            done, _ = await asyncio.wait({task}, timeout=max(0.0, min(left, 0.25)))
            now = time.monotonic()
            own, sure = clock.own(now)
            cap = start + grace + clock.paused(now)
            last = cap + grace
            if done:
                if overtime and own > timeout and task.exception() is None:
                    break  # what it waited for in overtime was its own: too late
                if sure >= timeout and task.exception() is not None:
                    break  # it failed after its own time ran out (e.g. its own over-long call timed out)
                return task.result()  # an exception (the endpoint's failure) is raised as it is
            if own < timeout:
                overtime = False
                if now >= cap:  # most of its time went to others: the machine or endpoint was too busy
                    raise BusyTimeout(f"timed out after {timeout:g}s of its own time within "
                                      f"{grace:g}s: {cap - start - clock.paused(now) - own:.1f}s went waiting for "
                                      f"the endpoint or the machine (others' work, not the workflow's)")
                continue
            if sure >= timeout or now >= last:
                break
            overtime = True  # an attempt in flight may still be the endpoint's time: wait for its outcome
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    given = time.monotonic() - start - clock.own()[0]
    raise OwnTimeout(f"timed out: the workflow's own work took more than {timeout:g}s"
                     + (f" ({given:.1f}s of the wall time was waiting for others or ran beside its longest "
                        f"chain of steps)" if given >= 0.05 else ""))


def by_workflow(exc: BaseException | None) -> bool:
    """Is this failure the workflow's own doing: its own timeout, a node its wiring left with nothing to work
    with, a prompt it built too long for the model, or one the model or its filter refused? Then the problem is
    answered wrong, not errored."""
    from flowcore.execution._standalone_ops import NodeError
    from flowcore.llm.client import ContextOverflow, Refused

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (OwnTimeout, ContextOverflow, Refused)) or (isinstance(exc, NodeError) and exc.by_workflow):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


async def _solve(runner: Runner, problem: Problem, timeout: float | None,
                 scorer: Scorer | None = None, group: object | None = None) -> ProblemResult:
    start = time.perf_counter()
    answer, cost = "", 0.0
    clock, token = waits.clock_start(group)  # what the problem's calls and runs wait for (execution.waits)
    try:
        out = runner(problem)
        answer, cost = await (_within(out, timeout, clock) if timeout else out)
        answer = "" if answer is None else str(answer)
        cost = float(cost or 0.0)
    except SandboxUnavailable:
        raise  # no problem's fault: the whole evaluation stops (code is never run unconfined)
    except Exception as exc:  # noqa: BLE001 - any runner failure is this problem's result
        fault = health.fault_of(exc)
        if fault not in (None, "outage"):  # a full disk, a damaged or read-only workspace: the evaluation stops
            raise health.cause(exc) from None  # saying so (not the node that happened to write)
        # what a failed run had already spent: its own count, or its calls' (a timeout keeps no result)
        cost = max(float(getattr(exc, "cost", 0.0) or 0.0), clock.spent)
        detail = f"{type(exc).__name__}: {exc}"
        if by_workflow(exc):  # a candidate cannot leave a problem it fails out of its score by failing it
            return ProblemResult(problem.id, False, answer, None, cost, time.perf_counter() - start, detail)
        # An endpoint failure, waiting for others past the grace, or an engine bug leaves no answer to judge:
        # the problem is errored (left out of the score, counted against --max-error-rate), never a wrong
        # answer. The workspace database away for a while (a restart, a lock) is an outage like the endpoint's.
        transient = endpoint_failure(exc)[1] or isinstance(exc, BusyTimeout) or fault == "outage"
        from flowcore.llm.client import budget_refused

        return ProblemResult(problem.id, False, answer, None, cost, time.perf_counter() - start, detail, True,
                             transient, budget=budget_refused(exc))
    finally:
        waits.clock_stop(token)
    latency = time.perf_counter() - start
    if problem.metric is not None:
        return await _graded(scorer or Scorer(), problem, answer, cost, latency)
    try:
        # Code scoring runs the sandbox and math scoring may call sympy: keep both off the event loop.
        res = await asyncio.to_thread(score, problem.benchmark, answer, problem)
    except SandboxUnavailable:
        raise  # hidden tests cannot run confined: that is no wrong answer, the evaluation stops
    except Exception as exc:  # noqa: BLE001 - scorer bug: record it as errored, keep going
        return ProblemResult(problem.id, False, answer, None, cost, latency, f"score {type(exc).__name__}: {exc}",
                             True)
    if res.errored:  # the hidden tests could not give a verdict (the machine was too busy): not a wrong answer
        return ProblemResult(problem.id, False, answer, res.extracted, cost, latency, res.detail, True, True)
    return ProblemResult(problem.id, res.correct, answer, res.extracted, cost, latency, None)


async def _graded(scorer: Scorer, problem: Problem, answer: str, cost: float, latency: float) -> ProblemResult:
    """A task metric's grade as the problem's result: a metric that raised, timed out or gave no number leaves
    the problem errored (no verdict), never wrong."""
    try:
        g = await scorer.grade(problem, answer)
    except SandboxUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - a metric's failure is this problem's error, not a wrong answer
        return ProblemResult(problem.id, False, answer, None, cost, latency, f"metric {type(exc).__name__}: {exc}",
                             True)
    cost += g.cost
    grade = {"model": g.model, "reason": g.reason} if g.model else None
    if g.score is None:
        return ProblemResult(problem.id, False, answer, g.extracted, cost, latency, g.detail or "metric failed",
                             True, g.transient, None, grade)
    return ProblemResult(problem.id, g.score >= 1.0 - 1e-9, answer, g.extracted, cost, latency, None, False, False,
                         g.score, grade)


async def evaluate(runner: Runner, problems: list[Problem], *, concurrency: int = 8,
                   progress: Callable[[int, int, ProblemResult], None] | None = None,
                   cancel: threading.Event | None = None, timeout: float | None = None,
                   llm: Any = None) -> EvalReport:
    """Run `runner` on every problem (at most `concurrency` at once) and score the answers.

    cancel: once set, no new problem starts; those already running finish and the partial report comes back
    with cancelled=True. timeout: seconds per problem for the runner. Results keep the problems' order.
    llm: what a task's judge metric grades with (its judge model)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if any(needs_sandbox(p) for p in problems):
        require_sandbox()  # before any LLM call: hidden tests and metric code can only run in the sandbox
    scorer = Scorer(llm)
    group = object()  # this evaluation: its problems are one candidate's (execution.waits: paused time)
    total = len(problems)
    results: dict[int, ProblemResult] = {}
    next_index = 0
    cancelled = False
    fatal: list[BaseException] = []  # a storage failure: no new problem starts (its calls could not be kept)

    async def worker() -> None:
        nonlocal next_index, cancelled
        while next_index < total and not fatal:
            if cancel is not None and cancel.is_set():
                cancelled = True
                return
            i = next_index
            next_index += 1
            try:
                res = await _solve(runner, problems[i], timeout, scorer, group)
            except SandboxUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - _solve lets only storage failures through
                fatal.append(exc)
                return
            results[i] = res
            if progress is not None:
                try:
                    progress(len(results), total, res)
                except Exception:  # a broken progress display must not stop the run
                    log.exception("progress callback failed")

    await asyncio.gather(*(worker() for _ in range(min(concurrency, max(total, 1)))))
    if fatal:
        raise fatal[0]
    return report_of(problems[0].benchmark if problems else "", [results[i] for i in sorted(results)],
                     cancelled=cancelled or (cancel is not None and cancel.is_set() and len(results) < total))


def not_run_text(errors: int) -> str:
    """What every report puts next to a score when problems were errored: '2 not run (errored, not in the score)',
    or '' when none were. The errored problems are left out of the score and counted against --max-error-rate,
    so a reader always sees how many there were (docs/evaluation.md, "Errored rows")."""
    return f"{errors} not run (errored, not in the score)" if errors else ""


def report_of(benchmark: str, done: list[ProblemResult], cancelled: bool = False) -> EvalReport:
    """The report of these results: errored problems are counted apart and left out of the score. 0/1 scores
    get the binomial bootstrap (exact when all agree); fractional ones a percentile bootstrap of the mean."""
    values = [r.value for r in done if not r.errored]
    if all(v in (0.0, 1.0) for v in values):
        lo, hi = bootstrap_ci([v == 1.0 for v in values])
    else:
        lo, hi = mean_ci(values)
    models = sorted({str(r.grade["model"]) for r in done if r.grade and r.grade.get("model")})
    return EvalReport(benchmark=benchmark, n=len(values), score=(sum(values) / len(values)) if values else 0.0,
                      ci_low=lo, ci_high=hi, cost=sum(r.cost for r in done), results=done, cancelled=cancelled,
                      errors=len(done) - len(values), graded_by=models)
