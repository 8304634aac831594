"""MCP tools over the official SDK (``mcp``'s MCPServer): a coding agent checks, formats, runs and evaluates
workflows, lists and publishes versions, starts an evolution and reads its progress.

The same server object is served over streamable HTTP at /mcp (flowcore.serve.app, behind the key guard) and
over stdio (``python -m flowcore mcp``). Every tool calls the library functions the command line calls; a bad
input is a tool error naming what is wrong (``ToolError``), never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from flowcore import catalogue as cat
from flowcore.checker.check import check, is_valid
from flowcore.mermaid.reader import WorkflowSyntaxError, parse, to_mermaid
from flowcore.serve.engine import Engine, ServeError, kind_of, owner_salt
from flowcore.serve.limits import ENV, Limits, screen, too_big
from flowcore.serve.publish import describe, publish_workflow
from flowcore.workspace import jobs, published
from flowcore.workspace.keys import ApiKey, KeyProblem, get_key

# What one evolve_start may ask for (the command line and the pages, run by the operator, have no such bound).
# How many runs, evaluations and publishes a caller may set going: flowcore.serve.limits (settings).
MAX_ROUNDS, MAX_CANDIDATES, MAX_LIMIT = 30, 8, 500
MAX_TEXT = 1 << 20  # characters of workflow text a tool reads: the HTTP body cap (stdio has none of its own)
T = TypeVar("T")
REVOKED_POLL_S = 1.0  # how often a run started with a key looks whether the key was revoked

INSTRUCTIONS = ("MermaidFlow Studio: workflows are Mermaid flowcharts of typed LLM operators. Check and format "
                "them, run one on a problem, evaluate it on a benchmark, publish it as NAME@vN, list the published "
                "versions, start an evolution run and read its progress.")


def _state(ctx: Context | None) -> dict:
    """What the guard put in the HTTP request's scope (flowcore.serve.guard), or {}: no request (stdio)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # no request context (stdio, a direct call)
        return {}
    state = getattr(request, "scope", {}).get("state") if request is not None else None
    return state if isinstance(state, dict) else {}


def _caller(ctx: Context | None, engine: Engine) -> ApiKey | None:
    """The active key the guard verified for this request, or None: no key (stdio, keyless loopback). Read from
    the guard's scope state only: re-parsing the headers let a second Authorization header pick another
    identity than the one the guard checked."""
    kid = _state(ctx).get("key_id")
    if not kid:
        return None
    try:
        rec = get_key(engine.ws, kid)
    except KeyProblem:
        return None
    return rec if rec.active else None


def _owner(ctx: Context | None, engine: Engine) -> str:
    """The caller: the owner of the key the guard verified, else 'local' (stdio, keyless loopback)."""
    state = _state(ctx)
    if state.get("key_id"):
        rec = _caller(ctx, engine)
        if rec is None:  # revoked since the guard let the request in
            raise ToolError("the API key of this request is no longer active")
        return rec.owner
    return str(state.get("owner") or "local")


def _stop_when_revoked(engine: Engine, key_id: str, job: jobs.Job) -> None:
    """A run started with a key stops once the key is revoked: revoking ends what the key set going too (before,
    the run kept spending the server's endpoint for all its rounds)."""
    def watch() -> None:
        while not job.wait(REVOKED_POLL_S):
            try:
                active = get_key(engine.ws, key_id).active
            except (KeyProblem, LookupError):
                active = False
            if not active:
                job.cancel()
                return

    threading.Thread(target=watch, name=f"revoke-watch-{key_id}", daemon=True).start()


def _cap(text: str | None, what: str, limits: Limits) -> bool:
    """A submitted text over the HTTP body cap, or whose quick count of nodes and edges is far over the limits,
    is refused before it is read (stdio has no body cap; a 50,000-node text cost the reader and the checker
    seconds of the server's CPU). Returns whether it must still be counted exactly (:func:`_count`)."""
    if text is None:
        return False
    if len(text) > MAX_TEXT:
        raise ToolError(f"{what} is {len(text)} characters; at most {MAX_TEXT} are accepted")
    refusal, need = screen(text, limits)
    if refusal is not None:
        raise ToolError(f"{what}: {refusal}")
    return need


def _count(text: str, what: str, limits: Limits) -> None:
    """The reader's own count of a text the quick count could not clear (at most SLACK times the limits' worth of
    statements, so this is quick too); a text it cannot read is left to the tool's own reading to report."""
    try:
        w = parse(text)
    except WorkflowSyntaxError:
        return
    refusal = too_big(len(w.nodes), len(w.edges), limits, exact=True)
    if refusal is not None:
        raise ToolError(f"{what}: {refusal}")


def _admit(text: str | None, what: str, limits: Limits) -> None:
    """Both steps, for the plain tools (the SDK runs them in a worker thread)."""
    if _cap(text, what, limits):
        _count(text or "", what, limits)


async def _admit_async(text: str | None, what: str, limits: Limits) -> None:
    """Both steps, for the async tools: the exact count off the event loop."""
    if _cap(text, what, limits):
        await asyncio.to_thread(_count, text or "", what, limits)


class _Slots:
    """Calls of one kind going at once, per owner and on the whole server: one key holder cannot take them all."""

    def __init__(self, what: str, per_owner: int, total: int, per_owner_env: str, total_env: str) -> None:
        self.what, self.per_owner, self.total = what, per_owner, total
        self.envs = per_owner_env, total_env
        self.going: dict[str, int] = {}
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, owner: str) -> Iterator[None]:
        with self.lock:
            mine, all_ = self.going.get(owner, 0), sum(self.going.values())
            if mine >= self.per_owner:
                raise ToolError(f"{owner} already has {mine} {self.what} going on this server; at most "
                                f"{self.per_owner} at a time per owner ({self.envs[0]}): wait for one to finish")
            if all_ >= self.total:
                raise ToolError(f"{all_} {self.what} are going on this server; at most {self.total} at a time "
                                f"({self.envs[1]}): try again when one has finished")
            self.going[owner] = mine + 1
        try:
            yield
        finally:
            with self.lock:
                left = self.going.get(owner, 1) - 1
                if left > 0:
                    self.going[owner] = left
                else:
                    self.going.pop(owner, None)


async def _while_here(ctx: Context | None, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` while the HTTP client that asked is still there: once it hangs up (flowcore.serve.app sets
    ``gone``), the work is cancelled and with it its LLM calls (before, a dropped client's evaluation went on
    spending for all its problems). Over stdio, plainly awaited."""
    gone = _state(ctx).get("gone")
    task = asyncio.ensure_future(work)
    if not isinstance(gone, asyncio.Event):
        return await task
    waiter = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ToolError("the client went away: the call was cancelled")
    return task.result()


def _task(task: str | None) -> str | None:
    if task is not None and task not in cat.TASKS:
        raise ToolError(f"task must be one of {', '.join(cat.TASKS)}, got {task!r}")
    return task


def build_mcp(engine: Engine, limits: Limits | None = None) -> MCPServer:
    server = MCPServer("mermaidflow", instructions=INSTRUCTIONS, log_level="WARNING")
    lim = limits or Limits.from_env()
    evaluating = _Slots("evaluations", lim.evals_per_owner, lim.evals, ENV["evals_per_owner"], ENV["evals"])
    publishing = threading.Lock()  # a publish's count of the owner's last hour and its insert are one step

    def owner(ctx: Context | None) -> str:
        return _owner(ctx, engine)

    @server.tool()
    def check_workflow(workflow: str, task: str | None = None) -> dict:
        """Check a workflow's Mermaid text (task: math or code). Returns {valid, diagnostics: [{code, severity,
        message, line, column, node}]}."""
        _admit(workflow, "workflow", lim)
        diags = check(workflow, _task(task))
        return {"valid": is_valid(diags), "diagnostics": [d.to_dict() for d in diags]}

    @server.tool()
    def format_workflow(workflow: str) -> str:
        """The canonical text of a workflow (as `python -m flowcore fmt` prints it)."""
        _admit(workflow, "workflow", lim)
        try:
            return to_mermaid(parse(workflow))
        except WorkflowSyntaxError as exc:
            raise ToolError("; ".join(str(d) for d in exc.diagnostics)) from None

    @server.tool()
    async def run_workflow(problem: str, model: str | None = None, workflow: str | None = None,
                           task: str | None = None, entry_point: str | None = None,
                           ctx: Context | None = None) -> dict:
        """Run a published workflow (model: NAME or NAME@vN) or a workflow's text on one problem. Returns
        {answer, cost, calls, version, trace_id}; the run's trace is stored in the workspace."""
        who = owner(ctx)
        if (model is None) == (workflow is None):
            raise ToolError("give either model (a published NAME or NAME@vN) or workflow (Mermaid text)")
        await _admit_async(workflow, "workflow", lim)
        try:
            if model is not None:
                a = await _while_here(ctx, engine.run(model, problem, entry_point=entry_point, source="mcp",
                                                      created_by=who))
            else:
                a = await _while_here(ctx, engine.run_text(workflow or "", _task(task), problem,
                                                           entry_point=entry_point, source="mcp", created_by=who))
        except ServeError as exc:
            raise ToolError(exc.message) from None
        return {"answer": a.text, "cost": a.cost, "calls": a.calls, "version": a.version, "trace_id": a.trace_id}

    @server.tool()
    async def evaluate_workflow(benchmark: str, model: str | None = None, workflow: str | None = None,
                                split: str = "validation", limit: int = 5, ctx: Context | None = None) -> dict:
        """Evaluate a published workflow (model) or a workflow's text on a benchmark (gsm8k, math, humaneval,
        mbpp), split validation or test, the first `limit` problems. Returns {score, n, errors, cost, ci}."""
        if split not in ("validation", "test") or not 1 <= limit <= 500:
            raise ToolError("split must be validation or test, and limit between 1 and 500")
        await _admit_async(workflow, "workflow", lim)
        # the first call's imports and the saved tasks' read, off the event loop (others' requests never wait)
        evaluate, task_of, load, known = await asyncio.to_thread(_evaluation, engine, benchmark)
        if not known:  # built in, or a task saved in the served workspace
            raise ToolError(f"benchmark must be one of {', '.join(task_of)} or a task saved in the workspace, "
                            f"got {benchmark!r}")
        text = _text_of(engine, model, workflow)
        who = owner(ctx)
        llm = engine.for_owner(who)
        try:
            with evaluating.hold(who):  # evaluations at once, per owner and in all: one caller cannot take them all
                w = await asyncio.to_thread(parse, text)  # off the event loop (a large text takes seconds)
                problems = load(benchmark, split, limit=limit)
                async with asyncio.timeout(engine.deadline):  # the served deadline, as a chat request's
                    report = await _while_here(ctx, evaluate(w, benchmark, problems, llm=llm, concurrency=4))
        except TimeoutError:
            raise ToolError(f"the evaluation ran past the server's deadline of {engine.deadline:g} s; its LLM "
                            "calls were cancelled (ask for fewer problems)") from None
        except (WorkflowSyntaxError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        out = report.to_json()
        out.pop("results")
        return out

    @server.tool()
    def list_versions(name: str | None = None) -> list[dict]:
        """Published versions (of one name, or all), newest first within a name: model id, who, when, from which
        run and round, note, validation and test scores."""
        return [describe(p) for p in published.list_published(engine.ws, name, text=False)]

    @server.tool()
    def publish(workflow: str, task: str, name: str, note: str | None = None, ctx: Context | None = None) -> dict:
        """Publish a workflow's text as the next immutable version NAME@vN (checked first). Bounded per owner:
        a version's size, and how many an owner publishes an hour."""
        _admit(workflow, "workflow", lim)
        if isinstance(workflow, str) and len(workflow) > lim.publish_chars:
            raise ToolError(f"workflow is {len(workflow):,} characters; a published version holds at most "
                            f"{lim.publish_chars:,} ({ENV['publish_chars']})")
        who = owner(ctx)
        with publishing:
            hour = published.count_since(engine.ws, who, time.time() - 3600)
            if hour >= lim.publish_per_hour:
                raise ToolError(f"{who} published {hour} versions in the last hour; at most {lim.publish_per_hour} "
                                f"an hour ({ENV['publish_per_hour']}): try again later")
            try:
                p = publish_workflow(engine.ws, name, workflow, task, created_by=who, note=note)
            except ValueError as exc:
                raise ToolError(str(exc)) from None
        return describe(p)

    started: list[tuple[str, jobs.Job]] = []  # (owner, job) this server's tool started: a caller cannot pile them up
    starting = threading.Lock()

    @server.tool()
    def evolve_start(benchmark: str, rounds: int = 3, candidates: int = 2, workflow: str | None = None,
                     limit: int = 5, mode: str = "programmatic", ctx: Context | None = None) -> dict:
        """Start an evolution run in the background (mode programmatic or llm; workflow: the seed's text, else
        the benchmark's seed; at most 30 rounds of 8 candidates on at most 500 problems, a few runs at a time
        per owner and on the server, all spending from the server's budget). Returns {run_id}; read its
        progress with evolve_progress."""
        _evolve_bounds(rounds, candidates, limit)
        _admit(workflow, "workflow", lim)  # before the imports below: a refusal costs nothing
        from flowcore.evolution.loop import EvolutionConfig
        from flowcore.evolution.session import start_run

        cfg = EvolutionConfig(benchmark=benchmark, rounds=rounds, candidates=candidates, workflow=workflow,
                              limit=limit, mode=mode)
        caller = _caller(ctx, engine)
        who = _owner(ctx, engine)
        # The SDK runs this plain function in a worker thread per call: the count of live runs and the start
        # are one step under the lock (before, 8 of 8 concurrent calls all saw fewer than 2 and started).
        with starting:
            live = [(o, j) for o, j in started if j.snapshot().active]
            mine = [j for o, j in live if o == who]
            if len(mine) >= lim.runs_per_owner:
                raise ToolError(f"{len(mine)} evolution runs {who} started here are still going (runs "
                                f"{', '.join(str(j.meta.get('run_id')) for j in mine)}); at most "
                                f"{lim.runs_per_owner} at a time per owner ({ENV['runs_per_owner']}): wait for "
                                "one to finish (evolve_progress)")
            if len(live) >= lim.runs:
                raise ToolError(f"{len(live)} evolution runs started here are still going; at most {lim.runs} at "
                                f"a time on this server ({ENV['runs']}): try again when one has finished")
            try:
                cfg.validate()
                root = engine.llm()  # the run spends from the server's budget, never from a fresh one of its own
                # and caches under its owner, as the owner's served calls do: never another owner's answers
                job = start_run(engine.ws, root.settings, cfg, created_by=who, spend_under=root,
                                cache_salt=owner_salt(who))
            except ValueError as exc:
                raise ToolError(str(exc)) from None
            started[:] = [*live, (who, job)]
        if caller is not None:
            _stop_when_revoked(engine, caller.id, job)
        return {"run_id": job.meta.get("run_id"), "job": job.id}

    @server.tool()
    def evolve_progress(run_id: int, ctx: Context | None = None) -> dict:
        """An evolution run's status and rounds so far: {status, rounds: [{round, status, score, operator}],
        best}. With a key, only the runs its owner started."""
        from flowcore.evolution.history import History
        from flowcore.evolution.session import run_status

        h = History(engine.ws)
        keyed, who = bool(_state(ctx).get("key_id")), _owner(ctx, engine)
        try:
            info = h.run(run_id)
        except (KeyError, ValueError, LookupError) as exc:
            info, why = None, str(exc)
        if keyed and (info is None or info.created_by != who):
            # another owner's run (or an app user's) reads as missing: its scores and progress are theirs
            raise ToolError(f"no evolution run {run_id} started by {who}")
        if info is None:
            raise ToolError(f"no evolution run {run_id}: {why}")
        rows = h.summaries(run_id)
        scores = [r["score"] for r in rows if r.get("score") is not None]
        return {"run_id": run_id, "status": run_status(info, engine.ws), "benchmark": info.benchmark,
                "planned": int(info.config.get("rounds", 0)) + 1,
                "rounds": [{"round": r["round"], "status": r["status"], "score": r["score"],
                            "operator": r["operator"]} for r in rows],
                "best": max(scores) if scores else None}

    return server


def _evolve_bounds(rounds: object, candidates: object, limit: object) -> None:
    """A run a remote caller starts keeps going after the call, spending the server's endpoint: bounded."""
    for name, value, low, top in (("rounds", rounds, 0, MAX_ROUNDS), ("candidates", candidates, 1, MAX_CANDIDATES),
                                  ("limit", limit, 1, MAX_LIMIT)):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= top:
            raise ToolError(f"{name} must be a whole number from {low} to {top}, got {value!r}")


def _evaluation(engine: Engine, benchmark: str) -> tuple[Any, Any, Any, bool]:
    """(evaluate_workflow, the built-in benchmarks, load, whether ``benchmark`` is one or a saved task)."""
    from flowcore.evaluation.evaluate import evaluate_workflow
    from flowcore.tasks import TASK_OF, kind_of, load

    return evaluate_workflow, TASK_OF, load, kind_of(benchmark, engine.ws) is not None


def _text_of(engine: Engine, model: str | None, workflow: str | None) -> str:
    if (model is None) == (workflow is None):
        raise ToolError("give either model (a published NAME or NAME@vN) or workflow (Mermaid text)")
    if workflow is not None:
        return workflow
    try:
        return engine.resolve(model).text
    except ServeError as exc:
        raise ToolError(exc.message) from None


async def serve_stdio(engine: Engine, limits: Limits | None = None) -> None:
    await build_mcp(engine, limits).run_stdio_async()


def run_stdio(engine: Engine, limits: Limits | None = None) -> None:
    try:
        asyncio.run(serve_stdio(engine, limits))
    finally:
        engine.close()


__all__ = ["build_mcp", "kind_of", "run_stdio"]
