"""A problem's own time, for a load-fair per-problem timeout.

A workflow on one problem spends its time in its own work (its LLM calls answering, its code running) or
blocked by others: waiting for a client slot or a sandbox CPU that other problems hold, an endpoint's failed
attempts and the backoff after them, a garbled transfer, or the host keeping its code off a CPU. Only the first
counts against ``--timeout``; the rest is given back, up to LOAD_GRACE (sandbox.py) times the timeout
(flowcore.tasks.harness decides).

Own time is measured per node of the workflow and taken along its longest chain (the critical path): a node's
own time is its wall time less what it waited for others, and a node starts, in own time, when the last of its
inputs is done. So a slot wait on one branch never hides what another branch did meanwhile (a union of waits
over the whole problem did), and a branch delayed by a neighbour never counts against the branch beside it.
Without nodes (a runner that is not a workflow) the problem's own timeline is used the same way.

- Within one timeline, given-back time is a set of intervals measured as their union: five calls garbled at
  once over the same 0.6 s give back 0.6 s, not 3 s.
- A slot wait (``Pool``) is given back while the problem would have had that slot alone (its own held slots
  plus its own waiters ahead of this one are fewer than the pool's size); further back in its queue, the share
  of its pace that others take (of the slots it would hold alone, those it does not). A wide ensemble queued
  behind its own calls waits for itself; a branch kept from a slot by a neighbour waits for the neighbour.
- An HTTP attempt in flight is *pending*: whether it was the endpoint's time is known only when it ends (a
  504, a refused connection and the backoff after it are; an answer is the workflow's). The harness waits for
  pending attempts before calling a timeout the workflow's own. An attempt that got no answer within the
  client's timeout after the problem's own time had run out is the workflow's: it asked for that long a reply.

An exported module's copy of the sandbox runs without any of this (no clock there)."""
from __future__ import annotations

import contextvars
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

Span = tuple[float, float, float]  # (from, to, the share of that time given back)


def _given(spans: list[Span]) -> float:
    """The time given back: at each moment the largest share any span gives (a union when all give 1)."""
    events = sorted(e for a, b, r in spans if b > a and r > 0 for e in ((a, 1, r), (b, -1, r)))
    active: Counter[float] = Counter()
    total, last = 0.0, 0.0
    for t, step, r in events:
        if active:
            total += (t - last) * max(active)
        active[r] += step
        if not active[r]:
            del active[r]
        last = t
    return total


def _merged(spans: list[Span]) -> list[Span]:
    """The same spans, those of one share that overlap merged."""
    out: list[Span] = []
    for a, b, r in sorted(spans, key=lambda x: (x[2], x[0])):
        if out and out[-1][2] == r and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b), r)
        else:
            out.append((a, b, r))
    return out


class Timeline:
    """One timeline's given-back intervals (closed and open) and pending attempts, thread-safe: a node of the
    workflow, or the whole problem when it runs no nodes."""

    def __init__(self, problem: ProblemClock | None = None) -> None:
        self._lock = threading.Lock()
        self.problem: ProblemClock = problem if problem is not None else self  # type: ignore[assignment]
        self.start = time.monotonic()
        self.end: float | None = None
        self._closed: list[Span] = []  # given back, merged as they come
        self._open: dict[object, tuple[float, float]] = {}  # given back since ..., at that share
        self._pending: dict[object, float] = {}  # undecided since ...

    def give_span(self, a: float, b: float) -> None:
        """[a, b] was others' time (a garbled attempt, the sandbox's CPU credit)."""
        a = max(a, self.start)
        if b > a:
            with self._lock:
                self._add(a, b, 1.0)

    def _add(self, a: float, b: float, share: float) -> None:  # under self._lock
        self._closed.append((a, b, share))
        if len(self._closed) > 64:  # keep it short: merge what overlaps
            self._closed = _merged(self._closed)

    def blocked(self, key: object, on: bool | float) -> None:
        """Open a given-back interval named ``key`` (a slot wait, a backoff) giving back ``on`` of its time
        (True: all of it), or close it (False, 0)."""
        now, share = time.monotonic(), float(on)
        with self._lock:
            since = self._open.get(key)
            if since is not None and since[1] == share:
                return
            if since is not None:
                del self._open[key]
                self._add(since[0], now, since[1])
            if share > 0:
                self._open[key] = (now, share)

    def pending(self, key: object, on: bool, give: bool = False) -> None:
        """An attempt ``key`` starts (on) or ends; when it ends as the endpoint's failure (give), its span is given
        back."""
        now = time.monotonic()
        with self._lock:
            since = self._pending.pop(key, None)
            if on:
                self._pending[key] = now
            elif since is not None and give:
                self._add(since, now, 1.0)

    def own(self, now: float | None = None) -> tuple[float, float]:
        """(own time counting pending attempts as the workflow's, own time counting them as the endpoint's)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self.end is not None:
                now = min(now, self.end)
            given = [(a, min(b, now), r) for a, b, r in self._closed] + \
                [(t, now, r) for t, r in self._open.values()]
            pending = [(t, now, 1.0) for t in self._pending.values()]
        elapsed = max(0.0, now - self.start)
        return elapsed - _given(given), elapsed - _given(given + pending)


class NodeClock(Timeline):
    """One node of the problem's workflow: it starts once its inputs are done (``deps``: the nodes they came
    from)."""

    def __init__(self, problem: ProblemClock, name: str, deps: Iterable[str]) -> None:
        super().__init__(problem)
        self.name, self.deps = name, tuple(deps)


class ProblemClock(Timeline):
    """One problem's clock: its nodes' timelines (the longest chain is its own time), or its own timeline when
    it runs none. ``limit``: the problem's timeout, once the harness has set it. ``group``: its evaluation (the
    same candidate's other problems): waiting for them is *paused* time, neither its own nor others' load."""

    def __init__(self, group: object | None = None) -> None:
        super().__init__()
        self.limit: float | None = None
        self.group = group
        self.spent = 0.0  # what its LLM calls cost (read when it ends by a timeout, which keeps no result)
        self.nodes: list[NodeClock] = []
        self._paused: list[Span] = []
        self._pausing: dict[object, tuple[float, float]] = {}

    def pausing(self, key: object, share: float) -> None:
        """Open (share > 0) or close the paused interval ``key``: a wait for slots the same evaluation's other
        problems hold. Given back like any wait, but it does not run the 3x cap toward "too busy": the candidate's
        own width is no machine's fault, and those problems are bounded by their own timeouts."""
        now = time.monotonic()
        with self._lock:
            since = self._pausing.get(key)
            if since is not None and since[1] == share:
                return
            if since is not None:
                del self._pausing[key]
                self._paused.append((since[0], now, since[1]))
            if share > 0:
                self._pausing[key] = (now, share)

    def paused(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            spans = self._paused + [(t, now, r) for t, r in self._pausing.values()]
        return _given(spans)

    def node(self, name: str, deps: Iterable[str]) -> NodeClock:
        n = NodeClock(self, name, deps)
        with self._lock:
            self.nodes.append(n)
        return n

    def own(self, now: float | None = None) -> tuple[float, float]:
        with self._lock:
            nodes = list(self.nodes)
        if not nodes:
            return super().own(now)
        done: dict[str, tuple[float, float]] = {}  # node -> own time at which it was done (both readings)
        for n in nodes:  # started in order: a node's inputs were done (and registered) before it
            o, s = n.own(now)
            before = [done[d] for d in n.deps if d in done]
            done[n.name] = (max((b[0] for b in before), default=0.0) + o,
                            max((b[1] for b in before), default=0.0) + s)
        return max(v[0] for v in done.values()), max(v[1] for v in done.values())

    def overdue(self) -> bool:
        """Has the problem's own time (counting attempts in flight as its own) reached its timeout?"""
        return self.limit is not None and self.own()[0] >= self.limit


class Pool:
    """Slots several problems share (the LLM client's concurrency, the sandbox's CPUs): see the module
    docstring. It only accounts; the caller's semaphore does the limiting."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._lock = threading.Lock()
        self._held: Counter[ProblemClock] = Counter()
        self._queue: dict[ProblemClock, list[tuple[Timeline, object]]] = {}  # waiters in arrival order

    def _refresh(self, problem: ProblemClock) -> None:  # under self._lock
        held, queue = self._held[problem], self._queue.get(problem, [])
        alone = min(self.size, held + len(queue))  # the slots it would hold alone
        lost = (alone - held) / alone if alone else 0.0  # the share of its pace that others take
        ours = sum(n for p, n in self._held.items() if p is not problem and p.group is not None
                   and p.group is problem.group)  # slots the same evaluation's other problems hold
        others = sum(self._held.values()) - held
        kin = ours / others if others else 0.0
        for ahead, (timeline, key) in enumerate(queue):
            share = 1.0 if held + ahead < self.size else lost
            timeline.blocked(key, share)
            problem.pausing(key, share * kin)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        timeline = _CLOCK.get()
        if timeline is None:
            yield
            return
        problem, key = timeline.problem, object()
        with self._lock:
            self._queue.setdefault(problem, []).append((timeline, key))
            self._refresh(problem)
        try:
            yield
        finally:
            with self._lock:
                queue = self._queue.get(problem, [])
                queue[:] = [w for w in queue if w[1] is not key]
                if not queue:
                    self._queue.pop(problem, None)
                timeline.blocked(key, False)
                problem.pausing(key, 0.0)
                self._refresh(problem)

    @contextmanager
    def holding(self) -> Iterator[None]:
        timeline = _CLOCK.get()
        if timeline is None:
            yield
            return
        problem = timeline.problem
        with self._lock:
            self._held[problem] += 1
            self._refresh(problem)
        try:
            yield
        finally:
            with self._lock:
                self._held[problem] -= 1
                if self._held[problem] <= 0:
                    del self._held[problem]
                self._refresh(problem)


_CLOCK: contextvars.ContextVar[Timeline | None] = contextvars.ContextVar("problem_clock", default=None)
_POOLS: dict[str, Pool] = {}
_POOLS_LOCK = threading.Lock()


def clock_current() -> Timeline | None:
    """The timeline this code runs on (a node's, else its problem's; asyncio tasks and to_thread inherit it)."""
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


def clock_spend(cost: float) -> None:
    clock = _CLOCK.get()
    if clock is not None and cost:
        with clock.problem._lock:
            clock.problem.spent += cost


def clock_overdue() -> bool:
    """Has the current problem's own time run out (False when no clock runs)?"""
    clock = _CLOCK.get()
    return clock is not None and clock.problem.overdue()


def clock_start(group: object | None = None) -> tuple[ProblemClock, contextvars.Token]:
    """A fresh clock for the problem about to run in this context (``clock_stop(token)`` when it is done);
    ``group``: its evaluation."""
    clock = ProblemClock(group)
    return clock, _CLOCK.set(clock)


def clock_stop(token: contextvars.Token) -> None:
    _CLOCK.reset(token)


@contextmanager
def node(name: str, deps: Iterable[str]) -> Iterator[None]:
    """Run a workflow node on a timeline of its own (its inputs are done): see the module docstring."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    timeline = clock.problem.node(name, deps)
    token = _CLOCK.set(timeline)
    try:
        yield
    finally:
        timeline.end = time.monotonic()
        _CLOCK.reset(token)
