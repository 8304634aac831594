"""Run untrusted (LLM-generated) code in a bubblewrap sandbox: the operating system is the boundary.

``run_untrusted`` is the one entry point: Programmer and Test operators, compiled workflows (this file is pasted
into them), the HumanEval/MBPP scorers and evolution all run code through it. Each run is a fresh ``bwrap``:

- a new mount namespace that holds only read-only ``/usr`` (the system libraries), the interpreter and its
  stdlib (bound at /sbx/python when it lives elsewhere, e.g. under a 0700 /root/.pyenv), the site-packages of
  the running environment (read-only, /sbx/site/N), a private /proc and /dev, and a size-capped tmpfs at /tmp
  (the scratch dir and cwd) -- no /root, /home, /etc, workspace database, project folder or keys;
- no network (own network namespace: not even the host's loopback), own PID, IPC and UTS namespaces, no
  capabilities, no_new_privs, ``--new-session``, ``--die-with-parent``. Started by an ordinary user, bwrap maps
  it into a new user namespace (no nested ones allowed); started by root, the code runs as a throwaway uid
  per run instead (see ``_sbx_compute_layout``), so that RLIMIT_NPROC holds;
- a clean environment (bwrap itself starts with one too, so /proc/1/environ holds nothing of ours);
- resource limits set before the code runs: CPU time, address space, processes, open files, file size;
- a wall-clock timeout that kills the sandbox; its PID namespace dies with it, so nothing outlives a run, and
  the scratch tmpfs exists only in the sandbox, so a killed caller leaves no directory behind.

Where bwrap is missing or cannot create namespaces, ``run_untrusted`` raises ``SandboxUnavailable``: generated
code is never run unconfined. Any other outcome, bad code included, is a ``SandboxResult``.
"""

from __future__ import annotations

import contextlib
import ctypes
import marshal
import os
import random
import re
import select
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any


def _slots_pool() -> Any:
    """The problem clock's account of the CPU slots (flowcore.execution.waits) when flowcore has loaded it; a
    standalone copy (an exported module, an unprivileged test's copy) has none, and never imports flowcore."""
    waits = sys.modules.get("flowcore.execution.waits")
    return waits.pool("sandbox", _cpus()) if waits is not None else None


def _give_span(a: float, b: float) -> None:
    waits = sys.modules.get("flowcore.execution.waits")
    if waits is not None:
        waits.clock_give_span(a, b)


OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream; the rest is drained and counted
SCRATCH_LIMIT = 64 * 1024 * 1024  # size of the /tmp tmpfs (the scratch dir)
FILE_SIZE_LIMIT = 32 * 1024 * 1024  # RLIMIT_FSIZE: one file
NPROC_LIMIT = 64  # processes + threads of the sandbox (its own uid, or its own user namespace)
NOFILE_LIMIT = 256
FALLBACK_NPROC = 2  # without a cgroup: bwrap's init and the interpreter, no more (see _sbx_execute)
SANDBOX_PYTHON = "/sbx/python"
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: sudo apt-get install -y bubblewrap; `make run` and "
                "`make test` do it when run as root)")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here: generated code was not run."""


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    memory_exceeded: bool
    error: str | None
    duration: float
    cpu_time: float | None = None  # CPU seconds of all the run's processes, when the host can tell
    overloaded: bool = False  # the wall clock ran out while the code had little CPU: the machine's fault
    peak_mb: float | None = None  # the run's peak memory as its cgroup counted it (None without a cgroup)


# The code that runs first inside the sandbox (python -I -S -B -c BOOTSTRAP JOB_FD REPORT_FD): the job comes in
# on one pipe, reports go out on another. The limits are set here, inside the sandbox's own user namespace, so
# RLIMIT_NPROC counts only its processes.
# The reports are a convenience for messages (what failed, where), not a security channel.
_BOOTSTRAP = r'''
import sys, os, marshal, resource
JOB, REP = int(sys.argv[1]), int(sys.argv[2])
with os.fdopen(JOB, "rb") as f:
    job = marshal.loads(f.read())  # marshal, not json: nothing to import, so a faster start
def report(kind, detail=""):
    try:
        os.write(REP, (kind + "\t" + str(detail)[:500].replace("\n", " ") + "\n").encode())
    except OSError:
        pass
# Defence in depth: the code must start with no capability and no way to regain one (bwrap gives both).
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
if 0 in os.getresuid() or status["NoNewPrivs"].strip() != "1" or any(
        status[k].strip().strip("0") for k in ("CapPrm", "CapEff", "CapAmb")):
    report("error", "sandbox: the code would have started with privileges")
    os._exit(70)
report("started")
sys.path.extend(job["site"])
lim = lambda r, soft, hard=None: resource.setrlimit(r, (soft, soft if hard is None else hard))
lim(resource.RLIMIT_CORE, 0)
lim(resource.RLIMIT_FSIZE, job["fsize"])
lim(resource.RLIMIT_NOFILE, job["nofile"])
lim(resource.RLIMIT_CPU, job["cpu"], job["cpu"] + 1)
lim(resource.RLIMIT_NPROC, job["nproc"])
lim(resource.RLIMIT_AS, job["memory"])
mode = job["mode"]
ns = {"__name__": "__main__" if mode == "code" else "__sandbox__", "__builtins__": __builtins__}
names = [name for name, _ in job["parts"]]

def lines_for_tracebacks():  # only on an error: importing traceback and linecache costs start-up time
    import linecache, traceback
    for name, src in job["parts"]:
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    return traceback

def where(tb):
    traceback = lines_for_tracebacks()
    found = None
    for fs in traceback.extract_tb(tb):
        if fs.filename in names:
            found = fs
    return found

def print_tb(e):
    traceback = lines_for_tracebacks()
    frames = [fs for fs in traceback.extract_tb(e.__traceback__) if fs.filename not in ("<string>", "<sandbox>")]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(e), e))
    sys.stderr.write("Traceback (most recent call last):\n" + text)

def finish(code):
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)

try:
    if mode in ("serve", "judge"):  # the two halves of a verdict: see _SERVE and _JUDGE
        exec(compile(job["runner"], "<sandbox>", "exec"), {"job": job, "report": report, "finish": finish,
                                                             "where": where, "print_tb": print_tb})
    for name, src in job["parts"]:
        exec(compile(src, name, "exec"), ns)
    if mode == "program" and callable(ns.get("solve")):
        print(ns["solve"]())
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if not isinstance(e.code, (int, type(None))):
        print(e.code, file=sys.stderr)
    finish(code)
except MemoryError:
    report("memory")
    print("MemoryError: memory limit of %d MB exceeded" % (job["memory"] >> 20), file=sys.stderr)
    finish(1)
except SyntaxError as e:
    lines_for_tracebacks().print_exc(limit=0)
    report("error", "SyntaxError: %s (%s line %s)" % (e.msg, e.filename, e.lineno))
    finish(1)
except BaseException as e:
    print_tb(e)
    fs = where(e.__traceback__)
    at = " (%s line %s)" % (fs.filename, fs.lineno) if fs else ""
    if getattr(e, "sbx_where", None):  # raised in the solution, across the judge's pipe
        at = " (%s%s)" % (e.sbx_where, ", called from " + at[2:-1] if at else "")
    if isinstance(e, AssertionError):
        src = (fs.line or "").strip() if fs else ""
        msg = "assertion failed" + (": " + src if src else "") + (" -- " + str(e) if str(e) else "") + at
    else:
        msg = "%s: %s%s" % (type(e).__name__, e, at)
    report("error", msg)
    finish(1)
finish(0)
'''


# -- the verdict: the candidate and the tests in two sandboxes --------------------------------------------
#
# A verdict never shares an interpreter or a writable channel with the code it judges. The candidate's program
# runs in one sandbox (_SERVE) and answers calls; the tests run in a second (_JUDGE), which alone reports
# "done" to us. Between them is one pipe pair that carries plain data: tagged JSON, decoded strictly into
# builtin values by the judge, so an object the candidate built (one that equals anything, say) never reaches
# the tests; a value that is not plain data crosses as an opaque handle that compares by identity. The hidden
# tests are never inside the candidate's sandbox, and nothing the candidate prints, patches or leaves behind
# (atexit and signal handlers, threads, children) can reach the judge's report.

_WIRE = r"""
import json, os
MAX_MESSAGE = 64 << 20

class WireError(BaseException):  # not an Exception: a test's `except Exception` must not swallow it
    pass

def _read(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf

def send(fd, obj):
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    data = len(data).to_bytes(4, "big") + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]

def recv(fd):
    head = _read(fd, 4)
    if head is None:
        return None
    n = int.from_bytes(head, "big")
    if n > MAX_MESSAGE:
        raise WireError("a message of %d bytes from the other side (limit %d)" % (n, MAX_MESSAGE))
    body = _read(fd, n)
    if body is None:
        return None
    def no_constants(name):
        raise ValueError("bare %s" % name)
    return json.loads(body.decode("utf-8"), parse_constant=no_constants)

def enc(x, handle, depth=0):
    # Plain data by its builtin base type (a Counter crosses as a dict, a namedtuple as a tuple): the other
    # side rebuilds plain builtins, so no method of the sender's classes (__eq__, __bool__...) goes with it.
    if depth > 100:
        raise ValueError("a value nested more than 100 levels deep")
    if x is None:
        return ["n"]
    if isinstance(x, bool):
        return ["b", bool(x)]
    if isinstance(x, int):
        return ["i", int.__index__(x)]
    if isinstance(x, float):
        x = float.__float__(x)
        return ["f", x if x == x and x not in (float("inf"), float("-inf")) else repr(x)]
    if isinstance(x, complex):
        return ["c", enc(x.real, handle), enc(x.imag, handle)]
    if isinstance(x, str):
        return ["s", str.__str__(x)]
    if isinstance(x, (bytes, bytearray)):
        return ["y", bytes(x).decode("latin-1")]
    for base, tag in ((list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F")):
        if isinstance(x, base):
            return [tag, [enc(v, handle, depth + 1) for v in base.__iter__(x)]]
    if isinstance(x, dict):
        return ["d", [[enc(k, handle, depth + 1), enc(v, handle, depth + 1)] for k, v in dict.items(x)]]
    if type(x).__module__ == "numpy" and hasattr(x, "item") and getattr(x, "shape", None) == ():
        return enc(x.item(), handle, depth + 1)  # a numpy scalar compares as its Python value
    return ["h", handle(x)]

def dec(v, remote, depth=0):
    # strict: only the tags above, each with a payload of exactly its type; anything else is a WireError
    if depth > 200 or type(v) is not list or not v or type(v[0]) is not str:
        raise WireError("a malformed value from the other side")
    tag, rest = v[0], v[1:]
    if tag == "n" and not rest:
        return None
    if len(rest) == 1:
        x = rest[0]
        if tag == "b" and type(x) is bool or tag == "s" and type(x) is str or tag == "i" and type(x) is int:
            return x
        if tag == "f" and type(x) is float:
            return x
        if tag == "f" and x in ("nan", "inf", "-inf"):
            return float(x)
        if tag == "y" and type(x) is str:
            return x.encode("latin-1")
        if tag == "h" and type(x) is int:
            return remote(x)
        if type(x) is list and tag in ("l", "t", "S", "F", "d"):
            if tag == "d":
                out = {}
                for pair in x:
                    if type(pair) is not list or len(pair) != 2:
                        raise WireError("a malformed mapping from the other side")
                    out[dec(pair[0], remote, depth + 1)] = dec(pair[1], remote, depth + 1)
                return out
            items = [dec(i, remote, depth + 1) for i in x]
            return items if tag == "l" else (tuple, set, frozenset)["tSF".index(tag)](items)
    if tag == "c" and len(rest) == 2:
        re_, im = dec(rest[0], remote, depth + 1), dec(rest[1], remote, depth + 1)
        if type(re_) is float and type(im) is float:
            return complex(re_, im)
    raise WireError("a malformed value from the other side")
"""

# The candidate's side: load the program, then answer the judge's requests until its pipe closes.
_SERVE = _WIRE + r"""
import sys
REQ, RSP = job["req_fd"], job["rsp_fd"]
ns = {"__name__": "__sandbox__", "__builtins__": __builtins__}
handles = []
def handle(obj):
    handles.append(obj)
    return len(handles) - 1

def describe(e):
    fs = where(e.__traceback__)
    at = " (%s line %s)" % (fs.filename, fs.lineno) if fs else ""
    return "%s: %s%s" % (type(e).__name__, e, at)

try:
    for name, src in job["parts"]:
        exec(compile(src, name, "exec"), ns)
except SyntaxError as e:
    send(RSP, {"load_error": "SyntaxError: %s (%s line %s)" % (e.msg, e.filename, e.lineno)})
    finish(1)
except SystemExit:
    finish(0)  # an exit while loading: the judge sees the pipe close before "ready"
except BaseException as e:
    print_tb(e)
    send(RSP, {"load_error": describe(e)})
    finish(1)
send(RSP, {"ready": True})
while True:
    msg = recv(REQ)
    if msg is None:
        finish(0)
    try:
        if msg.get("op") == "names":
            send(RSP, {"names": {n: enc(ns[n], handle) if n in ns else None for n in msg["names"]}})
            continue
        target = handles[msg["h"]]
        if msg.get("op") == "getattr":
            value = getattr(target, msg["name"])
            send(RSP, {"ok": enc(value, handle)})
            continue
        args = [dec(a, handles.__getitem__) for a in msg["args"]]
        kwargs = {k: dec(v, handles.__getitem__) for k, v in msg["kwargs"].items()}
        result = target(*args, **kwargs)
        send(RSP, {"ok": enc(result, handle), "args": [enc(a, handle) for a in args]})
    except BaseException as e:  # the candidate's exception travels back as a name, a message and a place
        try:
            fs = where(e.__traceback__)
            send(RSP, {"raise": [type(e).__name__, str(e)[:2000]],
                       "at": "%s line %s" % (fs.filename, fs.lineno) if fs else ""})
        except BaseException:
            send(RSP, {"raise": ["Exception", "an exception that cannot be described"]})
"""

# The judge's side: the tests, with the candidate's names bound to proxies that call across the pipe.
_JUDGE = _WIRE + r"""
import builtins
REQ, RSP = job["req_fd"], job["rsp_fd"]

class Remote:
    # a value of the candidate's that is not plain data: callable, attributes readable, equal only to itself
    __slots__ = ("_h",)
    def __init__(self, h):
        object.__setattr__(self, "_h", h)
    def __call__(self, *args, **kwargs):
        return call(self._h, args, kwargs)
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return exchange({"op": "getattr", "h": self._h, "name": name})[0]
    def __repr__(self):
        return "<a value of the solution's (not plain data)>"

def handle(obj):
    if type(obj) is Remote:
        return object.__getattribute__(obj, "_h")
    raise TypeError("cannot pass a %s to the solution" % type(obj).__name__)

def exchange(msg, args=()):
    send(REQ, msg)
    reply = recv(RSP)
    if reply is None:
        raise WireError("the solution's process ended during a call")
    if type(reply) is not dict:
        raise WireError("a malformed reply from the solution")
    if "raise" in reply:
        info = reply["raise"]
        if type(info) is not list or len(info) != 2 or not all(type(i) is str for i in info):
            raise WireError("a malformed reply from the solution")
        kind = getattr(builtins, info[0], None)
        error = RuntimeError("%s: %s" % tuple(info))
        if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
            try:
                error = kind(info[1])
            except Exception:
                pass
        if type(reply.get("at")) is str and reply["at"]:
            error.sbx_where = reply["at"][:200]
        raise error
    if "ok" not in reply:
        raise WireError("a malformed reply from the solution")
    value = dec(reply["ok"], Remote)
    back = reply.get("args")
    if type(back) is list and len(back) == len(args):  # arguments the solution changed in place
        for a, sent, now in zip(args, msg["args"], back):
            if now != sent and type(a) in (list, dict, set):
                new = dec(now, Remote)
                if type(new) is not type(a):
                    raise WireError("a malformed reply from the solution")
                if type(a) is list:
                    a[:] = new
                else:
                    a.clear()
                    a.update(new)
    return value, reply

def call(h, args, kwargs):
    msg = {"op": "call", "h": h, "args": [enc(a, handle) for a in args],
           "kwargs": {str(k): enc(v, handle) for k, v in kwargs.items()}}
    return exchange(msg, args)[0]

first = recv(RSP)
if first is None:
    report("error", "the code exited before the tests finished")
    finish(1)
if type(first) is not dict or "ready" not in first:
    report("error", str(first.get("load_error", "the solution did not start")) if type(first) is dict
           else "the solution did not start")
    finish(1)
ns = {"__name__": "__sandbox__", "__builtins__": builtins}
if job["context"]:  # the problem's own text (HumanEval's prompt: imports, helpers, the stub): trusted
    exec(compile(job["context"], "prompt.py", "exec"), ns)
for module in job["imports"]:  # stdlib modules the tests use without importing (the solution did)
    try:
        ns[module] = __import__(module)
    except ImportError:
        pass
send(REQ, {"op": "names", "names": job["names"]})
reply = recv(RSP)
names = reply.get("names") if type(reply) is dict else None
if type(names) is not dict:
    report("error", "the code exited before the tests finished" if reply is None else
           "a malformed reply from the solution")
    finish(1)
for name in job["names"]:
    if names.get(name) is not None:
        ns[name] = dec(names[name], Remote)
entry = job["entry_point"]
if entry and names.get(entry) is None:
    report("error", "the solution does not define %r" % entry)
    finish(1)
exec(compile(job["tests"], "tests.py", "exec"), ns)
if job["harness"]:
    ns["check"](ns[entry])
report("done")
finish(0)
"""

def run_untrusted(code: str, *, tests: str | list[str] | None = None, entry_point: str | None = None,
                  call_solve: bool = False, stdin: str | None = None, timeout: float = 10.0,
                  memory_mb: int = 512, context: str | None = None) -> SandboxResult:
    """Run ``code`` in the sandbox. Raises SandboxUnavailable (nothing was run) when bubblewrap is missing.

    - plain: ``code`` runs as ``__main__``; ok when it exits 0 within the limits (``stdin`` is its input);
    - ``call_solve``: then ``solve()`` is called and its result printed (ProgrammerOp's contract);
    - ``tests``: ok iff the tests run to the end without failing, judged in a sandbox of their own that calls
      the solution's functions across a pipe (see _SERVE/_JUDGE). HumanEval style, they define
      ``check(candidate)``, called with ``entry_point``; MBPP style, they are plain ``assert`` lines (a list is
      joined). ``context`` is trusted code of the problem's (HumanEval's prompt) that the tests may use.
      Exiting early counts as a failure.
    """
    start = time.monotonic()
    parts, mode = [("main.py", code)], "code"
    if tests is not None:
        if isinstance(tests, (list, tuple)):
            tests = "\n".join(str(t) for t in tests)
        if isinstance(tests, str) and not tests.strip():
            return _sbx_failure("no tests given")
        parts, mode = [("solution.py", code), ("tests.py", tests)], "tests"
        if context is not None:
            parts.append(("prompt.py", context))
    elif call_solve:
        parts, mode = [("program.py", code)], "program"
    for name, src in parts:
        if not isinstance(src, str):
            return _sbx_failure(f"{name}: expected source text, got {type(src).__name__}")
    try:
        timeout, memory_mb = max(float(timeout), 0.05), max(int(memory_mb), 64)
    except (TypeError, ValueError):
        return _sbx_failure(f"bad sandbox limits: timeout={timeout!r}, memory_mb={memory_mb!r}")
    layout = _sbx_layout()  # raises SandboxUnavailable
    pool = _slots_pool()
    with pool.waiting() if pool else contextlib.nullcontext():  # slots others hold: their time (execution.waits)
        _RUN_SLOTS.acquire()  # one run per CPU at a time: see _RUN_SLOTS (the clock starts once it has its turn)
    try:
        if _cancelled():  # its problem ended while it waited for a slot
            return _sbx_failure("cancelled before it ran")
        with pool.holding() if pool else contextlib.nullcontext():
            if mode == "tests":
                return _sbx_verdict(layout, code, tests, entry_point, context or "", timeout, memory_mb, start)
            return _sbx_run(layout, {"parts": parts, "mode": mode, "entry_point": entry_point}, timeout,
                            memory_mb, stdin, start)
    finally:
        _RUN_SLOTS.release()


_CANCEL = threading.local()


@contextlib.contextmanager
def cancel_on(event: threading.Event) -> Any:
    """Runs started in this thread inside it are killed within LOAD_SAMPLE_S of ``event`` being set (their
    problem was cancelled: its timeout, the user's stop), so they never hold a CPU slot for a problem that is
    over."""
    _CANCEL.event = event
    try:
        yield
    finally:
        _CANCEL.event = None


def _cancelled() -> bool:
    event = getattr(_CANCEL, "event", None)
    return event is not None and event.is_set()


def _cpus() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


# At most one sandboxed run (a verdict's two halves count as one) per CPU at a time in this process. Each run gets
# one CPU, and the time a run waits for a CPU is given back as other work's fault (see _Credit); an evaluation runs
# --concurrency problems at once, so without this its own runs starved each other: eight spinning answers on two
# cores got a quarter of a CPU each, reached the 3x cap and were all "errored (machine too busy)", left out of the
# score instead of wrong (tests/execution/test_sandbox_load.py, test_concurrent_spinning_answers_...). A run waits
# for its turn before its clock starts, so waiting never costs it time.
_RUN_SLOTS = threading.BoundedSemaphore(_cpus())


def _sbx_run(layout: dict, job: dict, timeout: float, memory_mb: int, stdin: str | None, start: float,
             extra_fds: tuple[int, ...] = (), on_spawn=None, credit: _Credit | None = None) -> SandboxResult:
    uid = _sbx_claim_uid() if layout["root"] else None
    job = {**job, "site": layout["site"], "uid": uid, "memory": memory_mb << 20, "fsize": FILE_SIZE_LIMIT,
           "nofile": NOFILE_LIMIT, "nproc": NPROC_LIMIT, "cpu": int(timeout) + 2}
    try:
        return _sbx_execute(layout, job, timeout, memory_mb, stdin, start, extra_fds, on_spawn, credit)
    finally:
        if uid is not None:
            _sbx_release_uid(uid)


def _sbx_verdict(layout: dict, code: str, tests: str, entry: str | None, context: str, timeout: float,
                 memory_mb: int, start: float) -> SandboxResult:
    """The tests' verdict on ``code``: the candidate serves calls in one sandbox, the judge runs the tests in
    another; only the judge's report decides ``ok``."""
    harness = bool(re.search(r"^def\s+check\s*\(", tests, re.MULTILINE))
    if harness and not entry:
        return _sbx_failure("the tests define check(candidate) but no entry point was given")
    names, imports = _sbx_free_names(tests, context, entry, harness)
    req_r, req_w = os.pipe()  # judge -> candidate
    rsp_r, rsp_w = os.pipe()  # candidate -> judge
    serve = {"parts": [("solution.py", code)], "mode": "serve", "runner": _SERVE, "entry_point": None,
             "req_fd": req_r, "rsp_fd": rsp_w}
    judge = {"parts": [("prompt.py", context), ("tests.py", tests)], "mode": "judge", "runner": _JUDGE,
             "entry_point": entry, "req_fd": req_w, "rsp_fd": rsp_r, "tests": tests, "context": context,
             "names": names, "imports": imports, "harness": harness}
    spawned: list = []
    served: dict = {}
    credit = _Credit()  # both sides' waiting: the candidate does the judge's work while the judge waits on it

    def on_candidate(proc, tasks, cpu) -> None:
        spawned.append(proc)
        credit.add(tasks, cpu)

    def candidate() -> None:
        try:  # the judge decides when this ends: its own clock is only a backstop
            served["result"] = _sbx_run(layout, serve, timeout * LOAD_GRACE, memory_mb, None, start,
                                        (req_r, rsp_w), on_candidate)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            served["error"] = exc

    thread = threading.Thread(target=candidate, daemon=True)
    thread.start()
    try:
        verdict = _sbx_run(layout, judge, timeout, memory_mb, None, start, (req_w, rsp_r),
                           lambda proc, tasks, cpu: credit.add(tasks, cpu), credit)
    finally:
        for proc in spawned:  # the verdict is in: nothing the candidate left running goes on
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        thread.join()
    if "error" in served:
        raise served["error"]
    cand = served["result"]
    cpu = None if verdict.cpu_time is None or cand.cpu_time is None else verdict.cpu_time + cand.cpu_time
    return SandboxResult(verdict.ok, cand.stdout, cand.stderr + verdict.stderr, verdict.returncode,
                         verdict.timed_out, cand.memory_exceeded or verdict.memory_exceeded, verdict.error,
                         round(time.monotonic() - start, 4), cpu, verdict.overloaded)


def _sbx_free_names(tests: str, context: str, entry: str | None, harness: bool) -> tuple[list[str], list[str]]:
    """(names the judge takes from the solution, stdlib modules it imports itself) for these tests: the
    names the tests read but neither define nor get from builtins or the problem's own text."""
    import ast
    import builtins

    defined: set[str] = set(dir(builtins)) | {"candidate"}
    used: set[str] = set()
    for src in (context, tests):
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            continue  # the judge reports it
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name):
                (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    free = sorted(used - defined)
    imports = [n for n in free if n in sys.stdlib_module_names]
    names = [n for n in free if n not in sys.stdlib_module_names]
    if entry and entry not in names:
        names.insert(0, entry)
    return names, imports


def sandbox_status() -> tuple[bool, str]:
    """(ready, one line for people): whether generated code can run here, checked by running a trivial
    program in the sandbox (once per process when it works)."""
    global _status_ok
    if _status_ok is not None:
        return True, _status_ok
    try:
        res = run_untrusted("print('ok')", timeout=20)
    except SandboxUnavailable as exc:
        return False, str(exc)
    if res.stdout.strip() != "ok":
        return False, f"the sandbox starts but a trivial program failed: {res.error or res.stderr[-300:]}"
    _status_ok = f"bubblewrap sandbox ready ({_sbx_layout()['bwrap']}); {budget_mode()}"
    return True, _status_ok


def budget_mode() -> str:
    """One line for people: how a run's memory and processes are bounded here."""
    roots = _sbx_layout()["cgroups"]
    if roots:
        return (f"seccomp filter on; one budget per run across all its processes: a cgroup "
                f"({'v1' if 'v1' in roots else 'v2'}) with its memory cap and {NPROC_LIMIT} processes")
    return ("seccomp filter on; no cgroup can be made here (not root, or none delegated), so the fallback "
            "holds: one process with no threads, its address space capped at the run's memory")


def require_sandbox() -> None:
    """Raise SandboxUnavailable unless generated code can run confined here."""
    ok, msg = sandbox_status()
    if not ok:
        raise SandboxUnavailable(msg)


_status_ok: str | None = None
_uids_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _sbx_claim_uid() -> int:
    """A uid no account and no other running sandbox uses: RLIMIT_NPROC then counts this run alone."""
    with _uids_lock:
        while True:
            uid = random.randrange(200_000, 1_200_000)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


def _sbx_release_uid(uid: int) -> None:
    with _uids_lock:
        _uids_in_use.discard(uid)
_layout_cache: dict | None = None
_layout_lock = threading.Lock()


def _sbx_failure(error: str, duration: float = 0.0) -> SandboxResult:
    return SandboxResult(False, "", "", None, False, False, error, duration)


def _sbx_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _sbx_layout() -> dict:
    """Where things are, and the bwrap arguments shared by every run (computed once)."""
    global _layout_cache
    with _layout_lock:
        if _layout_cache is None:
            _layout_cache = _sbx_compute_layout()
        layout = _layout_cache
    if not os.path.exists(layout["bwrap"]):
        _layout_cache = None
        raise SandboxUnavailable(f"generated code was not run: bubblewrap (bwrap) is not installed; "
                                 f"{INSTALL_HINT}")
    return layout


STAGE = "/mnt"  # where root stages unreachable sources, under a tmpfs of the run's own mount namespace


def _sbx_reachable(path: str) -> bool:
    """Whether any uid (not owner, not in the group) can reach and read ``path``."""
    import stat

    parts = path.rstrip("/").split("/")
    for i in range(1, len(parts) + 1):
        try:
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH and stat.S_ISDIR(mode):
            return False
    return bool(mode & stat.S_IROTH)


def _sbx_compute_layout() -> dict:
    bwrap = (os.environ.get("MERMAIDFLOW_BWRAP") or shutil.which("bwrap")  # the variable: a bwrap elsewhere
             or shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") or "/usr/bin/bwrap")
    base = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    root = os.geteuid() == 0
    staged: list[tuple[str, str]] = []

    def bind(src: str, dest: str) -> list[str]:
        # bwrap runs as a throwaway uid, which may not be able to walk to a source (an interpreter under a
        # 0700 /root). Root then binds such a source, read-only, at a reachable stage path first, inside a
        # mount namespace of the run's own (see _sbx_execute): nothing on the host changes.
        if root and not _sbx_reachable(src) and not _sbx_under(src, STAGE):
            staged.append((src, f"{STAGE}/{len(staged)}"))
            src = staged[-1][1]
        return ["--ro-bind", src, dest]

    # Folders bwrap makes for the mount points below would be 0700: make them 0755 first.
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/etc", "/sbx", "/sbx/site", "/sbx/bin"):
        args += ["--perms", "0755", "--dir", d]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # merged-/usr symlinks, or the real dirs
        p = "/" + top
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    if os.path.exists("/etc/ld.so.cache"):  # the loader's index of /usr/lib (not secret; speeds start-up)
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    system = ("/usr",)
    if any(_sbx_under(base, s) for s in system):
        python = exe if any(_sbx_under(exe, s) for s in system) else None
        inner_base = base
    else:
        args += bind(base, SANDBOX_PYTHON)
        python = SANDBOX_PYTHON + exe[len(base):] if _sbx_under(exe, base) else None
        inner_base = SANDBOX_PYTHON
        env["LD_LIBRARY_PATH"] = SANDBOX_PYTHON + "/lib"  # its libpython (RUNPATH names the outside path)
    if python is None:  # an interpreter outside its prefix: bind the binary alone
        python = "/sbx/bin/python3"
        args += bind(exe, python)
    # The interpreter runs with -S (no site module: .pth files are code, and this machine's base site-packages
    # holds one that imports certifi on every start); its package folders go on sys.path as plain entries.
    sites: list[str] = []
    candidates = list(site.getsitepackages()) + [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    for d in dict.fromkeys(os.path.realpath(c) for c in candidates if c):
        if not os.path.isdir(d):
            continue
        if _sbx_under(d, base):
            sites.append(inner_base + d[len(base):])  # comes with the interpreter's bind
        elif any(_sbx_under(d, s) for s in system):
            sites.append(d)
        else:
            inner = f"/sbx/site/{len(sites)}"
            args += bind(d, inner)
            sites.append(inner)
    # One path for root and for an ordinary user: bwrap always runs unprivileged (root drops to a throwaway uid
    # first, see _sbx_execute) and maps that uid to 65534 in a user namespace of its own, in which no further
    # user namespace can be made (--disable-userns; seccomp denies the calls as well). Only /tmp is writable;
    # /proc is read-only.
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SCRATCH_LIMIT),
             "--tmpfs", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/proc", "--remount-ro", "/",
             "--chdir", "/tmp", "--hostname", "sandbox", "--die-with-parent", "--new-session", "--clearenv",
             "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return {"bwrap": bwrap, "args": args, "staged": staged, "python": python, "site": sites,
            "base": inner_base, "root": root, "seccomp": _sbx_seccomp_bpf(),
            "setpriv": shutil.which("setpriv", path="/usr/bin:/bin") if root else None,
            "unshare": shutil.which("unshare", path="/usr/bin:/bin") if root else None,
            "cgroups": _sbx_cgroup_roots() if root else None}


# -- seccomp (libseccomp, through ctypes) ----------------------------------------------------------------------

# What a solution has no use for, after Docker's default profile: the kernel keyrings (which would reach the
# host's session keyring), io_uring, bpf, perf, userfaultfd, memory held outside the address space (memfd, SysV
# shared memory), tracing other processes, mounting, namespaces
# (unshare, setns, the CLONE_NEW* flags of clone; clone3 reads its flags from memory a filter cannot see, so
# it answers ENOSYS and the C library falls back to clone), kernel modules, kexec, and personalities other
# than the usual ones.
_DENY = ("keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf",
         "perf_event_open", "userfaultfd", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
         "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
         "mount_setattr", "unshare", "setns", "chroot", "kexec_load", "kexec_file_load", "init_module",
         "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "lookup_dcookie",
         "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "settimeofday", "clock_settime",
         "clock_adjtime", "adjtimex", "syslog", "uselib", "fanotify_init", "pidfd_getfd", "vhangup",
         # Memory no address-space limit counts: a memfd filled with write() and SysV shared memory attached,
         # touched and detached stay allocated without being mapped. Where there is no cgroup (an ordinary
         # user's run, the fallback) RLIMIT_AS was then no cap at all: 40 memfds held 1.3 GB and six 200 MB shm
         # segments 1.2 GB beside a 512 MB budget (tests/helpers/hostile_programs.py). /tmp is a capped tmpfs.
         "memfd_create", "memfd_secret", "shmget")
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (NEWTIME only exists for clone3/unshare)
_CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
# ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, ADDR_LIMIT_32BIT/3GB, FDPIC_FUNCPTRS,
# SHORT_INODE, WHOLE_SECONDS, STICKY_TIMEOUTS: what personality() can weaken
_PERSONA_FLAGS = (0x0040000, 0x0400000, 0x0100000, 0x0200000, 0x0800000, 0x8000000, 0x0080000, 0x1000000,
                  0x2000000, 0x4000000)
SECCOMP_HINT = "install libseccomp2 (Debian/Ubuntu: sudo apt-get install -y libseccomp2)"


class _ArgCmp(ctypes.Structure):  # libseccomp's struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _sbx_seccomp_bpf() -> bytes:
    """The filter, compiled to BPF by libseccomp itself (its C API through ctypes, so an exported module
    needs nothing beyond the standard library) for bwrap's --seccomp. Raises SandboxUnavailable without it."""
    from ctypes.util import find_library

    try:
        lib = ctypes.CDLL(find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    except OSError as e:
        raise SandboxUnavailable(f"generated code was not run: no seccomp filter can be built here ({e}); "
                                 f"{SECCOMP_HINT}") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SCMP_ACT_ALLOW, SCMP_ACT_ERRNO(EPERM)
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise SandboxUnavailable("generated code was not run: libseccomp could not start a filter")

    def rule(action: int, name: str, *cmps: tuple[int, int, int, int]) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # a call this kernel/architecture does not have
        arr = (_ArgCmp * max(len(cmps), 1))(*[_ArgCmp(*c) for c in cmps])
        rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
        if rc < 0:
            raise SandboxUnavailable(f"generated code was not run: libseccomp refused the rule for {name} "
                                     f"({os.strerror(-rc)})")

    masked_eq = 7  # SCMP_CMP_MASKED_EQ: (arg & datum_a) == datum_b
    try:
        for name in _DENY:
            rule(deny, name)
        for flag in _CLONE_NEW:  # rules for one call are or-ed: any namespace flag is refused
            rule(deny, "clone", (0, masked_eq, flag, flag))
        rule(0x00050000 | 38, "clone3")  # ENOSYS
        for flag in _PERSONA_FLAGS:  # with bit 31 in the mask, the query personality(0xffffffff) stays allowed
            rule(deny, "personality", (0, masked_eq, flag | 0x80000000, flag))
        fd = os.memfd_create("seccomp", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise SandboxUnavailable(f"generated code was not run: libseccomp could not export its filter "
                                         f"({os.strerror(-rc)})")
            return os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


# -- cgroups: one memory, process and CPU budget per run ------------------------------------------------------

def _sbx_cgroup_roots() -> dict | None:
    """Where this process may make a run's cgroups: {"v1": {controller: dir}} or {"v2": dir}; None when the
    host gives no writable memory and pids controllers (then the rlimit fallback holds, see sandbox_status)."""
    try:
        lines = _sbx_read("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    v1: dict[str, str] = {}
    v2 = None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        for ctrl in ctrls.split(","):
            if ctrl in ("memory", "pids", "cpuacct", "cpu"):
                v1[ctrl] = f"/sys/fs/cgroup/{ctrl}{path.rstrip('/')}"
        if ctrls == "":
            v2 = path
    if "cpu" in v1 and not (os.access(v1["cpu"], os.W_OK) and os.path.exists(v1["cpu"] + "/cpu.cfs_quota_us")):
        del v1["cpu"]  # no CPU quota here: the credit rule alone keeps a run from starving itself into "errored"
    if {"memory", "pids", "cpuacct"} <= set(v1) and all(os.access(d, os.W_OK) for d in v1.values()):
        return {"v1": v1}
    for top in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        d = top + (v2 or "/").rstrip("/")
        try:
            have = _sbx_read(f"{top}/cgroup.controllers").split()
        except OSError:
            continue
        if {"memory", "pids"} <= set(have) and os.access(d, os.W_OK):
            return {"v2": d}
    return None


_cg_counter = iter(range(1 << 62))
# Every run gets at most one CPU, however many processes it starts: its children compete with each other, not
# with the host (60 spinning children pin one core, not every core), and never earn load credit (see _Credit).
CPU_QUOTA = 1.0
CPU_PERIOD_US = 100_000


class _Cgroup:
    """A run's cgroup(s), made before it starts and removed after: memory and pids limits, a CPU quota (one CPU
    for all of the run's processes, where the host has the cpu controller), CPU usage."""

    def __init__(self, roots: dict, memory_mb: int) -> None:
        name = f"mermaidflow-{os.getpid()}-{next(_cg_counter)}"
        self.dirs: list[str] = []
        self.quota = False
        if "v1" in roots:
            v1 = roots["v1"]
            self.mem, self.pids, self.cpu = (f"{v1[c]}/{name}" for c in ("memory", "pids", "cpuacct"))
            quota = f"{v1['cpu']}/{name}" if "cpu" in v1 else None
            for d in (self.mem, self.pids, self.cpu, quota):
                # cpu and cpuacct are often one hierarchy mounted twice (cpu,cpuacct): one folder then
                if d is not None and not any(os.path.realpath(d) == os.path.realpath(x) for x in self.dirs):
                    os.mkdir(d)
                    self.dirs.append(d)
            _sbx_put(self.mem + "/memory.limit_in_bytes", memory_mb << 20)
            try:
                _sbx_put(self.mem + "/memory.memsw.limit_in_bytes", memory_mb << 20)
            except OSError:
                pass  # no swap accounting
            _sbx_put(self.pids + "/pids.max", NPROC_LIMIT)
            if quota is not None:
                _sbx_put(quota + "/cpu.cfs_period_us", CPU_PERIOD_US)
                _sbx_put(quota + "/cpu.cfs_quota_us", int(CPU_PERIOD_US * CPU_QUOTA))
                self.quota = True
        else:
            d = f"{roots['v2']}/{name}"
            os.mkdir(d)
            self.dirs.append(d)
            self.mem = self.pids = self.cpu = d
            _sbx_put(d + "/memory.max", memory_mb << 20)
            _sbx_put(d + "/memory.swap.max", 0) if os.path.exists(d + "/memory.swap.max") else None
            _sbx_put(d + "/pids.max", NPROC_LIMIT)
            if os.path.exists(d + "/cpu.max"):  # the parent delegates the cpu controller
                _sbx_put(d + "/cpu.max", f"{int(CPU_PERIOD_US * CPU_QUOTA)} {CPU_PERIOD_US}")
                self.quota = True
        self.v1 = "v1" in roots

    @property
    def procs(self) -> list[str]:
        return [d + "/cgroup.procs" for d in self.dirs]

    def cpu_time(self) -> float | None:
        try:
            if self.v1:
                return int(_sbx_read(self.cpu + "/cpuacct.usage")) / 1e9
            stat = dict(line.split() for line in _sbx_read(self.cpu + "/cpu.stat").splitlines())
            return int(stat["usage_usec"]) / 1e6
        except (OSError, KeyError, ValueError):
            return None

    def peak_mb(self) -> float | None:
        """The most memory the kernel charged the run at once (every page of all its processes, swap too)."""
        names = ("/memory.memsw.max_usage_in_bytes", "/memory.max_usage_in_bytes") if self.v1 else ("/memory.peak",)
        for name in names:
            try:
                return int(_sbx_read(self.mem + name)) / (1 << 20)
            except (OSError, ValueError):
                continue
        return None

    def tasks(self) -> list[int]:
        try:
            return [int(t) for t in _sbx_read(self.mem + ("/tasks" if self.v1 else "/cgroup.threads")).split()]
        except (OSError, ValueError):
            return []

    def oom_killed(self) -> bool:
        try:
            if self.v1:
                ctl = dict(line.split() for line in _sbx_read(self.mem + "/memory.oom_control").splitlines())
                return int(ctl.get("oom_kill", 0)) > 0 or int(_sbx_read(self.mem + "/memory.failcnt")) > 0
            ev = dict(line.split() for line in _sbx_read(self.mem + "/memory.events").splitlines())
            return int(ev.get("oom_kill", 0)) > 0 or int(ev.get("max", 0)) > 0
        except (OSError, ValueError):
            return False

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):  # the last tasks may take a moment to be reaped after the kill
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _sbx_read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _sbx_put(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _sbx_waits(pids: list[int]) -> tuple[float, dict[int, int]]:
    """(CPU seconds of these tasks, {tid: nanoseconds it has waited for a CPU while runnable})."""
    cpu, waits = 0, {}
    for tid in pids:
        try:
            on, queued, _ = _sbx_read(f"/proc/{tid}/schedstat").split()
        except (OSError, ValueError):
            continue
        cpu += int(on)
        waits[tid] = int(queued)
    return cpu / 1e9, waits


class _Credit:
    """The wall-clock time a run is given back because other work on the host kept it from a CPU.

    Sampled every LOAD_SAMPLE_S over all the sandboxes of one run (a verdict has two). In each interval the
    credit is the least of
    - the most any *one* of the run's tasks waited for a CPU while runnable (what a single-task run would have
      waited: never the sum over its processes, which 60 spinning children make 60 times the wall clock), and
    - the interval less the CPU time the whole run got in it (a run that keeps a CPU busy, even a quota's worth
      spread over many children, was not kept waiting by anyone).
    A task kept waiting by its own siblings waits at most their CPU time, so what a run can earn from itself is at
    most min(cpu, interval - cpu): half the interval. Its own time then grows at least half as fast as the wall
    clock and reaches the timeout within 2x, before LOAD_GRACE's 3x: a self-starving answer is timed out (wrong),
    never "errored" (tests/execution/test_sandbox_load.py, the hostile table's 60 spinning children)."""

    def __init__(self) -> None:
        self.sources: list[tuple] = []  # (tasks(), cpu() or None) per sandbox
        self.lock = threading.Lock()
        self.last = time.monotonic()
        self.cpu = 0.0
        self.waits: dict[int, int] = {}
        self.total = 0.0

    def add(self, tasks, cpu) -> None:
        with self.lock:
            self.sources.append((tasks, cpu))

    def sample(self) -> float:
        """Take a sample now; the credit so far (seconds)."""
        with self.lock:
            now, cpu, waits = time.monotonic(), 0.0, {}
            for tasks, cpu_of in self.sources:
                own, w = _sbx_waits(tasks())
                counted = cpu_of() if cpu_of is not None else None
                cpu += own if counted is None else counted  # the cgroup counts children that have exited too
                waits.update(w)
            waited = max((w - self.waits.get(t, 0) for t, w in waits.items()), default=0) / 1e9
            got = max(cpu - self.cpu, 0.0)
            self.total += max(0.0, min(waited, (now - self.last) - got))
            self.last, self.cpu = now, max(cpu, self.cpu)
            self.waits.update(waits)
            return self.total


def _sbx_tree(pid: int) -> list[int]:
    """The threads of ``pid`` and of all its descendants (when there is no cgroup to ask)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = _sbx_read(f"/proc/{entry}/stat")
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            out += [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            pass
        todo += children.get(p, [])
    return out


# Run by root before bwrap: enter the cgroups, stage the unreachable sources read-only, exec the rest.
# Run by root before bwrap: enter the cgroups ("$1"... up to --), then, when a source needs staging, mount a small
# tmpfs over the stage folder (this run's mount namespace only: the host's folder is untouched) and bind each
# source ("$1" -> "$2" pairs, up to --) read-only under it; then exec the rest.
_SHIM = ('while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
         'if [ "$1" != -- ]; then mount -t tmpfs -o size=64k,mode=755 sbx "$STAGE" || exit 125; fi; '
         'while [ "$1" != -- ]; do mkdir -p "$2" && mount --bind "$1" "$2" && '
         'mount -o remount,bind,ro "$2" || exit 125; shift 2; done; shift; exec "$@"')
LOAD_GRACE = 3.0  # a run starved of CPU gets back the time it waited, up to this many times its timeout
LOAD_SAMPLE_S = 0.2  # how often a running sandbox's waiting is sampled (see _Credit)


def _sbx_execute(layout: dict, job: dict, timeout: float, memory_mb: int, stdin: str | None,
                 start: float, extra_fds: tuple[int, ...] = (), on_spawn=None,
                 credit: _Credit | None = None) -> SandboxResult:
    """One sandboxed process. ``extra_fds`` are handed to it at the same numbers (and closed here once it has
    them); ``on_spawn(proc, tasks, cpu)`` lets a caller kill it early and see its threads and CPU time;
    ``credit`` measures the load credit over all of the run's sandboxes (default: this sandbox's own)."""
    # Encoded before anything starts: a lone surrogate (an LLM reply may hold "\ud800") made a strict encode raise
    # after the sandbox had started, which left it waiting on its input for good, its pipes open and its cgroup in
    # place, and failed every row of a python metric's batch. The code inside reads the bytes as they are.
    stdin_bytes = stdin.encode("utf-8", "surrogatepass") if stdin is not None else None
    job_r, job_w = os.pipe()
    rep_r, rep_w = os.pipe()
    bpf_r, bpf_w = os.pipe()
    os.write(bpf_w, layout["seccomp"])  # a few KB: fits the pipe
    os.close(bpf_w)
    cgroup = None
    try:
        if layout["cgroups"]:
            cgroup = _Cgroup(layout["cgroups"], memory_mb)
    except OSError:
        cgroup = None  # the host refused: the rlimit fallback below still bounds the run
    # Without a cgroup the budget is the rlimits': room for no process or thread beyond the code's own (bwrap's
    # init and the interpreter are the two), so the address-space cap is the whole run's memory.
    job = {**job, "nproc": NPROC_LIMIT if cgroup else FALLBACK_NPROC}
    # bwrap keeps inherited fds open for the command, at the same numbers
    argv = [layout["bwrap"], *layout["args"], "--seccomp", str(bpf_r), layout["python"], "-I", "-S", "-B",
            "-c", _BOOTSTRAP, str(job_r), str(rep_w)]
    if layout["root"]:
        # Root enters the run's cgroups, stages what the throwaway uid could not reach (in a mount namespace of
        # this run's own), becomes that uid (no account, no other run has it) and only then starts bwrap,
        # unprivileged: the same sandbox an ordinary user gets.
        uid = job["uid"]
        stage = [x for pair in layout["staged"] for x in pair]
        argv = ["/bin/sh", "-c", f"STAGE={STAGE}; {_SHIM}", "sh", *(cgroup.procs if cgroup else ()), "--", *stage, "--",
                layout["setpriv"] or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
                *argv]
        if stage:
            argv = [layout["unshare"], "--mount", "--propagation", "private", *argv]
    fds = (job_r, rep_w, bpf_r, *extra_fds)
    try:
        proc = subprocess.Popen(
            argv, env={"PATH": "/usr/bin:/bin"}, cwd="/",
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=fds, start_new_session=True)
    except OSError as e:
        for fd in (job_r, job_w, rep_r, rep_w, bpf_r, *extra_fds):
            os.close(fd)
        if cgroup:
            cgroup.remove()
        raise SandboxUnavailable(f"generated code was not run: cannot start bubblewrap ({e}); "
                                 f"{INSTALL_HINT}") from None
    for fd in (job_r, rep_w, bpf_r, *extra_fds):
        os.close(fd)
    tasks = cgroup.tasks if cgroup else (lambda: _sbx_tree(proc.pid))
    cpu_of = cgroup.cpu_time if cgroup else None
    gives = credit is not None or on_spawn is None  # a verdict's candidate side shares the judge's credit
    if credit is None:
        credit = _Credit()
        credit.add(tasks, cpu_of)
    if on_spawn is not None:
        on_spawn(proc, tasks, cpu_of)
    readers = [_Reader(proc.stdout.fileno()), _Reader(proc.stderr.fileno()), _Reader(rep_r, limit=1 << 20)]
    threading.Thread(target=_sbx_write, args=(job_w, marshal.dumps(job)), daemon=True).start()
    if stdin is not None:
        threading.Thread(target=_sbx_write, args=(proc.stdin.fileno(), stdin_bytes, proc.stdin),
                         daemon=True).start()
    timed_out = overloaded = False
    began = time.monotonic()
    deadline, cap = began + timeout, began + timeout * LOAD_GRACE
    given = 0.0  # credit already on the problem's clock: given as it accrues, so a deadline never outruns it
    exited = _sbx_exit_waiter(proc)
    while True:
        try:
            exited(max(min(deadline, time.monotonic() + LOAD_SAMPLE_S) - time.monotonic(), 0))
            break
        except subprocess.TimeoutExpired:
            if _cancelled():
                timed_out = True
                break
            # Load never flips a verdict: the time other work on the host kept the code from a CPU is given
            # back, so it is judged on its own time; past the cap that is the machine's fault, not a wrong
            # answer. What the run's own processes cost each other is never given back (see _Credit).
            owed = credit.sample()
            now = time.monotonic()
            if gives and owed > given:  # the host kept it off a CPU in the last sample: not its problem's time
                _give_span(now - min(owed - given, now - began), now)
                given = owed
            if began + timeout + owed > now + 0.01 and now < cap:
                deadline = min(began + timeout + owed, cap)
                continue
            timed_out, overloaded = True, now >= cap - 0.01 and owed > 0.25 * timeout
            break
    cpu = cgroup.cpu_time() if cgroup else None
    if cpu is None:
        cpu = _sbx_waits(tasks())[0] if proc.poll() is None else None
    try:  # bwrap's group; the PID namespace (and all it started, setsid or not) dies with its init
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    returncode = proc.wait()
    duration = time.monotonic() - start
    for r in readers:
        r.join(2.0)
    proc.stdout.close()
    proc.stderr.close()
    os.close(rep_r)
    oom = cgroup.oom_killed() if cgroup else False
    peak = cgroup.peak_mb() if cgroup else None
    if cgroup:
        cgroup.remove()
    out, err = readers[0].text(), readers[1].text()
    reports = _sbx_reports(readers[2].data)
    if returncode == 125 and not reports and not timed_out:
        raise SandboxUnavailable("generated code was not run: the run's cgroup could not be entered")
    if not any(k == "started" for k, _ in reports) and not timed_out and err.startswith(("bwrap:", "setpriv:")):
        raise SandboxUnavailable(f"generated code was not run: bubblewrap cannot create its sandbox here "
                                 f"({err.strip().splitlines()[0]})")
    if oom:
        reports.append(("memory", ""))
    res = _sbx_result(job["mode"], reports, out, err, returncode, timed_out, timeout, memory_mb, duration)
    res.cpu_time, res.overloaded, res.peak_mb = cpu, overloaded, peak
    if gives and credit.total > given:
        end = time.monotonic()  # the rest of the credit (spans, so parallel runs' credit is not summed)
        _give_span(end - min(credit.total - given, end - began), end)
    if overloaded:
        res.error = (f"timed out after {timeout:g}s of its own time within {timeout * LOAD_GRACE:g}s: the "
                     f"machine was too busy to give it a CPU (not the code's fault)")
    return res


def _sbx_exit_waiter(proc: subprocess.Popen):
    """wait(timeout) that returns the moment the process exits: Popen.wait(timeout) polls with sleeps of up to
    50 ms, which was most of a short run's cost. A pidfd becomes readable at exit (Linux 5.3+)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return lambda t: proc.wait(timeout=t)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    weakref.finalize(proc, os.close, fd)

    def wait(t: float) -> None:
        if not poller.poll(t * 1000):
            raise subprocess.TimeoutExpired(proc.args, t)
        proc.wait()
    return wait


def _sbx_result(mode, reports, out, err, returncode, timed_out, timeout, memory_mb, duration) -> SandboxResult:
    kinds = {k for k, _ in reports}
    reported_error = next((d for k, d in reports if k == "error"), None)
    memory = "memory" in kinds or (not timed_out and "MemoryError" in err)
    if timed_out:
        error = f"timed out after {timeout:g}s"
    elif memory:
        error = f"memory limit {memory_mb} MB exceeded"
    elif reported_error:
        error = reported_error
    elif returncode is not None and returncode < 0:
        error = f"killed by {_sbx_signal_name(-returncode)}"
    elif returncode is not None and returncode > 128 and "started" in kinds and "done" not in kinds:
        # bwrap reports a command killed by signal N as exit 128+N
        error = f"killed by {_sbx_signal_name(returncode - 128)}"
        if returncode - 128 == signal.SIGXFSZ:
            error += f" (file size limit {FILE_SIZE_LIMIT >> 20} MB exceeded)"
        elif returncode - 128 == signal.SIGXCPU:
            error += " (CPU time limit exceeded)"
    elif returncode:
        error = f"exit code {returncode}"
    elif mode == "judge" and "done" not in kinds:
        error = "the code exited before the tests finished"
    else:
        error = None
    ok = error is None and returncode == 0
    return SandboxResult(ok, out, err, returncode, timed_out, memory, error, round(duration, 4))


def _sbx_signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _sbx_reports(data: bytes) -> list[tuple[str, str]]:
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        kind, tab, detail = line.partition("\t")
        if tab and kind in ("started", "error", "memory", "done"):
            out.append((kind, detail))  # anything else is the code scribbling on the fd: not ours
    return out


class _Reader:
    """Drains a pipe on a thread, keeping the first ``limit`` bytes (so a print loop cannot eat memory)."""

    def __init__(self, fd: int, limit: int = OUTPUT_LIMIT) -> None:
        self.fd, self.limit, self.total = fd, limit, 0
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        kept = 0
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.total += len(chunk)
            if kept < self.limit:
                self.chunks.append(chunk[: self.limit - kept])
                kept += len(self.chunks[-1])

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    def text(self) -> str:
        s = self.data.decode("utf-8", "replace")
        if self.total > self.limit:
            s += f"\n... [output truncated: {self.total} bytes in all]"
        return s


def _sbx_write(fd: int, data: bytes, owner: object = None) -> None:
    """Write all of ``data`` to a pipe and close it (on a thread: a pipe holds only 64 KiB)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass
    finally:
        try:
            owner.close() if owner is not None else os.close(fd)  # type: ignore[attr-defined]
        except OSError:
            pass
