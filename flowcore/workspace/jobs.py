"""Background jobs for the pages: a long evaluation (or evolution) runs in a daemon thread while the page
polls a snapshot of its progress, and can cancel it.

A Streamlit rerun re-executes the page script but not this module, so jobs live in a process-wide registry
keyed by id: the page keeps only the id (in session state or the workspace) and finds its job again.
Failures are kept as one-line messages for the page; the traceback goes to the server log only.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Job", "JobCancelled", "JobContext", "JobSnapshot", "error_message", "find", "get", "jobs"]

log = logging.getLogger(__name__)

STATUSES = ("queued", "running", "done", "failed", "cancelled")
FINISHED = ("done", "failed", "cancelled")
MAX_EVENTS = 200  # recent log/progress events kept per job
MAX_FINISHED = 50  # finished jobs kept in the registry (older ones are forgotten)


class JobCancelled(Exception):
    """Raised by a target (or ``JobContext.check``) to stop early because the job was cancelled."""


@dataclass(frozen=True)
class JobSnapshot:
    """A consistent copy of a job's state, safe to read from another thread."""

    id: str
    name: str
    status: str
    done: int
    total: int
    message: str
    data: Any
    events: list[tuple[float, str]]  # (unix time, text), oldest first
    error: str | None
    started: float | None
    finished: float | None
    meta: dict = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return min(max(self.done / self.total, 0.0), 1.0) if self.total > 0 else 0.0

    @property
    def finished_ok(self) -> bool:
        return self.status == "done"

    @property
    def active(self) -> bool:
        return self.status in ("queued", "running")

    @property
    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.finished or time.time()) - self.started


class JobContext:
    """What a job's target sees: report progress, log lines, and the cancel flag."""

    def __init__(self, job: Job) -> None:
        self._job = job
        self.cancelled = job._cancel  # threading.Event: set once cancel() was called

    def progress(self, done: int, total: int, message: str = "", data: Any = None) -> None:
        self._job._set_progress(done, total, message, data)

    def log(self, msg: str) -> None:
        self._job._event(str(msg))

    def check(self) -> None:
        """Raise JobCancelled if the job was cancelled (for targets that loop)."""
        if self.cancelled.is_set():
            raise JobCancelled("cancelled")


class Job:
    """Run ``target(ctx)`` in a daemon thread. A coroutine function (or a target returning an awaitable)
    runs on a fresh event loop in that thread."""

    def __init__(self, target: Callable[[JobContext], Any], name: str = "job", *,
                 meta: dict | None = None) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.name = name
        self.meta = dict(meta or {})  # small facts for the page (e.g. the evaluation id)
        self._target = target
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self._status = "queued"
        self._done, self._total, self._message, self._data = 0, 0, "", None
        self._events: deque[tuple[float, str]] = deque(maxlen=MAX_EVENTS)
        self._started: float | None = None
        self._ended: float | None = None
        self.result: Any = None
        self.error: str | None = None
        self._thread: threading.Thread | None = None

    # -- control ------------------------------------------------------------------------------------------
    def start(self) -> Job:
        with self._lock:
            if self._thread is not None:
                raise RuntimeError(f"job {self.id} was already started")
            self._thread = threading.Thread(target=self._main, name=f"job-{self.name}-{self.id}", daemon=True)
            self._status = "running"
            self._started = time.time()
        _register(self)
        self._event("started")
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Ask the job to stop. The target decides when (work already under way usually finishes)."""
        if not self._finished.is_set() and not self._cancel.is_set():
            self._cancel.set()
            self._event("cancel requested")

    def wait(self, timeout: float | None = None) -> bool:
        """True once the job has finished (in any way)."""
        return self._finished.wait(timeout)

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    @property
    def status(self) -> str:
        with self._lock:
            return self._status

    def snapshot(self) -> JobSnapshot:
        with self._lock:
            return JobSnapshot(self.id, self.name, self._status, self._done, self._total, self._message,
                               _copy(self._data), list(self._events), self.error, self._started, self._ended,
                               dict(self.meta))

    # -- internals ------------------------------------------------------------------------------------------
    def _set_progress(self, done: int, total: int, message: str, data: Any) -> None:
        with self._lock:
            self._done, self._total, self._data = int(done), int(total), data
            if message:
                self._message = message
                self._events.append((time.time(), message))

    def _event(self, msg: str) -> None:
        with self._lock:
            self._events.append((time.time(), msg))

    def _main(self) -> None:
        ctx = JobContext(self)
        status, result, error = "done", None, None
        try:
            out = self._target(ctx)
            if inspect.isawaitable(out):
                out = asyncio.run(_await(out))
            result = out
            if self._cancel.is_set():
                status = "cancelled"  # stopped early; the target's partial result is kept
        except JobCancelled:
            status = "cancelled"
        except Exception as exc:  # noqa: BLE001 - any failure becomes the job's message
            log.exception("job %s (%s) failed", self.id, self.name)
            status, error = "failed", error_message(exc)
        except BaseException as exc:  # SystemExit/KeyboardInterrupt in a worker thread: record, don't hang
            status, error = "failed", error_message(exc)
        with self._lock:
            self.result, self.error = result, error
            self._status, self._ended = status, time.time()
            self._events.append((self._ended, status if error is None else f"failed: {error}"))
        self._finished.set()


async def _await(aw: Any) -> Any:
    return await aw


def error_message(exc: BaseException) -> str:
    """One line for people: the exception's own message (first line), or its type when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


# -- the registry -----------------------------------------------------------------------------------------------

_registry: dict[str, Job] = {}
_registry_lock = threading.Lock()


def _register(job: Job) -> None:
    with _registry_lock:
        _registry[job.id] = job
        done = [j for j in _registry.values() if j._finished.is_set()]
        for old in sorted(done, key=lambda j: j._ended or 0)[:max(0, len(done) - MAX_FINISHED)]:
            del _registry[old.id]


def get(job_id: str | None) -> Job | None:
    """The job with this id, or None (unknown, forgotten, or started by an earlier server process)."""
    if not job_id:
        return None
    with _registry_lock:
        return _registry.get(job_id)


def jobs(name: str | None = None) -> list[Job]:
    """Registered jobs (optionally only those with ``name``), newest first."""
    with _registry_lock:
        found = [j for j in _registry.values() if name is None or j.name == name]
    return sorted(found, key=lambda j: j._started or 0, reverse=True)


def find(name: str, **meta: Any) -> Job | None:
    """The newest job named ``name`` whose meta contains all of ``meta``."""
    return next((j for j in jobs(name) if all(j.meta.get(k) == v for k, v in meta.items())), None)
