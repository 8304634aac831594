"""What went wrong with the workspace database, in words a person can act on, and what to do about it.

Every database error of either backend arrives as a ``sqlite3`` exception (``flowcore.workspace.pg`` maps
psycopg's and keeps the SQLSTATE); ``fault_of`` sorts it into one of a few kinds, because each calls for a
different response:

- ``outage``: the database is away for a while (a PostgreSQL restart, a connection dropped, SQLite's write lock
  held by another process past the busy timeout). Waited out with the same back-offs as an LLM endpoint outage.
- ``full``: no room left on the disk (or the server's). Said at once, by name; nothing is retried.
- ``damaged``: the file is not a valid database any more. Refused for writing, with the command that recovers it.
- ``readonly``: the file or the server refuses writes.
- ``io``: another I/O failure of the file (on a full disk SQLite may say only "disk I/O error").

``check_once`` runs ``PRAGMA quick_check`` when a process first opens a SQLite workspace, bounded in time, so
damage is found before anything is written into it.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)
QUICK_CHECK_SECONDS = 2.0  # a larger file is checked as far as this allows (the rest when next opened)
_CHECKED: dict[str, str | None] = {}  # file -> None (ok or not finished) or what quick_check found
_CHECKED_LOCK = threading.Lock()

# PostgreSQL SQLSTATEs (kept on the mapped exception as ``sqlstate``) by kind.
_PG_OUTAGE = ("08", "57P01", "57P02", "57P03", "53300", "40001", "40P01", "55P03", "58030")
_PG_FULL = ("53100",)
_PG_DAMAGED = ("XX001", "XX002")
_PG_READONLY = ("25006",)
# SQLite's error names (Python 3.11 keeps them on the exception as ``sqlite_errorname``) by kind.
_SQLITE = {"SQLITE_BUSY": "outage", "SQLITE_LOCKED": "outage", "SQLITE_FULL": "full", "SQLITE_CORRUPT": "damaged",
           "SQLITE_NOTADB": "damaged", "SQLITE_READONLY": "readonly", "SQLITE_IOERR_SHMSIZE": "full",
           "SQLITE_IOERR": "io", "SQLITE_CANTOPEN": "io"}
_WORDS = (("database or disk is full", "full"), ("no space left", "full"), ("could not extend file", "full"),
          ("malformed", "damaged"), ("file is not a database", "damaged"), ("is damaged", "damaged"),
          ("readonly database", "readonly"), ("read-only", "readonly"),
          ("database is locked", "outage"), ("database table is locked", "outage"), ("is busy", "outage"),
          ("server closed the connection", "outage"), ("connection", "outage"), ("terminating", "outage"),
          ("shutting down", "outage"), ("starting up", "outage"), ("cannot connect", "outage"),
          ("disk i/o error", "io"))


class WorkspaceError(OSError):
    """The workspace file cannot be used (not a SQLite database, unreadable, a folder...): an I/O error.
    ``str()`` says what is wrong; ``path`` says where (callers usually prefix it)."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])


class WorkspaceDamaged(WorkspaceError):
    """The SQLite file failed its integrity check: nothing is written into it. The message says how to recover."""


class StorageFull(sqlite3.OperationalError):
    """No room left where the workspace is stored: a write failed (the message names the disk and what is free)."""


def fault_of(exc: BaseException | None) -> str | None:
    """'outage' | 'full' | 'damaged' | 'readonly' | 'io' for a database error anywhere in the exception's
    cause/context chain; None when it holds none (or only a programming error: a bug is not an outage)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = _kind(exc)
        if kind is not None:
            return kind
        exc = exc.__cause__ or exc.__context__
    return None


def cause(exc: BaseException) -> BaseException:
    """The exception in ``exc``'s chain that carries its database fault (``exc`` itself when none does): what to
    report, rather than the node or harness error that wrapped it."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if _kind(cur) is not None:
            return cur
        cur = cur.__cause__ or cur.__context__
    return exc


def _kind(exc: BaseException) -> str | None:
    if isinstance(getattr(exc, "fault", None), str):  # an error that already says which (llm's ResultNotStored)
        return exc.fault  # type: ignore[attr-defined]
    if isinstance(exc, StorageFull):
        return "full"
    if isinstance(exc, WorkspaceDamaged):
        return "damaged"
    if not isinstance(exc, sqlite3.Error):
        return None
    state = getattr(exc, "sqlstate", None)
    if state:
        for kind, codes in (("outage", _PG_OUTAGE), ("full", _PG_FULL), ("damaged", _PG_DAMAGED),
                            ("readonly", _PG_READONLY)):
            if state.startswith(codes):
                return kind
        return None  # any other SQLSTATE is the statement's own problem (a bug, a constraint): not the database's
    name = getattr(exc, "sqlite_errorname", None) or ""
    for prefix in sorted(_SQLITE, key=len, reverse=True):
        if name.startswith(prefix):
            return _SQLITE[prefix]
    text = str(exc).lower()
    return next((kind for words, kind in _WORDS if words in text), None)


def is_outage(exc: BaseException | None) -> bool:
    return fault_of(exc) == "outage"


def free_space(path: object) -> str:
    """'12 kB free on /srv' for the folder holding ``path`` ('' when it cannot be told: a server, a gone folder)."""
    try:
        folder = Path(str(path)).resolve().parent
        free = shutil.disk_usage(folder).free
    except (OSError, ValueError):
        return ""
    size = f"{free / 1e6:.1f} MB" if free >= 1e6 else f"{free / 1e3:.0f} kB"
    return f"{size} free in {folder}"


def describe(exc: BaseException, where: object) -> str:
    """One sentence naming what happened to the workspace at ``where`` and what to do."""
    kind = fault_of(exc)
    if kind == "full":
        room = free_space(where) if not str(where).startswith("postgres") else ""
        said = (str(exc).strip().splitlines() or [""])[0]  # PostgreSQL adds a HINT line: the first says it all
        return (f"the disk holding the workspace {where} is full ({room or said}): free some space, then run the same "
                "command again to resume; what was stored is kept and can still be read")
    if kind == "damaged":
        return damaged_message(where, str(exc))
    if kind == "readonly":
        return f"the workspace {where} refuses writes ({exc}): make it writable, or point MERMAIDFLOW_DB elsewhere"
    if kind == "outage":
        return f"the workspace database {where} is unreachable for now ({exc})"
    return f"the workspace {where} failed ({exc})"


def damaged_message(where: object, finding: str) -> str:
    return (f"the workspace {where} is damaged ({finding.strip()[:200]}); nothing was written into it. Recover what "
            f"it holds into a new file with: python -m flowcore workspace recover {where}")


# -- the integrity check at open ------------------------------------------------------------------------------------

def quick_check(conn: sqlite3.Connection, seconds: float = QUICK_CHECK_SECONDS) -> str | None:
    """What ``PRAGMA quick_check`` found ('ok' -> None), or None when it ran out of time (checked again next time)."""
    deadline = time.monotonic() + seconds
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            log.info("quick_check of the workspace stopped after %g s (a large file): not finished", seconds)
            return None
        if _kind(exc) == "outage":
            return None
        return str(exc)
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.set_progress_handler(None, 0)
    found = "; ".join(str(r[0]) for r in rows)
    return None if found == "ok" else found


def check_once(conn: sqlite3.Connection, path: Path) -> None:
    """``quick_check`` the first time this process opens ``path``; WorkspaceDamaged when it finds damage."""
    key = str(Path(path).resolve())
    with _CHECKED_LOCK:
        if key in _CHECKED and _CHECKED[key] is None:
            return
        if key not in _CHECKED:
            _CHECKED[key] = quick_check(conn)
        finding = _CHECKED[key]
    if finding is not None:
        conn.close()
        raise WorkspaceDamaged(path, damaged_message(path, finding))


def forget_checks() -> None:
    """Check every file again at its next open (tests; after a recovery replaced a file)."""
    with _CHECKED_LOCK:
        _CHECKED.clear()
