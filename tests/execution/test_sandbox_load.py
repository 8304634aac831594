"""Load never flips a verdict, and one memory budget holds for all of a run's processes (issue 17.3, 17.4).

With both cores kept busy by CPU burners, an honest answer that needs most of its timeout in CPU still passes
(the time it waited for a CPU is given back); a sleeper still fails; a run starved of CPU beyond the cap is an
error that `evaluate` leaves out of the score, never a wrong answer. And 10 forked children of 400 MB each cost
the host no more than memory_mb + 256 MB, measured from /proc/meminfo while they run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowcore.execution import sandbox
from tests.helpers.hostile_programs import ATTACKS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

BURN = "import sys\nn = int(sys.argv[1])\nwhile True:\n    n += 1\n"
# An honest MBPP-style answer that must spend real CPU before it can answer.
HEAVY = "def work(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n"


CORES = os.cpu_count() or 2


@contextlib.contextmanager
def burning(k: int):
    """k CPU burners, each in a session of its own: with autogroup scheduling (Linux's default) the kernel
    shares the CPUs between sessions, and a sandboxed run is a session of its own too."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN, str(i)], start_new_session=True) for i in range(k)]
    try:
        yield
    finally:
        for b in burners:
            b.kill()
            b.wait()


@pytest.fixture
def both_cores_busy():
    with burning(CORES):
        yield


def _iterations_for(seconds: float) -> int:
    """Loop count of HEAVY that takes about ``seconds`` of CPU on this machine (measured unloaded)."""
    ns: dict = {}
    exec(HEAVY, ns)
    n, t0 = 200_000, time.process_time()
    ns["work"](n)
    per = (time.process_time() - t0) / n
    return int(seconds / max(per, 1e-9))


def test_an_honest_cpu_heavy_answer_passes_with_both_cores_busy():
    n = _iterations_for(1.0)
    tests = [f"assert work({n}) == {sum(i * i for i in range(n))}"]
    quiet = sandbox.run_untrusted(HEAVY, tests=tests, entry_point="work", timeout=2.0)
    assert quiet.ok, quiet.error
    # 1 s of CPU in a 2 s timeout beside twice as many burners as cores: it gets about 2/5 of a CPU, so its
    # wall time is past 2 s, and it still passes because it is judged on its own time. When the machine gave it
    # more than that (CI once read 1.995 s), the load was not real yet: again beside twice as many burners.
    # Half the timeout, not more: on a VM the host's steal is counted as the guest process's CPU time (CI, with
    # 8 burners on 2 vCPUs, read 1.96 s of CPU for work calibrated at 1.2 s), and no sandbox can give that back.
    for burners in (2 * CORES, 4 * CORES):
        with burning(burners):
            busy = sandbox.run_untrusted(HEAVY, tests=tests, entry_point="work", timeout=2.0)
        assert busy.ok and not busy.timed_out, (burners, busy.error, busy.duration)
        if busy.duration > 2.0:
            break
    assert busy.duration > 2.0, busy.duration  # the load was real: without the time given back it timed out


def test_a_sleeper_still_times_out_under_load(both_cores_busy):
    res = sandbox.run_untrusted("import time\ntime.sleep(60)\n", timeout=1.0)
    assert res.timed_out and not res.overloaded and not res.ok
    assert res.duration < 1.0 * sandbox.LOAD_GRACE + 2  # a sleeper waits for nothing: no time is given back


def test_an_infinite_loop_still_fails_under_load(both_cores_busy):
    """Beside two burners the loop gets its second of CPU within the 3 s cap and is timed out (wrong). Only when
    other work on a shared host starves it below that second (a CI run failed so at load 11) is it the machine's
    fault ("overloaded": no verdict); a loop that had its own second of CPU is never that."""
    res = sandbox.run_untrusted("while True:\n    pass\n", timeout=1.0)
    assert not res.ok and (res.timed_out or "CPU" in (res.error or "")), res.error
    assert not res.overloaded or (res.cpu_time is not None and res.cpu_time < 1.0), (res.cpu_time, res.error)


STARVED = r'''
import asyncio, functools, json, os, sys
sys.path.insert(0, sys.argv[1])
from flowcore.execution import sandbox
from flowcore.tasks import harness
from flowcore.tasks.problem import Problem
from flowcore.tasks.scoring import score
n, want = int(sys.argv[2]), sys.argv[3]
answer = "```python\ndef work(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n```"
problem = Problem("mbpp/heavy", "mbpp", "Sum of squares below n.", "", entry_point="work",
                  tests=f"assert work({n}) == {want}")
raw = sandbox.run_untrusted(answer.split("\n", 1)[1].rsplit("```", 1)[0], tests=problem.tests,
                            entry_point="work", timeout=1.0)
harness.score = functools.partial(score, timeout=1.0)  # the default 10 s timeout would make this test slow

async def runner(p):
    return answer, 0.0

report = asyncio.run(harness.evaluate(runner, [problem], concurrency=1))
r = report.results[0]
print(json.dumps({"overloaded": raw.overloaded, "timed_out": raw.timed_out, "error": raw.error,
                  "errored": r.errored, "correct": r.correct, "detail": r.error, "n": report.n,
                  "errors": report.errors}))
'''


def test_a_run_starved_of_cpu_is_errored_through_evaluate_not_wrong():
    n = _iterations_for(1.0)  # beside 6x as many burners as cores, the run cannot get 1 s of CPU within 3 s
    with burning(6 * CORES):
        p = subprocess.run([sys.executable, "-c", STARVED, str(ROOT), str(n), str(sum(i * i for i in range(n)))],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["overloaded"] and got["timed_out"] and "too busy" in got["error"], got
    assert got["errored"] and not got["correct"] and got["errors"] == 1 and got["n"] == 0, got
    assert "too busy" in got["detail"], got


def _mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_ten_forked_400mb_children_cost_the_host_at_most_memory_mb_plus_256():
    attack = next(a for a in ATTACKS if a.name == "10 forked children of 400 MB each")
    memory_mb = 512
    base, low, stop = _mem_available_mb(), [_mem_available_mb()], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            low.append(_mem_available_mb())
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        res = sandbox.run_untrusted(attack.code.format(), timeout=attack.timeout, memory_mb=memory_mb)
    finally:
        stop.set()
        t.join()
    assert not res.ok or "fork refused" in res.stdout, (res.error, res.stdout)
    drop = base - min(low)
    if res.peak_mb is not None:
        # The kernel's own count of what the run cost: every page of its 11 processes, swap included. The drop in
        # MemAvailable is printed beside it but not asserted: other processes on a shared machine move it too.
        print(f"run peak {res.peak_mb:.0f} MB (cgroup), MemAvailable fell by {drop:.0f} MB")
        assert res.peak_mb <= memory_mb + 256, f"the run's cgroup peaked at {res.peak_mb:.0f} MB"
        assert res.memory_exceeded  # 4 GB were asked for: the cap was hit, the OOM killer ended the excess
    else:  # the fallback: no second process at all, so nothing beyond the one address-space cap
        assert "fork refused after 0" in res.stdout and drop <= memory_mb + 256, (res.stdout, drop)


# -- a self-starving answer (issue 25.1) ---------------------------------------------------------------------
#
# A HumanEval answer that forks 60 spinning children piled up ~58 s of "waiting" per second when the credit summed
# every task's run-queue wait, reached the 3x cap and was recorded "errored (machine too busy)": left out of the
# score, while pinning both cores for 3x the timeout. Now a run gets one CPU (cgroup quota) and is credited at most
# what one task waited beyond the CPU the run got (flowcore/execution/sandbox.py, _Credit): it is a wrong answer.

SELF_STARVING = ("import os\n"
                 "def add(a, b):\n"
                 "    for _ in range(60):\n"
                 "        if os.fork() == 0:\n"
                 "            while True:\n"
                 "                pass\n"
                 "    while True:\n"
                 "        pass\n")
ADD_PROMPT = 'def add(a, b):\n    """Add two numbers.\n    >>> add(1, 2)\n    3\n    """\n'
SUB_PROMPT = 'def sub(a, b):\n    """Subtract b from a.\n    >>> sub(3, 1)\n    2\n    """\n'


def _code_rows(tmp_path: Path) -> Path:
    rows = [{"task_id": "Starve/add", "prompt": ADD_PROMPT, "entry_point": "add", "canonical_solution": "",
             "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"},
            {"task_id": "Starve/sub", "prompt": SUB_PROMPT, "entry_point": "sub", "canonical_solution": "",
             "test": "def check(candidate):\n    assert candidate(3, 1) == 2\n"}]
    path = tmp_path / "starve.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _replies(request: dict) -> str:
    from tests.helpers.fakellm import message_text

    text = message_text(request)
    if "def add" in text and "Fix the code" not in text:
        return "```python\n" + SELF_STARVING + "```"
    if "def add" in text:
        return "```python\ndef add(a, b):\n    return a + b\n```"
    return "```python\ndef sub(a, b):\n    return a - b\n```"


@pytest.fixture
def short_code_timeout(monkeypatch):
    """Hidden tests and Test nodes get 2 s instead of 15 s / 10 s: the same path, a shorter clock."""
    import functools

    from flowcore.tasks import harness
    from flowcore.tasks.scoring import score

    monkeypatch.setattr(harness, "score", functools.partial(score, timeout=2.0))
    real = sandbox.run_untrusted
    monkeypatch.setattr(sandbox, "run_untrusted", lambda *a, **k: real(*a, **{**k, "timeout": 2.0}))


@pytest.fixture
def judgeable():
    """Skip (saying so) when this shared machine is too busy to judge any 2 s timeout: a plain one-process
    infinite loop, run the same way, comes out "errored" too. On a machine that can give a run a third of a CPU
    (CI, a quiet box) it comes out wrong, and then so must the self-starving answer."""
    control = sandbox.run_untrusted("def add(a, b):\n    while True:\n        pass\n",
                                    tests="assert add(1, 2) == 3\n", entry_point="add", timeout=2.0)
    share = (control.cpu_time or 0) / max(control.duration, 1e-9)
    # A run is errored when it gets under a third of a CPU; the control must have had comfortably more, or the
    # load of the moment (this machine is shared) decides the outcome of the next run, not the rule under test.
    if control.overloaded or share < 0.6:
        pytest.skip(f"the machine is too busy to judge a timeout now (a plain infinite loop got {share:.0%} of a "
                    f"CPU; load {os.getloadavg()[0]:.1f})")
    assert control.timed_out and not control.ok, control.error


def test_a_self_starving_answer_is_wrong_through_score_and_pins_one_core_at_most(judgeable):
    from flowcore.tasks.problem import Problem
    from flowcore.tasks.scoring import score

    problem = Problem("Starve/add", "humaneval", ADD_PROMPT, "", entry_point="add",
                      tests="def check(candidate):\n    assert candidate(1, 2) == 3\n")
    res = score("humaneval", "```python\n" + SELF_STARVING + "```", problem, timeout=2.0)
    assert not res.correct and not res.errored and res.detail == "timed out", res
    raw = sandbox.run_untrusted(SELF_STARVING, tests=problem.tests, entry_point="add", timeout=2.0,
                                context=ADD_PROMPT)
    assert raw.timed_out and not raw.overloaded, raw.error
    if raw.cpu_time is not None and sandbox.budget_mode().startswith("seccomp filter on; one budget"):
        # one CPU for the run, however many children: the candidate's quota plus the judge's few milliseconds
        assert raw.cpu_time <= raw.duration * sandbox.CPU_QUOTA + 0.5, (raw.cpu_time, raw.duration)


def test_a_self_starving_answer_is_wrong_through_evaluate(endpoint, short_code_timeout, judgeable, capsys, tmp_path):
    from flowcore.cli.main import main

    wf = tmp_path / "gen.mmd"
    wf.write_text((ROOT / "assets" / "examples" / "code_seed.mmd").read_text())
    endpoint(_replies)
    code = main(["evaluate", str(wf), "--benchmark", "humaneval", "--data", str(_code_rows(tmp_path)), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    # was: score 1.0 over n=1 with 1 error (the wrong answer left out); now the wrong answer counts
    assert (doc["score"], doc["n"], doc["errors"]) == (0.5, 2, 0), doc
    wrong = next(r for r in doc["results"] if r["id"] == "Starve/add")
    assert not wrong["correct"], wrong


def test_a_self_starving_answer_fails_the_test_operator_which_asks_for_a_fix(endpoint, short_code_timeout, judgeable):
    import asyncio

    from flowcore.execution.operators import Value, run_operator
    from flowcore.llm.client import LLM, LLMSettings

    srv = endpoint(_replies)
    llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0, cache=False))
    out = asyncio.run(run_operator("TestOp", {"solution": [Value(SELF_STARVING, "Code")], "problem": [ADD_PROMPT],
                                              "entry_point": ["add"]}, llm=llm, problem=ADD_PROMPT,
                                   entry_point="add"))
    # the starving candidate failed the public example (timed out), the fix the LLM sent passes
    assert out.verdict["passed"] and out.verdict["fixes"] == 1, out.verdict
    fix_request = srv.requests[0]["messages"][-1]["content"]
    assert "Fix the code" in fix_request and "timed out after 2s" in fix_request
    assert "too busy" not in fix_request


def test_a_self_starving_answer_is_wrong_through_evolution(endpoint, short_code_timeout, judgeable, tmp_path):
    from flowcore.evolution.loop import Evolution, EvolutionConfig
    from flowcore.workspace.store import Workspace

    endpoint(_replies)
    ws = Workspace(tmp_path / "w.db")
    evo = Evolution(ws, EvolutionConfig(benchmark="humaneval", rounds=0, data_path=str(_code_rows(tmp_path)),
                                        workflow=(ROOT / "assets" / "examples" / "code_seed.mmd").read_text()))
    result = evo.run()
    seed = ws.query("SELECT score, status, per_problem_json FROM evo_rounds WHERE run_id = ? AND round = 0",
                    (result["run_id"],))[0]
    per = {p["id"]: p for p in json.loads(seed["per_problem_json"])}
    assert seed["status"] == "ok" and seed["score"] == 0.5, dict(seed)
    assert not per["Starve/add"]["correct"] and not per["Starve/add"].get("errored"), per


# -- an evaluation's own sandboxes starving each other (found by attack-verdict) -------------------------------
#
# Each run gets one CPU, but an evaluation runs --concurrency problems at once (8 by default): eight answers that
# spin, judged side by side on two cores, got a quarter of a CPU each, and the time they waited for each other was
# given back as if other work on the host had taken it. All eight reached the 3x cap and were recorded "errored
# (machine too busy)": left out of the score, so a workflow that loops whenever it is unsure scored 100% on the one
# problem it solved. Now at most one sandboxed run per CPU goes at a time in a process (a run waits for its turn
# before its clock starts), so the sandboxes of one evaluation never make each other wait.

LOOPS = 8


def _loop_rows(tmp_path: Path) -> Path:
    rows = [{"task_id": f"Loop/f{i}", "prompt": f'def f{i}(x):\n    """Add one.\n    >>> f{i}(1)\n    2\n    """\n',
             "entry_point": f"f{i}", "canonical_solution": "",
             "test": "def check(candidate):\n    assert candidate(1) == 2\n"} for i in range(LOOPS)]
    path = tmp_path / "loops.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _loop_replies(request: dict) -> str:
    from tests.helpers.fakellm import message_text

    text = message_text(request)
    if "def f0(" in text:
        return "```python\ndef f0(x):\n    return x + 1\n```"
    name = next(f"f{i}" for i in range(1, LOOPS) if f"def f{i}(" in text)
    return f"```python\ndef {name}(x):\n    while True:\n        pass\n```"


def test_concurrent_spinning_answers_of_one_evaluation_are_wrong_not_errored(endpoint, short_code_timeout,
                                                                             judgeable, capsys, tmp_path):
    from flowcore.cli.main import main

    endpoint(_loop_replies)
    code = main(["evaluate", str(ROOT / "assets" / "baselines" / "code_io.mmd"), "--benchmark", "humaneval",
                 "--data", str(_loop_rows(tmp_path)), "--concurrency", str(LOOPS), "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    # was: score 1.0 over n=1 with 7 errors ("the machine was too busy"), and exit 1
    assert (doc["score"], doc["n"], doc["errors"]) == (1 / LOOPS, LOOPS, 0), doc
    assert code == 0, err
    assert all("too busy" not in (r["error"] or "") for r in doc["results"]), doc["results"]
