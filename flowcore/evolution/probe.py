"""Whose failure is it (DESIGN §5)? When some calls of a round failed on every try (``Evolution._attempts``), the
loop asks whether the endpoint answers calls like them *now*, in two steps:

1. Is it up? A one-word call, never from the cache (``ask``). A refused connection or an error status says "no"
   at once: an outage. A call that gets no answer in time is asked again for up to ``PROBE_WINDOW`` s
   (``answered_within``): a server that finishes the requests a client gave up on (most do; a non-streamed
   generation is not aborted) answers once the round's abandoned calls are done, so a candidate's own backlog
   does not pass for an outage.
2. Does it answer a call of normal length in time? Under load a one-word reply still comes at once while every
   real answer outlasts the timeout, so the loop runs a workflow the run measured before on one of the failed
   problems (``reference_problem``), uncached, with the same timeout. Only when it answers are the failures the
   candidate's own; otherwise they are the endpoint's, never a verdict on the candidate.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from flowcore.llm.client import BudgetExceeded

PROBE_TEXT = "Reply with the word OK."
# Seconds a probe that gets no answer in time is asked again: room for a server to finish the calls the client
# abandoned (a dead endpoint says so at once; only a silent one is waited for this long).
PROBE_WINDOW = 120.0
PROBE_PAUSE = 1.0  # between two probes that got no answer in time


@dataclass
class Asked:
    seconds: float | None  # how long the answer took; None: no answer
    timed_out: bool = False  # no answer within the client's timeout (rather than a "no" at once)


async def ask(llm: Any) -> Asked:
    """One short call with a fresh cache salt: a cached answer would say nothing about the endpoint now.
    BudgetExceeded is raised, not answered: a call the run's budget refused says nothing about the endpoint."""
    t0 = time.monotonic()
    try:
        await llm.chat(PROBE_TEXT, role="executor", max_tokens=4, cache_salt=f"probe:{uuid.uuid4().hex}")
    except BudgetExceeded:
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure means: not shown to be up
        return Asked(None, bool(getattr(exc, "timed_out", False)))
    return Asked(time.monotonic() - t0)


async def answered_within(llm: Any, window: float, pause: Callable[[float], Awaitable[None]]) -> float | None:
    """Seconds until the endpoint answered a short probe, asked again while it got no answer in time, for up to
    ``window`` s; None when it said no, or never answered."""
    start = time.monotonic()
    while True:
        got = await ask(llm)
        if got.seconds is not None:
            return time.monotonic() - start
        if not got.timed_out or time.monotonic() - start >= window:
            return None
        await pause(PROBE_PAUSE)


def reference_problem(failed: list[dict], before: list[dict], problems: list) -> Any:
    """The problem to run the reference workflow on: one the round failed that the reference answered when it
    was measured (so its answer fits the timeout on a healthy endpoint), else one the round failed, else one the
    reference answered; None without problems. ``failed``/``before``: the per-problem rows of both rounds."""
    by_id = {p.id: p for p in problems}
    bad = [x.get("id") for x in failed if x.get("errored")]
    good = {x.get("id") for x in before if not x.get("errored")}
    order = [*(i for i in bad if i in good), *bad, *(i for i in by_id if i in good), *by_id]
    return next((by_id[i] for i in order if i in by_id), None)
