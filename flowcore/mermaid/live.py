"""Mermaid 11's own verdict for the Editor's live gutter: debounced, computed off the typing path.

The soft reader is Mermaid's grammar, so the two agree (benchmarks/mermaid_agreement.py); this is the
belt to those braces: whenever the soft reader accepts a text, the Editor also asks the real Mermaid 11 and
shows its verdict, so the screen never calls valid a text Mermaid cannot render. ``verdict(text)`` never
blocks: it answers from what is already known, and otherwise schedules a check that runs on a worker thread
once the text has stopped changing for ``DEBOUNCE_S``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from flowcore.model import Diagnostic

DEBOUNCE_S = 0.3


@dataclass(frozen=True)
class Verdict:
    ok: bool
    diagnostic: Diagnostic | None = None  # Mermaid's error as an M001 at its line, when not ok


class _Live:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[str, Verdict] = {}
        self._latest: tuple[str, float] | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def verdict(self, text: str) -> Verdict | None:
        """Mermaid's verdict on ``text`` if known; else None, and a check of it is scheduled."""
        with self._lock:
            if text in self._done:
                return self._done[text]
            self._latest = (text, time.monotonic())
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mermaid-live", daemon=True)
                self._thread.start()
        self._wake.set()
        return None

    def wait(self, text: str, timeout: float = 30.0) -> Verdict | None:
        """Block until the verdict on ``text`` is known (for tests and the command line)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = self.verdict(text)
            if v is not None:
                return v
            time.sleep(0.02)
        return None

    def _run(self) -> None:
        while True:
            self._wake.wait(timeout=30)
            self._wake.clear()
            with self._lock:
                latest = self._latest
            if latest is None:
                return
            text, asked = latest
            quiet = DEBOUNCE_S - (time.monotonic() - asked)
            if quiet > 0:  # still typing: wait until the text has been still for DEBOUNCE_S
                time.sleep(quiet)
                with self._lock:
                    if self._latest is not None and self._latest[0] != text:
                        continue
            verdict = _check(text)
            with self._lock:
                self._done[text] = verdict
                while len(self._done) > 64:
                    self._done.pop(next(iter(self._done)))
                if self._latest is not None and self._latest[0] == text:
                    self._latest = None


def _check(text: str) -> Verdict:
    try:
        from flowcore.mermaid.engines.js import parse_check
    except ImportError:  # pragma: no cover - mermaidx is a requirement
        return Verdict(True)
    err = parse_check(text)
    if err is None:
        return Verdict(True)
    return Verdict(False, Diagnostic("M001", "error", f"Mermaid 11 cannot parse this: {err.message}",
                                     err.line, err.column))


_LIVE = _Live()


def verdict(text: str) -> Verdict | None:
    return _LIVE.verdict(text)


def wait(text: str, timeout: float = 30.0) -> Verdict | None:
    return _LIVE.wait(text, timeout)


def with_mermaid(text: str, diags: list[Diagnostic]) -> tuple[list[Diagnostic], bool]:
    """The soft diagnostics plus Mermaid's verdict when the soft reader accepted the text.

    Returns (diagnostics, pending): pending is True while Mermaid's verdict is still being computed."""
    if any(d.code == "M001" for d in diags):
        return diags, False
    v = verdict(text)
    if v is None:
        return diags, True
    if v.ok or v.diagnostic is None:
        return diags, False
    return sorted([*diags, v.diagnostic], key=lambda d: (d.line or 0, d.column or 0, d.code)), False
