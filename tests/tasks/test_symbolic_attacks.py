"""Attacks on the symbolic scoring pool (flowcore/tasks/symbolic.py, _symbolic_worker.py): the text compared is a
candidate's answer, so it may be anything. Whatever it is, it gets its own verdict and no other: it cannot run code
in a worker, kill or stall the workers that compare other answers, hang the scorer or leave processes and
descriptors behind; and a failure of the pool itself (a killed or stopped process, no descriptors left) is an
error, never a wrong answer."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import itertools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowcore.tasks import scoring, symbolic

ROOT = Path(__file__).resolve().parents[2]
# found by path, as the zygote runs it (not on sys.path: flowcore/tasks' modules would shadow others)
_spec = importlib.util.spec_from_file_location("_symbolic_worker", ROOT / "flowcore" / "tasks" / "_symbolic_worker.py")
worker_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker_module)

# ---------------------------------------------------------------- code in the compared text

CODE = [  # each would run in the worker if the text reached sympy's parser (it evaluates Python)
    "x+0*__import__('os').system('touch {flag}')",
    "x+0*eval(chr(95)*2+'import'+chr(95)*2+'(\"os\").system(\"touch {flag}\")')",
    "x+0*exec('open(\"{flag}\",\"w\")')",
]


@pytest.mark.parametrize("code", CODE)
def test_code_in_the_compared_text_never_runs_in_the_worker(tmp_path, code):
    """parse_expr evaluates Python: `__import__('os').system(...)` compared with `x` ran, and said True."""
    flag = tmp_path / "ran"
    assert symbolic.equal(code.format(flag=flag), "x") is None
    assert not flag.exists()
    assert symbolic.equal("x+1", "1+x") is True


def test_the_worker_refuses_exactly_what_the_scorer_refuses():
    """The worker's own check names the same functions as the LaTeX translator: no answer the scorer lets through
    is refused, and no name the scorer refuses reaches the parser."""
    assert worker_module.NAMES == scoring._NAMES
    for ok in ["sqrt(2)*x", "((1)/(2))", "x**(2)", "2.5 * pi", "log(x) + E + I*oo"]:
        worker_module.check(ok)
    for bad in ["srepr(x)", "x.name", "x_1", "'a'", "x[0]", "x,y", "lambda: 1", "x;y", "Symbol(x)"]:
        with pytest.raises(ValueError):
            worker_module.check(bad)


@pytest.mark.parametrize("answer", [r"\boxed{__import__('os').system('touch {flag}')}",
                                    r"\boxed{x+0\cdot eval(chr(95))}", r"\boxed{x.__class__}"])
def test_code_in_an_answer_is_a_wrong_answer_through_the_scorer(tmp_path, answer):
    flag = tmp_path / "ran"
    res = scoring.score("math", answer.replace("{flag}", str(flag)), r"\boxed{x}")
    assert (res.correct, res.errored) == (False, False) and not flag.exists()


# ---------------------------------------------------------------- the pool's processes: who ends them

def _scorer(code: str, *args: str, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh scorer process (a pool of its own); its last line of output, as JSON."""
    p = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n" + code, str(ROOT),
                        *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip(), p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _eventually(check, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(_running(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _running(p)]


def test_the_zygote_outlives_the_thread_that_started_it():
    """PR_SET_PDEATHSIG fires when the *thread* that forked ends: a pool first used from a short-lived thread (a
    Streamlit run, a thread pool's worker) lost its zygote with that thread, and with it every comparison running."""
    got = _scorer(r'''
import json, threading, time
from flowcore.tasks import symbolic
t = threading.Thread(target=symbolic.equal, args=("x+1", "1+x"))
t.start()
t.join()
zygote = symbolic.worker_pids()[0]
end = time.monotonic() + 3
while time.monotonic() < end and symbolic._pool.proc.poll() is None:
    time.sleep(0.05)
alive = symbolic._pool.proc.poll() is None
print(json.dumps({"alive": alive, "verdict": symbolic.equal("x+2", "2+x"), "same": symbolic.worker_pids()[0] == zygote}))
''')
    assert got == {"alive": True, "verdict": True, "same": True}


def test_a_killed_scorer_leaves_no_zygote_and_no_workers():
    """The scorer SIGKILLed with a worker idle and another one mid-comparison: all of them end by themselves (the
    zygote and the idle worker at once, the busy one at its CPU budget at the latest)."""
    code = r'''
import json, os, threading, time
from flowcore.tasks import symbolic
assert symbolic.equal("x+1", "1+x")
threading.Thread(target=symbolic.equal, args=("(a+b+c+d+e+f)**500", "1"), kwargs={"cpu_seconds": 2}).start()
time.sleep(0.3)
assert symbolic.equal("x+2", "2+x")  # on a second worker, idle after it
zygote, idle = symbolic.worker_pids()
print(json.dumps({"zygote": zygote, "idle": idle}), flush=True)
time.sleep(60)
'''
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n" + code, str(ROOT)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        got = json.loads(p.stdout.readline())
        workers = _children(got["zygote"])
        assert set(got["idle"]) < set(workers)  # one idle, one busy
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
    assert _wait_gone([got["zygote"], *workers], 20) == []


def _expansion(names: str, n: int) -> str:
    """(a+b+...)**n written out term by term (sympy takes a second or two to see that the two are equal)."""
    terms = []
    for ks in itertools.product(range(n + 1), repeat=len(names)):
        if sum(ks) == n:
            c = math.factorial(n)
            for k in ks:
                c //= math.factorial(k)
            terms.append(str(c) + "".join(f"*{v}**{k}" for v, k in zip(names, ks) if k))
    return "+".join(terms)


SLOW_TRUE = ("(a+b+c+d)**10", _expansion("abcd", 10))  # about 1.7 s of CPU, equal
MEDIUM_TRUE = ("(a+b+c+d)**8", _expansion("abcd", 8))  # about 0.9 s

_BUSY = r'''
def cpu(pid):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0

def busy_worker(zygote, seconds=0.3, wait=60):
    """The zygote's child that has spent ``seconds`` of CPU: on a slow comparison (an idle one spent milliseconds)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1]) == zygote \
                        and cpu(entry) >= seconds:
                    return int(entry)
            except (OSError, IndexError, ValueError):
                pass
        time.sleep(0.02)
    raise AssertionError("no worker got busy")

def busy_comparison(a, b, cpu_seconds):
    """``a`` and ``b`` compared in a thread once the pool is warm: (zygote, verdicts box, thread, its busy worker)."""
    assert symbolic.equal("x+1", "1+x")
    zygote = symbolic.worker_pids()[0]
    box = []
    t = threading.Thread(target=lambda: box.append(symbolic.equal(a, b, cpu_seconds=cpu_seconds)))
    t.start()
    return zygote, box, t, busy_worker(zygote)
'''


def test_a_comparison_running_when_the_zygote_is_killed_keeps_its_verdict():
    """The zygote SIGKILLed while a worker compares a correct answer: the workers died with it (PR_SET_PDEATHSIG),
    and replacing the pool killed its whole process group, so that answer read as wrong."""
    got = _scorer(_BUSY + r'''
import json, os, signal, sys, threading, time
from flowcore.tasks import symbolic
zygote, box, t, _ = busy_comparison(sys.argv[2], sys.argv[3], 30)
os.kill(zygote, signal.SIGKILL)
while symbolic._pool.proc.poll() is None:
    time.sleep(0.01)
meanwhile = symbolic.equal("x+2", "2+x")  # a new pool for it; the busy worker is left to finish
t.join()
print(json.dumps({"running": box, "meanwhile": meanwhile, "new_zygote": symbolic.worker_pids()[0] != zygote}))
''', *SLOW_TRUE)
    assert got == {"running": [True], "meanwhile": True, "new_zygote": True}


@contextlib.contextmanager
def choosing_pids():
    """One test at a time hands out chosen pids (another run's choice would take ours: test runs are parallel)."""
    with open("/tmp/.flowcore-tests-ns_last_pid.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _take_pid(pid: int) -> subprocess.Popen | None:
    """A bystander process given ``pid`` (a freed pid handed out again, as the kernel does once pids wrap); None
    when this machine does not let us choose (not root, /proc/sys/kernel/ns_last_pid read-only, a race lost)."""
    with choosing_pids():
        for _ in range(20):
            try:
                Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
            except OSError:
                return None
            p = subprocess.Popen(["sleep", "30"])
            if p.pid == pid:
                return p
            p.kill()
            p.wait()
    return None


def test_no_signal_reaches_a_process_that_took_a_dead_workers_pid():
    """A worker that died idle was SIGKILLed by pid when the pool next looked at it: by then the kernel had reaped
    it (the zygote ignores SIGCHLD) and the pid could be another process's. Workers are signalled by pidfd."""
    assert symbolic.equal("x+1", "1+x") is True
    worker = symbolic.worker_pids()[1][0]
    os.kill(worker, signal.SIGKILL)
    # the zygote reaps it (a zombie a moment before: its pid is not free until then)
    assert _eventually(lambda: not Path(f"/proc/{worker}").exists(), 10)
    bystander = _take_pid(worker)
    if bystander is None:
        pytest.skip("cannot hand a chosen pid to a process here")
    try:
        assert symbolic.equal("x+2", "2+x") is True
        time.sleep(0.2)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


# ---------------------------------------------------------------- stopped processes

def _stop_idle_workers() -> list[int]:
    assert symbolic.equal("x+1", "1+x") is True
    stopped = symbolic.worker_pids()[1]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    return stopped


def _end(pids: list[int]) -> None:
    for pid in pids:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_stopped_idle_worker_is_passed_over_not_read_as_a_wrong_answer():
    """An idle worker SIGSTOPped: the comparison sent to it waited out its deadline and read as wrong (None). It
    never acknowledged the request, so another worker takes it, and the stopped one is ended."""
    stopped = _stop_idle_workers()
    try:
        assert symbolic.equal("x+2", "2+x", cpu_seconds=1) is True
        assert _wait_gone(stopped, 5) == []
    finally:
        _end(stopped)


def test_a_long_request_to_a_stopped_worker_does_not_hang_the_scorer():
    """A request longer than the socket's buffer, sent to a stopped worker: sendall blocked for ever."""
    stopped = _stop_idle_workers()
    box: list = []
    t = threading.Thread(target=lambda: box.append(symbolic.equal("x" + " " * 600_000 + "+1", "1+x", cpu_seconds=1)),
                         daemon=True)
    try:
        t.start()
        t.join(60)
        assert box == [True]
    finally:
        _end(stopped)  # unblocks a hung sendall
        t.join(10)


def test_a_request_over_the_cap_is_no_verdict_and_costs_no_worker():
    assert symbolic.equal("x+1", "1+x") is True
    before = symbolic.worker_pids()
    assert symbolic.equal("x" + " " * symbolic.MAX_REQUEST, "x") is None
    assert symbolic.worker_pids() == before


def test_a_stopped_zygote_is_replaced_not_waited_on_for_every_answer():
    """The zygote SIGSTOPped: each comparison needing a new worker waited START_TIMEOUT (60 s) holding the pool's
    lock, then read as wrong, for ever after. Now a zygote that does not fork within FORK_TIMEOUT is replaced."""
    got = _scorer(r'''
import json, os, signal, time
from flowcore.tasks import symbolic
symbolic.FORK_TIMEOUT = 1.0
assert symbolic.equal("x+1", "1+x")
assert symbolic.equal("(", "x") is None  # its worker leaves: none idle, the next comparison needs a fork
zygote = symbolic.worker_pids()[0]
os.kill(zygote, signal.SIGSTOP)
t = time.monotonic()
verdict = symbolic.equal("x+2", "2+x")
print(json.dumps({"verdict": verdict, "seconds": time.monotonic() - t, "new": symbolic.worker_pids()[0] != zygote,
                  "old_reaped": not os.path.exists(f"/proc/{zygote}")}))
''')
    assert (got["verdict"], got["new"], got["old_reaped"]) == (True, True, True) and got["seconds"] < 50, got


def test_a_zygote_killed_just_before_a_comparison_is_replaced_at_once():
    """No pause between the kill and the comparison: the pool still looked alive, the fork request got no reply
    and the answer read as wrong."""
    assert symbolic.equal("x+1", "1+x") is True
    assert symbolic.equal(")", "x") is None  # no idle worker left: the next comparison asks the zygote to fork
    zygote = symbolic.worker_pids()[0]
    os.kill(zygote, signal.SIGKILL)
    assert symbolic.equal("x+2", "2+x") is True
    assert symbolic.worker_pids()[0] != zygote


def test_no_descriptor_left_is_an_error_not_a_wrong_answer():
    """The scorer's process at RLIMIT_NOFILE: the worker's socket could not be received and a correct answer read
    as wrong. Now the row is errored (no verdict), and once descriptors are free again it is scored right."""
    got = _scorer(r'''
import json, os, resource
from flowcore.tasks.scoring import score
from flowcore.tasks import symbolic
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
assert score("math", r"\boxed{2\sqrt{2}}", r"\sqrt{8}").correct
assert symbolic.equal("(", "x") is None  # its worker leaves: the next comparison needs a new one
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
full = score("math", r"\boxed{x+1}", r"\boxed{1+x}")
for fd in held:
    os.close(fd)
after = score("math", r"\boxed{x+1}", r"\boxed{1+x}")
print(json.dumps({"full": [full.correct, full.errored], "after": [after.correct, after.errored]}))
''')
    assert got == {"full": [False, True], "after": [True, False]}


# ---------------------------------------------------------------- forks of the scoring process

def test_a_fork_made_while_another_thread_starts_the_pool_can_compare():
    """os.fork (multiprocessing) while a thread held the module's lock (held while a zygote starts): the lock stayed
    held in the child, whose first comparison waited for ever."""
    got = _scorer(r'''
import json, os, signal, threading, time
from flowcore.tasks import symbolic
t = threading.Thread(target=symbolic.equal, args=("x+1", "1+x"))
t.start()
while not symbolic._lock.locked():
    time.sleep(0.001)
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a hang ends the child with SIGALRM
    os._exit(0 if symbolic.equal("x+2", "2+x") is True else 3)
t.join()
_, status = os.waitpid(pid, 0)
print(json.dumps({"child": os.waitstatus_to_exitcode(status), "parent": symbolic.equal("x+3", "3+x")}))
''')
    assert got == {"child": 0, "parent": True}


def test_a_killed_scorer_leaves_no_zygote_while_a_fork_of_it_lives_on():
    """The zygote ends when the scorer's socket closes: a fork of the scorer held a copy of it, so the zygote
    outlived a SIGKILLed scorer for as long as the fork lived. Forks close the parent's sockets."""
    code = r'''
import json, os, time
from flowcore.tasks import symbolic
assert symbolic.equal("x+1", "1+x")
if os.fork() == 0:
    time.sleep(30)
    os._exit(0)
zygote, idle = symbolic.worker_pids()
print(json.dumps({"zygote": zygote, "idle": idle}), flush=True)
time.sleep(60)
'''
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1])\n" + code, str(ROOT)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        got = json.loads(p.stdout.readline())
        p.kill()
        p.wait()
        assert _wait_gone([got["zygote"], *got["idle"]], 10) == []
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the fork
        p.stdout.close()


# ---------------------------------------------------------------- what a worker says back

def _fake_worker() -> tuple[symbolic._Worker, socket.socket, subprocess.Popen]:
    """A worker whose side of the socket the test writes (a process stands in for it, to be signalled)."""
    proc = subprocess.Popen(["sleep", "30"])
    ours, theirs = socket.socketpair()
    return symbolic._Worker(proc.pid, ours, os.pidfd_open(proc.pid), set()), theirs, proc


def test_a_worker_that_floods_its_reply_does_not_grow_the_scorer():
    """A reply is under a hundred bytes; one that never ended was read whole, up to the deadline (16 MB here)."""
    worker, theirs, proc = _fake_worker()

    def send() -> None:
        with contextlib.suppress(OSError):  # until the scorer closes its end
            theirs.sendall(b"+" + b"x" * (16 << 20))

    flood = threading.Thread(target=send, daemon=True)
    try:
        flood.start()
        assert worker.ask(b'{"a": "x", "b": "x", "cpu": 1}\n', 5.0) is None
        assert len(worker.buf) <= symbolic.REPLY_MAX + 65536 and proc.wait(5) == -signal.SIGKILL
    finally:
        theirs.close()
        proc.kill()
        proc.wait()
        flood.join(5)


@pytest.mark.parametrize("reply", [b"+not json\n", b"+[true]\n", b'+{"equal": "yes"}\n', b'+{"equal": 1}\n'])
def test_a_reply_that_is_no_verdict_is_none_and_the_worker_ended(reply):
    worker, theirs, proc = _fake_worker()
    try:
        theirs.sendall(reply)
        assert worker.ask(b'{"a": "x", "b": "x", "cpu": 1}\n', 5.0) is None and proc.wait(5) == -signal.SIGKILL
    finally:
        theirs.close()
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- held: kept as regression tests

def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


ODD = {  # text no scorer sends; each is no verdict, costs at most its own worker, and leaves the pool sound
    "NUL": "x\x00+1",
    "lone surrogate": "x+\ud800",
    "newline": "x\n+1",
    "the protocol's own line": 'x"}\n{"a": "1", "b": "1", "cpu": 1}',
    "100,000 nested parentheses": "(" * 100_000 + "x" + ")" * 100_000,
    "a 500 KB sum": "+".join(["x"] * 250_000),
}


@pytest.mark.parametrize("name", list(ODD))
def test_odd_text_is_no_verdict_and_leaves_the_pool_sound(name):
    assert symbolic.equal("x+1", "1+x") is True
    fds = _fds()
    assert symbolic.equal(ODD[name], "1+x", cpu_seconds=1) is None
    assert symbolic.equal("x+1", "1+x") is True and _fds() <= fds


def test_a_worker_reused_after_long_comparisons_still_has_its_full_budget():
    """Each comparison's CPU limit counts from what its worker has used so far: two comparisons of ~1.7 s on one
    worker (more than one budget together) and a third after them all get their verdicts, on that same worker."""
    assert symbolic.equal("x+1", "1+x") is True
    worker = symbolic.worker_pids()[1]
    assert [symbolic.equal(*SLOW_TRUE) for _ in range(2)] == [True, True]
    assert symbolic.equal("x+2", "2+x") is True and symbolic.worker_pids()[1] == worker


def test_concurrent_comparisons_each_get_their_own_verdict():
    """Threads comparing at once, bombs among them killed at their budget: no verdict lands on another answer."""
    cases = [("x+1", "1+x", True), ("x+1", "x+2", False), ("(a+b+c+d+e+f)**500", "1", None),
             ("2*sqrt(2)", "sqrt(8)", True), ("sin(x)**2+cos(x)**2", "1", True), ("(", "x", None)] * 3
    got: dict[int, object] = {}

    def run(i: int) -> None:
        a, b, want = cases[i]
        got[i] = symbolic.equal(a, b, cpu_seconds=1 if want is None else symbolic.CPU_SECONDS)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [got.get(i) for i in range(len(cases))] == [want for _, _, want in cases]


def test_many_dead_workers_leave_no_descriptor_or_process_behind():
    assert symbolic.equal("x+1", "1+x") is True
    zygote = symbolic.worker_pids()[0]
    fds, zygote_fds = _fds(), len(os.listdir(f"/proc/{zygote}/fd"))
    for i in range(30):
        if i % 3:
            assert symbolic.equal("x+", "x") is None  # no verdict: its worker leaves
        else:
            for pid in symbolic.worker_pids()[1]:
                os.kill(pid, signal.SIGKILL)  # killed while idle
        assert symbolic.equal("x+1", "1+x") is True
    assert symbolic.worker_pids()[0] == zygote and _fds() <= fds
    # the zygote closes its copies just after handing a worker over; workers that left exit by themselves
    assert _eventually(lambda: len(os.listdir(f"/proc/{zygote}/fd")) <= zygote_fds, 5)
    assert _eventually(lambda: len([p for p in _children(zygote) if _running(p)]) <= symbolic.WORKERS, 5)


def test_a_comparison_after_atexit_works_and_its_zygote_ends_with_the_process():
    got = _scorer(r'''
import atexit, json

def late():
    from flowcore.tasks import symbolic
    print(json.dumps({"verdict": symbolic.equal("x+2", "2+x"), "zygote": symbolic.worker_pids()[0]}), flush=True)

atexit.register(late)  # runs after the pool's own handler
from flowcore.tasks import symbolic
assert symbolic.equal("x+1", "1+x")
''')
    assert got["verdict"] is True and _wait_gone([got["zygote"]], 10) == []


def test_a_worker_stopped_mid_comparison_is_passed_over_not_read_as_a_wrong_answer():
    """A worker SIGSTOPped after taking a correct answer: it met its deadline stopped and the answer read as wrong.
    An answer cannot stop its own worker (no terminal, no code of its own), so that deadline is not its doing."""
    got = _scorer(_BUSY + r'''
import json, os, signal, sys, threading, time
from flowcore.tasks import symbolic
zygote, box, t, stopped = busy_comparison(sys.argv[2], sys.argv[3], 1.5)
os.kill(stopped, signal.SIGSTOP)
t.join()
end = time.monotonic() + 5
while os.path.exists(f"/proc/{stopped}") and time.monotonic() < end:
    time.sleep(0.05)
print(json.dumps({"verdict": box, "stopped_ended": not os.path.exists(f"/proc/{stopped}")}))
''', *MEDIUM_TRUE)
    assert got == {"verdict": [True], "stopped_ended": True}


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_worker_killed_by_someone_else_mid_comparison_is_not_a_wrong_answer(sig):
    """A worker SIGKILLed (an operator, the OOM killer under the machine's memory pressure) after taking a correct
    answer: it read as wrong, like an answer past its budget. The zygote reaps its workers and says how each
    ended; only the answer's own death (SIGXCPU, a crash at its memory limit) is no verdict, so the answer is
    compared again on another worker."""
    got = _scorer(_BUSY + r'''
import json, os, signal, sys, threading, time
from flowcore.tasks import symbolic
zygote, box, t, victim = busy_comparison(sys.argv[2], sys.argv[3], 30)
os.kill(victim, getattr(signal, sys.argv[4]))
t.join()
bomb = symbolic.equal("(a+b+c+d+e+f)**500", "1", cpu_seconds=1)  # its own budget: still no verdict
print(json.dumps({"verdict": box, "bomb": bomb, "same_zygote": symbolic.worker_pids()[0] == zygote}))
''', *MEDIUM_TRUE, sig)
    assert got == {"verdict": [True], "bomb": None, "same_zygote": True}


def test_the_zygote_says_how_each_worker_ended():
    """What the scorer asks when a worker died mid-comparison: its own budget (SIGXCPU), a kill from elsewhere, an
    exit; a worker the zygote never forked is not known (-1), and so is one that has not ended. Workers are named by
    serial number, not pid (tests/tasks/test_symbolic_status_attacks.py: a pid is handed out again)."""
    got = _scorer(r'''
import json, os, signal, socket, subprocess, sys, time
from flowcore.tasks import symbolic
assert symbolic.equal("x+1", "1+x")
pool = symbolic._pool
out = {}
for name, how in (("kill", lambda w: os.kill(w.pid, signal.SIGKILL)), ("xcpu", lambda w: os.kill(w.pid, signal.SIGXCPU)),
                  ("exit", lambda w: w.sock.close())):
    w = pool.take()
    how(w)
    how = pool.ended_by(w.serial)
    out[name] = None if how is None else how[0]  # the signal (0: an exit); then its peak memory growth
    w.forget()
out["stranger"] = pool.ended_by(10**6)  # a worker number it never gave
w = pool.take()
out["alive"] = pool.ended_by(w.serial)
w.kill()
out["still_answers"] = symbolic.equal("x+2", "2+x")
print(json.dumps(out))
''')
    assert got == {"kill": signal.SIGKILL, "xcpu": signal.SIGXCPU, "exit": 0, "stranger": None, "alive": None,
                   "still_answers": True}


def test_low_precision_numbers_in_one_answer_do_not_change_a_later_verdict_on_the_same_worker():
    """sympy caches results on a reused worker; an answer full of one-digit floats (``.n(1)``, which the scorer's
    text allows) must not leave results a later answer's comparison picks up."""
    assert symbolic.equal("x+1", "1+x") is True
    worker = symbolic.worker_pids()[1]
    for low in ["sqrt((2.0).n(1))", "(2.0).n(1)*pi", "log((2.0).n(1))", "exp((1.5).n(1))", "(0.5).n(1)**(1/3)"]:
        assert symbolic.equal(low, "0") is False
    assert [symbolic.equal(a, b) for a, b in [("sqrt(2.0)", "sqrt(2)"), ("2.0*pi", "2*pi"), ("log(2.0)", "log(2)"),
                                              ("exp(1.5)", "exp(3/2)"), ("0.5**(1/3)", "(1/2)**(1/3)")]] == [True] * 5
    assert symbolic.worker_pids()[1] == worker
