"""Ray fan-out on a real local Ray instance (``ray.init(num_cpus=2)``): the same evaluation as a local run, an
evolution run in a detached actor, and nothing Ray-related without MERMAIDFLOW_RAY. One Ray start per module."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.evolution import remote
from flowcore.evolution.history import History
from flowcore.evolution.loop import EvolutionConfig, default_seed
from flowcore.execution import cluster
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks import load
from tests.helpers.fakellm import FakeLLMServer

ray = pytest.importorskip("ray", reason="ray is installed by `make test` (requirements-dev.txt)")


@pytest.fixture(scope="module")
def local_ray():
    mp = pytest.MonkeyPatch()
    mp.setenv(cluster.ENV, "local")
    r = cluster.connect("local", num_cpus=2)
    yield r
    r.shutdown()
    mp.undo()


def _answers(problems: list):
    """Right for the first half of the problems, wrong for the rest (keyed by each question's text)."""
    right = {p.question[:60]: p.reference for p in problems[:len(problems) // 2]}

    def respond(request: dict) -> str:
        text = str(request.get("messages"))
        return next((f"The answer is {ref}." for q, ref in right.items() if q in text), "The answer is -7.")

    return respond


def _fields(report) -> list[tuple]:
    return [(r.id, r.correct, r.prediction, r.extracted, round(r.cost, 9), r.error) for r in report.results]


def test_without_ray_configured_nothing_imports_it(monkeypatch):
    monkeypatch.delenv(cluster.ENV, raising=False)
    code = ("import sys, asyncio; from flowcore.execution import cluster; from flowcore.evaluation import evaluate; assert not cluster.enabled(); "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    monkeypatch.setenv(cluster.ENV, "somewhere")
    with pytest.raises(cluster.ClusterError, match="must be 'local', 'auto' or ray://"):
        cluster.address()


def test_ray_evaluation_matches_local(local_ray, ws, monkeypatch):
    problems = load("gsm8k", "validation", limit=6)
    w = parse(default_seed("math"))
    with FakeLLMServer(_answers(problems)) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="sk-test", cache=False,
                               models={r: "m" for r in ("optimizer", "judge", "executor")})
        monkeypatch.delenv(cluster.ENV)
        local = asyncio.run(evaluate_workflow(w, "gsm8k", problems, llm=LLM(settings, ws), concurrency=2))
        monkeypatch.setenv(cluster.ENV, "local")
        llm = LLM(settings, ws, run_id="evo-7")  # the driver's call-log name (an evolution run's)
        seen = []
        remote = asyncio.run(evaluate_workflow(w, "gsm8k", problems, llm=llm, concurrency=2,
                                               progress=lambda d, n, r: seen.append((d, n))))
        requests = len(srv.requests)
    assert _fields(remote) == _fields(local)  # identical per-problem results, in the problems' order
    assert (remote.score, remote.n, remote.ci_low, remote.ci_high) == (local.score, local.n, local.ci_low,
                                                                        local.ci_high)
    assert any(r.correct for r in remote.results) and not all(r.correct for r in remote.results)
    assert seen[-1] == (6, 6) and len(seen) == 6
    assert llm.usage.cost == pytest.approx(remote.cost)  # the tasks' spend reaches the driver's budget
    assert requests % 2 == 0 and requests >= 2 * len(problems)  # both runs made the same calls
    # the workers logged their calls in the same workspace
    assert ws.query("SELECT COUNT(*) AS n FROM llm_calls")[0]["n"] == requests
    # ... under the driver's name, so a run's budget finds them in the log after a crash (History.logged)
    assert ws.query("SELECT COUNT(*) AS n FROM llm_calls WHERE run_id = 'evo-7'")[0]["n"] == requests // 2


def test_evolution_as_a_detached_ray_job(local_ray, tmp_path):
    from flowcore.workspace.store import Workspace

    ws = Workspace(tmp_path / "cluster.db")
    run_id, ref = remote.submit_evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=2, seed=3, offline=True,
                                                                mode="programmatic"))
    out = ray.get(ref, timeout=240)
    assert out["status"] == "finished" and out["run_id"] == run_id
    h = History(ws)
    assert [r["round"] for r in h.rounds(run_id)] == [0, 1, 2] and h.run(run_id).status == "finished"
    with pytest.raises(cluster.ClusterError, match="workspace the cluster can open"):
        remote.submit_evolution(Workspace(":memory:"), EvolutionConfig(benchmark="gsm8k", rounds=1, offline=True))
    ws.close_all()


def test_a_ray_evolution_with_an_llm_calls_it_and_equals_the_foreground_run(local_ray, tmp_path):
    """Issue 19.3: `submit --ray` makes progress - the detached actor reaches the endpoint and stores the rounds a
    foreground run with the same seed stores."""
    from flowcore.evolution.loop import Evolution
    from flowcore.workspace.store import Workspace

    problems = load("gsm8k", "validation", limit=4)
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, seed=5, limit=4, candidates=2)
    with FakeLLMServer(_answers(problems)) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="sk-test")
        fg_ws = Workspace(tmp_path / "fg.db")
        Evolution(fg_ws, cfg, llm=LLM(settings, fg_ws)).run()
        calls = len(srv.requests)
        ws = Workspace(tmp_path / "ray.db")
        run_id, ref = remote.submit_evolution(ws, cfg, settings)
        out = ray.get(ref, timeout=300)
        ray_calls = len(srv.requests) - calls
    assert out["status"] == "finished" and ray_calls == calls > 0

    def rounds(w):
        return [(r["round"], r["status"], r["score"], r["operator"], r["workflow_text"]) for r in History(w).rounds(1)]

    assert rounds(ws) == rounds(fg_ws) and any(r[2] for r in rounds(ws))
    ws.close_all()
    fg_ws.close_all()


def _kill_a_running_task(name: str = "solve_problem", timeout: float = 60.0) -> int:
    """SIGKILL one Ray worker process while it runs ``name`` (Ray titles a busy worker `ray::<function>`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = _find_worker(name, exclude=[])
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.05)
    raise AssertionError(f"no Ray worker ran {name} within {timeout:g} s")


def test_a_killed_ray_task_process_is_run_again_with_the_same_results(local_ray, ws, monkeypatch):
    """Issue 19.3: SIGKILL the worker process of a running problem mid-evaluation; Ray runs the problem again and
    the evaluation ends with the per-problem results of an undisturbed local run."""
    import threading
    from dataclasses import replace

    problems = load("gsm8k", "validation", limit=4)
    w = parse(default_seed("math"))
    with FakeLLMServer(_answers(problems), latency=0.5) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="sk-test",
                               models={r: "m" for r in ("optimizer", "judge", "executor")})
        monkeypatch.delenv(cluster.ENV)
        local = asyncio.run(evaluate_workflow(w, "gsm8k", problems, llm=LLM(settings, ws), concurrency=2))
        monkeypatch.setenv(cluster.ENV, "local")
        killed: list[int] = []
        killer = threading.Thread(target=lambda: killed.append(_kill_a_running_task()), daemon=True)
        killer.start()
        fresh = replace(settings, cache=False)  # every call reaches the server: the tasks take time to kill
        remote = asyncio.run(evaluate_workflow(w, "gsm8k", problems, llm=LLM(fresh, ws), concurrency=2))
        killer.join(5)
    assert killed, "no worker was killed"
    assert _fields(remote) == _fields(local) and remote.errors == 0


def test_a_killed_evolution_actor_is_restarted_and_ends_as_the_foreground_run(local_ray, tmp_path):
    """Issue 28.2: SIGKILL the detached actor's process mid-run; Ray restarts it (max_restarts) and sends run()
    again, which resumes after the last stored round: the rounds equal a foreground run's. Before: the run was
    left "running" until someone typed the same command again."""
    import time

    from flowcore.evolution.loop import Evolution
    from flowcore.workspace.store import Workspace

    problems = load("gsm8k", "validation", limit=3)
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=4, seed=6, limit=3, candidates=2, mode="programmatic")
    with FakeLLMServer(_answers(problems), latency=0.3) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="sk-test")
        fg_ws = Workspace(tmp_path / "fg.db")
        Evolution(fg_ws, cfg, llm=LLM(settings, fg_ws)).run()
        ws = Workspace(tmp_path / "ray.db")
        run_id, ref = remote.submit_evolution(ws, cfg, settings)
        deadline = time.monotonic() + 240
        while History(ws).last_round(run_id) < 1:  # kill it mid-run, after a round or two are stored
            assert time.monotonic() < deadline, "the actor stored no round"
            time.sleep(0.2)
        killed = _kill_a_running_task("_Evolver")
        out = ray.get(ref, timeout=300)
    assert killed and out["status"] == "finished", out

    def rounds(w):
        return [(r["round"], r["status"], r["score"], r["operator"], r["workflow_text"])
                for r in History(w).rounds(run_id)]

    assert rounds(ws) == rounds(fg_ws) and History(ws).run(run_id).status == "finished"
    ws.close_all()
    fg_ws.close_all()


def test_a_local_ray_listens_on_loopback_only(local_ray):
    """Issue 28.7: every socket the local Ray's processes listen on is bound to 127.0.0.1 (was: every interface,
    and the machine's external address), checked with `ss`, never assumed."""
    import shutil

    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    import os
    import re

    local_ray.get(local_ray.remote(lambda: 1).remote(), timeout=120)  # a worker up, listening too
    session = local_ray._private.worker._global_node.session_name  # this Ray's processes, not another test run's

    def ours(pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            return session.encode() in cmd or int(pid) == os.getpid()
        except OSError:
            return False

    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    ray_lines = [ln for ln in lines if any(ours(pid) for pid in re.findall(r"pid=(\d+)", ln))]
    assert any('"raylet"' in ln for ln in ray_lines) and any('"gcs_server"' in ln for ln in ray_lines), lines
    bound = {ln.split()[3].rsplit(":", 1)[0] for ln in ray_lines}
    assert bound <= {"127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"}, ray_lines


def _kill_each_actor(times: int, name: str = "_Evolver", timeout: float = 120.0) -> list[int]:
    """SIGKILL the evolution actor's process ``times`` times: each time the next process Ray starts for it (a pid
    not killed before), waiting for it, never a fixed time."""
    killed: list[int] = []
    for _ in range(times):
        deadline = time.monotonic() + timeout
        while True:
            pid = _find_worker(name, exclude=killed)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            assert time.monotonic() < deadline, f"Ray started no new {name} process ({len(killed)} killed)"
            time.sleep(0.05)
    return killed


def _find_worker(name: str, exclude: list[int]) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(f"ray::{name}".encode()) and int(pid) not in exclude:
            return int(pid)
    return None


def test_an_actor_that_dies_past_its_restarts_leaves_its_run_stopped_with_the_command_that_resumes_it(
        local_ray, tmp_path, monkeypatch, capsys):
    """Issue 28.2: the actor's process is SIGKILLed once more than Ray restarts it (cluster.RESTARTS). The command
    that was waiting (`submit --ray --wait`) records the run "stopped" (was: left "running") and prints the exact
    command that resumes it; the History page shows it; that command, run, ends the run as a foreground run ends."""
    from streamlit.testing.v1 import AppTest

    from flowcore.cli.main import main
    from flowcore.evolution.loop import Evolution
    from flowcore.workspace.store import Workspace

    problems = load("gsm8k", "validation", limit=3)
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=3, seed=4, limit=3, candidates=2, mode="programmatic")
    db = str(tmp_path / "ray.db")
    with FakeLLMServer(_answers(problems), latency=0.2) as srv:
        for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
            monkeypatch.delenv(var)
        monkeypatch.setenv(cluster.ENV, "local")
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        fg_ws = Workspace(tmp_path / "fg.db")
        Evolution(fg_ws, cfg, llm=LLM(LLMSettings(base_url=srv.base_url, api_key="sk-test"), fg_ws)).run()
        killed: list[int] = []
        killer = threading.Thread(target=lambda: killed.extend(_kill_each_actor(cluster.RESTARTS + 1)), daemon=True)
        killer.start()
        started = time.monotonic()
        code = main(["submit", "--ray", "--wait", "--benchmark", "gsm8k", "--rounds", "3", "--seed", "4", "--limit",
                     "3", "--candidates", "2", "--mode", "programmatic", "--db", db])
        took = time.monotonic() - started
        killer.join(10)
        out = capsys.readouterr().out
        assert len(killed) == cluster.RESTARTS + 1 and code == 1, (killed, code, out)
        resume = f"MERMAIDFLOW_RAY=local python -m flowcore submit --ray --resume 1 --db {db} --wait"
        assert "run 1 stopped: its Ray actor mermaidflow-evolve-1 died" in out and resume in out, out
        assert took < 120, took  # said as soon as Ray gave up, not after a lease or a grace period
        ws = Workspace(db)
        info = History(ws).run(1)
        assert info.status == "stopped" and resume in info.reason and "restarts (3) are used up" in info.reason

        monkeypatch.setenv("MERMAIDFLOW_DB", db)
        at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=60)
        at.run()
        at.switch_page("pages/history.py").run()
        assert not at.exception, at.exception
        assert any("status **stopped**" in c.value and "restarts (3) are used up" in c.value for c in at.caption), \
            [c.value for c in at.caption]
        assert [c.value for c in at.code] == [resume]  # the command, to copy as it is
        monkeypatch.delenv("MERMAIDFLOW_DB")

        assert main(resume.split()[4:]) == 0, capsys.readouterr()  # the printed command, as printed
        assert "run 1 finished" in capsys.readouterr().out

    def rounds(w):
        return [(r["round"], r["status"], r["score"], r["operator"], r["workflow_text"]) for r in History(w).rounds(1)]

    assert rounds(ws) == rounds(fg_ws) and History(ws).run(1).status == "finished"
    ws.close_all()
    fg_ws.close_all()


def test_a_ray_run_whose_cluster_went_away_is_recorded_stopped_by_the_next_reader(tmp_path):
    """Issue 28.2: the Ray cluster goes away with nobody waiting on the run (`submit --ray` on a Ray that lives in
    that command's process: it exits, and Ray with it). The next reader (`queue`, the History page) that finds no
    actor on the run for MERMAIDFLOW_RAY_GRACE seconds records it "stopped" with the command that resumes it."""
    from tests.helpers.fakellm import FakeLLMServer

    db = str(tmp_path / "gone.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    env = {**env, cluster.ENV: "local", remote.GRACE_ENV: "2"}
    root = str(Path(__file__).resolve().parents[2])
    with FakeLLMServer("The answer is 7.", latency=0.2) as srv:
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-test")
        sub = subprocess.run([sys.executable, "-m", "flowcore", "submit", "--ray", "--benchmark", "gsm8k", "--rounds",
                              "5", "--limit", "3", "--mode", "programmatic", "--db", db], cwd=root, env=env,
                             capture_output=True, text=True, timeout=300)
        assert sub.returncode == 0 and "run 1 submitted" in sub.stdout, sub.stderr[-1500:]
        from flowcore.workspace.store import Workspace

        ws = Workspace(db)
        assert History(ws).run(1).status == "running"  # what was left before: "running", nothing evolving it
        deadline = time.monotonic() + 60
        while True:  # the grace counts from the last sign of an actor: asked again until it has passed
            q = subprocess.run([sys.executable, "-m", "flowcore", "queue", "--db", db], cwd=root, env=env,
                               capture_output=True, text=True, timeout=120)
            assert q.returncode == 0, q.stderr[-1500:]
            if "· stopped ·" in q.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    resume = f"MERMAIDFLOW_RAY=local python -m flowcore submit --ray --resume 1 --db {db} --wait"
    assert "run 1 · Ray actor mermaidflow-evolve-1 (local) · stopped" in q.stdout and resume in q.stdout, q.stdout
    info = History(ws).run(1)
    assert info.status == "stopped" and "Ray cluster went away" in info.reason and remote.resume_hint(
        info.reason) == resume, info.reason
    ws.close_all()
