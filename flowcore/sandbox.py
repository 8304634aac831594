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

import marshal
import os
import random
import re
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream; the rest is drained and counted
SCRATCH_LIMIT = 64 * 1024 * 1024  # size of the /tmp tmpfs (the scratch dir)
FILE_SIZE_LIMIT = 32 * 1024 * 1024  # RLIMIT_FSIZE: one file
NPROC_LIMIT = 64  # processes + threads of the sandbox (its own uid, or its own user namespace)
NOFILE_LIMIT = 256
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


# The code that runs first inside the sandbox (python -I -S -B -c BOOTSTRAP JOB_FD REPORT_FD): the job JSON comes
# in on one pipe, reports go out on another. The
# limits are set here, inside the sandbox's own user namespace, so RLIMIT_NPROC counts only its processes.
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
if job["uid"] is not None:  # started by root: drop to a throwaway uid (see _sbx_compute_layout)
    os.setgroups([])
    os.setresgid(job["uid"], job["uid"], job["uid"])
    os.setresuid(job["uid"], job["uid"], job["uid"])
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    if 0 in os.getresuid() or status["NoNewPrivs"].strip() != "1" or any(
            status[k].strip().strip("0") for k in ("CapPrm", "CapEff", "CapAmb")):
        report("error", "sandbox: could not drop privileges")
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
    if mode == "tests":
        return _sbx_verdict(layout, code, tests, entry_point, context or "", timeout, memory_mb, start)
    return _sbx_run(layout, {"parts": parts, "mode": mode, "entry_point": entry_point}, timeout, memory_mb,
                    stdin, start)


def _sbx_run(layout: dict, job: dict, timeout: float, memory_mb: int, stdin: str | None, start: float,
             extra_fds: tuple[int, ...] = (), on_spawn=None) -> SandboxResult:
    uid = _sbx_claim_uid() if layout["root"] else None
    job = {**job, "site": layout["site"], "uid": uid, "memory": memory_mb << 20, "fsize": FILE_SIZE_LIMIT,
           "nofile": NOFILE_LIMIT, "nproc": NPROC_LIMIT, "cpu": int(timeout) + 2}
    try:
        return _sbx_execute(layout, job, timeout, memory_mb, stdin, start, extra_fds, on_spawn)
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

    def candidate() -> None:
        try:
            served["result"] = _sbx_run(layout, serve, timeout, memory_mb, None, start, (req_r, rsp_w),
                                        spawned.append)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            served["error"] = exc

    thread = threading.Thread(target=candidate, daemon=True)
    thread.start()
    try:
        verdict = _sbx_run(layout, judge, timeout, memory_mb, None, start, (req_w, rsp_r))
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
    cpu = [r.cpu_time for r in (verdict, cand) if r.cpu_time is not None]
    overloaded = verdict.timed_out and len(cpu) == 2 and sum(cpu) < timeout / 2
    error = verdict.error
    if overloaded:
        error = (f"timed out after {timeout:g}s with only {sum(cpu):.2f}s of CPU used: the machine was too "
                 f"busy (not the code's fault)")
    return SandboxResult(verdict.ok, cand.stdout, cand.stderr + verdict.stderr, verdict.returncode,
                         verdict.timed_out, cand.memory_exceeded or verdict.memory_exceeded, error,
                         round(time.monotonic() - start, 4), sum(cpu) if len(cpu) == 2 else None, overloaded)


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
    _status_ok = f"bubblewrap sandbox ready ({_sbx_layout()['bwrap']})"
    return True, _status_ok


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


def _sbx_compute_layout() -> dict:
    bwrap = (os.environ.get("MERMAIDFLOW_BWRAP") or shutil.which("bwrap")  # the variable: a bwrap elsewhere
             or shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") or "/usr/bin/bwrap")
    base = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    # Folders bwrap would make for the mount points below are 0700: a uid the bootstrap switches to could
    # not enter them, so make them 0755 first.
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
        args += ["--ro-bind", base, SANDBOX_PYTHON]
        python = SANDBOX_PYTHON + exe[len(base):] if _sbx_under(exe, base) else None
        inner_base = SANDBOX_PYTHON
        env["LD_LIBRARY_PATH"] = SANDBOX_PYTHON + "/lib"  # its libpython (RUNPATH names the outside path)
    if python is None:  # an interpreter outside its prefix: bind the binary alone
        python = "/sbx/bin/python3"
        args += ["--ro-bind", exe, python]
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
            args += ["--ro-bind", d, inner]
            sites.append(inner)
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SCRATCH_LIMIT),
             "--tmpfs", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/",  # only /tmp stays writable
             "--chdir", "/tmp", "--hostname", "sandbox", "--die-with-parent", "--new-session", "--clearenv"]
    root = os.geteuid() == 0
    if root:
        # bwrap run by root: no user namespace (inside one, the code would still be kernel uid 0, which
        # RLIMIT_NPROC does not limit). Every namespace but the user one; all capabilities dropped except the
        # two the bootstrap needs to switch to a throwaway uid before any of the code runs. bwrap sets
        # no_new_privs, so no later exec can regain a capability (the bootstrap checks both).
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:  # an ordinary user: bwrap maps the user into a fresh user namespace with no capabilities
        args += ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return {"bwrap": bwrap, "args": args, "python": python, "site": sites, "base": inner_base, "root": root}


def _sbx_execute(layout: dict, job: dict, timeout: float, memory_mb: int, stdin: str | None,
                 start: float, extra_fds: tuple[int, ...] = (), on_spawn=None) -> SandboxResult:
    """One sandboxed process. ``extra_fds`` are handed to it at the same numbers (and closed here once it has
    them); ``on_spawn(proc)`` lets a caller kill it early."""
    job_r, job_w = os.pipe()
    rep_r, rep_w = os.pipe()
    # bwrap keeps inherited fds open for the command, at the same numbers
    argv = [layout["bwrap"], *layout["args"], layout["python"], "-I", "-S", "-B", "-c", _BOOTSTRAP, str(job_r),
            str(rep_w)]
    try:
        proc = subprocess.Popen(
            argv, env={"PATH": "/usr/bin:/bin"}, cwd="/",
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(job_r, rep_w, *extra_fds),
            start_new_session=True)
    except OSError as e:
        for fd in (job_r, job_w, rep_r, rep_w, *extra_fds):
            os.close(fd)
        raise SandboxUnavailable(f"generated code was not run: cannot start bubblewrap ({e}); "
                                 f"{INSTALL_HINT}") from None
    for fd in (job_r, rep_w, *extra_fds):
        os.close(fd)
    if on_spawn is not None:
        on_spawn(proc)
    readers = [_Reader(proc.stdout.fileno()), _Reader(proc.stderr.fileno()), _Reader(rep_r, limit=1 << 20)]
    threading.Thread(target=_sbx_write, args=(job_w, marshal.dumps(job)), daemon=True).start()
    if stdin is not None:
        threading.Thread(target=_sbx_write, args=(proc.stdin.fileno(), stdin.encode(), proc.stdin),
                         daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
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
    out, err = readers[0].text(), readers[1].text()
    reports = _sbx_reports(readers[2].data)
    if not any(k == "started" for k, _ in reports) and not timed_out and err.startswith("bwrap:"):
        raise SandboxUnavailable(f"generated code was not run: bubblewrap cannot create its sandbox here "
                                 f"({err.strip().splitlines()[0]})")
    return _sbx_result(job["mode"], reports, out, err, returncode, timed_out, timeout, memory_mb, duration)


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
