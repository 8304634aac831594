"""A problem's own time, for a load-fair per-problem timeout.

A workflow on one problem spends its time in its own work (its LLM calls answering, its code running) or
blocked by others: waiting for a client slot or a sandbox CPU that other problems hold, an endpoint's failed
attempts and the backoff after them, a garbled transfer, or the host keeping its code off a CPU. Only the first
counts against ``--timeout``; the rest is given back, up to LOAD_GRACE (sandbox.py) times the timeout
(flowcore.tasks.harness decides).

Given-back time is a set of intervals on the problem's timeline, measured as their union: five calls garbled
at once over the same 0.6 s give back 0.6 s, not 3 s, so running things in parallel never inflates it.

- A slot wait (``Pool``) is given back while the problem holds fewer slots than its share (the pool's size over
  the problems holding or waiting for one): a wide ensemble queued behind its own calls at its share waits
  for itself, an honest one squeezed below its share by a neighbour waits for the neighbour.
- An HTTP attempt in flight is *pending*: whether it was the endpoint's time is known only when it ends (a
  504, a refused connection and the backoff after it are; an answer is the workflow's). The harness waits for
  pending attempts before calling a timeout the workflow's own.

An exported module's copy of the sandbox runs without any of this (no clock there)."""
from __future__ import annotations

import contextvars
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


def _union(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


class ProblemClock:
    """One problem's given-back intervals (closed and open) and pending attempts, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.start = time.monotonic()
        self._closed: list[tuple[float, float]] = []  # given back, merged as they come
        self._open: dict[object, float] = {}  # given back since ...
        self._pending: dict[object, float] = {}  # undecided since ...

    def give_span(self, a: float, b: float) -> None:
        """[a, b] was others' time (a garbled attempt, the sandbox's CPU credit)."""
        a = max(a, self.start)
        if b > a:
            with self._lock:
                self._closed.append((a, b))
                if len(self._closed) > 64:  # keep it short: merge what overlaps
                    self._closed = _merged(self._closed)

    def blocked(self, key: object, on: bool) -> None:
        """Open (on) or close a given-back interval named ``key`` (a slot wait, a backoff)."""
        now = time.monotonic()
        with self._lock:
            since = self._open.pop(key, None)
            if on:
                self._open[key] = now if since is None else since
            elif since is not None:
                self._closed.append((since, now))

    def pending(self, key: object, on: bool, give: bool = False) -> None:
        """An attempt ``key`` starts (on) or ends; when it ends as the endpoint's failure (give), its span is given
        back."""
        now = time.monotonic()
        with self._lock:
            since = self._pending.pop(key, None)
            if on:
                self._pending[key] = now
            elif since is not None and give:
                self._closed.append((since, now))

    def own(self, now: float | None = None) -> tuple[float, float]:
        """(own time counting pending attempts as the workflow's, own time counting them as the endpoint's)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            given = self._closed + [(t, now) for t in self._open.values()]
            pending = [(t, now) for t in self._pending.values()]
        elapsed = now - self.start
        return elapsed - _union(given), elapsed - _union(given + pending)

    def given(self) -> float:
        own, _ = self.own()
        return time.monotonic() - self.start - own


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Pool:
    """Slots several problems share (the LLM client's concurrency, the sandbox's CPUs): see the module
    docstring. It only accounts; the caller's semaphore does the limiting."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._lock = threading.Lock()
        self._held: Counter[ProblemClock] = Counter()
        self._waiting: Counter[ProblemClock] = Counter()

    def _change(self, clock: ProblemClock, held: int = 0, waiting: int = 0) -> None:
        with self._lock:
            self._held[clock] += held
            self._waiting[clock] += waiting
            self._held, self._waiting = +self._held, +self._waiting  # drop zeros
            problems = set(self._held) | set(self._waiting)
            share = self.size / max(1, len(problems))
            for c in problems | {clock}:
                c.blocked(self, self._waiting[c] > 0 and self._held[c] < share)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        clock = _CLOCK.get()
        if clock is None:
            yield
            return
        self._change(clock, waiting=1)
        try:
            yield
        finally:
            self._change(clock, waiting=-1)

    @contextmanager
    def holding(self) -> Iterator[None]:
        clock = _CLOCK.get()
        if clock is None:
            yield
            return
        self._change(clock, held=1)
        try:
            yield
        finally:
            self._change(clock, held=-1)


_CLOCK: contextvars.ContextVar[ProblemClock | None] = contextvars.ContextVar("problem_clock", default=None)
_POOLS: dict[str, Pool] = {}
_POOLS_LOCK = threading.Lock()


def clock_current() -> ProblemClock | None:
    """The clock of the problem this code runs for (asyncio tasks and to_thread inherit it), if any."""
    return _CLOCK.get()


def pool(name: str, size: int) -> Pool:
    """The process-wide pool ``name`` (the sandbox's CPU slots)."""
    with _POOLS_LOCK:
        if name not in _POOLS:
            _POOLS[name] = Pool(size)
        return _POOLS[name]


def clock_give_span(a: float, b: float) -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.give_span(a, b)


def clock_blocked(key: object, on: bool) -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.blocked(key, on)


def clock_pending(key: object, on: bool, give: bool = False) -> None:
    clock = _CLOCK.get()
    if clock is not None:
        clock.pending(key, on, give)


def clock_start() -> tuple[ProblemClock, contextvars.Token]:
    """A fresh clock for the problem about to run in this context (``clock_stop(token)`` when it is done)."""
    clock = ProblemClock()
    return clock, _CLOCK.set(clock)


def clock_stop(token: contextvars.Token) -> None:
    _CLOCK.reset(token)
