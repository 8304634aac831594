"""The workspace: one database for workflows, history, runs, evaluations, LLM logs, AOV executions, settings.

Embedded SQLite by default (a file); ``MERMAIDFLOW_DB=postgresql://user@host:port/db`` (or a ``postgresql://``
target passed to ``Workspace``) puts the same tables in PostgreSQL so several app processes and workers share
one workspace. Engine modules keep writing SQLite-flavoured SQL (``?`` placeholders, ``INSERT OR REPLACE``,
``INTEGER PRIMARY KEY AUTOINCREMENT`` in their DDL, ``cursor.lastrowid``): ``flowcore.workspace.pg`` translates it
in this one place, so no module needs a second dialect.

Each engine module owns its tables and registers their DDL with ``ensure_schema``; the workspace guarantees
transactional writes (a crash loses nothing that was committed), safe use from threads (one connection per
thread), and one writer at a time (SQLite's BEGIN IMMEDIATE; a transaction-scoped advisory lock in
PostgreSQL), so read-then-write code behaves the same on both.

Errors: both backends raise ``sqlite3`` exception types (``IntegrityError``, ``OperationalError``, …; the
PostgreSQL adapter maps psycopg's), re-exported here as ``DatabaseError``/``IntegrityError``/``OperationalError``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flowcore.workspace import health
from flowcore.workspace.health import StorageFull, WorkspaceDamaged, WorkspaceError  # noqa: F401 - re-exported
from flowcore.workspace.target import redact

log = logging.getLogger(__name__)

DB_ENV = "MERMAIDFLOW_DB"
DEFAULT_FILE = "workspace.db"
# Seconds a SQLite write waits for another process's write lock before "database is locked" (then the caller's
# back-offs take over). MERMAIDFLOW_DB_BUSY_TIMEOUT changes it (tests use a few seconds).
BUSY_ENV = "MERMAIDFLOW_DB_BUSY_TIMEOUT"
BUSY_TIMEOUT = 30.0
WAL_LIMIT = 4 << 20  # bytes of write-ahead log SQLite keeps after a checkpoint
DEFERRED_CHECKPOINT = 10000  # log pages (~40 MB) past which a connection that defers checkpoints does one itself
# Room set aside beside a SQLite workspace (<file>-reserve) and given up when the disk fills, so the writes that end
# a run cleanly (its "stopped" status, its lease) still fit. Made again at the next open that has room.
RESERVE = 256 << 10
_PG_RESERVED: dict[str, bool] = {}  # PostgreSQL workspaces whose reserve this process has seen (by URL)
DatabaseError = sqlite3.DatabaseError
IntegrityError = sqlite3.IntegrityError
OperationalError = sqlite3.OperationalError
# Where applied DDL is recorded (the "migration table"): a module's DDL re-runs only when its text changed.
_SCHEMA_TABLE = ("CREATE TABLE IF NOT EXISTS mf_schema(name TEXT PRIMARY KEY, ddl_hash TEXT NOT NULL, "
                 "applied REAL NOT NULL)")
# The workspace's schema version, kept in mf_schema under this name: bumped when a table changes in a way an older
# app cannot read or write. A workspace written by a newer app is refused, and its marker is never rewritten.
SCHEMA_VERSION = 2
VERSION_ROW = "schema_version"


def too_new(path: object, stored: int) -> WorkspaceError:
    return WorkspaceError(path, f"written by a newer MermaidFlow Studio (workspace schema version {stored}; this one "
                                f"knows version {SCHEMA_VERSION}): it is not changed - update this checkout to use it")


def is_postgres(target: object) -> bool:
    return str(target).startswith(("postgresql://", "postgres://"))


def default_target() -> str:
    """``$MERMAIDFLOW_DB`` (a file path or a postgresql:// URL), else ``workspace.db``."""
    return os.environ.get(DB_ENV) or DEFAULT_FILE


def busy_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get(BUSY_ENV) or BUSY_TIMEOUT))
    except ValueError:
        return BUSY_TIMEOUT


class Workspace:
    """The engine's database. Thread-safe: one connection per thread.

    ``path`` is the SQLite file, or the PostgreSQL URL without its password (for messages)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        target = default_target() if path is None else path
        self.backend = "postgresql" if is_postgres(target) else "sqlite"
        self.url: str | None = None
        if self.backend == "postgresql":
            self.url = str(target)
            self.path: Path | str = redact(self.url)
        else:
            self.path = Path(target)
            if str(self.path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._schemas: set[str] = set()
        self._lock = threading.Lock()
        self._conns: list[Any] = []  # every thread's connection, so close_all() can reach them
        self._conns_lock = threading.Lock()
        self.read_only: str | None = None  # why writes are refused (a full disk at open), else None

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @property
    def conn(self) -> Any:
        """This thread's connection: a ``sqlite3.Connection`` or the PostgreSQL adapter with the same calls
        (``execute`` returning a cursor with ``fetchone/fetchall/lastrowid/rowcount``, ``executescript``)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self.is_postgres and conn.broken:
            conn.close()  # the server restarted or the connection dropped: start a fresh one
            conn = None
        if conn is None:
            if self.is_postgres:
                from flowcore.workspace.pg import PgConnection

                conn = PgConnection(self.url or "")
                self._local.conn = conn
                self._keep_pg_reserve(conn)
            else:
                conn = self._open_sqlite()
                if conn is None:
                    return self.conn  # another thread or process created the file first
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _open_sqlite(self) -> sqlite3.Connection | None:
        """Connect to the SQLite file, creating it 0600 (it holds prompts, history and logs; SQLite gives the
        -wal/-shm files the same mode). A file that is not a database is a WorkspaceError (an I/O error)."""
        path = Path(self.path)
        try:
            if str(path) != ":memory:" and not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            conn = sqlite3.connect(path, timeout=busy_timeout(), isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
        except FileExistsError:
            return None
        except sqlite3.DatabaseError as exc:
            if health.fault_of(exc) in ("full", "io") and path.exists():  # a full disk: read what is there
                return self._open_read_only(path, exc)
            raise WorkspaceError(path, f"not usable as the workspace database ({exc})") from None
        except OSError as exc:
            raise WorkspaceError(path, f"not usable as the workspace database ({exc})") from None
        if str(path) != ":memory:":
            health.check_once(conn, path)  # a damaged file is refused before anything is written into it
            self._keep_reserve(path)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")  # a checkpointed WAL shrinks back to this
        return conn

    def _open_read_only(self, path: Path, cause: BaseException) -> sqlite3.Connection:
        """The file opened for reading only, when opening it normally failed for lack of room (SQLite needs a
        little for its shared-memory index): the pages keep showing what is stored, every write says why not."""
        wal = Path(f"{path}-wal")
        # Without a write-ahead log the file is complete: immutable mode needs no shared memory at all.
        uri = f"file:{path}?mode=ro" + ("" if wal.exists() and wal.stat().st_size else "&immutable=1")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout(), isolation_level=None,
                                   check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            raise WorkspaceError(path, f"not usable as the workspace database ({cause}; read-only too: {exc})") \
                from None
        self.read_only = health.describe(cause, path)
        return conn

    def _keep_reserve(self, path: Path) -> None:
        reserve = Path(f"{path}-reserve")
        if reserve.exists():
            return
        try:
            fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, 0, RESERVE)
        except OSError:  # no room now: none is kept (the next open tries again)
            os.close(fd)
            reserve.unlink(missing_ok=True)
            return
        os.close(fd)

    def _keep_pg_reserve(self, conn: Any) -> None:
        """PostgreSQL: the reserve is a table of the workspace's schema (so in its tablespace, on its disk) holding
        ``RESERVE`` random bytes in one row; made once per schema, checked once per process."""
        if _PG_RESERVED.get(self.url or "") is not None:
            return
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS mf_reserve(id INTEGER PRIMARY KEY, filler BYTEA NOT NULL)")
            conn.execute("INSERT INTO mf_reserve(id, filler) VALUES (1, ?) ON CONFLICT (id) DO NOTHING",
                         (os.urandom(RESERVE),))  # random: PostgreSQL cannot compress it to nothing
            _PG_RESERVED[self.url or ""] = True
        except sqlite3.Error as exc:  # no room now, or a server that refuses writes: none is kept
            log.info("no room set aside in the PostgreSQL workspace: %s", exc)

    def release_reserve(self) -> bool:
        """Give the reserve's room back to the disk (it filled up): True when there was one."""
        if self.is_postgres:
            try:  # the catalogs change (not the full disk's tables); the table's files go at commit
                had = "mf_reserve" in self.conn.tables()
                self.conn.execute("DROP TABLE IF EXISTS mf_reserve")
            except sqlite3.Error:
                return False
            _PG_RESERVED.pop(self.url or "", None)
            return had
        if str(self.path) == ":memory:":
            return False
        reserve = Path(f"{self.path}-reserve")
        try:
            reserve.unlink()
        except OSError:
            return False
        return True

    def checkpoint(self) -> None:
        """Fold the SQLite write-ahead log into the database (after each evolution round), so the log stays small.
        RESTART, not TRUNCATE: the log's file keeps the room it has (up to ``WAL_LIMIT``) and the next writes reuse
        it, so when the disk fills, the few small writes that end a run cleanly (its "stopped" status, the lease)
        still fit. PostgreSQL: no-op."""
        if self.is_postgres or str(self.path) == ":memory:" or self.read_only:
            return
        try:
            self.conn.execute("PRAGMA wal_checkpoint(RESTART)")
        except sqlite3.OperationalError:  # busy readers, or no room to grow the file: the next round catches up
            pass

    def check_usable(self) -> None:
        """Open the workspace and write to it once (its schema record), so a file that is not a database, a
        folder or a read-only file is a WorkspaceError naming the problem before a page or command uses it."""
        try:
            self.ensure_schema("workspace", "")
        except WorkspaceError:
            raise
        except sqlite3.DatabaseError as exc:  # e.g. "attempt to write a readonly database"
            if health.fault_of(exc) == "full":  # what is stored can still be read: say why nothing can be written
                self.read_only = health.describe(exc, self.path)
                return
            if health.fault_of(exc) == "damaged":
                raise WorkspaceDamaged(self.path, health.damaged_message(self.path, str(exc))) from None
            raise WorkspaceError(Path(str(self.path)), f"not usable as the workspace database ({exc})") from None

    def ensure_schema(self, name: str, ddl: str) -> None:
        """Create a module's tables once per process (DDL must use IF NOT EXISTS). The DDL's hash is recorded
        in ``mf_schema``; another process (or a restart) skips DDL that is already applied."""
        if name in self._schemas:
            return
        with self._lock:
            if name in self._schemas:
                return
            import hashlib

            digest = hashlib.sha256(ddl.encode()).hexdigest()[:16]
            conn = self.conn
            if self.read_only:  # nothing can be created now; reads of what exists still work
                self._schemas.add(name)
                return
            if self.is_postgres:
                conn.apply_ddl(name, ddl, digest, _SCHEMA_TABLE, (VERSION_ROW, SCHEMA_VERSION, too_new))
            else:
                conn.executescript(_SCHEMA_TABLE)
                row = conn.execute("SELECT ddl_hash FROM mf_schema WHERE name = ?", (VERSION_ROW,)).fetchone()
                if row is not None and int(row[0]) > SCHEMA_VERSION:
                    raise too_new(self.path, int(row[0]))
                have = conn.execute("SELECT ddl_hash FROM mf_schema WHERE name = ?", (name,)).fetchone()
                if have is not None and have[0] == digest and row is not None and int(row[0]) == SCHEMA_VERSION:
                    self._schemas.add(name)  # applied already: nothing to write (a full disk still opens)
                    return
                conn.executescript(ddl + ";\n" if ddl else "")
                conn.execute("INSERT OR REPLACE INTO mf_schema(name, ddl_hash, applied) VALUES (?,?,?)",
                             (name, digest, time.time()))
                if row is None or int(row[0]) < SCHEMA_VERSION:
                    conn.execute("INSERT OR REPLACE INTO mf_schema(name, ddl_hash, applied) VALUES (?,?,?)",
                                 (VERSION_ROW, str(SCHEMA_VERSION), time.time()))
            self._schemas.add(name)

    def add_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """A small migration: add the columns ``{name: declaration}`` that ``table`` lacks (both backends)."""
        have = set(self.columns(table))
        missing = {c: d for c, d in columns.items() if c not in have}
        if not missing:
            return
        with self.transaction() as c:
            if not self.is_postgres:  # looked at again under the write lock: another connection (a run's thread,
                # another session) may have added them since ("duplicate column name" on a page before)
                have = {r[1] for r in c.execute(f'PRAGMA table_info("{table}")').fetchall()}
            for col, decl in missing.items():
                if self.is_postgres:
                    c.execute(f'ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS "{col}" {decl}')
                elif col not in have:
                    c.execute(f'ALTER TABLE "{table}" ADD COLUMN "{col}" {decl}')

    def columns(self, table: str) -> list[str]:
        if self.is_postgres:
            return self.conn.columns(table)
        return [r["name"] for r in self.query(f'PRAGMA table_info("{table}")')]

    def tables(self) -> list[str]:
        """The workspace's tables (the migration table excluded), sorted."""
        if self.is_postgres:
            names = self.conn.tables()
        else:
            names = [r["name"] for r in self.query(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        return sorted(n for n in names if n not in ("mf_schema", "mf_reserve"))

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """BEGIN IMMEDIATE ... COMMIT (SQLite) or BEGIN + the workspace write lock ... COMMIT (PostgreSQL);
        rolls back on any exception so partial writes never land."""
        conn = self.conn
        if self.read_only:
            raise health.StorageFull(self.read_only)
        conn.execute("BEGIN IMMEDIATE")  # the PostgreSQL adapter turns this into BEGIN + advisory lock
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def defer_checkpoints(self) -> None:
        """This thread's connection leaves checkpointing the write-ahead log to the workspace's other connections
        (SQLite; nothing to do in PostgreSQL). A checkpoint copies the log into the file and syncs both to disk
        (10-100 ms on a busy disk), inside whichever commit passes SQLite's 1000-page mark: a server's event loop
        that commits an LLM call's log row waited that long with every request in flight. The server's trace
        writer, a thread of its own that commits every batch, checkpoints instead; this connection still does
        past DEFERRED_CHECKPOINT pages, so the log stays bounded when nothing else writes."""
        if not self.is_postgres:
            self.conn.execute(f"PRAGMA wal_autocheckpoint={DEFERRED_CHECKPOINT}")

    def change_token(self) -> tuple[Any, int] | None:
        """A value that differs once another connection (another thread's, another process's) has committed to
        the workspace since it was taken: SQLite's ``PRAGMA data_version`` on this thread's connection (a few
        microseconds). Writes through this same connection do not change it. None in PostgreSQL, which has no
        such cheap check: a caller then reads the database every time."""
        if self.is_postgres:
            return None
        conn = self.conn
        return conn, conn.execute("PRAGMA data_version").fetchone()[0]

    def query(self, sql: str, params: tuple | dict = ()) -> list[Any]:
        """Rows that read like ``sqlite3.Row``: ``row["col"]``, ``row[0]``, ``dict(row)``."""
        return self.conn.execute(sql, params).fetchall()

    def query_columns(self, sql: str, params: tuple | dict, width: int) -> list[list]:
        """The result column by column (``width`` lists, one per selected column): a wide read of many rows
        without a row object per row (10,000 ``sqlite3.Row`` cost ~20 ms more to unpack than tuples)."""
        if self.is_postgres:
            rows = [tuple(r) for r in self.query(sql, params)]
        else:
            cur = self.conn.cursor()
            cur.row_factory = None
            rows = cur.execute(sql, params).fetchall()
        return [list(c) for c in zip(*rows)] if rows else [[] for _ in range(width)]

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._conns_lock:
                if conn in self._conns:
                    self._conns.remove(conn)

    def close_all(self) -> None:
        """Close every thread's connection (tests, shutdown)."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing is best effort (another thread may be using it)
                pass
        self._local = threading.local()
