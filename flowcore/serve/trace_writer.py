"""Stores a server's traces off the request path: a request hands its finished trace over (a queue put) and
answers; one thread writes whatever has queued up in one transaction, then sends it over OTLP when asked.

Under load that is one transaction for a batch of requests instead of one each, and none of it on the event
loop. Nothing queued is lost on a clean stop: ``close`` (the server's lifespan end, the MCP stdio server's exit,
and at the latest the interpreter's exit) writes everything still queued before it returns. A trace is in the
workspace within ``linger`` seconds of its answer (MERMAIDFLOW_TRACE_LINGER, default 0.05 s).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time

from flowcore.tracing import otel
from flowcore.workspace import traces
from flowcore.workspace.store import Workspace
from flowcore.workspace.traces import Trace

log = logging.getLogger("flowcore.serve")
LINGER_ENV = "MERMAIDFLOW_TRACE_LINGER"
DEFAULT_LINGER = 0.05  # seconds the writer waits for more traces to join a batch
BATCH = 256  # traces written in one transaction at most
_FLUSH = object()  # a queue marker: write what came before it now


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
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._closed = False

    def put(self, trace: Trace) -> None:
        """Queue ``trace`` to be stored (and exported); never blocks, never raises for storage."""
        if self._closed:  # after close (a request that outlived the server's lifespan): store it now
            self._write([trace])
            return
        self._ensure_thread()
        self._q.put(trace)

    def flush(self) -> None:
        """Return once every trace put before this call is written (or its failure logged)."""
        if self._thread is None:
            return
        done = threading.Event()
        self._q.put((_FLUSH, done))
        while not done.wait(0.5):
            if not self._thread.is_alive():  # pragma: no cover - the writer never dies (it logs and goes on)
                return

    def close(self) -> None:
        """Write everything still queued; later puts are written at once."""
        self.flush()
        self._closed = True

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
                    self._thread.start()
                    atexit.register(self.close)  # a daemon thread: never leave with traces queued

    def _run(self) -> None:
        while True:
            batch, marks = self._collect()
            if batch:
                self._write(batch)
            for done in marks:
                done.set()

    def _collect(self) -> tuple[list[Trace], list[threading.Event]]:
        """The next batch: what is queued, plus what arrives within ``linger``; a flush marker ends it early."""
        batch: list[Trace] = []
        marks: list[threading.Event] = []
        item = self._q.get()
        deadline = time.monotonic() + self.linger
        while True:
            if isinstance(item, tuple) and item[0] is _FLUSH:
                marks.append(item[1])
                return batch, marks
            batch.append(item)
            if len(batch) >= BATCH:
                return batch, marks
            try:
                item = self._q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
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
        for t in batch:
            try:
                otel.export(t)
            except Exception:  # noqa: BLE001
                log.exception("could not export trace %s over OTLP", t.id)
