"""One evolving process per run: a lease row in the workspace that names the process evolving a run, with a
fencing token every write of the run checks.

Two processes on one run would repeat each other's LLM calls and collide on the same round numbers, so a
process takes the run's lease before it evolves it and refreshes it every few seconds from a thread. A lease
is free when it is released, when its heartbeat is older than ``stale_after`` seconds (the holder hung or its
machine went away), or when its holder ran on this machine and that process is gone (SIGKILL, a crash) or is
stopped (SIGSTOP, Ctrl-Z) with a heartbeat older than two beats: so a resume right after a kill never waits.

Fencing. Each acquisition takes the next number of the run's ``fence`` counter (it only grows, even across
releases). Every write of the run (a round, a status, the run's settings) is made in a transaction that first
checks that the lease row still carries this holder's token and fence (``Lease.check``), so a holder that was
paused, judged gone and replaced, then woken, writes nothing: its next write raises ``LeaseLost``, and its
heartbeat (or ``verify`` before a paid LLM call) finds out as soon as it runs again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowcore.workspace.store import Workspace

DDL = """
CREATE TABLE IF NOT EXISTS evo_leases(
    run_id INTEGER PRIMARY KEY, token TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    started REAL NOT NULL, heartbeat REAL NOT NULL);
"""
log = logging.getLogger(__name__)
STALE_AFTER = 30.0  # seconds without a heartbeat after which a lease is free
BEAT_EVERY = 5.0


class RunBusy(Exception):
    """Another live process is evolving this run."""


class LeaseLost(Exception):
    """This process no longer holds the run's lease (another took it over after this one looked gone): it must
    write nothing more to the run. The message says who holds it now."""


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


def _state(pid: int) -> str | None:
    """The process's state letter on this machine (R, S, T for stopped, Z for a zombie...), None when gone."""
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "?"
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return "?"


def _alive(pid: int) -> bool:
    """A process of this machine that exists and is not a zombie (a killed child not yet reaped)."""
    return _state(pid) not in (None, "Z")


def schema(ws: Workspace) -> None:
    ws.ensure_schema("evo_leases", DDL)
    if "evo_leases-fence" not in ws._schemas:
        ws.add_columns("evo_leases", {"fence": "INTEGER NOT NULL DEFAULT 0"})
        ws._schemas.add("evo_leases-fence")


def holder(ws: Workspace, run_id: int, stale_after: float = STALE_AFTER) -> Holder | None:
    """The live process holding ``run_id``'s lease, or None when the lease is free."""
    schema(ws)
    rows = ws.query("SELECT * FROM evo_leases WHERE run_id = ?", (run_id,))
    return _live(rows[0], run_id, stale_after) if rows else None


def _live(r: Any, run_id: int, stale_after: float) -> Holder | None:
    if not r["token"]:
        return None  # released
    h = Holder(run_id, r["pid"], r["host"], r["started"], r["heartbeat"])
    age = time.time() - h.heartbeat
    if age > stale_after:
        return None
    if h.host == socket.gethostname():
        state = _state(h.pid)
        if state in (None, "Z") or (state in ("T", "t") and age > 2 * BEAT_EVERY):
            return None  # gone, or stopped (SIGSTOP, Ctrl-Z) and silent: taken over, and fenced off if it wakes
    return h


class Lease:
    """``acquire()`` (RunBusy naming the holder when another live process has it), a heartbeat thread,
    ``check(conn)`` inside every write of the run, ``release()``. Re-acquiring a lease this object holds is a
    no-op. ``on_lost(message)`` is called (from the heartbeat thread) when another process took the lease."""

    def __init__(self, ws: Workspace, run_id: int, *, stale_after: float = STALE_AFTER,
                 beat_every: float | None = None, on_lost: Callable[[str], None] | None = None) -> None:
        self.ws, self.run_id = ws, run_id
        self.stale_after = stale_after
        self.beat_every = beat_every if beat_every is not None else min(BEAT_EVERY, stale_after / 3)
        self.token = uuid.uuid4().hex
        self.fence = 0  # this holder's fencing token (0: not held)
        self.lost: str | None = None  # why the lease was lost, once it was
        self.on_lost = on_lost
        self._confirmed = 0.0  # monotonic time the database last confirmed the lease
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        schema(ws)

    @property
    def held(self) -> bool:
        return self._thread is not None and self.lost is None

    def acquire(self) -> None:
        if self.held:
            return
        now = time.time()
        with self.ws.transaction() as c:  # BEGIN IMMEDIATE: two processes cannot both see it free
            rows = c.execute("SELECT * FROM evo_leases WHERE run_id = ?", (self.run_id,)).fetchall()
            if rows and rows[0]["token"] != self.token:
                h = _live(rows[0], self.run_id, self.stale_after)
                if h is not None:
                    raise RunBusy(h.describe())
            fence = (int(rows[0]["fence"] or 0) if rows else 0) + 1
            if rows:
                c.execute("UPDATE evo_leases SET token = ?, pid = ?, host = ?, started = ?, heartbeat = ?, fence = ? "
                          "WHERE run_id = ?", (self.token, os.getpid(), socket.gethostname(), now, now, fence,
                                               self.run_id))
            else:
                c.execute("INSERT INTO evo_leases(run_id, token, pid, host, started, heartbeat, fence) "
                          "VALUES (?,?,?,?,?,?,?)", (self.run_id, self.token, os.getpid(), socket.gethostname(), now,
                                                     now, fence))
        self.fence, self.lost, self._confirmed = fence, None, time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"evo-lease-{self.run_id}", daemon=True)
        self._thread.start()

    def check(self, conn: Any) -> None:
        """Inside a write transaction of the run: LeaseLost unless this holder's token and fence are still the
        lease's (the write then rolls back with the transaction)."""
        if self.lost is not None:
            raise LeaseLost(self.lost)
        row = conn.execute("SELECT token, fence, pid, host FROM evo_leases WHERE run_id = ?",
                           (self.run_id,)).fetchone()
        if row is None or row["token"] != self.token or int(row["fence"] or 0) != self.fence:
            self._lose(row)
            raise LeaseLost(self.lost or "")
        self._confirmed = time.monotonic()

    def verify(self) -> None:
        """Before work that costs money (a paid LLM call): LeaseLost when the lease is gone. Reads the database
        only when the heartbeat has not confirmed the lease for two beats (e.g. this process was paused)."""
        if self.lost is not None:
            raise LeaseLost(self.lost)
        if time.monotonic() - self._confirmed <= 2 * self.beat_every:
            return
        rows = self.ws.query("SELECT token, fence, pid, host FROM evo_leases WHERE run_id = ?", (self.run_id,))
        row = rows[0] if rows else None
        if row is None or row["token"] != self.token or int(row["fence"] or 0) != self.fence:
            self._lose(row)
            raise LeaseLost(self.lost or "")
        self._confirmed = time.monotonic()

    def _lose(self, row: Any) -> None:
        if self.lost is not None:
            return
        who = f"process {row['pid']} on {row['host']}" if row is not None and row["token"] else "nobody now"
        self.lost = (f"run {self.run_id} was taken over ({who} holds it) while this process (pid {os.getpid()}) "
                     "was not heard from; this process stopped without writing anything more to it")
        if self.on_lost is not None:
            try:
                self.on_lost(self.lost)
            except Exception:  # noqa: BLE001 - the loss is recorded in self.lost either way
                pass

    def lose(self, why: str) -> None:
        """Give the lease up from outside (the work item it serves was taken over): LeaseLost from now on."""
        if self.lost is not None:
            return
        self._stop.set()  # no more beats: the other worker can take the lease without waiting it out
        try:
            with self.ws.transaction() as c:
                c.execute("UPDATE evo_leases SET token = '', heartbeat = 0 WHERE run_id = ? AND token = ? AND "
                          "fence = ?", (self.run_id, self.token, self.fence))
        except Exception as exc:  # noqa: BLE001 - then it goes stale by itself
            log.warning("run %s: the lease could not be given up (%s)", self.run_id, exc)
        self.lost = why
        if self.on_lost is not None:
            self.on_lost(why)

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_every):
            try:
                with self.ws.transaction() as c:
                    cur = c.execute("UPDATE evo_leases SET heartbeat = ? WHERE run_id = ? AND token = ? AND fence = ?",
                                    (time.time(), self.run_id, self.token, self.fence))
                    if cur.rowcount == 0:
                        row = c.execute("SELECT token, fence, pid, host FROM evo_leases WHERE run_id = ?",
                                        (self.run_id,)).fetchone()
                        self._lose(row)
                        return
                self._confirmed = time.monotonic()
            except Exception:  # noqa: BLE001 - a busy database skips one beat; the next one retries
                pass

    def release(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=2 * self.beat_every)
        self._thread = None
        if self.lost is not None:
            return  # not ours any more: the new holder's row is left alone
        try:
            with self.ws.transaction() as c:  # the row (and its fence counter) stays; only the holder is cleared
                c.execute("UPDATE evo_leases SET token = '', heartbeat = 0 WHERE run_id = ? AND token = ? AND "
                          "fence = ?", (self.run_id, self.token, self.fence))
        except Exception as exc:  # noqa: BLE001 - e.g. a full disk: the lease frees itself (stale, or this pid gone)
            log.warning("run %s: the lease could not be released (%s); it frees itself after %g s", self.run_id,
                        exc, self.stale_after)
