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


def _enter(clock: waits.ProblemClock, cm):  # noqa: ANN001, ANN202
    _run_in(clock, cm.__enter__)
    return cm


def _leave(clock: waits.ProblemClock, cm) -> None:  # noqa: ANN001
    _run_in(clock, lambda: cm.__exit__(None, None, None))


def test_a_slot_wait_is_given_back_as_far_as_a_neighbour_takes_the_problems_pace():
    pool = waits.Pool(2)
    hog, honest, wide = waits.ProblemClock(), waits.ProblemClock(), waits.ProblemClock()
    held = [_enter(hog, _run_in(hog, pool.holding)) for _ in range(2)]
    # honest holds nothing and waits with two: alone both would run, so both waits are the neighbour's
    waits_ = [_enter(honest, _run_in(honest, pool.waiting)) for _ in range(2)]
    time.sleep(0.2)
    assert honest.own()[0] < 0.05
    for w in waits_:
        _leave(honest, w)
    for h in held:
        _leave(hog, h)
    # wide holds both slots and waits with a third: it waits for itself, nothing is given back
    mine = [_enter(wide, _run_in(wide, pool.holding)) for _ in range(2)]
    w = _enter(wide, _run_in(wide, pool.waiting))
    t0 = time.monotonic()
    time.sleep(0.2)
    assert wide.own()[0] >= time.monotonic() - t0
    _leave(wide, w)
    for h in mine:
        _leave(wide, h)


def test_far_back_in_its_queue_a_problem_gets_back_the_share_of_its_pace_others_take():
    pool = waits.Pool(2)
    other, wide = waits.ProblemClock(), waits.ProblemClock()
    taken = _enter(other, _run_in(other, pool.holding))  # a neighbour holds one of the two slots
    mine = _enter(wide, _run_in(wide, pool.holding))
    nodes = [wide.node(f"P{i}", ["PROBLEM"]) for i in range(3)]  # three branches, each waiting for a slot
    queue = [_enter(n, _run_in(n, pool.waiting)) for n in nodes]
    time.sleep(0.4)
    now = time.monotonic()
    head, second, third = (n.own(now)[0] / (now - n.start) for n in nodes)
    # the head would run alone: all given back; behind it, alone the problem would hold 2 slots and holds 1:
    # half its pace is the neighbour's
    assert head < 0.1 and second == pytest.approx(0.5, abs=0.1) and third == pytest.approx(0.5, abs=0.1)
    for n, q in zip(nodes, queue, strict=True):
        _leave(n, q)
    _leave(wide, mine)
    _leave(other, taken)


def test_shares_given_back_count_the_largest_at_each_moment():
    assert waits._given([(0.0, 1.0, 0.5), (0.5, 1.5, 1.0), (2.0, 3.0, 0.25)]) == pytest.approx(0.25 + 1.0 + 0.25)
    assert waits._given([(0.0, 2.0, 1.0)] * 5) == pytest.approx(2.0)


def test_own_time_is_the_longest_chain_of_nodes():
    clock, token = waits.clock_start()
    try:
        with waits.node("A", ["PROBLEM"]):
            time.sleep(0.2)
        with waits.node("B", ["A"]):  # after A: its own time adds to A's
            waits.clock_blocked("wait", True)  # but all of it was waiting for others
            time.sleep(0.2)
            waits.clock_blocked("wait", False)
        with waits.node("C", ["PROBLEM"]):  # beside A and B (here run after them): its own chain
            time.sleep(0.3)
    finally:
        waits.clock_stop(token)
    own, _ = clock.own()
    assert own == pytest.approx(0.3, abs=0.06)  # C alone: A (0.2) + B (0 own) is shorter


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
