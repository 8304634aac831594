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
    frames = [fs for fs in traceback.extract_tb(e.__traceback__) if fs.filename != "<string>"]
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
    before_tests = None
    for name, src in job["parts"]:
        if name == "tests.py":
            before_tests = ns.get("check")  # a solution may define its own check(); only the tests' counts
        exec(compile(src, name, "exec"), ns)
    if mode == "program" and callable(ns.get("solve")):
        print(ns["solve"]())
    elif mode == "tests":
        entry = job["entry_point"]
        if entry and entry not in ns:
            report("error", "the solution does not define %r" % entry)
            finish(1)
        if callable(ns.get("check")) and ns.get("check") is not before_tests:
            if not entry:
                report("error", "the tests define check(candidate) but no entry point was given")
                finish(1)
            ns["check"](ns[entry])
        report("done")
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
    if isinstance(e, AssertionError):
        src = (fs.line or "").strip() if fs else ""
        msg = "assertion failed" + (": " + src if src else "") + (" -- " + str(e) if str(e) else "") + at
    else:
        msg = "%s: %s%s" % (type(e).__name__, e, at)
    report("error", msg)
    finish(1)
finish(0)
'''


def run_untrusted(code: str, *, tests: str | list[str] | None = None, entry_point: str | None = None,
                  call_solve: bool = False, stdin: str | None = None, timeout: float = 10.0,
                  memory_mb: int = 512) -> SandboxResult:
    """Run ``code`` in the sandbox. Raises SandboxUnavailable (nothing was run) when bubblewrap is missing.

    - plain: ``code`` runs as ``__main__``; ok when it exits 0 within the limits (``stdin`` is its input);
    - ``call_solve``: then ``solve()`` is called and its result printed (ProgrammerOp's contract);
    - ``tests``: ok iff the tests run to the end without failing. HumanEval style, they define
      ``check(candidate)``, called with ``entry_point``; MBPP style, they are plain ``assert`` lines (a list is
      joined). Exiting early counts as a failure.
    """
    start = time.monotonic()
    parts, mode = [("main.py", code)], "code"
    if tests is not None:
        if isinstance(tests, (list, tuple)):
            tests = "\n".join(str(t) for t in tests)
        if isinstance(tests, str) and not tests.strip():
            return _sbx_failure("no tests given")
        parts, mode = [("solution.py", code), ("tests.py", tests)], "tests"
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
    uid = _sbx_claim_uid() if layout["root"] else None
    job = {"parts": parts, "mode": mode, "entry_point": entry_point, "site": layout["site"], "uid": uid,
           "memory": memory_mb << 20, "fsize": FILE_SIZE_LIMIT, "nofile": NOFILE_LIMIT, "nproc": NPROC_LIMIT,
           "cpu": int(timeout) + 2}
    try:
        return _sbx_execute(layout, job, timeout, memory_mb, stdin, start)
    finally:
        if uid is not None:
            _sbx_release_uid(uid)


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
                 start: float) -> SandboxResult:
    job_r, job_w = os.pipe()
    rep_r, rep_w = os.pipe()
    # bwrap keeps inherited fds open for the command, at the same numbers
    argv = [layout["bwrap"], *layout["args"], layout["python"], "-I", "-S", "-B", "-c", _BOOTSTRAP, str(job_r),
            str(rep_w)]
    try:
        proc = subprocess.Popen(
            argv, env={"PATH": "/usr/bin:/bin"}, cwd="/",
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(job_r, rep_w),
            start_new_session=True)
    except OSError as e:
        for fd in (job_r, job_w, rep_r, rep_w):
            os.close(fd)
        raise SandboxUnavailable(f"generated code was not run: cannot start bubblewrap ({e}); "
                                 f"{INSTALL_HINT}") from None
    os.close(job_r)
    os.close(rep_w)
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
    elif mode == "tests" and "done" not in kinds:
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
