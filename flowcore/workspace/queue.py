"""Work shared by several processes on one workspace: a queue table that workers claim from.

A work item is claimed by exactly one worker: on PostgreSQL with ``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP
LOCKED)`` (concurrent workers skip each other's rows instead of waiting), on SQLite inside the workspace's
BEGIN IMMEDIATE (one writer at a time). The claiming worker refreshes a heartbeat; an item whose heartbeat is
older than ``stale_after`` seconds (its worker died or hung) can be claimed again, and its handler resumes it —
an evolution run continues after its last stored round. ``python -m flowcore worker`` runs the loop.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from flowcore.workspace.store import Workspace

log = logging.getLogger(__name__)
DDL = """
CREATE TABLE IF NOT EXISTS work_queue(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',  -- queued | running | done | failed
    worker TEXT,
    heartbeat REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    result_json TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS work_queue_status ON work_queue(status, id);
"""
STALE_AFTER = 30.0
KINDS = ("evolve",)


@dataclass(frozen=True)
class Item:
    id: int
    kind: str
    payload: dict
    attempts: int
    worker: str
    stale_after: float = STALE_AFTER  # how long the claiming worker lets a silent holder keep it
    outcome: str = ""  # after work_one: done | failed | lost (another worker took it over; not finished here)
    detail: str = ""  # the error (failed) or who took it over (lost)


class Lost(Exception):
    """The item was taken over by another worker (this one looked gone): stop quietly, record nothing."""


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("work_queue", DDL)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def submit(ws: Workspace, kind: str, payload: dict) -> int:
    """Queue one item; its id."""
    if kind not in KINDS:
        raise ValueError(f"unknown work kind {kind!r} (one of {', '.join(KINDS)})")
    _schema(ws)
    with ws.transaction() as c:
        cur = c.execute("INSERT INTO work_queue(kind, payload_json, created) VALUES (?,?,?)",
                        (kind, json.dumps(payload), time.time()))
        return int(cur.lastrowid)


def claim(ws: Workspace, worker: str, stale_after: float = STALE_AFTER) -> Item | None:
    """The oldest queued (or abandoned) item, now this worker's; None when there is nothing to do."""
    _schema(ws)
    now = time.time()
    cutoff = now - stale_after
    if ws.is_postgres:
        rows = ws.query(
            "UPDATE work_queue SET status = 'running', worker = ?, heartbeat = ?, started = ?, "
            "attempts = attempts + 1 WHERE id = (SELECT id FROM work_queue WHERE status = 'queued' OR "
            "(status = 'running' AND heartbeat < ?) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
            "RETURNING id, kind, payload_json, attempts", (worker, now, now, cutoff))
    else:
        with ws.transaction() as c:
            found = c.execute("SELECT id FROM work_queue WHERE status = 'queued' OR (status = 'running' AND "
                              "heartbeat < ?) ORDER BY id LIMIT 1", (cutoff,)).fetchall()
            rows = []
            if found:
                c.execute("UPDATE work_queue SET status = 'running', worker = ?, heartbeat = ?, started = ?, "
                          "attempts = attempts + 1 WHERE id = ?", (worker, now, now, found[0]["id"]))
                rows = c.execute("SELECT id, kind, payload_json, attempts FROM work_queue WHERE id = ?",
                                 (found[0]["id"],)).fetchall()
    if not rows:
        return None
    r = rows[0]
    return Item(int(r["id"]), r["kind"], json.loads(r["payload_json"]), int(r["attempts"]), worker, stale_after)


def heartbeat(ws: Workspace, item: Item) -> bool:
    """Still this worker's? (False: it was reclaimed after looking abandoned; stop working on it.)"""
    with ws.transaction() as c:
        cur = c.execute("UPDATE work_queue SET heartbeat = ? WHERE id = ? AND worker = ? AND status = 'running'",
                        (time.time(), item.id, item.worker))
        return cur.rowcount == 1


def finish(ws: Workspace, item: Item, *, result: Any = None, error: str | None = None) -> bool:
    """Record the outcome (only the current holder can); True when recorded."""
    with ws.transaction() as c:
        cur = c.execute("UPDATE work_queue SET status = ?, finished = ?, result_json = ?, error = ? "
                        "WHERE id = ? AND worker = ? AND status = 'running'",
                        ("failed" if error else "done", time.time(), json.dumps(result), error, item.id,
                         item.worker))
        return cur.rowcount == 1


def items(ws: Workspace, limit: int = 100) -> list[dict]:
    _schema(ws)
    return [dict(r) for r in ws.query("SELECT id, kind, payload_json, status, worker, attempts, created, finished, "
                                      "error FROM work_queue ORDER BY id DESC LIMIT ?", (int(limit),))]


# -- handlers -----------------------------------------------------------------------------------------------------

# kind -> what does it; stages above storage register theirs (flowcore.evolution.queued registers "evolve"), so
# the queue never imports the work it hands out.
Handler = Callable[[Workspace, Item, threading.Event], dict]
HANDLERS: dict[str, Handler] = {}


def handler(kind: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[kind] = fn
        return fn
    return register


def work_one(ws: Workspace, worker: str | None = None, *, stale_after: float = STALE_AFTER) -> Item | None:
    """Claim one item and do it, with a heartbeat thread; None when the queue is empty. The item comes back
    with its ``outcome``: done, failed, or lost when another worker took it over while this one was silent
    (paused, cut off): then nothing is recorded here, and the other worker carries it on.

    The handler gets an Event that is set when the item is lost; it must then stop, writing nothing more."""
    worker = worker or worker_name()
    item = claim(ws, worker, stale_after)
    if item is None:
        return None
    lost, done = threading.Event(), threading.Event()

    def beat() -> None:
        while not done.wait(max(0.2, stale_after / 3)):
            try:
                if not heartbeat(ws, item):
                    lost.set()  # another worker took it over: stop, writing nothing more
                    return
            except Exception:  # noqa: BLE001 - a missed beat is retried; the work goes on
                log.exception("work queue heartbeat failed")

    t = threading.Thread(target=beat, daemon=True, name=f"heartbeat-{item.id}")
    t.start()
    outcome, detail = "done", ""
    try:
        do = HANDLERS.get(item.kind)
        if do is None:
            raise LookupError(f"this worker cannot do '{item.kind}' items (nothing registered that kind)")
        result = do(ws, item, lost)
    except Lost as exc:
        outcome, detail = "lost", str(exc)
    except Exception as exc:  # noqa: BLE001 - the item records why it failed; the worker goes on
        outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
        if not finish(ws, item, error=detail):
            outcome, detail = "lost", "another worker took the item over"
    else:
        if not finish(ws, item, result=result):
            outcome, detail = "lost", "another worker took the item over before it was recorded here"
    finally:
        done.set()
        t.join()
    return replace(item, outcome=outcome, detail=detail)


def run_worker(ws: Workspace, *, worker: str | None = None, once: bool = False, poll: float = 1.0,
               stale_after: float = STALE_AFTER, stop: threading.Event | None = None,
               on_item: Callable[[Item], None] | None = None) -> int:
    """Claim and do items until ``stop`` (or, with ``once``, until the queue is empty). Items done."""
    stop = stop or threading.Event()
    n = 0
    while not stop.is_set():
        item = work_one(ws, worker, stale_after=stale_after)
        if item is None:
            if once:
                break
            stop.wait(poll)
            continue
        n += 1
        if on_item is not None:
            on_item(item)
    return n
