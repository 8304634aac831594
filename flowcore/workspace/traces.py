"""Traces: one row per served request or Run-page run, one span per node (operator, model, tokens, cost,
latency, error), kept in the workspace so the Traces view can list them and draw one as a timeline.

The trace id is the OpenTelemetry trace id (32 hex digits), so a trace in the workspace and the one an OTLP
collector received are found by the same id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowcore.workspace.store import Workspace

_DDL = """
CREATE TABLE IF NOT EXISTS traces(
    id TEXT PRIMARY KEY, created REAL NOT NULL, source TEXT NOT NULL, workflow TEXT, version INTEGER,
    created_by TEXT NOT NULL, status TEXT NOT NULL, error TEXT, latency REAL NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0, calls INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, problem TEXT, answer TEXT);
CREATE INDEX IF NOT EXISTS traces_workflow ON traces(workflow, version, created);
CREATE INDEX IF NOT EXISTS traces_created ON traces(created);
CREATE TABLE IF NOT EXISTS trace_spans(
    trace_id TEXT NOT NULL, seq INTEGER NOT NULL, node TEXT NOT NULL, op TEXT, model TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0, calls INTEGER NOT NULL DEFAULT 0, start REAL NOT NULL DEFAULT 0,
    latency REAL NOT NULL DEFAULT 0, error TEXT, skipped INTEGER NOT NULL DEFAULT 0, output TEXT,
    PRIMARY KEY(trace_id, seq));
"""
STATUSES = ("ok", "error", "timeout", "cancelled")
SOURCES = ("api", "mcp", "run-page", "cli")
TEXT_CAP = 4000  # characters of the problem and the answer kept with a trace


@dataclass
class Span:
    node: str
    op: str | None = None
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    calls: int = 0
    start: float = 0.0  # seconds after the trace began
    latency: float = 0.0
    error: str | None = None
    skipped: bool = False
    output: str | None = None


@dataclass
class Trace:
    id: str
    created: float
    source: str
    workflow: str | None
    version: int | None
    created_by: str
    status: str
    error: str | None = None
    latency: float = 0.0
    cost: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    problem: str | None = None
    answer: str | None = None
    spans: list[Span] = field(default_factory=list)


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("traces", _DDL)


def _cap(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + f"... [{len(text)} chars]"


def save_trace(ws: Workspace, t: Trace) -> None:
    """Store a finished trace and its spans in one transaction."""
    save_traces(ws, [t])


def save_traces(ws: Workspace, batch: list[Trace]) -> None:
    """Store finished traces and their spans in one transaction (all or none)."""
    for t in batch:
        if t.status not in STATUSES or t.source not in SOURCES:
            raise ValueError(f"trace {t.id}: status {t.status!r} / source {t.source!r} not in {STATUSES} / "
                             f"{SOURCES}")
    # The rows are made before the write lock is taken: a server's event loop that logs an LLM call waits for
    # that lock, and this is often a thread that must win the interpreter's lock back between statements.
    rows = [(t.id, t.created, t.source, t.workflow, t.version, t.created_by, t.status, t.error, t.latency, t.cost,
             t.calls, t.prompt_tokens, t.completion_tokens, _cap(t.problem), _cap(t.answer)) for t in batch]
    spans = [(t.id, i, s.node, s.op, s.model, s.prompt_tokens, s.completion_tokens, s.cost, s.calls, s.start,
              s.latency, s.error, int(s.skipped), _cap(s.output)) for t in batch for i, s in enumerate(t.spans)]
    _schema(ws)
    with ws.transaction() as conn:
        conn.executemany("INSERT INTO traces(id, created, source, workflow, version, created_by, status, error,"
                         " latency, cost, calls, prompt_tokens, completion_tokens, problem, answer)"
                         " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        if spans:
            conn.executemany("INSERT INTO trace_spans(trace_id, seq, node, op, model, prompt_tokens,"
                             " completion_tokens, cost, calls, start, latency, error, skipped, output)"
                             " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", spans)


def _trace(d: dict[str, Any]) -> Trace:
    keys = Trace.__dataclass_fields__.keys() - {"spans"}
    return Trace(**{k: d[k] for k in keys})


def list_traces(ws: Workspace, *, workflow: str | None = None, version: int | None = None,
                limit: int = 200) -> list[Trace]:
    """The latest traces (without spans), newest first; ``workflow``/``version`` filter them."""
    _schema(ws)
    where, params = [], []
    if workflow is not None:
        where.append("workflow = ?")
        params.append(workflow)
    if version is not None:
        where.append("version = ?")
        params.append(int(version))
    sql = "SELECT * FROM traces" + (" WHERE " + " AND ".join(where) if where else "")
    rows = ws.query(sql + " ORDER BY created DESC, id LIMIT ?", (*params, int(limit)))
    return [_trace(dict(r)) for r in rows]


def load_trace(ws: Workspace, trace_id: str) -> Trace | None:
    """A trace with its spans in node order, or None."""
    _schema(ws)
    rows = ws.query("SELECT * FROM traces WHERE id=?", (trace_id,))
    if not rows:
        return None
    t = _trace(dict(rows[0]))
    fields = Span.__dataclass_fields__.keys()
    for r in ws.query("SELECT * FROM trace_spans WHERE trace_id=? ORDER BY seq", (trace_id,)):
        d = dict(r)
        t.spans.append(Span(**{k: (bool(d[k]) if k == "skipped" else d[k]) for k in fields}))
    return t


def traced_workflows(ws: Workspace) -> list[tuple[str, int | None]]:
    """(workflow, version) pairs that have traces, for the view's filter."""
    _schema(ws)
    rows = ws.query("SELECT DISTINCT workflow, version FROM traces WHERE workflow IS NOT NULL "
                    "ORDER BY workflow, version")
    return [(r["workflow"], r["version"]) for r in rows]
