"""A problem's own time, for a load-fair per-problem timeout.

A workflow on one problem spends its time in its own work (its LLM calls answering, its code running) or
blocked by others: waiting for one of the client's concurrency slots or a sandbox CPU that other problems hold,
backing off from an endpoint that failed, or kept off a CPU by the host. Only the first counts against
``--timeout``; the rest is given back, as the sandbox does for code (``sandbox._Credit``), up to LOAD_GRACE
(sandbox.py) times the timeout. Past that cap the problem is errored (the machine or endpoint was too busy);
inside it, a timeout is the workflow's own and the answer is wrong.

Waiting is given back only while none of the problem's own calls or runs is in flight: a wide ensemble whose
twenty calls queue behind its own four slots was kept waiting by itself, never by others (the same rule as the
sandbox's 60 spinning children), so a candidate cannot slow itself into "errored".

An exported module's copy of the sandbox runs without it (no clock there)."""
from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ProblemClock:
    """Counts, thread-safely, the seconds one problem was blocked by others (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = self._active = self._failing = 0
        self._blocked_since: float | None = None  # waiting, nothing of its own in flight
        self._failing_since: float | None = None  # a call of its own backing off from the endpoint's failure
        self._given = 0.0

    def _update(self, waiting: int = 0, active: int = 0, failing: int = 0) -> None:
        now = time.monotonic()
        self._waiting += waiting
        self._active += active
        self._failing += failing
        blocked = self._waiting > 0 and self._active == 0
        if self._blocked_since is not None and not blocked:
            self._given += now - self._blocked_since
            self._blocked_since = None
        elif blocked and self._blocked_since is None:
            self._blocked_since = now
        if self._failing_since is not None and self._failing == 0:
            self._given += now - self._failing_since
            self._failing_since = None
        elif self._failing and self._failing_since is None:
            self._failing_since = now

    @contextmanager
    def _state(self, **change: int) -> Iterator[None]:
        with self._lock:
            self._update(**change)
        try:
            yield
        finally:
            with self._lock:
                self._update(**{k: -v for k, v in change.items()})

    def waiting(self):
        """Blocked by others: a slot's queue (given back only while nothing of the problem's is in flight)."""
        return self._state(waiting=1)

    def active(self):
        """The problem's own work in flight: an LLM request, a sandboxed run."""
        return self._state(active=1)

    def failing(self, on: bool) -> None:
        """A call of the problem's starts (on) or stops backing off after the endpoint failed it: that time is
        the endpoint's, given back even while other calls of the problem run."""
        with self._lock:
            self._update(failing=1 if on else -1)

    def give(self, seconds: float) -> None:
        """Time measured elsewhere as others' fault (the sandbox's CPU credit, a garbled transfer)."""
        if seconds > 0:
            with self._lock:
                self._given += seconds

    def given(self) -> float:
        with self._lock:
            now = time.monotonic()
            return self._given + sum(now - t for t in (self._blocked_since, self._failing_since) if t is not None)


_CLOCK: contextvars.ContextVar[ProblemClock | None] = contextvars.ContextVar("problem_clock", default=None)


def clock_current() -> ProblemClock | None:
    """The clock of the problem this code runs for (asyncio tasks and to_thread inherit it), if any."""
    return _CLOCK.get()


@contextmanager
def clock_waiting() -> Iterator[None]:
    clock = _CLOCK.get()
    if clock is None:
        yield
    else:
        with clock.waiting():
            yield


@contextmanager
def clock_active() -> Iterator[None]:
    clock = _CLOCK.get()
    if clock is None:
        yield
    else:
        with clock.active():
            yield


def clock_failing(on: bool) -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.failing(on)


def clock_give(seconds: float) -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.give(seconds)


def clock_start() -> tuple[ProblemClock, contextvars.Token]:
    """A fresh clock for the problem about to run in this context (``clock_stop(token)`` when it is done)."""
    clock = ProblemClock()
    return clock, _CLOCK.set(clock)


def clock_stop(token: contextvars.Token) -> None:
    _CLOCK.reset(token)
