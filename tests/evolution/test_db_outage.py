"""A workspace database that goes away mid-run is ridden out like an endpoint outage (issue 19.4): a PostgreSQL
crash and restart during an evolution run, and a run stopped (not left "running") when it stays away longer
than the back-offs, which the same run then resumes to the same rounds."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.workspace.store import Workspace

pytestmark = pytest.mark.slow
CFG = EvolutionConfig(benchmark="gsm8k", rounds=6, seed=3, offline=True, mode="programmatic", limit=3)


def _texts(ws: Workspace, run_id: int) -> list[str]:
    return [r["workflow_text"] for r in History(ws).rounds(run_id)]


def _crash_at_round_2(server, down: float):
    def progress(rec: dict) -> None:
        if rec["round"] == 2 and not getattr(progress, "done", False):
            progress.done = True
            server.crash()  # the next round's first query fails
            threading.Thread(target=lambda: (time.sleep(down), server.start_again()), daemon=True).start()
    return progress


def test_a_postgresql_restart_mid_run_is_ridden_out(pg_server, tmp_path):
    straight = Evolution(Workspace(tmp_path / "a.db"), CFG).run()
    want = _texts(Workspace(tmp_path / "a.db"), straight["run_id"])
    ws = Workspace(pg_server.new_schema())
    evo = Evolution(ws, CFG, progress=_crash_at_round_2(pg_server, 3.0))
    out = evo.run()
    assert out["status"] == "finished", out["reason"]
    assert _texts(ws, out["run_id"]) == want and History(ws).run(out["run_id"]).status == "finished"
    ws.close_all()


def test_a_database_away_past_the_backoffs_stops_the_run_which_resumes(pg_server, tmp_path):
    straight = Evolution(Workspace(tmp_path / "a.db"), CFG).run()
    want = _texts(Workspace(tmp_path / "a.db"), straight["run_id"])
    url = pg_server.new_schema()
    ws = Workspace(url)
    evo = Evolution(ws, CFG, progress=_crash_at_round_2(pg_server, 4.0))
    evo.outage_waits = (0.3, 0.3, 0.3)  # gives up after about a second; the server is back after four
    out = evo.run()
    assert out["status"] == "stopped" and "workspace database stayed unreachable" in out["reason"], out
    assert History(ws).run(out["run_id"]).status == "stopped"  # recorded once the server was back, not "running"
    again = Evolution.resume(Workspace(url), out["run_id"]).run()
    assert again["status"] == "finished" and _texts(ws, out["run_id"]) == want
    ws.close_all()


def test_a_lease_taken_right_after_a_restart_finds_its_table(pg_server):
    # Once flaky: "relation evo_leases does not exist". The lease's table was created (and remembered as created)
    # just before the server crashed, and the test server (then synchronous_commit=off) came back without it.
    from flowcore.evolution.lease import Lease
    from tests.workspace.test_pg_crash import reachable_again

    ws = Workspace(pg_server.new_schema())
    lease = Lease(ws, 1)  # creates evo_leases and its fence column
    pg_server.crash()
    pg_server.start_again()
    reachable_again(ws)
    lease.acquire()
    try:
        assert [tuple(r) for r in ws.query("SELECT run_id, fence FROM evo_leases")] == [(1, 1)]
    finally:
        lease.release()
        ws.close_all()


# -- an outage inside a round (issue 28.3): during the evaluation of round 2, not between rounds ---------------------

ONLINE = EvolutionConfig(benchmark="gsm8k", rounds=3, seed=4, limit=4, candidates=2, mode="programmatic",
                         concurrency=2)


def _problems() -> list:
    from flowcore.tasks import load

    return load("gsm8k", "validation", limit=4)


class _Fault:
    """A responder (right on the first problem, wrong elsewhere) that, once armed, sets off ``fault`` at the first
    evaluation request it sees (a request quoting a problem): the database fails mid-evaluation."""

    def __init__(self, fault=None) -> None:
        problems = _problems()
        self.questions, self.right = [p.question[:60] for p in problems], problems[0].reference
        self.fault, self.armed, self.fired = fault, False, threading.Event()

    def __call__(self, request: dict) -> str:
        from tests.helpers.fakellm import message_text

        text = message_text(request)
        if self.armed and not self.fired.is_set() and any(q in text for q in self.questions):
            self.fired.set()
            self.fault()
        return f"So the answer is \\boxed{{{self.right}}}." if self.questions[0] in text else "It is \\boxed{-7}."

    def arm_after_round_1(self, rec: dict) -> None:
        if rec["round"] == 1:
            self.armed = True


def _measured(ws: Workspace, run_id: int) -> list[tuple]:
    return [(r["round"], r["status"], r["score"], r["operator"], r["workflow_text"],
             [(p["id"], p["correct"], p["errored"]) for p in r["per_problem"]]) for r in History(ws).rounds(run_id)]


def _undisturbed(endpoint, tmp_path) -> tuple[list[tuple], int]:
    srv = endpoint(_Fault())
    ws = Workspace(tmp_path / "straight.db")
    out = Evolution(ws, ONLINE).run()
    assert out["status"] == "finished", out
    want = _measured(ws, out["run_id"])
    assert all(s == "ok" for _, s, *_ in want) and any(score for _, _, score, *_ in want), want
    ws.close_all()
    return want, len(srv.requests)


def _check_same_run(ws: Workspace, out: dict, want: list[tuple], srv, calls: int, fault: _Fault) -> None:
    assert fault.fired.is_set(), "the fault never landed mid-evaluation"
    assert out["status"] == "finished", out
    got = _measured(ws, out["run_id"])
    assert got == want  # the same rounds, scores and per-problem verdicts: no round failed, no problem errored
    assert len(srv.requests) == calls  # and not one paid call was repeated (replies kept in memory meanwhile)
    rows = ws.query("SELECT COUNT(*) AS n FROM llm_cache")[0]["n"]
    assert rows == calls  # every reply reached the cache once the database was back


def test_a_postgresql_restart_mid_evaluation_changes_nothing(pg_server, endpoint, tmp_path):
    want, calls = _undisturbed(endpoint, tmp_path)

    def crash() -> None:
        pg_server.crash()
        threading.Thread(target=lambda: (time.sleep(3.0), pg_server.start_again()), daemon=True).start()

    fault = _Fault(crash)
    srv = endpoint(fault)
    ws = Workspace(pg_server.new_schema())  # the test server keeps synchronous_commit on: a committed round survives
    evo = Evolution(ws, ONLINE, progress=fault.arm_after_round_1)
    out = evo.run()
    _check_same_run(ws, out, want, srv, calls, fault)
    ws.close_all()


def test_a_sqlite_write_lock_held_33_s_mid_evaluation_changes_nothing(endpoint, tmp_path, monkeypatch):
    want, calls = _undisturbed(endpoint, tmp_path)
    db = tmp_path / "locked.db"
    monkeypatch.setenv("MERMAIDFLOW_DB_BUSY_TIMEOUT", "5")  # each blocked write gives up after 5 s, not 30
    held = threading.Event()

    def lock() -> None:
        def hold() -> None:
            other = sqlite3.connect(db, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # another process's write transaction, held 33 s
            held.set()
            time.sleep(33)
            other.execute("ROLLBACK")
            other.close()
        threading.Thread(target=hold, daemon=True).start()
        held.wait(10)

    fault = _Fault(lock)
    srv = endpoint(fault)
    ws = Workspace(db)
    started = time.monotonic()
    out = Evolution(ws, ONLINE, progress=fault.arm_after_round_1).run()
    assert time.monotonic() - started > 33  # the lock was really waited out
    _check_same_run(ws, out, want, srv, calls, fault)
    ws.close_all()
