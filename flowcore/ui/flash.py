"""One-shot page messages ("Saved …", "Refinement accepted …") that survive a page's own rerun.

A callback leaves a message in the session; the page's next run takes it (shown once). When that same run then
reruns the page at once (a live view finding its run just ended, a verdict that came in while it was drawn), the
message would vanish before anyone read it, so ``keep`` puts back what this very run took. Plain functions over
the session's mapping: no Streamlit here (the page says whether its run is a full one).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

RUN_NO = "mf_run_no"  # counts the session's full page runs
SHOWN = "mf_shown:"  # + a message's key: (the run that took it, the message)


def new_run(state: MutableMapping[str, Any]) -> None:
    """A full page run starts: what earlier runs took is theirs, never put back by this one."""
    state[RUN_NO] = state.get(RUN_NO, 0) + 1


def take(state: MutableMapping[str, Any], key: str) -> Any:
    """The message under ``key`` (None: none), removed once taken; this run keeps a copy for ``keep``."""
    value = state.pop(key, None)
    if value is not None:
        state[SHOWN + key] = (state.get(RUN_NO), value)
    return value


def keep(state: MutableMapping[str, Any], keys: Iterable[str]) -> None:
    """Before this run reruns the page: the messages it took under ``keys`` are left for the next run."""
    for key in keys:
        run_no, value = state.pop(SHOWN + key, (None, None))
        if value is not None and run_no == state.get(RUN_NO):
            state.setdefault(key, value)
