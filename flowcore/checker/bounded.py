"""The checker within a time and size budget, for the texts pages are handed (typed, pasted, opened from a link).

Reading is linear (tests/mermaid/test_pathological.py), but a pasted or linked text can still be large, and
pathological shapes cost ~10 us a character. A text up to INLINE_CHARS is checked here, in well under a second;
a longer one is checked in a child process (engines/process.py's Worker) that is killed when it runs past
``check_seconds()`` (MERMAIDFLOW_CHECK_SECONDS: 5 s of CPU time, 15 s at most on the clock), and a text over MAX_CHARS is not read at all. Past either
budget the page gets one M001 saying so, and the server core is free again (tests/mermaid/test_budgets.py).
The hard check (Mermaid 11) has the same budget in its own process (engines/js.py ``parse_check``).
"""

from __future__ import annotations

import base64
import pickle
import threading

from flowcore.checker.check import _hard
from flowcore.checker.check import check as _check
from flowcore.mermaid.engines.process import CheckTimeout, Worker, check_seconds
from flowcore.mermaid.reader import parse_lenient
from flowcore.model import Diagnostic, Workflow

__all__ = ["INLINE_CHARS", "MAX_CHARS", "check", "read"]

INLINE_CHARS = 64_000  # checked in this process: well under a second even for the slowest shapes
MAX_CHARS = 2_000_000  # a 10,000-node workflow is ~720,000 characters
_lock = threading.Lock()
_worker: Worker | None = None


def check(text: str, task: str | None = None, *, hard: bool = False) -> list[Diagnostic]:
    """``flowcore.check`` for a text a page was handed, within the budget."""
    return read(text, task, hard=hard)[0]


def read(text: str, task: str | None = None, *, hard: bool = False) -> tuple[list[Diagnostic], Workflow,
                                                                             list[Diagnostic]]:
    """(diagnostics, the workflow as read, the reader's own diagnostics), within the budget; past it, one M001
    saying why, an empty workflow, and the same M001 as the reader's."""
    if not isinstance(text, str) or len(text) <= INLINE_CHARS:
        diags = _check(text, task, hard=hard)
        w, parse_diags = parse_lenient(text) if isinstance(text, str) else (Workflow(), [])
        return diags, w, parse_diags
    if len(text) > MAX_CHARS:
        return _refused(f"the text is too large to check here ({len(text):,} characters; the limit is "
                        f"{MAX_CHARS:,})")
    try:
        blob = _get().call({"text": text, "task": task})
    except CheckTimeout:
        return _refused(f"the checker stopped at its budget ({check_seconds():g} s of CPU time) on this text "
                        f"({len(text):,} characters): it is too large or too deeply nested to check here "
                        "(MERMAIDFLOW_CHECK_SECONDS sets the budget)")
    except RuntimeError as exc:
        return _refused(f"the checker could not read this text ({exc})")
    diags, w, parse_diags = pickle.loads(base64.b64decode(blob))  # noqa: S301 - our own child's pickle
    if hard:
        diags = sorted(diags + _hard(text, diags), key=lambda d: (d.line or 0, d.column or 0, d.code))
    return diags, w, parse_diags


def _refused(message: str) -> tuple[list[Diagnostic], Workflow, list[Diagnostic]]:
    d = Diagnostic("M001", "error", message, 1, 1)
    return [d], Workflow(), [d]


def _get() -> Worker:
    global _worker
    with _lock:
        if _worker is None:
            import atexit

            _worker = Worker("flowcore.checker.bounded", "the checker")
            atexit.register(_worker.close)
        return _worker


def boot() -> dict:  # pragma: no cover - runs in the child
    return {"info": {}}


def handle(state: dict, request: dict) -> str:  # pragma: no cover - runs in the child
    text, task = request["text"], request.get("task")
    result = (_check(text, task), *parse_lenient(text))
    return base64.b64encode(pickle.dumps(result)).decode("ascii")
