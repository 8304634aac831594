"""Stores a server's traces off the request path: a request hands its finished trace over (a list append) and
answers; one thread writes whatever has gathered in one transaction, then sends it over OTLP when asked. The
same thread runs the server's other writes (``also``: its LLM client's replies and call-log rows), so the event
loop never writes to the workspace on a request's path.

Under load that is one transaction for a batch of requests instead of one each, and none of it on the event
loop. The writer thread is woken once per batch (by the trace that starts it, or a full batch, or a flush), not
once per trace: each wake-up took the interpreter's lock from the event loop in the middle of its requests.
Nothing handed over is lost on a clean stop: ``close`` (the server's lifespan end, the MCP stdio server's exit,
and at the latest the interpreter's exit) writes everything still waiting before it returns. A trace is in the
workspace within ``linger`` seconds of its answer (MERMAIDFLOW_TRACE_LINGER, default 0.05 s).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable

from flowcore.tracing import otel
from flowcore.workspace import traces
from flowcore.workspace.store import Workspace
from flowcore.workspace.traces import Trace

log = logging.getLogger("flowcore.serve")
LINGER_ENV = "MERMAIDFLOW_TRACE_LINGER"
DEFAULT_LINGER = 0.05  # seconds the writer waits for more traces to join a batch
BATCH = 256  # traces written in one transaction at most


def linger_from_env() -> float:
    try:
        value = float(os.environ.get(LINGER_ENV) or DEFAULT_LINGER)
    except ValueError:
        return DEFAULT_LINGER
    return value if value >= 0 else DEFAULT_LINGER


class TraceWriter:
    def __init__(self, ws: Workspace, *, linger: float | None = None) -> None:
        self.ws = ws
        self.linger = linger_from_env() if linger is None else linger
        self._cond = threading.Condition(threading.Lock())
        self._waiting: list[Trace] = []  # handed over, not yet taken by the writer
        self._flushes: list[threading.Event] = []  # set once everything handed over before them is written
        self._jobs: list[Callable[[], None]] = []  # other writes, run after each batch (``also``)
        self._nudged = False  # a job has something to write
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False

    def put(self, trace: Trace) -> None:
        """Hand ``trace`` over to be stored (and exported); never blocks on storage, never raises for it."""
        if self._closed:  # after close (a request that outlived the server's lifespan): store it now
            self._write([trace])
            return
        if self._thread is None:
            self._begin()
        with self._cond:
            self._waiting.append(trace)
            n = len(self._waiting)
            if (n == 1 and not self._nudged) or n >= BATCH:  # a batch begins (the writer sleeps until then),
                self._cond.notify()  # or it is full

    def also(self, job: Callable[[], None]) -> None:
        """Run ``job`` (another write; it logs its own failures) on the writer's thread after every batch, and
        whenever :meth:`nudge` asks."""
        self._jobs.append(job)

    def nudge(self) -> None:
        """Something for the jobs to write: a batch begins, if none is gathering (the writer wakes once)."""
        if self._closed:
            self._run_jobs()
            return
        if self._thread is None:
            self._begin()
        with self._cond:
            if not self._nudged and not self._waiting:
                self._cond.notify()
            self._nudged = True

    def flush(self) -> None:
        """Return once every trace put before this call is written (or its failure logged)."""
        thread = self._thread
        if thread is None:
            return
        done = threading.Event()
        with self._cond:
            self._flushes.append(done)
            self._cond.notify()
        while not done.wait(0.5):
            if not thread.is_alive():  # pragma: no cover - the writer never dies (it logs and goes on)
                return

    def close(self) -> None:
        """Write everything still waiting; later puts are written at once."""
        self.flush()
        self._closed = True
        self.flush()  # a put that began before _closed was set and appended after the first flush

    def _begin(self) -> None:
        with self._start:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
                thread.start()
                atexit.register(self.close)  # a daemon thread: never leave with traces waiting
                self._thread = thread

    def _run(self) -> None:
        while True:
            batch, marks = self._take()
            for i in range(0, len(batch), BATCH):
                self._write(batch[i:i + BATCH])
            self._run_jobs()
            for done in marks:
                done.set()

    def _run_jobs(self) -> None:
        for job in list(self._jobs):
            try:
                job()
            except Exception:  # noqa: BLE001 - a job logs its own; this is what it did not foresee
                log.exception("a write of the trace writer's thread failed")

    def _take(self) -> tuple[list[Trace], list[threading.Event]]:
        """The next batch: once a trace is waiting, what gathers within ``linger`` (a flush or a full batch ends
        the wait early), and the flushes asked for meanwhile."""
        with self._cond:
            while not self._waiting and not self._flushes and not self._nudged:
                self._cond.wait()
            deadline = time.monotonic() + self.linger
            while not self._flushes and len(self._waiting) < BATCH:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    break
            batch, self._waiting = self._waiting, []
            marks, self._flushes = self._flushes, []
            self._nudged = False
        return batch, marks

    def _write(self, batch: list[Trace]) -> None:
        try:
            traces.save_traces(self.ws, batch)
        except Exception:  # noqa: BLE001 - one bad trace must not cost the others theirs: one at a time
            for t in batch:
                try:
                    traces.save_trace(self.ws, t)
                except Exception:  # noqa: BLE001 - the answer stood; the missing trace is in the log
                    log.exception("could not store trace %s", t.id)
        if not otel.enabled():
            return
        for t in batch:
            try:
                otel.export(t)
            except Exception:  # noqa: BLE001
                log.exception("could not export trace %s over OTLP", t.id)
