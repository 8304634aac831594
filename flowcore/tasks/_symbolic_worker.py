"""The symbolic half of MATH scoring, run as its own process (``python -I _symbolic_worker.py FD MEMORY_MB``): sympy
never runs in the scorer's process (flowcore/tasks/symbolic.py starts this file and talks to it).

This process (the *zygote*) imports sympy once, warms it, and then forks *workers* from that warm state whenever
the scorer asks, over the unix socket ``FD``: each fork sends back the worker's pid and serial number, one end of a
socket pair and a pidfd of the worker (SCM_RIGHTS), so the scorer then talks to the worker directly. A worker caps its address space at its start size
+ MEMORY_MB and answers comparisons one after another (reused: sympy's caches stay warm, so a typical comparison
costs about what it costs in-process); before each one it sets its CPU-time limit to what it has used + that
comparison's budget (SIGXCPU past it). The scorer kills a worker still busy at the comparison's wall-clock
deadline. A worker that has grown by a quarter of its budget says so in its answer and exits, so its memory goes
back to the system.

Worker protocol, one JSON object per line: in ``{"a", "b", "cpu"}`` (acknowledged with ``+`` once its CPU limit is set) (``a``, ``b``: Python expressions already
translated from LaTeX and checked by the scorer, and again here: check), out ``{"equal": true|false|null, "why", "leaving"}`` (null: no
verdict: over its memory, too deep, unparsable). Only the standard library and sympy: this file runs with ``-I``
and is found by path.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import sys
import time

TOL = 1e-6
# What the scorer's LaTeX translator writes (scoring._latex_to_py): sympy's parser evaluates Python, so any other
# text (`__import__('os')...`, `eval(chr(95)...)`, `x.name`) would run as code in this process.
_TEXT = re.compile(r"[0-9A-Za-z+\-*/(). ]*")
NAMES = {"sqrt", "pi", "oo", "log", "sin", "cos", "tan", "exp", "sec", "csc", "cot"}  # and one-letter symbols


def _sympy():
    import sympy
    from sympy.parsing import sympy_parser

    return sympy, sympy_parser


def check(py: str) -> None:
    """ValueError unless ``py`` is arithmetic on one-letter symbols, numbers and NAMES, as the scorer writes it."""
    if not _TEXT.fullmatch(py):
        raise ValueError("not arithmetic")
    for name in re.findall(r"[A-Za-z]+", py):
        if len(name) > 1 and name not in NAMES:
            raise ValueError(f"unknown name {name!r}")


def _parse(py: str):
    check(py)
    sympy, sp = _sympy()
    trans = sp.standard_transformations + (sp.implicit_multiplication, sp.convert_xor)
    local = {c: sympy.Symbol(c) for c in "abcdefghijklmnopqrstuvwxyzABCDFGHJKLMNOPQRTUVWXYZ"}
    local.update({"pi": sympy.pi, "oo": sympy.oo, "E": sympy.E, "I": sympy.I})
    return sp.parse_expr(py, local_dict=local, transformations=trans, evaluate=True)


def sympy_equal(pa: str, pb: str) -> bool:
    """a == b symbolically: exact numbers to 40 digits, decimals within TOL, else simplify(a - b) == 0."""
    sympy, _ = _sympy()
    a, b = _parse(pa), _parse(pb)
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return False
    if not a.free_symbols and not b.free_symbols:
        if a.has(sympy.Float) or b.has(sympy.Float):  # a decimal answer: within the tolerance
            return abs(complex(sympy.N(a - b, 30))) <= TOL
        return abs(complex(sympy.N(a - b, 60))) < 1e-40  # exact numbers: equal to 40 digits
    return bool(sympy.simplify(a - b) == 0)


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _worker(sock: socket.socket, memory_mb: int) -> None:
    """A forked worker: comparisons in, one verdict line out for each, until the scorer closes the socket. It does
    not die with the zygote: a comparison running when the zygote is killed keeps its verdict; it ends when the
    scorer closes its socket (at once when idle, after the comparison when busy, bounded by RLIMIT_CPU)."""
    try:
        _serve(sock, memory_mb)
    except OSError:  # the scorer has gone
        pass
    finally:
        os._exit(0)  # never back into the zygote's loop


def _serve(sock: socket.socket, memory_mb: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    start_rss = _status("VmHWM")
    room = _status("VmSize") + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (room, room))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for line in sock.makefile("rb"):
        req = json.loads(line)
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(used.ru_utime + used.ru_stime + float(req["cpu"])) + 1  # RLIMIT_CPU counts whole seconds
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))
        # taken: from here on a death is this comparison's (its CPU or memory budget). Not before its budget is
        # set: a SIGXCPU still due for the previous comparison is then no death of this one.
        sock.sendall(b"+")
        try:
            verdict, why = sympy_equal(req["a"], req["b"]), ""
        except MemoryError:
            verdict, why = None, f"more than {memory_mb} MB"
        except BaseException as e:  # noqa: BLE001 - RecursionError, a parse error: no verdict
            verdict, why = None, type(e).__name__
        # grown by a quarter of its budget (or in doubt): it leaves after this answer and says so, handing its
        # memory back; the scorer gets a fresh worker for the next comparison
        # Its peak, not its size now: a worker reused never grew that far before its comparison, so one that did
        # grew in it (what the scorer takes a SIGKILL of a worker grown that far for: the OOM killer, its doing).
        leaving = verdict is None or _status("VmHWM") - start_rss > memory_mb * 1024 * 1024 // 4
        sock.sendall((json.dumps({"equal": verdict, "why": why, "leaving": leaving}) + "\n").encode())
        if leaving:
            break


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("the scorer has gone")
        data += chunk
    return data


def _ended(raw: bytes, ended: dict[int, tuple[int, int]], reap) -> bytes:  # noqa: ANN001 - the SIGCHLD handler
    """How worker ``raw`` (4 bytes, its serial number) ended, as 8 bytes: its wait status and how far its peak
    memory grew above this zygote's (KB), or -1, 0 when that is not known (not ended within a second, or not a
    worker of this zygote). Its socket closed, so it is ending: waited for briefly. By serial, not pid: a reaped
    worker's pid may be a newer worker's by the time the scorer asks."""
    serial = int.from_bytes(raw, "big")
    for _ in range(100):
        reap()
        if serial in ended:
            status, grown_kb = ended.pop(serial)
            return status.to_bytes(4, "big", signed=True) + grown_kb.to_bytes(4, "big", signed=True)
        time.sleep(0.01)
    return (-1).to_bytes(4, "big", signed=True) + bytes(4)


def main() -> None:
    # It ends when the scorer's end of ``control`` closes (the scorer exited or was killed: the kernel closes it),
    # not by PR_SET_PDEATHSIG: that fires when the *thread* that started it ends, and a pool first used from a
    # short-lived thread (a Streamlit run) lost its zygote, and the comparisons running, with that thread.
    control = socket.socket(fileno=int(sys.argv[1]))
    memory_mb = int(sys.argv[2])
    for a, b in (("x + 1", "1 + x"), ("2*sqrt(2)", "sqrt(8)"), ("((1)/(2))", "0.5"), ("(x+1)**2", "x**2+2*x+1")):
        sympy_equal(a, b)  # warm: the lazy imports and caches every worker starts with
    # Workers are reaped here as they end, and how each ended is kept: the scorer asks ("S" + serial) when one died
    # mid-comparison, since its CPU budget (SIGXCPU) is the answer's doing and a SIGKILL from elsewhere is not.
    # Kept by each worker's serial number (the scorer is told it with the pid): a pid is the kernel's to hand out
    # again once reaped, and a worker forked since with that pid, and ended, put its end on the first one's question.
    # With its peak memory (wait4's ru_maxrss, KB): the OOM killer's SIGKILL is the answer's doing when its growth
    # used the memory up (a container with less memory than two workers may grow by), and no one else's.
    ended: dict[int, tuple[int, int]] = {}  # serial -> (wait status, peak growth above this zygote, KB)
    base_kb = _status("VmRSS") // 1024  # a worker starts with at most this (its pages shared with the zygote)
    serials: dict[int, int] = {}  # pid -> serial, of the workers not reaped yet
    forked = 0

    def reap(*_: object) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            serial = serials.pop(pid, None)
            if serial is None:
                continue
            ended[serial] = (status, max(0, min(usage.ru_maxrss - base_kb, 2**31 - 1)))
            if len(ended) > 1024:
                ended.pop(next(iter(ended)))

    signal.signal(signal.SIGCHLD, reap)
    control.sendall(b"R")
    while True:
        try:
            ask = control.recv(1)
        except InterruptedError:
            continue
        if not ask:  # the scorer has gone
            return
        if ask == b"S":
            control.sendall(_ended(_recv_exact(control, 4), ended, reap))
            continue
        mine, theirs = socket.socketpair()
        forked += 1
        # SIGCHLD held until the new worker's serial is noted: reaped before, its end would be no one's
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            pid = os.fork()
            if pid == 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                control.close()
                theirs.close()
                _worker(mine, memory_mb)
            serials[pid] = forked
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        mine.close()
        # a pidfd names this process and no other: the scorer signals the worker through it, never by pid (the
        # kernel reaps a worker that exits at once, and its pid may be another process's by the time it is signalled)
        try:
            pidfd = [os.pidfd_open(pid)]
        except OSError:  # a kernel without pidfds (before 5.3): the scorer then only closes the worker's socket
            pidfd = []
        socket.send_fds(control, [pid.to_bytes(4, "big") + forked.to_bytes(4, "big")], [theirs.fileno(), *pidfd])
        theirs.close()
        for fd in pidfd:
            os.close(fd)


if __name__ == "__main__":
    main()
