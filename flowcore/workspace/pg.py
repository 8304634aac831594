"""PostgreSQL behind ``flowcore.workspace.store.Workspace``: a psycopg 3 connection that takes the SQLite-flavoured SQL
the engine modules write and behaves like ``sqlite3`` (rows, ``lastrowid``, error types, NULL ordering).

Why psycopg 3 and not SQLAlchemy Core + Alembic: every module already speaks DB-API SQL through
``Workspace.query/transaction``; a thin adapter keeps that SQL unchanged (placeholders and the few dialect
differences are translated here, in one place), costs one small dependency, and imports only when a
``postgresql://`` workspace is used. Schema changes are few and additive: ``mf_schema`` records each module's
DDL hash and ``Workspace.add_columns`` adds columns, which covers them without a migrations framework.

Translations (statements are scanned so quoted strings, identifiers and comments are never touched):
``?`` and ``:name`` placeholders -> ``%s``/``%(name)s``; ``INSERT OR REPLACE``/``OR IGNORE`` -> ``ON CONFLICT``;
an INSERT into a table with an identity column gets ``RETURNING`` (for ``lastrowid``); ``ORDER BY`` terms get
SQLite's NULL placement; ``IFNULL`` -> ``COALESCE``; ``LIKE`` -> ``ILIKE`` (SQLite's LIKE ignores ASCII case);
``BEGIN IMMEDIATE`` -> ``BEGIN`` + a transaction-scoped advisory lock (one writer at a time, as in SQLite).
DDL: ``INTEGER PRIMARY KEY [AUTOINCREMENT]`` -> identity, ``INTEGER`` -> ``BIGINT``, ``REAL`` -> ``DOUBLE
PRECISION``, ``BLOB`` -> ``BYTEA``; PRAGMAs are dropped.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.types.numeric import FloatLoader

from flowcore.workspace.target import redact

__all__ = ["PgConnection", "Row", "redact", "translate", "translate_ddl"]


# ------------------------------------------------------------------------------------------------ rows


class Row:
    """Reads like ``sqlite3.Row``: by column name or index, ``keys()``, ``dict(row)``, iteration over values."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: Sequence[Any]) -> None:
        self._index, self._values = index, values

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            try:
                return self._values[self._index[key]]
            except KeyError:
                raise IndexError(f"No item with that key: {key!r}") from None
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Row) and self._index == other._index and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values))!r})"


def _row_factory(cursor: Any) -> Any:
    desc = cursor.description
    if desc is None:
        return tuple
    index: dict[str, int] = {}
    for i, d in enumerate(desc):
        index.setdefault(d.name, i)  # the first of duplicate names wins, as in sqlite3.Row
    return lambda values: Row(index, values)


class _BoolAsInt(Dumper):
    """SQLite has no boolean: modules store True/False in INTEGER (BIGINT) columns, so send them as numbers."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


# ------------------------------------------------------------------------------------------------ scanning

_TOKEN = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/""", re.S)


def _segments(sql: str) -> list[tuple[str, bool]]:
    """Split into (text, is_code): quoted strings, quoted identifiers and comments are not code."""
    out, pos = [], 0
    for m in _TOKEN.finditer(sql):
        if m.start() > pos:
            out.append((sql[pos:m.start()], True))
        out.append((m.group(0), False))
        pos = m.end()
    if pos < len(sql):
        out.append((sql[pos:], True))
    return out


def _map_code(sql: str, fn: Any) -> str:
    return "".join(fn(text) if code else text for text, code in _segments(sql))


def split_statements(script: str) -> list[str]:
    """A script's statements (split on ``;`` outside strings and comments), blanks dropped."""
    stmts, cur = [], []
    for text, code in _segments(script):
        if not code:
            cur.append(text)
            continue
        parts = text.split(";")
        cur.append(parts[0])
        for p in parts[1:]:
            stmts.append("".join(cur))
            cur = [p]
    stmts.append("".join(cur))
    return [s.strip() for s in stmts if _strip_comments(s).strip()]


def _strip_comments(sql: str) -> str:
    return "".join(t for t, code in _segments(sql) if code or t.startswith(("'", '"')))


# ------------------------------------------------------------------------------------------------ translation

# Type names are matched in upper case only (the modules' DDL convention), so a column called "real" or "blob"
# keeps its name.
_DDL_RULES = [
    (re.compile(r"\bINTEGER\s+PRIMARY\s+KEY(\s+AUTOINCREMENT)?\b"),
     "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bWITHOUT\s+ROWID\b", re.I), ""),
]


def translate_ddl(script: str) -> list[str]:
    """SQLite DDL as PostgreSQL statements (PRAGMAs dropped)."""
    out = []
    for stmt in split_statements(script):
        if re.match(r"\s*PRAGMA\b", _strip_comments(stmt), re.I):
            continue
        for rx, repl in _DDL_RULES:
            stmt = _map_code(stmt, lambda t, rx=rx, repl=repl: rx.sub(repl, t))
        out.append(stmt)
    return out


_INSERT = re.compile(r"^\s*INSERT\s+(?:OR\s+(REPLACE|IGNORE)\s+)?INTO\s+(\"?\w+\"?)\s*(\(([^)]*)\))?", re.I)
_ORDER_BY = re.compile(r"\bORDER\s+BY\b", re.I)
_ORDER_END = re.compile(r"(LIMIT|OFFSET|FOR|UNION|EXCEPT|INTERSECT|RETURNING)\b", re.I)
_PLACEHOLDER = re.compile(r"\?|(?<!:):([A-Za-z_]\w*)|%")


class Catalog:
    """Primary keys and identity columns of the workspace's tables (read once per table per process)."""

    def __init__(self) -> None:
        self.pk: dict[str, list[str]] = {}
        self.identity: dict[str, str | None] = {}
        self.translated: dict[tuple[str, bool], tuple[str, str | None]] = {}
        self.lock = threading.Lock()

    def forget(self) -> None:
        with self.lock:
            self.pk.clear()
            self.identity.clear()
            self.translated.clear()


def _order_end(code: str, start: int) -> int:
    """Where an ORDER BY list ends: a closing parenthesis of an enclosing group, ``;``, or a clause keyword."""
    depth, i = 0, start
    while i < len(code):
        ch = code[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                return i
            depth -= 1
        elif ch == ";" and depth == 0:
            return i
        elif depth == 0 and _ORDER_END.match(code, i) and (i == 0 or not code[i - 1].isalnum()):
            return i
        i += 1
    return len(code)


def _order_nulls(code: str) -> str:
    """SQLite sorts NULL first ascending and last descending; PostgreSQL the other way round."""
    out, pos = [], 0
    for m in _ORDER_BY.finditer(code):
        if m.start() < pos:
            continue
        out.append(code[pos:m.end()])
        end = _order_end(code, m.end())
        body, terms, depth, start = code[m.end():end], [], 0, 0
        for i, ch in enumerate(body):
            depth += (ch == "(") - (ch == ")")
            if ch == "," and depth == 0:
                terms.append(body[start:i])
                start = i + 1
        terms.append(body[start:])
        fixed = []
        for t in terms:
            stripped = t.rstrip()
            if not stripped.strip() or re.search(r"\bNULLS\b", t, re.I):
                fixed.append(t)
                continue
            nulls = " NULLS LAST" if re.search(r"\bDESC$", stripped, re.I) else " NULLS FIRST"
            fixed.append(stripped + nulls + t[len(stripped):])
        out.append(",".join(fixed))
        pos = end
    out.append(code[pos:])
    return "".join(out)


def translate(sql: str, named: bool, has_params: bool, pk: Any = None, identity: Any = None
              ) -> tuple[str, str | None]:
    """(PostgreSQL SQL, identity column returned for ``lastrowid`` or None). ``pk(table)``/``identity(table)``
    look the table up in the catalog when the statement needs it."""
    returning = None
    m = _INSERT.match(_strip_comments(sql))
    suffix = ""
    if m:
        kind, table = (m.group(1) or "").upper(), m.group(2).strip('"')
        if kind:
            sql = re.sub(r"\bINSERT\s+OR\s+\w+\s+INTO\b", "INSERT INTO", sql, count=1, flags=re.I)
        if kind == "IGNORE":
            suffix += " ON CONFLICT DO NOTHING"
        elif kind == "REPLACE":
            keys = pk(table) if pk else []
            if not keys:
                raise sqlite3.OperationalError(f"INSERT OR REPLACE into {table}: the table has no primary key")
            cols = [c.strip().strip('"') for c in (m.group(4) or "").split(",") if c.strip()]
            rest = [c for c in cols if c not in keys]
            action = ("DO UPDATE SET " + ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in rest)) if rest \
                else "DO NOTHING"
            suffix += f" ON CONFLICT ({', '.join(chr(34) + k + chr(34) for k in keys)}) {action}"
        if identity and not re.search(r"\bRETURNING\b", _strip_comments(sql), re.I):
            returning = identity(table)
            if returning:
                suffix += f' RETURNING "{returning}"'
    if suffix:
        sql = sql.rstrip().rstrip(";") + suffix

    def code_fn(text: str) -> str:
        text = re.sub(r"\bIFNULL\s*\(", "COALESCE(", text, flags=re.I)
        text = re.sub(r"\bLIKE\b", "ILIKE", text, flags=re.I)
        text = _order_nulls(text)
        if has_params:
            def ph(mm: re.Match) -> str:
                if mm.group(0) == "%":
                    return "%%"
                if mm.group(0) == "?":
                    return "%s"
                return f"%({mm.group(1)})s" if named else mm.group(0)

            text = _PLACEHOLDER.sub(ph, text)
        return text

    out = []
    for text, code in _segments(sql):
        if code:
            out.append(code_fn(text))
        else:
            out.append(text.replace("%", "%%") if has_params and text.startswith("'") else text)
    return "".join(out), returning


# ------------------------------------------------------------------------------------------------ connection

_CATALOGS: dict[str, Catalog] = {}
_CATALOGS_LOCK = threading.Lock()


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory lock key for this workspace and purpose."""
    return int.from_bytes(hashlib.sha256(":".join(("mermaidflow", *parts)).encode()).digest()[:8], "big",
                          signed=True)


def _mapped(exc: psycopg.Error) -> sqlite3.Error:
    """The sqlite3 exception type a module would catch for this psycopg error, carrying its SQLSTATE as
    ``sqlstate`` (how ``flowcore.workspace.health`` tells a server restart or a full disk from a bug). A dropped
    connection has no SQLSTATE from the server: it is given 08006 (connection failure)."""
    msg = str(exc).strip()
    if isinstance(exc, psycopg.IntegrityError):
        out: sqlite3.Error = sqlite3.IntegrityError(msg)
    elif isinstance(exc, (psycopg.OperationalError, psycopg.ProgrammingError, psycopg.InternalError)):
        out = sqlite3.OperationalError(msg)
    elif isinstance(exc, psycopg.DataError):
        out = sqlite3.DataError(msg)
    else:
        out = sqlite3.DatabaseError(msg)
    state = getattr(exc, "sqlstate", None)
    if state is None and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        state = "08006"
    out.sqlstate = state  # type: ignore[attr-defined]
    return out


class PgCursor:
    """What ``execute`` returns: the sqlite3 cursor calls the engine uses."""

    def __init__(self, cur: Any, returning: str | None) -> None:
        self._cur = cur
        self.lastrowid: int | None = None
        self.rowcount = cur.rowcount
        self._rows: list | None = None
        if returning is not None:
            row = cur.fetchone() if cur.description else None
            self.lastrowid = None if row is None else int(row[0])
            self._rows = []

    @property
    def description(self) -> Any:
        return self._cur.description

    def fetchall(self) -> list:
        if self._rows is not None:
            return self._rows
        return self._cur.fetchall() if self._cur.description else []

    def fetchone(self) -> Any:
        if self._rows is not None:
            return None
        return self._cur.fetchone() if self._cur.description else None

    def fetchmany(self, size: int = 1) -> list:
        return [] if self._rows is not None or not self._cur.description else self._cur.fetchmany(size)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


IDLE_IN_TRANSACTION_MS = 30_000  # our transactions last milliseconds; a holder idle this long is gone


class PgConnection:
    """One thread's PostgreSQL connection, used like a ``sqlite3.Connection`` in autocommit mode."""

    def __init__(self, url: str) -> None:
        self.where = redact(url)  # for messages: never the password
        try:
            self.raw = psycopg.connect(url, autocommit=True, row_factory=_row_factory, connect_timeout=10)
        except psycopg.Error as exc:
            err = sqlite3.OperationalError(f"cannot connect to the PostgreSQL workspace {redact(url)}: "
                                           f"{str(exc).strip()}")
            err.sqlstate = getattr(exc, "sqlstate", None) or "08001"  # type: ignore[attr-defined]
            raise err from None
        # A writer stopped or hung inside a transaction (SIGSTOP, a paused VM) would hold the write lock for
        # ever: the server ends such a session, so a worker taking over a stale run is never blocked by it.
        self.raw.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
        self.raw.adapters.register_dumper(bool, _BoolAsInt)
        self.raw.adapters.register_loader("numeric", FloatLoader)  # AVG/SUM of integers: float, as SQLite
        schema = self.raw.execute("SELECT current_schema()").fetchone()[0]
        dbname = self.raw.info.dbname
        self.write_key = _lock_key(dbname, schema, "write")
        self.ddl_key = _lock_key(dbname, schema, "ddl")
        with _CATALOGS_LOCK:
            self.catalog = _CATALOGS.setdefault(f"{url}#{schema}", Catalog())

    @property
    def broken(self) -> bool:
        return bool(self.raw.closed or self.raw.broken)

    # -- catalog --------------------------------------------------------------------------------------------
    def _pk(self, table: str) -> list[str]:
        if table not in self.catalog.pk:
            rows = self.raw.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)", (table,)).fetchall()
            self.catalog.pk[table] = [r[0] for r in rows]
        return self.catalog.pk[table]

    def _identity(self, table: str) -> str | None:
        if table not in self.catalog.identity:
            rows = self.raw.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s AND (is_identity = 'YES' OR column_default LIKE 'nextval(%%')",
                (table,)).fetchall()
            self.catalog.identity[table] = rows[0][0] if rows else None
        return self.catalog.identity[table]

    def columns(self, table: str) -> list[str]:
        return [r[0] for r in self.raw.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s ORDER BY ordinal_position", (table,)).fetchall()]

    def tables(self) -> list[str]:
        return [r[0] for r in self.raw.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE'").fetchall()]

    # -- statements -----------------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | dict | None = ()) -> PgCursor:
        head = sql.lstrip()[:24].upper()
        if head.startswith("BEGIN"):
            self._run("BEGIN", None)
            if "IMMEDIATE" in head or "EXCLUSIVE" in head:
                self._run("SELECT pg_advisory_xact_lock(%s)", (self.write_key,))
            return PgCursor(self.raw.cursor(), None)
        if head.startswith("PRAGMA"):
            return PgCursor(self.raw.cursor(), None)
        named = isinstance(params, dict)
        has = bool(params)
        key = (sql, named, has)
        hit = self.catalog.translated.get(key)  # type: ignore[arg-type]
        if hit is None:
            hit = translate(sql, named, has, self._pk, self._identity)
            with self.catalog.lock:
                self.catalog.translated[key] = hit  # type: ignore[index]
        pg_sql, returning = hit
        return PgCursor(self._run(pg_sql, params if has else None), returning)

    def _run(self, sql: str, params: Any) -> Any:
        try:
            return self.raw.execute(sql, params)
        except psycopg.Error as exc:
            raise _mapped(exc) from exc

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> None:
        for params in seq:
            self.execute(sql, params)

    def executescript(self, script: str) -> None:
        for stmt in translate_ddl(script):
            self._run(stmt, None)

    def apply_ddl(self, name: str, ddl: str, digest: str, schema_table: str, version: tuple | None = None) -> None:
        """Run a module's DDL once per change of its text, serialised across processes. ``version``:
        (marker row, this app's schema version, error for a newer one): a newer workspace is refused untouched."""
        try:
            with self.raw.transaction():
                self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (self.ddl_key,))
                self.raw.execute(schema_table)
                if version is not None:
                    marker, ours, too_new = version
                    got = self.raw.execute("SELECT ddl_hash FROM mf_schema WHERE name = %s", (marker,)).fetchone()
                    if got is not None and int(got[0]) > ours:
                        raise too_new(self.where, int(got[0]))
                    if got is None or int(got[0]) < ours:
                        self.raw.execute(
                            "INSERT INTO mf_schema(name, ddl_hash, applied) VALUES (%s, %s, extract(epoch from now())) "
                            "ON CONFLICT (name) DO UPDATE SET ddl_hash = EXCLUDED.ddl_hash", (marker, str(ours)))
                row = self.raw.execute("SELECT ddl_hash FROM mf_schema WHERE name = %s", (name,)).fetchone()
                if row is not None and row[0] == digest:
                    return
                for stmt in translate_ddl(ddl):
                    self.raw.execute(stmt)
                self.raw.execute(
                    "INSERT INTO mf_schema(name, ddl_hash, applied) VALUES (%s, %s, extract(epoch from now())) "
                    "ON CONFLICT (name) DO UPDATE SET ddl_hash = EXCLUDED.ddl_hash, applied = EXCLUDED.applied",
                    (name, digest))
        except psycopg.Error as exc:
            raise _mapped(exc) from exc
        self.catalog.forget()

    def commit(self) -> None:  # sqlite3 compatibility: autocommit mode, nothing pending outside BEGIN
        pass

    def close(self) -> None:
        try:
            self.raw.close()
        except psycopg.Error:
            pass
