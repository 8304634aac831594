"""Symbolic comparison runs outside the scorer's process (issue 25.2): a MATH answer that makes sympy grow to
gigabytes or run for minutes is killed in its own process at its budget, scored wrong the same way every time,
and the scorer's memory stays flat."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flowcore.tasks import symbolic
from flowcore.tasks.scoring import math_equal, score

ROOT = Path(__file__).resolve().parents[2]
BOMB = r"\boxed{(a+b+c+d+e+f)^{500}}"

# Run in a fresh interpreter so that its RSS is the scorer's alone: score the bomb twice, sample the RSS for a
# while after (the old thread kept computing after score() returned: 355 MB -> 6.5 GB in 80 s on the server).
_SCORER = r'''
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from flowcore.tasks import symbolic
from flowcore.tasks.scoring import math_equal, score

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS"))

assert math_equal("2\\sqrt{2}", "\\sqrt{8}")  # the worker is up and warm
idle = rss()
runs = []
for _ in range(2):
    t = time.monotonic()
    r = score("math", sys.argv[2], "1")
    runs.append({"correct": r.correct, "errored": r.errored, "seconds": time.monotonic() - t})
peak = rss()
end = time.monotonic() + 3
while time.monotonic() < end:
    peak = max(peak, rss())
    time.sleep(0.1)
after_ok = math_equal("x+1", "1+x")
pid = symbolic.worker_pids()[0]
def parent(p):
    try:
        return int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None
def mb(p):
    try:
        with open(f"/proc/{p}/status") as f:
            return next(int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS"))
    except (OSError, StopIteration):
        return 0
kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and parent(p) == pid]
print(json.dumps({"idle": idle, "peak": peak, "runs": runs, "after_ok": after_ok, "sympy": "sympy" in sys.modules,
                  "worker_mb": mb(pid), "worker_kids_mb": [mb(k) for k in kids]}))
'''


def test_a_power_bomb_is_scored_wrong_and_the_scorers_memory_stays_flat():
    p = subprocess.run([sys.executable, "-c", _SCORER, str(ROOT), BOMB], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.splitlines()[-1])
    print(got)
    budget = symbolic.CPU_SECONDS * symbolic.WALL_FACTOR + 5
    for run in got["runs"]:  # wrong, not errored, and the same both times; never a hang
        assert run == {**run, "correct": False, "errored": False} and run["seconds"] < budget, got
    assert not got["sympy"]  # sympy never entered the scorer's process
    assert got["peak"] - got["idle"] <= 30, got  # RSS flat: within 30 MB of idle, during and after
    assert got["after_ok"]  # a fresh worker took over from the one killed
    # the worker is back near its idle size: the comparison's memory went with the process that was killed
    assert got["worker_mb"] < 200 and all(k < 200 + symbolic.MEMORY_MB // 4 for k in got["worker_kids_mb"]), got


def test_typical_comparisons_stay_right_and_fast():
    assert math_equal(r"2\sqrt{2}", r"\sqrt{8}")  # warm the worker
    pairs = [(r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}", True), ("x+1", "1+x", True), (r"2\pi r", r"r \cdot 2\pi", True),
             (r"\sqrt{2}", "1.41", False), ("x+1", "x+2", False)]
    t = time.monotonic()
    for a, b, want in pairs * 4:
        assert math_equal(a, b) is want, (a, b)
    assert (time.monotonic() - t) / (4 * len(pairs)) < 0.5  # ms each in practice; benchmarks/math_symbolic.py


def test_killed_workers_and_a_killed_zygote_are_replaced():
    assert symbolic.equal("x+1", "1+x") is True
    zygote, workers = symbolic.worker_pids()
    assert workers
    for pid in workers:  # an idle worker gone: the next comparison notices and a fresh one answers it
        os.kill(pid, signal.SIGKILL)
    assert symbolic.equal("x+2", "2+x") is True
    os.kill(zygote, signal.SIGKILL)
    time.sleep(0.2)
    assert symbolic.equal("x+3", "3+x") is True and symbolic.worker_pids()[0] != zygote


def test_scoring_a_bomb_in_this_process_gives_the_same_verdict_every_time():
    verdicts = {score("math", BOMB, r"\boxed{1}").correct for _ in range(2)}
    assert verdicts == {False}


def test_comparisons_work_in_a_process_holding_over_a_thousand_descriptors():
    """A test run's worker once held over 1,024 descriptors: select() refused the zygote's socket and every math
    answer read as wrong. The pool waits with poll, which has no such bound."""
    code = ("import resource, sys\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))\n"
            "held = [open('/dev/null') for _ in range(1100)]\n"
            "from flowcore.tasks import symbolic\n"
            "print(symbolic.equal('x+1', '1+x'), symbolic.equal('x+1', 'x+2'), held[-1].fileno() > 1024)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.stdout.split() == ["True", "False", "True"], out.stderr[-2000:]
