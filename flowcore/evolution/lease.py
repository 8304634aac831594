"""One evolving process per run: a lease row in the workspace that names the process evolving a run.

Two processes on one run would repeat each other's LLM calls and collide on the same round numbers, so a
process takes the run's lease before it evolves it and refreshes it every few seconds from a thread. A lease
is free when it is released, when its heartbeat is older than ``stale_after`` seconds (the holder hung or its
machine went away), or when its holder ran on this machine and that process is gone (SIGKILL, a crash): so a
resume right after a kill never waits.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from flowcore.workspace.store import Workspace

DDL = """
CREATE TABLE IF NOT EXISTS evo_leases(
    run_id INTEGER PRIMARY KEY, token TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    started REAL NOT NULL, heartbeat REAL NOT NULL);
"""
STALE_AFTER = 30.0  # seconds without a heartbeat after which a lease is free
BEAT_EVERY = 5.0


class RunBusy(Exception):
    """Another live process is evolving this run."""


@dataclass(frozen=True)
class Holder:
    run_id: int
    pid: int
    host: str
    started: float
    heartbeat: float

    def describe(self) -> str:
        ago = max(0.0, time.time() - self.heartbeat)
        return (f"run {self.run_id} is being evolved by process {self.pid} on {self.host} "
                f"(since {time.strftime('%H:%M:%S', time.localtime(self.started))}, last heard {ago:.0f} s ago)")


def _alive(pid: int) -> bool:
    """A process of this machine that exists and is not a zombie (a killed child not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def holder(ws: Workspace, run_id: int, stale_after: float = STALE_AFTER) -> Holder | None:
    """The live process holding ``run_id``'s lease, or None when the lease is free."""
    ws.ensure_schema("evo_leases", DDL)
    rows = ws.query("SELECT * FROM evo_leases WHERE run_id = ?", (run_id,))
    if not rows:
        return None
    r = rows[0]
    h = Holder(run_id, r["pid"], r["host"], r["started"], r["heartbeat"])
    if time.time() - h.heartbeat > stale_after:
        return None
    if h.host == socket.gethostname() and not _alive(h.pid):
        return None
    return h


class Lease:
    """``acquire()`` (RunBusy naming the holder when another live process has it), a heartbeat thread,
    ``release()``. Re-acquiring a lease this object holds is a no-op."""

    def __init__(self, ws: Workspace, run_id: int, *, stale_after: float = STALE_AFTER,
                 beat_every: float = BEAT_EVERY) -> None:
        self.ws, self.run_id = ws, run_id
        self.stale_after, self.beat_every = stale_after, beat_every
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        ws.ensure_schema("evo_leases", DDL)

    @property
    def held(self) -> bool:
        return self._thread is not None

    def acquire(self) -> None:
        if self.held:
            return
        now = time.time()
        with self.ws.transaction() as c:  # BEGIN IMMEDIATE: two processes cannot both see it free
            rows = c.execute("SELECT token FROM evo_leases WHERE run_id = ?", (self.run_id,)).fetchall()
            if rows and rows[0]["token"] != self.token:
                h = holder(self.ws, self.run_id, self.stale_after)
                if h is not None:
                    raise RunBusy(h.describe())
            c.execute("INSERT OR REPLACE INTO evo_leases(run_id, token, pid, host, started, heartbeat) "
                      "VALUES (?,?,?,?,?,?)", (self.run_id, self.token, os.getpid(), socket.gethostname(), now, now))
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"evo-lease-{self.run_id}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_every):
            try:
                with self.ws.transaction() as c:
                    c.execute("UPDATE evo_leases SET heartbeat = ? WHERE run_id = ? AND token = ?",
                              (time.time(), self.run_id, self.token))
            except Exception:  # noqa: BLE001 - a busy database skips one beat; the next one retries
                pass

    def release(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=2 * self.beat_every)
        self._thread = None
        with self.ws.transaction() as c:
            c.execute("DELETE FROM evo_leases WHERE run_id = ? AND token = ?", (self.run_id, self.token))
