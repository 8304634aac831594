"""Checks in a child process, stopped at their deadline.

Mermaid 11's own parser is not linear in every shape (13,000 nested subgraphs took V8 about 54 s), and neither a
JS engine nor a Python loop inside the app's process can be stopped from outside a call. So work whose time a text
decides runs in a ``Worker``: a child process that answers one request at a time over a pipe; a request not
answered within its budget (``check_seconds()``: MERMAIDFLOW_CHECK_SECONDS, 5 s of the child's CPU time, or 3x
that on the wall clock) gets the child killed, the core it held freed, and a fresh child started in the background for the next request (tests/mermaid/test_budgets.py).
``ParseProcess`` is the hard check's engine (V8, else QuickJS) run that way; flowcore/checker/bounded.py runs the
soft checker of large texts in another.

Protocol: 4-byte big-endian length + JSON, both ways. The child first sends ``{"ready": info}`` (from the
handler module's ``boot()``), then answers each request ``{"op", ...}`` with ``{"ok": true, "result"}`` or
``{"ok": false, "error"}`` (from its ``handle(state, request)``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

CHECK_SECONDS = 5.0  # CPU seconds a check may use
LOAD_GRACE = 3.0  # and at most this many times that on the wall clock
START_SECONDS = 120.0  # booting Mermaid in a JS engine on a busy machine
_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding the flowcore package


class CheckTimeout(RuntimeError):
    """The work did not finish within its budget; the child that ran it was killed."""


def check_seconds() -> float:
    raw = (os.environ.get("MERMAIDFLOW_CHECK_SECONDS") or "").strip()
    try:
        value = float(raw) if raw else CHECK_SECONDS
    except ValueError:
        value = CHECK_SECONDS
    return value if value > 0 else CHECK_SECONDS


def _send(fd: int, obj: object) -> None:
    data = json.dumps(obj).encode()
    data = len(data).to_bytes(4, "big") + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int, n: int, over, poller: select.poll) -> bytes:
    buf = b""
    while len(buf) < n:
        while over is not None and not poller.poll(200):  # look at the budget 5 times a second
            if over():
                raise TimeoutError
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _recv(fd: int, over=None) -> object:
    """One message, or TimeoutError once ``over()`` says the budget is spent, or EOFError when the other side
    is gone."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    n = int.from_bytes(_read(fd, 4, over, poller), "big")
    return json.loads(_read(fd, n, over, poller))


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _budget(pid: int, seconds: float):
    """over() for one request: its CPU seconds, or LOAD_GRACE times them on the wall clock (a loaded machine
    slows a child down without it doing more work; past that, the machine's load is the reason)."""
    cpu0, wall_end = _cpu_seconds(pid), time.monotonic() + seconds * LOAD_GRACE
    return lambda: _cpu_seconds(pid) - cpu0 > seconds or time.monotonic() > wall_end


class Worker:
    """A child process running ``handler`` (a module with ``boot() -> state`` and ``handle(state, request)``),
    one request at a time, each bounded by its budget."""

    def __init__(self, handler: str, what: str) -> None:
        self.handler, self.what = handler, what
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._spare: subprocess.Popen | None = None
        self.info: dict = {}
        self.kills = 0  # requests stopped at their deadline

    def _spawn(self) -> subprocess.Popen:
        code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from flowcore.mermaid.engines.process import main; main(sys.argv[2])")
        return subprocess.Popen([sys.executable, "-c", code, _ROOT, self.handler], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")

    def start(self) -> None:
        with self._lock:
            self._ensure()

    def _ensure(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        proc, self._spare = (self._spare or self._spawn()), None
        try:
            end = time.monotonic() + START_SECONDS
            ready = _recv(proc.stdout.fileno(), lambda: time.monotonic() > end)  # type: ignore[union-attr]
        except (TimeoutError, EOFError):
            _kill(proc)
            raise RuntimeError(f"the {self.what} process did not start") from None
        info = ready.get("ready") if isinstance(ready, dict) else None
        if not isinstance(info, dict):
            _kill(proc)
            raise RuntimeError(f"the {self.what} process failed to start: "
                               f"{ready.get('error') if isinstance(ready, dict) else ready}")
        self.info, self._proc = info, proc
        return proc

    def call(self, request: dict, seconds: float | None = None) -> object:
        """The child's answer to ``request``; CheckTimeout (and the child killed) past ``seconds``."""
        with self._lock:
            proc = self._ensure()
            budget = check_seconds() if seconds is None else seconds
            try:
                _send(proc.stdin.fileno(), request)  # type: ignore[union-attr]
                reply = _recv(proc.stdout.fileno(), _budget(proc.pid, budget))  # type: ignore[union-attr]
            except TimeoutError:
                _kill(proc)  # the core it held is free again; a fresh child boots for the next request
                self._proc, self.kills = None, self.kills + 1
                self._spare = self._spawn()
                raise CheckTimeout(f"{self.what} did not finish within its budget ({budget:g} s of CPU time, at most "
                                   f"{budget * LOAD_GRACE:g} s on the clock), so it was stopped "
                                   "(MERMAIDFLOW_CHECK_SECONDS sets the budget)") from None
            except (EOFError, OSError):
                _kill(proc)
                self._proc = None
                raise RuntimeError(f"the {self.what} process ended during the request") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise RuntimeError(str(reply.get("error") if isinstance(reply, dict) else reply))
        return reply["result"]

    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        with self._lock:
            for proc in (self._proc, self._spare):
                if proc is not None:
                    _kill(proc)
            self._proc = self._spare = None


class ParseProcess(Worker):
    """The hard check's engine in a child process, with the in-process engines' surface (``parse``, ``graph``,
    ``grammar_tables``, ``fast_ready``, ``close``)."""

    def __init__(self) -> None:
        super().__init__("flowcore.mermaid.engines.js", "Mermaid 11")  # js.boot, js.handle

    @property
    def backend(self) -> str:
        return self.info.get("backend", "quickjs")

    @property
    def fallback(self) -> str | None:
        return self.info.get("fallback")

    @property
    def fast_ready(self) -> bool:
        return bool(self.info.get("fast_ready"))

    def parse(self, text: str) -> dict:
        return self.call({"op": "parse", "text": text})  # type: ignore[return-value]

    def graph(self, text: str) -> dict:
        return self.call({"op": "graph", "text": text})  # type: ignore[return-value]

    def grammar_tables(self) -> dict:
        return self.call({"op": "grammar"}, START_SECONDS)  # type: ignore[return-value]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()


def main(handler: str) -> None:  # pragma: no cover - runs in the child
    """The child: boot the handler, say so, then answer requests until stdin closes."""
    import ctypes
    import importlib

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: end with the app
    except (OSError, AttributeError):
        pass
    out = os.dup(1)  # the protocol's own descriptor: nothing the engines print can corrupt it
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    module = importlib.import_module(handler)
    try:
        state = module.boot()
    except Exception as exc:  # noqa: BLE001 - said to the parent, which says it to the user
        _send(out, {"error": f"{type(exc).__name__}: {exc}"})
        return
    _send(out, {"ready": state.get("info", {})})
    while True:
        try:
            req = _recv(0)
        except (EOFError, OSError):
            return
        try:
            _send(out, {"ok": True, "result": module.handle(state, req)})
        except Exception as exc:  # noqa: BLE001 - the work failed on this request: the parent reports it
            _send(out, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
