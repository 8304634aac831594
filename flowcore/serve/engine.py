"""What a served call does: resolve ``NAME`` / ``NAME@vN`` to a published version, run it on the problem with
the workspace's executor settings through the runtime's own ``execute`` (flowcore.tracing.run), hand the trace
to the writer (flowcore.serve.trace_writer: stored, and sent over OTLP when asked, off the request path), and
turn every failure into an OpenAI-shaped error with its HTTP status. ``close`` writes the traces still queued.

One root LLM client per engine: requests share its connections, cache and concurrency limit (the workspace's
``concurrency`` caps the LLM calls in flight across all requests), each with its own child for its usage; on a
team server (``fair_share``) no one key owner's calls hold all of those slots.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowcore import catalogue as cat
from flowcore.execution.runtime import NodeError, Plan, WorkflowInvalid, prepare
from flowcore.execution.sandbox import SandboxUnavailable
from flowcore.llm.client import LLM, BudgetExceeded, LLMError, LLMSettings, NotConfigured
from flowcore.mermaid.reader import WorkflowSyntaxError, parse
from flowcore.serve.limits import owner_share
from flowcore.serve.trace_writer import TraceWriter
from flowcore.tracing.run import TracedRun, new_trace_id, traced_run
from flowcore.workspace import keys, published
from flowcore.workspace.settings import effective_llm_settings
from flowcore.workspace.store import Workspace

log = logging.getLogger("flowcore.serve")
SETTINGS_TTL = 2.0  # seconds a served call may use settings read earlier (a Settings save shows within this)
ROOT_CALLS_KEPT = 1000  # call records the server's root client keeps in memory (each request keeps its own)
DEFAULT_DEADLINE = 300.0  # seconds a served workflow may run (MERMAIDFLOW_SERVE_TIMEOUT, `serve --timeout`)


class ServeError(Exception):
    """An error a client sees: HTTP status and OpenAI's {"error": {"message", "type", "code"}}."""

    def __init__(self, status: int, message: str, type_: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type_, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}


@dataclass
class Answer:
    model: str  # as asked
    version: str  # NAME@vN that answered
    text: str
    cost: float
    calls: int
    prompt_tokens: int
    completion_tokens: int
    trace_id: str

    def mermaidflow(self) -> dict:
        return {"version": self.version, "cost": self.cost, "calls": self.calls, "trace_id": self.trace_id}


def owner_salt(owner: str) -> str:
    """The cache salt of what ``owner`` makes the server's endpoint answer (served calls, MCP evaluations and the
    evolution runs an MCP caller starts alike): '' for the operator ('local', the workspace's own cache)."""
    return "" if owner == published.LOCAL else f"owner={owner}|"


def kind_of(task: str) -> str | None:
    """The checker's task kind for a published task name (a saved task's name is kept as its string)."""
    return task if task in cat.TASKS else None


# The kinds of failure flowcore.llm.client's messages name ("LLM call failed (executor, model 'm' at URL): HTTP 503:
# <the endpoint's reply>"), in what a key holder is told; the first one in a message wins.
_KINDS = ((re.compile(r"LLM call refused \("), "refused the prompt"),
          (re.compile(r"LLM call not sent \("), "the prompt does not fit the model's context"),
          (re.compile(r"\): HTTP (\d{3})\b"), "HTTP {0}"),
          (re.compile(r"\): timed out after\b"), "timed out"),
          (re.compile(r"\): cannot connect\b"), "could not be reached"),
          (re.compile(r"\): malformed reply\b"), "sent a malformed reply"))


def endpoint_failed(detail: str) -> str:
    """What a key holder is told of an LLM endpoint's failure: its kind ("the workflow's LLM endpoint failed: HTTP
    503"), never the endpoint's address (an internal host) nor its reply (a provider's message can quote the
    server's key): those stay in the server's log and the run's trace, for the operator."""
    found = [(m.start(), kind.format(*m.groups())) for rx, kind in _KINDS if (m := rx.search(detail))]
    return f"the workflow's LLM endpoint failed: {min(found)[1]}" if found else "the workflow's LLM endpoint failed"


def _cause(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        if isinstance(node, kinds):
            return node
        seen.add(id(node))
        node = node.__cause__ or node.__context__
    return None


def to_serve_error(exc: BaseException, version: str) -> ServeError:
    """The client-facing error for a failed run (never a traceback; an endpoint's failure is named by its kind,
    without the endpoint's address or reply: :func:`endpoint_failed`)."""
    if isinstance(exc, ServeError):
        return exc
    if (c := _cause(exc, (BudgetExceeded,))) is not None:
        return ServeError(429, f"{version}: {c}", "insufficient_quota", "budget_exceeded")
    if (c := _cause(exc, (NotConfigured,))) is not None:
        return ServeError(503, f"{version}: {c}", "server_error", "executor_not_configured")
    if (c := _cause(exc, (SandboxUnavailable,))) is not None:
        return ServeError(503, f"{version}: the sandbox is unavailable here ({c})", "server_error",
                          "sandbox_unavailable")
    if (c := _cause(exc, (LLMError,))) is not None:
        # the operator's log has the endpoint's address and reply; the key holder only the kind of failure
        log.warning("%s: the executor endpoint failed: %s", version, exc)
        return ServeError(502, f"{version}: {endpoint_failed(str(c))}", "upstream_error",
                          "executor_endpoint_failed")
    if isinstance(exc, NodeError):
        return ServeError(500, f"{version}: {exc}", "server_error", "workflow_failed")
    if isinstance(exc, (WorkflowInvalid, WorkflowSyntaxError)):
        return ServeError(500, f"{version}: the published workflow no longer passes the checker: {exc}",
                          "server_error", "workflow_invalid")
    log.exception("unexpected error serving %s", version, exc_info=exc)
    return ServeError(500, f"{version}: internal error ({type(exc).__name__}); see the server's log",
                      "server_error", "internal_error")


class Engine:
    """Serves a workspace's published workflows. Safe to use from one event loop (the server's)."""

    def __init__(self, ws: Workspace, *, deadline: float | None = None, settings: LLMSettings | None = None,
                 saved_ok: Callable[[str | None], bool] | None = None) -> None:
        self.ws = ws
        # Whose saved settings count (flowcore.workspace.settings.effective_llm_settings): in a team deployment
        # only an admin's, as on the pages (the command line passes flowcore.ui.access's rule), so the server's
        # key never goes to an endpoint a member saved. None: every saved setting (one person's loopback tool).
        self._saved_ok = saved_ok
        env = (os.environ.get("MERMAIDFLOW_SERVE_TIMEOUT") or "").strip()
        self.deadline = deadline or (float(env) if env else DEFAULT_DEADLINE)
        self._fixed = settings
        self._plans: dict[tuple[str, int], Plan] = {}
        self._versions: dict[tuple[str, int], published.Published] = {}  # immutable, so kept
        self._latest_of: dict[str, int] = {}  # NAME -> its latest version, valid under _latest_token
        self._latest_token: object = None
        self._llm: LLM | None = None
        self._read = 0.0
        self._lock = threading.Lock()
        self.traces = TraceWriter(ws)
        self._roots: list[LLM] = []  # root clients whose replies and call-log rows the writer's thread stores
        self.traces.also(self._write_calls)
        self._owner_slots: int | None = None
        self._fair = False
        self._share_set: int | None = None

    def fair_share(self, owner_slots: int | None) -> None:
        """Share the LLM slots fairly between key owners (a team server): one owner's calls hold at most
        ``limits.owner_share`` of them, freed slots go to the waiting owners in turn (flowcore.llm.slots)."""
        self._fair, self._owner_slots = True, owner_slots
        with self._lock:
            if self._llm is not None:
                self._apply_share(self._llm, force=True)

    def _apply_share(self, llm: LLM, force: bool = False) -> None:
        """Set ``llm``'s share per owner. Unless the operator set it, the share caps an owner only while two or
        more owners hold active keys: a one-tenant server has no one to keep slots for, and its lone owner gets
        every slot (re-counted at each settings re-read, so a second owner's key takes effect within seconds)."""
        share = owner_share(llm.settings.concurrency, self._owner_slots)
        if self._owner_slots is None and share < llm.settings.concurrency:
            try:
                owners = {k.owner for k in keys.list_keys(self.ws) if k.active}
            except Exception as exc:  # noqa: BLE001 - cannot count: keep the team's cap, the safe side
                log.warning("could not count key owners for the LLM slot share: %s", exc)
                owners = {"?", "??"}
            if len(owners) < 2:
                share = llm.settings.concurrency
        if force or share != self._share_set:
            llm.share_slots(share)
            self._share_set = share

    def close(self) -> None:
        """Write the traces still queued (the server's lifespan end, the MCP stdio server's exit)."""
        self.traces.close()

    def _write_calls(self) -> None:
        """On the writer's thread: store the replies and call-log rows of every root client (an old one, from
        before a settings change, until it has nothing left)."""
        for root in list(self._roots):
            failed = root.write_pending()
            if failed is not None:
                log.error("could not store LLM call records (kept in memory, tried again with the next batch): "
                          "%s", failed)
            elif root is not self._llm and not root.unwritten:
                self._roots.remove(root)

    def on_loop_thread(self) -> None:
        """Called from the thread that runs the server's event loop, before it answers: that thread's workspace
        connection (which logs every LLM call) leaves checkpoints of the write-ahead log to the trace writer's
        (flowcore.workspace.store.Workspace.defer_checkpoints)."""
        try:
            self.ws.defer_checkpoints()
        except Exception as exc:  # noqa: BLE001 - a workspace that cannot be written says so on the first request
            log.warning("could not defer checkpoints of %s: %s", self.ws.path, exc)

    def llm(self) -> LLM:
        """The root client for the workspace's current executor settings: re-read at most every SETTINGS_TTL
        seconds, and remade when the Settings page changed them."""
        with self._lock:
            now = time.monotonic()
            if self._llm is None or now - self._read >= SETTINGS_TTL:
                settings = self._fixed or effective_llm_settings(self.ws, saved_ok=self._saved_ok)[0]
                self._read = now
                if self._llm is None or self._llm.settings != settings:
                    old, self._llm = self._llm, LLM(settings, self.ws, run_id="serve")
                    # The process's spending goes on across a settings change: its budget counts everything
                    # paid since the server started (the runs an MCP tool started too, which count here).
                    self._llm.usage = old.usage if old is not None else self._llm.usage
                    # Each call's record also lands in the root's list; a server lives long, so keep only the
                    # latest (traces keep each request's own calls).
                    self._llm.calls = collections.deque(maxlen=ROOT_CALLS_KEPT)  # type: ignore[assignment]
                    # Each call's reply and log row are stored by the trace writer's thread (with the next batch
                    # of traces), not by the event loop in the middle of every other request.
                    self._llm._shared.persist_later = self.traces.nudge
                    self._roots.append(self._llm)
                    if self._fair:
                        self._apply_share(self._llm, force=True)
                elif self._fair:
                    self._apply_share(self._llm)
            return self._llm

    def for_owner(self, owner: str) -> LLM:
        """A request's client: the cache is salted per key owner, so that one owner's call is never answered from
        (and its cost of 0 never reveals) another's; the operator ('local') shares the workspace's cache."""
        c = self.llm().child()
        c.salt, c.tenant = owner_salt(owner), owner
        return c

    def resolve(self, model: Any) -> published.Published:
        if not isinstance(model, str) or not model.strip():
            raise ServeError(400, "'model' must name a published workflow (NAME or NAME@vN); GET /v1/models "
                             "lists them", "invalid_request_error", "invalid_model")
        try:
            name, version = published.parse_model(model)
            if version is None:
                version = self._latest(name)
                if version is None:
                    raise published.PublishError(f"the model {model!r} does not exist: no published workflow has "
                                                 "that name")
            p = self._versions.get((name, version))
            if p is None:
                p = published.resolve(self.ws, f"{name}@v{version}")
                with self._lock:
                    self._versions[(name, version)] = p
            return p
        except published.PublishError as exc:
            raise ServeError(404, f"{exc}; GET /v1/models lists the published workflows",
                             "invalid_request_error", "model_not_found") from None

    def _latest(self, name: str) -> int | None:
        """The latest version of ``name``: remembered while the workspace is unchanged (its change token, and no
        publish from this process), else read from the index (the text of a version, up to 1 MB, is read once
        per version: versions never change)."""
        token = self.ws.change_token()
        if token is None:
            return published.latest_version(self.ws, name)
        token = (token, published.published_here())
        with self._lock:
            if token != self._latest_token:
                self._latest_of.clear()
                self._latest_token = token
            version = self._latest_of.get(name)
        if version is None:
            version = published.latest_version(self.ws, name)
            if version is not None:
                with self._lock:
                    if self._latest_token == token:
                        self._latest_of[name] = version
        return version

    def plan(self, p: published.Published) -> Plan:
        """A version's execution plan, checked once (a version never changes)."""
        key = (p.name, p.version)
        plan = self._plans.get(key)
        if plan is None:
            try:
                plan = prepare(parse(p.text), kind_of(p.task))
            except (WorkflowInvalid, WorkflowSyntaxError) as exc:
                raise to_serve_error(exc, p.model_id) from None
            self._plans[key] = plan
        return plan

    async def run(self, model: str, problem: str, *, entry_point: str | None = None, source: str = "api",
                  created_by: str = "local", deadline: float | None = None,
                  version: published.Published | None = None) -> Answer:
        """Run the published workflow ``model`` (``version``: already resolved) on ``problem``. Raises ServeError;
        a cancelled call (the client went away) cancels the workflow's LLM calls and stores a 'cancelled' trace."""
        p = version or self.resolve(model)
        return await self._answer(self.plan(p), kind_of(p.task), problem, model, p.model_id, p.name, p.version,
                                  entry_point=entry_point, source=source, created_by=created_by, deadline=deadline)

    async def run_text(self, text: str, task: str | None, problem: str, *, entry_point: str | None = None,
                       source: str = "mcp", created_by: str = "local", deadline: float | None = None) -> Answer:
        """Run a workflow's text that is not published (MCP's run tool); a bad text is a 400."""
        try:  # off the event loop: a large text took seconds to read, and every other client waited (/health 7.8 s)
            plan = await asyncio.to_thread(lambda: prepare(parse(text), task))
        except (WorkflowInvalid, WorkflowSyntaxError) as exc:
            raise ServeError(400, str(exc), "invalid_request_error", "workflow_invalid") from None
        return await self._answer(plan, task, problem, "workflow", "workflow", None, None, entry_point=entry_point,
                                  source=source, created_by=created_by, deadline=deadline)

    async def _answer(self, plan: Plan, task: str | None, problem: str, model: str, label: str, name: str | None,
                      version: int | None, *, entry_point: str | None, source: str, created_by: str,
                      deadline: float | None) -> Answer:
        if "\x00" in problem:  # valid JSON, but PostgreSQL text cannot hold it: the trace would be lost
            raise ServeError(400, "the problem contains a NUL character (\\u0000), which is not accepted",
                             "invalid_request_error", "invalid_messages")
        llm = self.for_owner(created_by)
        tid = new_trace_id()
        llm.run_id = f"serve:{tid}"
        limit = deadline or self.deadline
        me = asyncio.current_task()
        # The workflow runs in the request's own task (a task of its own, and asyncio.wait's future and callbacks
        # around it, cost every request ~50 us of the event loop): the deadline cancels it through
        # asyncio.timeout, and traced_run answers any cancellation with the trace of what ran, never raising it.
        async with asyncio.timeout(limit) as clock:
            run = await traced_run(plan.workflow, problem, llm=llm, task=task, entry_point=entry_point, source=source,
                                   created_by=created_by, name=name, version=version, trace_id=tid, plan=plan)
        timed_out = clock.expired()
        if timed_out:  # past the deadline: its calls were cancelled; the trace keeps what it did
            run.trace.status, run.trace.error = "timeout", f"past the deadline of {limit:g} s"
        self._keep(run)
        if not timed_out and isinstance(run.error, asyncio.CancelledError) and me is not None and me.cancelling():
            raise asyncio.CancelledError  # the caller went away (or the server stops): its trace is kept above
        if timed_out:
            raise ServeError(504, f"{label}: the workflow ran past its deadline of {limit:g} s; its LLM calls were "
                             "cancelled", "timeout", "deadline_exceeded")
        if run.error is not None:
            raise to_serve_error(run.error, label)
        assert run.result is not None
        return Answer(model, label, run.result.answer, run.trace.cost, run.trace.calls, run.trace.prompt_tokens,
                      run.trace.completion_tokens, tid)

    def _keep(self, run: TracedRun) -> None:
        """Queue the trace to be stored and exported (a storage failure is logged there, never turned into a
        wrong answer)."""
        self.traces.put(run.trace)

