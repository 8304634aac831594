"""The problem clock (flowcore.execution.waits): what it gives back, and to whom."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time

import pytest

from flowcore.execution import sandbox, waits
from flowcore.execution._standalone_ops import _in_sandbox, last_boxed


def test_spans_given_back_at_once_count_once():
    clock = waits.ProblemClock()
    t = clock.start
    for _ in range(5):  # five calls garbled over the same second
        clock.give_span(t + 0.0, t + 1.0)
    clock.give_span(t + 0.5, t + 1.5)  # overlapping: only the half second beyond counts
    clock.give_span(t + 3.0, t + 3.25)
    own, sure = clock.own(t + 4.0)
    assert own == pytest.approx(4.0 - 1.75) and sure == own  # nothing pending


def test_a_pending_attempt_is_given_back_only_if_it_was_the_endpoints():
    clock = waits.ProblemClock()
    clock.pending("a", True)
    time.sleep(0.2)
    own, sure = clock.own()
    assert own >= 0.2 and sure < 0.05  # undecided: own time one way, the endpoint's the other
    clock.pending("a", False, give=True)  # it failed (a 504): the endpoint's
    own, sure = clock.own()
    assert own < 0.05 and sure == pytest.approx(own, abs=0.01)
    clock.pending("b", True)
    time.sleep(0.2)
    clock.pending("b", False, give=False)  # it answered: the workflow's
    assert clock.own()[0] >= 0.2


def _run_in(clock: waits.ProblemClock, fn):  # noqa: ANN001, ANN202
    token = waits._CLOCK.set(clock)
    try:
        return fn()
    finally:
        waits._CLOCK.reset(token)


def test_a_slot_wait_is_given_back_only_below_the_problems_share():
    pool = waits.Pool(8)
    hog, honest, wide = waits.ProblemClock(), waits.ProblemClock(), waits.ProblemClock()
    held = [_run_in(hog, pool.holding) for _ in range(5)]
    for h in held:
        _run_in(hog, h.__enter__)
    mine = [_run_in(honest, pool.holding) for _ in range(3)]
    for h in mine:
        _run_in(honest, h.__enter__)
    wait = _run_in(honest, pool.waiting)
    _run_in(honest, wait.__enter__)  # 3 held < 8 / 2: the neighbour keeps it below its share
    time.sleep(0.2)
    assert honest.given() >= 0.2
    _run_in(honest, lambda: wait.__exit__(None, None, None))
    for h in held:
        _run_in(hog, lambda h=h: h.__exit__(None, None, None))
    # a wide ensemble holding its share (4 of 8 beside one other problem) waits for itself
    other = [_run_in(hog, pool.holding) for _ in range(4)]
    for h in other:
        _run_in(hog, h.__enter__)
    extra = _run_in(wide, pool.holding)
    _run_in(wide, extra.__enter__)  # 1 + honest's 3 + hog's 4 = 8: wide now holds 1 of its share 8/3
    ctxs = [_run_in(wide, pool.holding) for _ in range(2)]
    for h in ctxs:
        _run_in(wide, h.__enter__)  # 3 held >= 8 / 3
    w = _run_in(wide, pool.waiting)
    _run_in(wide, w.__enter__)
    time.sleep(0.2)
    assert wide.given() < 0.05
    _run_in(wide, lambda: w.__exit__(None, None, None))


def test_boxed_answers_are_read_in_linear_time():
    assert last_boxed("so \\boxed{\\frac{1}{2}} and \\boxed {7}") == "7"
    assert last_boxed("\\boxed{x} then \\boxed{unclosed") == "x"
    hostile = "\\boxed{" * 200_000 + "7"
    t0 = time.process_time()
    assert last_boxed(hostile) is None
    assert time.process_time() - t0 < 1.0  # quadratic took seconds at 3,000


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_cancelled_problems_sandbox_run_is_killed_not_left_to_its_timeout():
    async def main() -> float:
        task = asyncio.ensure_future(_in_sandbox(sandbox, "import time\ndef solve():\n    time.sleep(60)\n",
                                                 call_solve=True, timeout=30.0))
        await asyncio.sleep(1.0)
        task.cancel()
        t0 = time.monotonic()
        await asyncio.gather(task, return_exceptions=True)
        while any(t.name.startswith("sandbox-run") and t.is_alive() and _busy(t) for t in threading.enumerate()):
            await asyncio.sleep(0.05)
            if time.monotonic() - t0 > 10:
                break
        return time.monotonic() - t0

    assert asyncio.run(main()) < 3.0  # killed within a sample or two, not after its 30 s


def _busy(thread: threading.Thread) -> bool:
    """Is the executor thread still inside a run (its frame not the pool's idle wait)?"""
    import sys

    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "run_untrusted":
            return True
        frame = frame.f_back
    return False
