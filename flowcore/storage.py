"""The workspace: one embedded SQLite database for workflows, history, runs, LLM logs and AOV executions.

Each engine module owns its tables and registers their DDL with ``ensure_schema``; the workspace only
guarantees transactional writes (a crash loses nothing that was committed) and safe use from threads.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEFAULT_DB = Path(os.environ.get("MERMAIDFLOW_DB", "workspace.db"))


class Workspace:
    """A SQLite database shared by the engine. Thread-safe: one connection per thread."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else DEFAULT_DB
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._schemas: set[str] = set()
        self._lock = threading.Lock()

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
        return conn

    def ensure_schema(self, name: str, ddl: str) -> None:
        """Create a module's tables once per process (DDL must use IF NOT EXISTS)."""
        if name in self._schemas:
            return
        with self._lock:
            if name not in self._schemas:
                self.conn.executescript(ddl)
                self._schemas.add(name)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; rolls back on any exception so partial writes never land."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def query(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
