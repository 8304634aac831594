"""Run generated code (Programmer, Test, benchmark tests) in a contained child process.

Layers, strongest first when the engine runs as root: a fresh network namespace, a throwaway uid (so
RLIMIT_NPROC counts only the sandbox's own processes and a leftover can be swept), resource limits (address
space, processes, file size, CPU, core dumps), a wall-clock timeout that kills the whole process group, a
scratch directory as cwd and HOME, and an audit hook that refuses network use, process creation, native
library loading and file changes outside the scratch directory. Without root only the last three apply.
Blocked actions are reported back over a private pipe, so code that swallows the exception is still caught.
No function here raises for bad code: every outcome is a ``SandboxResult``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream; the rest is drained and counted
FILE_SIZE_LIMIT = 64 * 1024 * 1024  # RLIMIT_FSIZE for files written in the scratch dir
NPROC_LIMIT = 32  # processes + threads of the sandbox uid (root only; the uid is private to one run)
NOFILE_LIMIT = 256
_UID_RANGE = (100_000, 1_100_000)


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    memory_exceeded: bool
    blocked: str | None
    error: str | None
    duration: float


# The child's first code. Runs with -I -B; argv[1] is the job file. Everything it needs is imported before
# privileges and limits are dropped (the interpreter may live under a directory only root can read).
_BOOTSTRAP = r'''
import sys, os, json, traceback, linecache, resource, io, signal, ctypes  # ctypes before the hook
job = json.load(open(sys.argv[1]))
REP = job["report_fd"]
SCRATCH = job["scratch"]
def report(kind, detail=""):
    try:
        os.write(REP, (json.dumps({"kind": kind, "detail": str(detail)[:500]}) + "\n").encode())
    except OSError:
        pass
os.chdir(SCRATCH)
uid = job["uid"]
if uid is not None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET: no interfaces at all, not even a usable loopback
        report("note", "no network namespace")
    resource.setrlimit(resource.RLIMIT_NPROC, (job["nproc"], job["nproc"]))
lim = lambda r, v: resource.setrlimit(r, (v, v))
lim(resource.RLIMIT_CORE, 0)
lim(resource.RLIMIT_FSIZE, job["fsize"])
lim(resource.RLIMIT_NOFILE, job["nofile"])
lim(resource.RLIMIT_CPU, job["cpu"])
if uid is not None:
    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]
    keep = job["keep_read_cap"]
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    for cap in range(64):  # PR_CAPBSET_DROP everything a later exec could regain
        if not (keep and cap == 2):
            libc.prctl(24, cap, 0, 0, 0)
    if keep:
        libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS so CAP_DAC_READ_SEARCH survives setuid
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if keep:  # read-only access to the interpreter's files; every other capability is gone
        data = (CapData * 2)(CapData(4, 4, 0), CapData(0, 0, 0))
        if libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), data) != 0:
            report("note", "capset failed")
    if os.getuid() == 0 or os.geteuid() == 0:
        report("error", "could not drop root privileges")
        os._exit(70)
lim(resource.RLIMIT_AS, job["memory"])

SCRATCH_REAL = os.path.realpath(SCRATCH)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
DEVICES = ("/dev/null", "/dev/stdout", "/dev/stderr")
NET = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
       "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex"}
PROC = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "subprocess.Popen",
        "pty.spawn", "os.startfile"}
FOLLOW = {"os.chmod", "os.chown", "os.utime", "os.truncate", "os.setxattr", "os.removexattr", "os.chflags"}
NOFOLLOW = {"os.remove", "os.rmdir", "os.mkdir", "os.mkfifo", "os.mknod"}
TWO = {"os.rename", "os.link", "os.symlink"}
seen = set()
busy = []

class SandboxBlocked(PermissionError):
    pass

def inside(path, follow):
    if isinstance(path, int):
        return True
    p = os.fsdecode(path)
    if p in DEVICES:
        return True
    p = os.path.abspath(p)
    full = os.path.realpath(p) if follow else os.path.join(os.path.realpath(os.path.dirname(p)),
                                                           os.path.basename(p))
    return full == SCRATCH_REAL or full.startswith(SCRATCH_REAL + os.sep)

def block(what):
    if what not in seen and len(seen) < 20:
        seen.add(what)
        report("blocked", what)
    raise SandboxBlocked("sandbox: " + what + " is not allowed")

def hook(event, args):
    if busy:
        return
    busy.append(1)
    try:
        if event == "open":
            path, flags = args[0], (args[2] if len(args) > 2 and isinstance(args[2], int) else 0)
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            if (flags & WRITE_FLAGS or any(c in mode for c in "wax+")) and not inside(path, True):
                block("write outside scratch dir: " + os.fsdecode(path))
        elif event in NET:
            block("network")
        elif event in PROC:
            block("process creation")
        elif event in ("ctypes.dlopen", "ctypes.dlsym"):
            block("native library loading (ctypes)")
        elif event in ("os.kill", "os.killpg") and args[0] not in (0, os.getpid()):
            block("signal to another process")
        elif event in FOLLOW or event in NOFOLLOW:
            if not inside(args[0], event in FOLLOW):
                block("change outside scratch dir: " + event + " " + os.fsdecode(args[0]))
        elif event in TWO:
            if not inside(args[1], False) or (event == "os.rename" and not inside(args[0], False)):
                block("change outside scratch dir: " + event + " " + os.fsdecode(args[1]))
    finally:
        busy.pop()

sys.addaudithook(hook)
sys.dont_write_bytecode = True
mode = job["mode"]
ns = {"__name__": "__main__" if mode == "code" else "__sandbox__", "__builtins__": __builtins__}
names = [name for name, _ in job["parts"]]

def where(tb):
    """Deepest frame in user code: (file, line, source)."""
    found = None
    for fs in traceback.extract_tb(tb):
        if fs.filename in names:
            found = fs
    return found

def print_tb(e):
    frames = [fs for fs in traceback.extract_tb(e.__traceback__) if fs.filename != "<string>"]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(e), e))
    sys.stderr.write("Traceback (most recent call last):\n" + text)

def finish():
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass

try:
    before_tests = None
    for name, src in job["parts"]:
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        if name == "tests.py":
            before_tests = ns.get("check")  # a solution may define its own check(); only the tests' counts
        exec(compile(src, name, "exec"), ns)
    if mode == "program" and callable(ns.get("solve")):
        print(ns["solve"]())
    elif mode == "tests":
        entry = job["entry_point"]
        if entry and entry not in ns:
            report("error", "the solution does not define %r" % entry)
            finish()
            os._exit(1)
        if callable(ns.get("check")) and ns.get("check") is not before_tests:
            if not entry:
                report("error", "the tests define check(candidate) but no entry point was given")
                finish()
                os._exit(1)
            ns["check"](ns[entry])
        report("done")
except SystemExit as e:
    finish()
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if not isinstance(e.code, (int, type(None))):
        print(e.code, file=sys.stderr)
    sys.stdout.flush()
    os._exit(code)
except MemoryError:
    report("memory")
    print("MemoryError: memory limit of %d MB exceeded" % (job["memory"] >> 20), file=sys.stderr)
    finish()
    os._exit(1)
except SyntaxError as e:
    traceback.print_exc(limit=0)
    report("error", "SyntaxError: %s (%s line %s)" % (e.msg, e.filename, e.lineno))
    finish()
    os._exit(1)
except BaseException as e:
    print_tb(e)
    fs = where(e.__traceback__)
    at = " (%s line %s)" % (fs.filename, fs.lineno) if fs else ""
    if isinstance(e, AssertionError):
        src = (fs.line or "").strip() if fs else ""
        msg = "assertion failed" + (": " + src if src else "") + (" -- " + str(e) if str(e) else "") + at
    else:
        msg = "%s: %s%s" % (type(e).__name__, e, at)
    report("error", msg)
    finish()
    os._exit(1)
finish()
os._exit(0)
'''


def run_code(code: str, *, timeout: float = 10.0, memory_mb: int = 512,
             stdin: str | None = None) -> SandboxResult:
    """Run a script as ``__main__``; ok when it exits 0 without hitting any limit."""
    return _run([("main.py", code)], "code", timeout=timeout, memory_mb=memory_mb, stdin=stdin)


def run_program(program: str, *, timeout: float = 10.0, memory_mb: int = 512) -> SandboxResult:
    """Run a program, then print ``solve()``'s result if it defines ``solve`` (ProgrammerOp's contract)."""
    return _run([("program.py", program)], "program", timeout=timeout, memory_mb=memory_mb)


def run_tests(solution: str, test_code: str | list[str], entry_point: str | None = None, *,
              timeout: float = 10.0, memory_mb: int = 512) -> SandboxResult:
    """ok iff the tests ran to the end without failing.

    HumanEval style: ``test_code`` defines ``check(candidate)``, called with ``entry_point``. MBPP style:
    ``test_code`` is plain ``assert`` lines (a list of them is joined). Exiting early counts as a failure.
    """
    if isinstance(test_code, (list, tuple)):
        test_code = "\n".join(str(t) for t in test_code)
    if isinstance(test_code, str) and not test_code.strip():
        return _failure("no tests given")
    return _run([("solution.py", solution), ("tests.py", test_code)], "tests", timeout=timeout,
                memory_mb=memory_mb, entry_point=entry_point)


def _failure(error: str, duration: float = 0.0) -> SandboxResult:
    return SandboxResult(False, "", "", None, False, False, None, error, duration)


def _run(parts: list[tuple[str, str]], mode: str, *, timeout: float, memory_mb: int,
         stdin: str | None = None, entry_point: str | None = None) -> SandboxResult:
    start = time.monotonic()
    for name, src in parts:
        if not isinstance(src, str):
            return _failure(f"{name}: expected source text, got {type(src).__name__}")
    try:
        timeout, memory_mb = max(float(timeout), 0.05), max(int(memory_mb), 64)
    except (TypeError, ValueError):
        return _failure(f"bad sandbox limits: timeout={timeout!r}, memory_mb={memory_mb!r}")
    scratch = tempfile.mkdtemp(prefix="mermaidflow-sandbox-")
    uid = _claim_uid() if _privileged() else None
    try:
        return _execute(parts, mode, scratch, uid, timeout, memory_mb, stdin, entry_point, start)
    except Exception as e:  # noqa: BLE001 -- never raise; this is the sandbox itself failing
        return _failure(f"sandbox failed: {type(e).__name__}: {e}", time.monotonic() - start)
    finally:
        if uid is not None:
            _sweep_uid(uid)
            _release_uid(uid)
        shutil.rmtree(scratch, ignore_errors=True)


def _execute(parts, mode, scratch, uid, timeout, memory_mb, stdin, entry_point, start) -> SandboxResult:
    rep_r, rep_w = os.pipe()
    job = {"parts": parts, "mode": mode, "entry_point": entry_point, "scratch": scratch, "uid": uid,
           "report_fd": rep_w, "memory": memory_mb * 1024 * 1024, "fsize": FILE_SIZE_LIMIT,
           "nofile": NOFILE_LIMIT, "nproc": NPROC_LIMIT, "cpu": int(timeout) + 2,
           "keep_read_cap": uid is not None and not _interpreter_world_readable()}
    job_path = os.path.join(scratch, ".job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    if uid is not None:
        os.chown(scratch, uid, uid)
        os.chmod(scratch, 0o700)
    env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", _BOOTSTRAP, job_path], cwd=scratch, env=env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(rep_w,), start_new_session=True)
    except OSError as e:
        os.close(rep_r)
        return _failure(f"could not start the sandbox: {e}", time.monotonic() - start)
    finally:
        os.close(rep_w)
    readers = [_Reader(proc.stdout.fileno()), _Reader(proc.stderr.fileno()), _Reader(rep_r, limit=1 << 20)]
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    _killpg(proc.pid)  # also reaps anything the code left behind in its group
    if uid is not None:
        _sweep_uid(uid)
    returncode = proc.wait()
    duration = time.monotonic() - start
    for r in readers:
        r.join(2.0)
    proc.stdout.close()
    proc.stderr.close()
    os.close(rep_r)
    out, err = readers[0].text(), readers[1].text()
    reports = _parse_reports(readers[2].data)
    return _result(mode, reports, out, err, returncode, timed_out, timeout, memory_mb, duration)


def _result(mode, reports, out, err, returncode, timed_out, timeout, memory_mb, duration) -> SandboxResult:
    kinds = {k for k, _ in reports}
    blocked = next((d for k, d in reports if k == "blocked"), None)
    reported_error = next((d for k, d in reports if k == "error"), None)
    memory = "memory" in kinds or (not timed_out and "MemoryError" in err)
    if timed_out:
        error = f"timed out after {timeout:g}s"
    elif memory:
        error = f"memory limit {memory_mb} MB exceeded"
    elif blocked:
        error = f"blocked: {blocked}"
    elif reported_error:
        error = reported_error
    elif returncode is not None and returncode < 0:
        error = f"killed by {_signal_name(-returncode)}"
        if -returncode == signal.SIGXFSZ:
            error += f" (file size limit {FILE_SIZE_LIMIT // (1024 * 1024)} MB exceeded)"
        elif -returncode == signal.SIGXCPU:
            error += " (CPU time limit exceeded)"
    elif returncode:
        error = f"exit code {returncode}"
    elif mode == "tests" and "done" not in kinds:
        error = "the code exited before the tests finished"
    else:
        error = None
    ok = error is None and returncode == 0
    return SandboxResult(ok, out, err, returncode, timed_out, memory, blocked, error, round(duration, 4))


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _parse_reports(data: bytes) -> list[tuple[str, str]]:
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            out.append((str(rec["kind"]), str(rec.get("detail", ""))))
        except (ValueError, KeyError, TypeError):
            continue  # the code may have scribbled on the report fd; ignore what is not ours
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


def _feed(pipe, text: str) -> None:
    try:
        pipe.write(text.encode())
        pipe.close()
    except OSError:
        pass


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _privileged() -> bool:
    """Root can add the namespace, private-uid and NPROC layers."""
    return os.geteuid() == 0


_uids_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _claim_uid() -> int:
    """A uid no one else uses, so NPROC and the final sweep concern this run alone."""
    with _uids_lock:
        while True:
            uid = random.randrange(*_UID_RANGE)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


def _release_uid(uid: int) -> None:
    with _uids_lock:
        _uids_in_use.discard(uid)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                st = os.stat(f"/proc/{entry}")
            except OSError:
                continue
            if st.st_uid == uid:
                pids.append(int(entry))
    return pids


def _sweep_uid(uid: int) -> None:
    """Kill whatever still runs as the sandbox uid (e.g. something that escaped the process group).

    Stop first, then kill, so a fork loop cannot outrun the sweep."""
    for _ in range(20):
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.01)


_world_readable: bool | None = None


def _interpreter_world_readable() -> bool:
    """Can an unprivileged uid import from this interpreter (stdlib and site-packages)?"""
    global _world_readable
    if _world_readable is None:
        paths = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
        _world_readable = all(_path_open_to_others(Path(p)) for p in paths if p)
    return _world_readable


def _path_open_to_others(path: Path) -> bool:
    try:
        path = path.resolve()
        if not os.stat(path).st_mode & stat.S_IROTH:
            return False
        for d in [path, *path.parents]:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True
