"""Recover what a damaged SQLite workspace still holds into a new file (``python -m flowcore workspace recover``).

With the ``sqlite3`` command-line shell installed, its ``.recover`` reads every page it can and writes SQL that
rebuilds the tables (rows it cannot place go to ``lost_and_found``). Without it (or when its ``.recover`` fails:
Debian's 3.40 shell answers "SQL logic error" on any file), each table is copied row by row
in rowid order; when a damaged page stops a read, the copy skips ahead to the next rowid that reads again. Either
way the damaged file is left as it was, and the new file must pass ``PRAGMA integrity_check`` before it is
offered (``replace`` then moves the damaged one aside, keeping it).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from flowcore.workspace.health import WorkspaceError

CLI_TIMEOUT = 600


@dataclass
class Recovered:
    source: Path
    out: Path
    method: str  # "sqlite3 .recover" | "row copy"
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows in the new file
    skipped: int = 0  # row-copy path: reads that failed on damaged pages

    def describe(self) -> str:
        total = sum(self.rows.values())
        return (f"recovered {total:,} rows in {len(self.rows)} tables from {self.source} into {self.out} "
                f"({self.method}); {self.source} is left as it was")


def recover(source: Path, out: Path | None = None, *, use_cli: bool = True) -> Recovered:
    """Rebuild ``source`` into ``out`` (default: ``<name>.recovered<suffix>`` beside it). WorkspaceError when the
    source is missing, ``out`` exists, or nothing usable came out."""
    source = Path(source)
    if not source.is_file():
        raise WorkspaceError(source, "no such workspace file")
    out = Path(out) if out else source.with_name(f"{source.stem}.recovered{source.suffix or '.db'}")
    if out.exists():
        raise WorkspaceError(out, "already exists: remove it or give another --out")
    cli = shutil.which("sqlite3") if use_cli else None
    try:
        result = _with_cli(cli, source, out) if cli else None
        if result is None:  # no shell, or its .recover failed (some builds lack the sqlite_dbpage table it reads)
            out.unlink(missing_ok=True)
            result = _row_copy(source, out)
        check = sqlite3.connect(out)
        try:
            found = [r[0] for r in check.execute("PRAGMA integrity_check").fetchall()]
            check.execute("PRAGMA journal_mode=WAL")
            result.rows = {t: int(check.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]) for t in _tables(check)}
        finally:
            check.close()
    except (sqlite3.Error, OSError, subprocess.SubprocessError) as exc:
        out.unlink(missing_ok=True)
        raise WorkspaceError(source, f"could not be recovered ({exc})") from None
    if found != ["ok"]:
        out.unlink(missing_ok=True)
        raise WorkspaceError(source, f"the recovered file failed its integrity check ({'; '.join(found[:3])})")
    out.chmod(0o600)  # it holds prompts, history and logs, as the workspace did
    return result


def replace(result: Recovered) -> Path:
    """Put the recovered file in the damaged one's place; the damaged one (and its -wal/-shm) is kept beside it as
    ``<name>.damaged-<time>``. Returns where the damaged file went."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = result.source.with_name(f"{result.source.name}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{result.source}{suffix}")
        if part.exists():
            part.rename(Path(f"{aside}{suffix}"))
    result.out.rename(result.source)
    return aside


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE "
                                       "'sqlite_%' ORDER BY name").fetchall()]


def _with_cli(cli: str, source: Path, out: Path) -> Recovered | None:
    """The shell's .recover into ``out``, or None when it failed (the caller copies row by row instead)."""
    dump = subprocess.run([cli, "-readonly", str(source), ".recover"], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, errors="replace")
    if "error" in dump.stderr.lower() or "CREATE TABLE" not in dump.stdout.upper():
        return None
    conn = sqlite3.connect(out)
    try:
        conn.executescript(dump.stdout)
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return Recovered(source, out, "sqlite3 .recover")


def _row_copy(source: Path, out: Path) -> Recovered:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    result = Recovered(source, out, "row copy")
    try:
        schema = src.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE "
                             "'sqlite_%' ORDER BY type = 'index'").fetchall()
        for kind, name, sql in schema:
            try:
                dst.execute(sql)
            except sqlite3.Error:
                result.skipped += 1
                continue
            if kind == "table":
                result.skipped += _copy_rows(src, dst, name)
        dst.commit()
    finally:
        src.close()
        dst.close()
    return result


def _copy_rows(src: sqlite3.Connection, dst: sqlite3.Connection, table: str) -> int:
    """Copy a table in rowid order; after a damaged page, probe ever further ahead for rowids that read again."""
    skipped, after, jump = 0, None, 1
    cols = [r[1] for r in src.execute(f'PRAGMA table_info("{table}")').fetchall()]
    names = ", ".join(f'"{c}"' for c in cols)
    marks = ", ".join("?" * len(cols))
    while True:
        try:
            where = "" if after is None else f"WHERE rowid > {after}"
            rows = src.execute(f'SELECT rowid, {names} FROM "{table}" {where} ORDER BY rowid LIMIT 500').fetchall()
        except sqlite3.DatabaseError:
            skipped += 1
            if after is None:
                after = 0
            after, jump = after + jump, jump * 2
            if jump > 1 << 40:
                return skipped
            continue
        if not rows:
            return skipped
        dst.executemany(f'INSERT OR IGNORE INTO "{table}"(rowid, {names}) VALUES (?, {marks})', rows)
        after, jump = rows[-1][0], 1
