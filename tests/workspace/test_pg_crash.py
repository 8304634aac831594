"""A PostgreSQL crash and restart (the test server's ``crash()``: an immediate stop, as a killed server) keeps every
transaction committed before it, as a real server does: a table created and a row written just before the crash are
there after the restart, so the process's memory of the tables it created (``Workspace._schemas``) stays true and a
database blink is only an outage to wait out."""

from __future__ import annotations

import pytest

from flowcore.workspace.store import OperationalError, Workspace

pytestmark = pytest.mark.slow


def reachable_again(ws: Workspace) -> None:
    """The first statement after a restart may fail on the connection the server dropped; the next one reconnects."""
    try:
        ws.query("SELECT 1")
    except OperationalError:
        ws.query("SELECT 1")


def test_what_was_committed_right_before_a_crash_is_there_after_the_restart(pg_server):
    ws = Workspace(pg_server.new_schema())
    ws.ensure_schema("crash_kv", "CREATE TABLE IF NOT EXISTS crash_kv(k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
    with ws.transaction() as c:
        c.execute("INSERT INTO crash_kv(k, v) VALUES (?, ?)", ("a", 1))
    pg_server.crash()  # at once: a commit still only in the server's memory would be lost here
    pg_server.start_again()
    reachable_again(ws)
    assert "crash_kv" in ws.tables()
    assert [dict(r) for r in ws.query("SELECT k, v FROM crash_kv")] == [{"k": "a", "v": 1}]
    ws.close_all()
