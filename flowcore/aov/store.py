"""AOV executions in the workspace database, so an execution can be reopened and continued.

``aov_executions`` holds the current graph (with every subtask's data) and the execution state;
``aov_events`` holds the log, one row per event. A save writes both in one transaction.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from flowcore.aov.context import DEFAULT_BUDGET
from flowcore.aov.execute import AgentBackend, EchoAgent, Execution
from flowcore.aov.inspector import Inspector
from flowcore.aov.model import AOVError, AOVGraph
from flowcore.workspace.store import Workspace

DDL = """
CREATE TABLE IF NOT EXISTS aov_executions (
    id TEXT PRIMARY KEY, goal TEXT NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL,
    graph_json TEXT NOT NULL, status TEXT NOT NULL, state_json TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS aov_events (
    execution_id TEXT NOT NULL REFERENCES aov_executions(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, step INTEGER NOT NULL, kind TEXT NOT NULL, payload_json TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq));
"""


OPEN_DDL = """
CREATE TABLE IF NOT EXISTS aov_open (browser TEXT PRIMARY KEY, execution_id TEXT NOT NULL, updated REAL NOT NULL);
"""


class ExecutionConflict(AOVError):
    """The execution was changed elsewhere (another tab, window or process) after this copy was read."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ExecutionStore:
    def __init__(self, workspace: Workspace) -> None:
        self.ws = workspace
        workspace.ensure_schema("aov", DDL)

    def save(self, ex: Execution) -> None:
        now = _now()
        with self.ws.transaction() as conn:
            conn.execute(
                "INSERT INTO aov_executions (id, goal, created, updated, graph_json, status, state_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET goal=excluded.goal, "
                "updated=excluded.updated, graph_json=excluded.graph_json, status=excluded.status, "
                "state_json=excluded.state_json",
                (ex.id, ex.graph.goal, now, now, ex.graph.to_json(indent=None), ex.status,
                 json.dumps(ex.state(), ensure_ascii=False)))
            last = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM aov_events WHERE execution_id = ?",
                                (ex.id,)).fetchone()[0]
            if last != ex.saved_seq:  # another copy wrote since this one was read: never mix the two
                raise ExecutionConflict(
                    f"execution {ex.id} was changed elsewhere (another tab, window or process) after it was "
                    "opened here; nothing from here was saved: reopen it to see its current state")
            new = [e for e in list(ex.events) if e["seq"] > last]
            conn.executemany(
                "INSERT INTO aov_events (execution_id, seq, step, kind, payload_json) VALUES (?, ?, ?, ?, ?)",
                [(ex.id, e["seq"], e["step"], e["kind"], json.dumps(e["payload"], ensure_ascii=False))
                 for e in new])
        ex.saved_seq = new[-1]["seq"] if new else last

    def last_seq(self, execution_id: str) -> int:
        """The number of the last saved event: a copy read before a later save is out of date."""
        return int(self.ws.query("SELECT COALESCE(MAX(seq), 0) FROM aov_events WHERE execution_id = ?",
                                 (execution_id,))[0][0])

    def row(self, execution_id: str) -> dict[str, Any]:
        rows = self.ws.query("SELECT * FROM aov_executions WHERE id = ?", (execution_id,))
        if not rows:
            raise AOVError(f"no AOV execution with id {execution_id!r}")
        return dict(rows[0])

    def events(self, execution_id: str) -> list[dict[str, Any]]:
        rows = self.ws.query("SELECT * FROM aov_events WHERE execution_id = ? ORDER BY seq", (execution_id,))
        return [{"seq": r["seq"], "step": r["step"], "kind": r["kind"],
                 "payload": json.loads(r["payload_json"])} for r in rows]

    def list(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.ws.query(
            "SELECT id, goal, created, updated, status FROM aov_executions ORDER BY updated DESC, id")]

    def delete(self, execution_id: str) -> None:
        with self.ws.transaction() as conn:
            conn.execute("DELETE FROM aov_events WHERE execution_id = ?", (execution_id,))
            conn.execute("DELETE FROM aov_executions WHERE id = ?", (execution_id,))


def remember_open(workspace: Workspace, browser: str, execution_id: str) -> None:
    """The execution this browser has open on the AOV page: a reload reopens it."""
    workspace.ensure_schema("aov_open", OPEN_DDL)
    with workspace.transaction() as conn:
        conn.execute("INSERT INTO aov_open (browser, execution_id, updated) VALUES (?, ?, ?) ON CONFLICT(browser) "
                     "DO UPDATE SET execution_id=excluded.execution_id, updated=excluded.updated",
                     (browser, execution_id, time.time()))


def open_of(workspace: Workspace, browser: str) -> str | None:
    """The execution this browser had open, if it is still saved."""
    ExecutionStore(workspace)  # its tables, on a workspace that has none yet
    workspace.ensure_schema("aov_open", OPEN_DDL)
    rows = workspace.query("SELECT o.execution_id FROM aov_open o JOIN aov_executions e ON e.id = o.execution_id "
                           "WHERE o.browser = ?", (browser,))
    return rows[0][0] if rows else None


def save_execution(workspace: Workspace, ex: Execution) -> str:
    """Attach ``ex`` to the workspace (later steps save themselves) and save it now."""
    ex.store = ExecutionStore(workspace)
    ex.save()
    return ex.id


def load_execution(workspace: Workspace, execution_id: str, agent: AgentBackend | None = None,
                   inspector: Inspector | None = None, repair_llm: Any = None,
                   refine_llm: Any = None) -> Execution:
    """Reopen a saved execution; it continues where it stopped (agents are not stored: pass them again)."""
    store = ExecutionStore(workspace)
    row = store.row(execution_id)
    state = json.loads(row["state_json"] or "{}")
    ex = Execution(AOVGraph.from_json(row["graph_json"]), agent or EchoAgent(), inspector,
                   repair_llm=repair_llm, mode=state.get("mode", "auto"), k=int(state.get("k", 3)),
                   max_repairs=int(state.get("max_repairs", 3)), execution_id=execution_id,
                   schedule=state.get("schedule", "steps"), refine_llm=refine_llm,
                   refine_every=int(state.get("refine_every", 3)),
                   max_refinements=int(state.get("max_refinements", 5)),
                   context_chars=int(state.get("context_chars", DEFAULT_BUDGET)))
    events = store.events(execution_id)
    ex.restore(state, events)
    ex.saved_seq = events[-1]["seq"] if events else 0
    ex.store = store
    return ex
