"""The work queue on both backends: an item is claimed by exactly one worker, an abandoned item is taken over,
and a worker killed mid-run is replaced by another that finishes the run after its last stored round."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowcore.evolution.history import History
from flowcore.evolution.loop import EvolutionConfig
from flowcore.evolution.queued import submit_evolution
from flowcore.workspace import queue as wq
from flowcore.workspace.store import Workspace

ROOT = Path(__file__).resolve().parents[2]


def _same(ws: Workspace) -> Workspace:
    return Workspace(ws.url or ws.path)  # another connection to the same workspace (as another process has)


def test_each_item_is_claimed_by_exactly_one_worker(any_ws):
    ids = [wq.submit(any_ws, "evolve", {"run_id": i}) for i in range(12)]
    claimed: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        ws = _same(any_ws)
        got = claimed.setdefault(name, [])
        while (item := wq.claim(ws, name)) is not None:
            got.append(item.id)
            assert wq.finish(ws, item, result={"ok": True})
        ws.close_all()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(i for got in claimed.values() for i in got)
    assert everything == ids  # every item once, none twice
    assert {r["status"] for r in wq.items(any_ws)} == {"done"}
    with pytest.raises(ValueError, match="unknown work kind"):
        wq.submit(any_ws, "dance", {})


def test_an_abandoned_item_is_taken_over(any_ws):
    wq.submit(any_ws, "evolve", {"run_id": 7})
    a = wq.claim(any_ws, "a")
    assert a is not None and wq.claim(any_ws, "b") is None  # held and fresh: nobody else gets it
    time.sleep(0.05)
    b = wq.claim(any_ws, "b", stale_after=0.01)  # a stopped beating
    assert b is not None and b.id == a.id and b.attempts == 2
    assert not wq.heartbeat(any_ws, a) and not wq.finish(any_ws, a, result=1)  # a lost it
    assert wq.heartbeat(any_ws, b) and wq.finish(any_ws, b, error="boom")
    row = wq.items(any_ws)[0]
    assert (row["status"], row["worker"], row["error"]) == ("failed", "b", "boom")


def test_worker_killed_mid_run_is_replaced(any_ws, tmp_path):
    run_id, item = submit_evolution(any_ws, EvolutionConfig(benchmark="gsm8k", rounds=60, seed=2, offline=True,
                                                               mode="programmatic"))
    target = any_ws.url or str(any_ws.path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_BASE_URL", None)
    first = subprocess.Popen([sys.executable, "-m", "flowcore", "worker", "--db", target, "--stale-after", "1",
                              "--poll", "0.2"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    h = History(any_ws)
    deadline = time.time() + 120
    while h.last_round(run_id) < 3 and time.time() < deadline:
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)  # the worker dies mid-run, holding the item
    first.wait(30)
    stored = h.last_round(run_id)
    assert 3 <= stored < 60
    time.sleep(1.5)  # the dead worker's heartbeat goes stale (--stale-after 1): only then is its item free
    done = subprocess.run([sys.executable, "-m", "flowcore", "worker", "--db", target, "--once",
                           "--stale-after", "1", "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    rounds = [r["round"] for r in h.summaries(run_id)]
    assert rounds == list(range(61))  # continued after the last stored round: no gap, no repeat
    row = next(r for r in wq.items(any_ws) if r["id"] == item)
    assert row["status"] == "done" and row["attempts"] == 2 and h.run(run_id).status == "finished"


def test_cli_submit_worker_queue_and_bad_input(tmp_path, capsys, monkeypatch):
    from flowcore.cli.main import main

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    db = str(tmp_path / "q.db")
    assert main(["submit", "--benchmark", "gsm8k", "--rounds", "1", "--offline", "--db", db, "--json"]) == 0
    assert '"where": "work queue"' in capsys.readouterr().out
    assert main(["worker", "--once", "--db", db]) == 0
    assert "1 item(s) done" in capsys.readouterr().out
    assert main(["queue", "--db", db]) == 0
    assert "· done · attempts 1" in capsys.readouterr().out
    assert main(["queue", "--db", "postgresql://me:hunter2@127.0.0.1:9/none"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to the PostgreSQL workspace" in err and "hunter2" not in err
    assert main(["submit", "--benchmark", "gsm8k", "--rounds", "1", "--operators", "nope", "--db", db]) in (1, 2)
    assert "nope" in capsys.readouterr().err
    monkeypatch.setenv("MERMAIDFLOW_RAY", "nowhere")
    assert main(["submit", "--benchmark", "gsm8k", "--rounds", "1", "--offline", "--ray", "--db", db]) == 2
    assert "MERMAIDFLOW_RAY must be" in capsys.readouterr().err
