"""Symbolic equality for MATH answers, computed outside the scorer's process.

sympy called in a thread cannot be stopped: a timeout that returns leaves the thread computing, and one answer
(``\\boxed{(a+b+c+d+e+f)^{500}}``) grew the app from 355 MB to 6.5 GB after its evaluation said "done". Here
sympy runs only in worker processes forked from a warm *zygote* (``_symbolic_worker.py``: sympy imported once),
each with an address-space limit and a per-comparison CPU-time limit, reused while they behave, and killed at
the comparison's wall-clock deadline. The scorer's process never imports sympy and its memory stays where it was
(tests/tasks/test_symbolic.py); a comparison costs a round trip to a warm worker (benchmarks/math_symbolic.py).

``equal(a, b)`` -> True, False, or None when the comparison got no verdict in its budget (the scorer reads that as
"not shown equal": a wrong answer, the same every time); it raises Unavailable when no worker could run it at all
(the pool's own failure, not the answer's: the scorer records no verdict, never a wrong answer).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

__all__ = ["CPU_SECONDS", "MAX_REQUEST", "MEMORY_MB", "WALL_FACTOR", "Unavailable", "equal", "worker_pids"]

CPU_SECONDS = 3.0  # CPU time one comparison may use (its worker's RLIMIT_CPU)
MEMORY_MB = 512  # memory a worker may grow by (its RLIMIT_AS above its start size)
WALL_FACTOR = 3.0  # wall-clock deadline: the CPU budget times this (a loaded machine slows a comparison down)
WORKERS = 2  # comparisons at once (two cores); more wait their turn
START_TIMEOUT = 60.0  # importing sympy on a busy machine
FORK_TIMEOUT = 10.0  # a warm zygote forks in milliseconds: one that has not by then (stopped, dying) is replaced
# A request longer than this is refused unsent (no verdict): the scorer sends at most 400 characters a side, and
# a worker reading a line of hundreds of MB would die of its memory limit before taking it (read as not its answer's).
MAX_REQUEST = 1 << 20
REPLY_MAX = 1 << 16  # a verdict is under a hundred bytes: a worker saying more is not ours any more
_SCRIPT = Path(__file__).with_name("_symbolic_worker.py")


class Unavailable(RuntimeError):
    """No worker could run the comparison: its zygote would not start or fork, or this process has no descriptor
    left. Not the answer's doing, so no verdict on it either way."""


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has something to read (or was closed) within ``timeout`` seconds. poll, not select:
    select refuses a descriptor numbered 1024 or more, which a busy process (a test run, a server) reaches."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


# How a worker that took a comparison may end by the answer's doing: past its CPU budget, or its native code
# failing at the memory limit (or an exit). A SIGKILL or SIGTERM comes from someone else (an operator, the OOM
# killer under the machine's memory pressure: the worker's own growth is capped by RLIMIT_AS): no verdict then.
_ANSWERS_DOING = {0, signal.SIGXCPU, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
# And a SIGKILL of a worker whose peak memory grew past a quarter of its budget (a worker leaves once it has, so a
# reused one had not before its comparison): the OOM killer of a container with less memory than two workers may
# grow by ends the process whose growth used it up. Read as someone else's, a bomb was asked again three times,
# then Unavailable: an errored row, left out of the score, so the bomb raised the score instead of lowering it.
_OOM_GROWTH = MEMORY_MB * 1024 * 1024 // 4


def _answers_doing(how: tuple[int, int] | None) -> bool:
    """Whether a worker that ended mid-comparison (``how``: the signal or 0, its peak growth in bytes; None: not
    known) ended by the answer's doing."""
    if how is None:
        return False
    sig, grown = how
    return sig in _ANSWERS_DOING or (sig == signal.SIGKILL and grown > _OOM_GROWTH)


class _Worker:
    def __init__(self, pid: int, sock: socket.socket, pidfd: int | None, live: set[_Worker],
                 ended_by: Callable[[int], tuple[int, int] | None] = lambda serial: None, serial: int = 0) -> None:
        self.pid, self.sock, self.pidfd, self.buf, self.live = pid, sock, pidfd, b"", live
        self.ended_by, self.serial = ended_by, serial
        live.add(self)

    def alive(self) -> bool:
        """An idle worker's socket has nothing to read; a dead one's reads as closed."""
        return not _readable(self.sock, 0)

    def ask(self, req: bytes, wall: float) -> dict | None:
        """One comparison; None (and the worker killed) when it is not answered within ``wall`` seconds.
        ConnectionError (the worker killed) when it never took the request: gone (killed while idle), or not
        reading it by the deadline (stopped, starved): not the answer's doing, the caller asks another."""
        end = time.monotonic() + wall
        try:
            self.sock.settimeout(wall)  # a worker that does not read would block sendall for ever
            self.sock.sendall(req)
        except OSError:
            self.kill()
            raise ConnectionError("the worker did not take the request") from None
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        closed = False
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                break
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                closed = True
                break
            self.buf += chunk
            if len(self.buf) > REPLY_MAX:
                break
        else:
            line, _, self.buf = self.buf[1:].partition(b"\n")
            try:
                reply = json.loads(line)
            except ValueError:
                reply = None
            if isinstance(reply, dict) and any(reply.get("equal") is v for v in (True, False, None)):
                return reply
            self.kill()  # it answered something else than a verdict
            return None
        # it acknowledges a request once its CPU budget is set; one stopped since missed its deadline through no
        # doing of the answer's (an answer cannot stop its worker: no terminal, no code of its own)
        taken = self.buf.startswith(b"+") and not self.stopped()
        # it ended before its deadline: by its budget, or killed by someone else (read as wrong before)
        others = taken and closed and not _answers_doing(self.ended_by(self.serial))
        self.kill()
        if not taken:
            raise ConnectionError("the worker did not take the request")
        if others:
            raise ConnectionError("the worker was ended by another process mid-comparison")
        return None  # SIGXCPU past its CPU budget, a crash at its memory limit, the wall-clock deadline

    def stopped(self) -> bool:
        """Whether it is SIGSTOPped (or held by a debugger)."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, 0)  # still alive, so that pid was still its own
        except (OSError, IndexError):
            return False
        return state in ("T", "t")

    def kill(self) -> None:
        """SIGKILL through its pidfd, never by pid: a worker that has exited was reaped at once and its pid may be
        another process's now. (Without a pidfd, closing its socket ends it, at its CPU budget at the latest.)"""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.forget()

    def forget(self) -> None:
        """Close this process's handles on it (no signal)."""
        self.live.discard(self)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self.sock.close()


class _Pool:
    """The zygote and the idle workers it forked for this process."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.live: set[_Worker] = set()  # every worker this process holds, idle or comparing
        self.idle: list[_Worker] = []
        self.closed = False
        self.control, theirs = socket.socketpair()
        self.theirs = theirs
        _pools.add(self)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", str(_SCRIPT), str(theirs.fileno()), str(MEMORY_MB)], pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                start_new_session=True)
        except BaseException:
            self.control.close()
            raise
        finally:
            theirs.close()
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(WORKERS)
        self.ok = _readable(self.control, START_TIMEOUT) and self.control.recv(1) == b"R"

    def take(self) -> _Worker | None:
        with self.lock:
            if self.closed:
                return None
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
            try:
                self.control.sendall(b"F")
                if not _readable(self.control, FORK_TIMEOUT):
                    return None
                data, fds, _, _ = socket.recv_fds(self.control, 8, 2)
            except OSError:
                return None
            if len(data) != 8 or not fds:  # no descriptor left in this process for them: the kernel dropped them
                for fd in fds:
                    os.close(fd)
                return None
            # its pid, and its serial number: the zygote's name for it when asked how it ended (a pid is reused)
            return _Worker(int.from_bytes(data[:4], "big"), socket.socket(fileno=fds[0]), fds[1] if fds[1:] else None,
                           self.live, self.ended_by, int.from_bytes(data[4:], "big"))

    def ended_by(self, serial: int) -> tuple[int, int] | None:
        """The signal that ended worker number ``serial`` (0: it exited) and how far its peak memory grew (bytes),
        asked of the zygote that reaped it; None when that is not known (the zygote replaced, or not answering: it
        is then retired, its reply would come late)."""
        data = b""
        with self.lock:
            if self.closed:
                return None
            try:
                self.control.sendall(b"S" + serial.to_bytes(4, "big"))
                while len(data) < 8 and _readable(self.control, FORK_TIMEOUT):
                    chunk = self.control.recv(8 - len(data))
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
        if len(data) < 8:
            _retire(self)
            return None
        status, grown_kb = int.from_bytes(data[:4], "big", signed=True), int.from_bytes(data[4:], "big", signed=True)
        if status < 0:
            return None
        return (os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0), grown_kb * 1024

    def give_back(self, worker: _Worker) -> None:
        with self.lock:
            if not self.closed:
                self.idle.append(worker)
                return
        worker.kill()

    def close(self) -> None:
        """End the zygote and the idle workers, once. Not its process group: when a pool is replaced (its zygote
        died) a worker of it may still be comparing for another thread; that comparison keeps its verdict, and the
        worker ends when given back."""
        with self.lock:
            if self.closed:
                return
            self.closed, idle, self.idle = True, self.idle, []
        for w in idle:
            w.kill()
        self.control.close()
        self.proc.kill()  # a no-op once it is reaped: its pid may be another process's by then
        self.proc.wait()

    def forget(self) -> None:
        """In a fork of this process: close the inherited sockets and pidfds, signal nothing (they are the parent's),
        take no lock (a thread of the parent's may have held it: it does not exist here)."""
        self.closed, self.idle = True, []
        for w in list(self.live):
            w.forget()
        self.control.close()
        self.theirs.close()


_lock = threading.Lock()
_pool: _Pool | None = None
_pools: weakref.WeakSet[_Pool] = weakref.WeakSet()  # every pool of this process, the current one and retired ones


def _after_fork_in_child() -> None:
    """A fork of this process (os.fork, multiprocessing) starts afresh. Another thread of the parent may have held
    _lock (held while a zygote starts): it would never be released here, and the fork's first comparison hung for
    ever. And the parent's sockets are closed here, so that its zygote and workers still see it end."""
    global _lock, _pool
    for pool in list(_pools):  # first: _pool may be the only reference to one
        pool.forget()
    _lock, _pool = threading.Lock(), None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _get() -> _Pool:
    global _pool
    with _lock:
        if _pool is None or _pool.proc.poll() is not None or _pool.owner != os.getpid():
            if _pool is not None and _pool.owner == os.getpid():
                _pool.close()
            _pool = None
            try:
                pool = _Pool()  # a forked copy of this process gets a zygote of its own
            except OSError as e:  # no descriptor or process left for it
                raise Unavailable(f"the symbolic worker could not start: {e}") from None
            if not pool.ok:
                pool.close()
                raise Unavailable("the symbolic worker did not start")
            _pool = pool
        return _pool


def _retire(pool: _Pool) -> None:
    """``pool``'s zygote did not fork a worker in time (stopped, killed): the next comparison starts a fresh one."""
    global _pool
    with _lock:
        if _pool is pool:
            _pool = None
    pool.close()


def equal(a: str, b: str, *, cpu_seconds: float = CPU_SECONDS) -> bool | None:
    """Whether the sympy expressions ``a`` and ``b`` (already translated from LaTeX) are equal; None when the
    comparison ran out of its budget (``cpu_seconds``, MEMORY_MB, the wall clock) or the text is longer than
    MAX_REQUEST. Unavailable when no worker could take it (three tries, each with a fresh zygote if need be)."""
    req = (json.dumps({"a": a, "b": b, "cpu": cpu_seconds}) + "\n").encode()
    if len(req) > MAX_REQUEST:
        return None
    for _ in range(3):
        pool = _get()
        with pool.slots:
            worker = pool.take()
            if worker is None:
                _retire(pool)
                continue
            try:
                reply = worker.ask(req, cpu_seconds * WALL_FACTOR)
            except ConnectionError:
                continue  # it never took the request: not the answer's doing, ask another
            if reply is None:
                return None
            if reply.get("leaving"):
                worker.kill()  # it is leaving by itself: this only makes sure
            else:
                pool.give_back(worker)
            return reply.get("equal")
    raise Unavailable("no symbolic worker took the comparison")


def worker_pids() -> tuple[int | None, list[int]]:
    """(the zygote's pid, the idle workers' pids) in this process, for tests and the status line."""
    if _pool is None:
        return None, []
    return _pool.proc.pid, [w.pid for w in _pool.idle]


@atexit.register
def _stop() -> None:
    if _pool is not None and _pool.owner == os.getpid():
        _pool.close()
