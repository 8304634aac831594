"""Fencing (issue 28.2): a run's lease carries a fencing token that every write of the run checks, so a holder
that was paused (SIGSTOP), judged gone and replaced, then woken (SIGCONT) writes nothing and makes no paid call.
A queue worker that loses its item says so and records nothing ("gave up", never "finished", never "cancelled by
the user"); the next worker carries the run on to the rounds of an undisturbed run. A paused `evolve` overtaken
by a second one stops with a plain message (no UNIQUE-constraint error). SQLite and PostgreSQL."""

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
from flowcore.evolution.lease import Lease, LeaseLost, RunBusy
from flowcore.tasks import load
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--benchmark", "gsm8k", "--rounds", "3", "--limit", "3", "--candidates", "2", "--seed", "5"]
FIRST = load("gsm8k", "validation", limit=3)[0]
MAX_IN_FLIGHT = 3  # the round's problems run at once (--limit 3): at most this many calls are out at a time


def _reply(request: dict) -> str:
    text = message_text(request)
    return f"So the answer is \\boxed{{{FIRST.reference}}}." if FIRST.question[:60] in text else "It is \\boxed{-7}."


def _run_row(ws: Workspace) -> int:
    return History(ws).create_run({"rounds": 3}, "k", "flowchart TD", "gsm8k", "math", True)


# -- the lease itself ---------------------------------------------------------------------------------------------

def test_a_stale_holder_is_fenced_off_and_writes_nothing(any_ws):
    run = _run_row(any_ws)
    a = Lease(any_ws, run, stale_after=30)
    a.acquire()
    with pytest.raises(RunBusy):
        Lease(any_ws, run, stale_after=30).acquire()
    with any_ws.transaction() as c:  # A goes silent (as if paused): its heartbeat ages past stale_after
        c.execute("UPDATE evo_leases SET heartbeat = heartbeat - 100, pid = 999999999 WHERE run_id = ?", (run,))
    b = Lease(any_ws, run, stale_after=30)
    b.acquire()
    assert b.fence == a.fence + 1  # the fencing token only grows
    ha, hb = History(any_ws), History(any_ws)
    ha.guard, hb.guard = a.check, b.check
    with pytest.raises(LeaseLost, match="taken over"):
        ha.add_round(run, {"round": 0, "status": "structure-only", "workflow_text": "flowchart TD"})
    with pytest.raises(LeaseLost):
        ha.set_status(run, "cancelled", "cancelled by the user")
    a._confirmed = 0.0  # A wakes: before any paid call it asks the database, and is told
    with pytest.raises(LeaseLost):
        a.verify()
    hb.add_round(run, {"round": 0, "status": "structure-only", "workflow_text": "flowchart TD"})
    assert [r["round"] for r in History(any_ws).rounds(run)] == [0]
    assert History(any_ws).run(run).status == "running"  # A's "cancelled" never landed
    a.release()  # leaves B's lease alone
    b.release()
    c = Lease(any_ws, run)
    c.acquire()  # free after release, and the counter goes on
    assert c.fence == b.fence + 1
    c.release()


# -- processes ----------------------------------------------------------------------------------------------------

def _flowcore(env: dict, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "flowcore", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _env(srv: FakeLLMServer, key: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    return {**env, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": key, "MERMAIDFLOW_MAX_RETRIES": "0"}


def _rounds(ws: Workspace, run: int = 1) -> list[tuple]:
    return [(r["round"], r["status"], r["score"], r["operator"], r["workflow_text"]) for r in History(ws).rounds(run)]


def _wait(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def _target(request, tmp_path: Path, backend: str, name: str) -> str:
    return request.getfixturevalue("pg_server").new_schema() if backend == "postgresql" else str(tmp_path / name)


class _Pauser:
    """A responder that answers as ``_reply`` and SIGSTOPs the process using API key ``key`` on its ``nth``
    request (before answering it). Records when each process's requests arrived."""

    def __init__(self, key: str, nth: int) -> None:
        self.key, self.nth, self.pid, self.seen = key, nth, 0, 0
        self.paused = threading.Event()
        self.by_key: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> str:
        return _reply(request)

    def hook(self, srv: FakeLLMServer) -> None:
        original = srv._next

        def nxt(request: dict, headers: dict[str, str], arrived: float):  # noqa: ANN202
            key = headers.get("authorization", "").removeprefix("Bearer ")
            with self.lock:
                self.by_key.setdefault(key, []).append(time.monotonic())
                self.seen += key == self.key
                pause = key == self.key and self.seen == self.nth and self.pid
            if pause:
                os.kill(self.pid, signal.SIGSTOP)
                self.paused.set()
            return original(request, headers, arrived)

        srv._next = nxt  # type: ignore[method-assign]


def _no_new_call_after(pauser: _Pauser, woke: float) -> None:
    """Woken, A starts no call: a request of A's reaching the server after SIGCONT can only be one it had already
    sent (or was sending) when SIGSTOP landed, so it arrives at once, never seconds later."""
    after = [t - woke for t in pauser.by_key.get("sk-A", []) if t > woke]
    assert len(after) <= MAX_IN_FLIGHT and all(dt < 2.0 for dt in after), after


def _undisturbed(srv: FakeLLMServer, tmp_path: Path) -> tuple[list[tuple], int]:
    db = tmp_path / "straight.db"
    p = _flowcore(_env(srv, "sk-ref"), "evolve", "--db", str(db), *ARGS)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    ws = Workspace(db)
    try:
        return _rounds(ws), len(srv.requests)
    finally:
        ws.close_all()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_paused_worker_is_overtaken_and_the_run_ends_as_an_undisturbed_one(request, tmp_path, backend):
    pauser = _Pauser("sk-A", nth=8)
    with FakeLLMServer(pauser) as srv:
        pauser.hook(srv)
        want, calls = _undisturbed(srv, tmp_path)
        target = _target(request, tmp_path, backend, "q.db")
        sub = _flowcore(_env(srv, "sk-sub"), "submit", "--db", target, *ARGS)
        assert sub.wait(timeout=300) == 0, sub.stderr.read()
        a = _flowcore(_env(srv, "sk-A"), "worker", "--db", target, "--once", "--stale-after", "5", "--name", "A")
        pauser.pid = a.pid
        assert pauser.paused.wait(300), "worker A never reached its 8th call"
        ws = Workspace(target)
        _wait(lambda: ws.query("SELECT heartbeat FROM work_queue WHERE id = 1")[0][0] < time.time() - 5.5, 60,
              "worker A's item to look abandoned")
        b = _flowcore(_env(srv, "sk-B"), "worker", "--db", target, "--once", "--stale-after", "5", "--name", "B")
        try:
            # B takes the item and the run's lease (a higher fence); A is woken at once, before B stores anything
            _wait(lambda: (ws.query("SELECT pid FROM evo_leases WHERE run_id = 1") or [[0]])[0][0] == b.pid, 120,
                  "worker B to take the run over")
            woke = time.monotonic()
            os.kill(a.pid, signal.SIGCONT)
            a_out, a_err = a.communicate(timeout=300)
            b_out, b_err = b.communicate(timeout=600)
            assert a.returncode == 0 and b.returncode == 0, (a_err[-1500:], b_err[-1500:])
            assert "gave up item 1" in a_out and "finished item 1" not in a_out, a_out
            assert "finished item 1" in b_out, b_out
            info = History(ws).run(1)
            assert info.status == "finished" and "cancelled" not in (info.reason or ""), info
            assert _rounds(ws) == want  # every round as in the undisturbed run: nothing lost, nothing doubled
            item = ws.query("SELECT status, worker FROM work_queue WHERE id = 1")[0]
            assert (item["status"], item["worker"]) == ("done", "B")
            _no_new_call_after(pauser, woke)
            paid = len(pauser.by_key["sk-A"]) + len(pauser.by_key["sk-B"])
            # the only calls made twice are those A had sent and not stored when it was paused (B cannot know
            # their answers): at most one per problem of the round (3), never one after A woke
            assert calls <= paid <= calls + MAX_IN_FLIGHT, (calls, paid)
        finally:
            for p in (a, b):
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
            ws.close_all()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_paused_evolve_overtaken_by_a_second_one_stops_cleanly(request, tmp_path, backend):
    pauser = _Pauser("sk-A", nth=8)
    with FakeLLMServer(pauser) as srv:
        pauser.hook(srv)
        want, calls = _undisturbed(srv, tmp_path)
        target = _target(request, tmp_path, backend, "e.db")
        a = _flowcore(_env(srv, "sk-A"), "evolve", "--db", target, *ARGS)
        pauser.pid = a.pid
        try:
            assert pauser.paused.wait(300), "evolve A never reached its 8th call"
            time.sleep(11)  # stopped and silent for two heartbeats: its lease is free to take
            b = _flowcore(_env(srv, "sk-B"), "evolve", "--db", target, *ARGS)
            b_out, b_err = b.communicate(timeout=600)
            assert b.returncode == 0, b_err[-2000:]
            woke = time.monotonic()
            os.kill(a.pid, signal.SIGCONT)
            a_out, a_err = a.communicate(timeout=300)
            assert a.returncode == 1 and "taken over" in a_err and "UNIQUE" not in a_err, a_err[-2000:]
            assert "Traceback" not in a_err
            ws = Workspace(target)
            assert _rounds(ws) == want and History(ws).run(1).status == "finished"
            ws.close_all()
            _no_new_call_after(pauser, woke)
            paid = len(pauser.by_key["sk-A"]) + len(pauser.by_key["sk-B"])
            assert calls <= paid <= calls + MAX_IN_FLIGHT, (calls, paid)
        finally:
            if a.poll() is None:
                os.kill(a.pid, signal.SIGCONT)
                a.kill()
