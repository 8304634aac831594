"""A workspace database that goes away mid-run is ridden out like an endpoint outage (issue 19.4): a PostgreSQL
crash and restart during an evolution run, and a run stopped (not left "running") when it stays away longer
than the back-offs, which the same run then resumes to the same rounds."""

from __future__ import annotations

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
