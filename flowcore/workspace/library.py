"""The workflow library: named, versioned workflows in the workspace database, and the bundled examples.

Saving never overwrites: every save of a changed text adds a version, so an earlier design can always be
reopened. Saving the same text and task as the latest version again adds nothing and returns that version.

A save names the version it started from (``base_version``): when someone saved a newer version of the same name
in between, the save is refused (``LibraryConflict``, with their text and a three-way ``merge``), so their edit is
never quietly left out of the next version.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from flowcore import catalogue as cat
from flowcore.checker.check import check, is_valid
from flowcore.workspace.store import Workspace

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "assets" / "examples"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,79}$")
MATH_PREFIXES = ("math_", "gsm8k_")

_DDL = """
CREATE TABLE IF NOT EXISTS workflows(
    name TEXT NOT NULL, version INTEGER NOT NULL, task TEXT NOT NULL, text TEXT NOT NULL,
    valid INTEGER NOT NULL, created REAL NOT NULL, PRIMARY KEY(name, version));
"""


class LibraryError(ValueError):
    """A bad name, task or text, or a workflow/version that is not in the workspace."""


class LibraryConflict(LibraryError):
    """``name`` has a version newer than the one the save started from (``base``): ``latest`` and its text."""

    def __init__(self, name: str, base: int, latest: int, theirs: str) -> None:
        super().__init__(f"not saved: {name!r} version {latest} was saved (by someone else) after version {base}, "
                         f"which you started from; merge both changes, open version {latest}, or save yours as a "
                         "new version on top of it")
        self.name, self.base, self.latest, self.theirs = name, base, latest, theirs

    def merge(self, ws: Workspace, mine: str) -> tuple[str, list[tuple[int, int]]]:
        """(merged text, conflicting base line ranges): your text and theirs, three-way from the base version."""
        from flowcore.workspace.merge import merge3

        base = load_workflow(ws, self.name, self.base)[0]
        return merge3(base, mine, self.theirs)


@dataclass(frozen=True)
class WorkflowEntry:
    name: str
    task: str
    version: int  # the latest version
    versions: int  # how many versions are stored
    updated: float  # unix time of the latest version
    valid: bool  # the latest version has no error diagnostic


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("library", _DDL)
    if "library-who" not in ws._schemas:  # who saved each version (added later: an additive column)
        ws.add_columns("workflows", {"created_by": "TEXT"})
        ws.ensure_schema("library-who", "")


def validate_name(name: object) -> str:
    """The name, stripped; LibraryError saying what is allowed when it is not a usable name."""
    if not isinstance(name, str) or not name.strip():
        raise LibraryError("workflow name is empty: give the workflow a name such as 'math-ensemble'")
    name = name.strip()
    if not NAME_RE.match(name):
        raise LibraryError(f"workflow name {name!r} is not allowed: use 1-80 letters, digits, spaces, "
                           "'_', '-' or '.', starting with a letter or digit")
    return name


def _validate_task(task: object) -> str:
    if task not in cat.TASKS:
        raise LibraryError(f"task {task!r} is not known: use one of {', '.join(cat.TASKS)}")
    return str(task)


def save_workflow(ws: Workspace, name: str, text: str, task: str, created_by: str = "local", *,
                  base_version: int | None = None) -> int:
    """Store ``text`` as the next version of ``name`` (saved by ``created_by``); returns the version number.
    ``base_version``: the version the text was opened from (None: do not check); LibraryConflict when a newer
    version of ``name`` is stored with another text."""
    name, task = validate_name(name), _validate_task(task)
    if not isinstance(text, str) or not text.strip():
        raise LibraryError(f"workflow {name!r}: the text is empty; there is nothing to save")
    _schema(ws)
    valid = is_valid(check(text, task))
    with ws.transaction() as conn:
        last = conn.execute("SELECT version, text, task FROM workflows WHERE name=? "
                            "ORDER BY version DESC LIMIT 1", (name,)).fetchone()
        if last is not None and last["text"] == text and last["task"] == task:
            return int(last["version"])
        if base_version is not None and last is not None and int(last["version"]) > base_version:
            raise LibraryConflict(name, base_version, int(last["version"]), last["text"])
        version = (int(last["version"]) if last else 0) + 1
        conn.execute("INSERT INTO workflows(name, version, task, text, valid, created, created_by) "
                     "VALUES (?,?,?,?,?,?,?)", (name, version, task, text, int(valid), time.time(), created_by))
    return version


def list_workflows(ws: Workspace) -> list[WorkflowEntry]:
    """Every stored workflow with its latest version, most recently updated first."""
    _schema(ws)
    rows = ws.query("""
        SELECT w.name, w.task, w.version, w.created, w.valid, c.n FROM workflows w
        JOIN (SELECT name, MAX(version) AS v, COUNT(*) AS n FROM workflows GROUP BY name) c
          ON c.name = w.name AND c.v = w.version
        ORDER BY w.created DESC, w.name""")
    return [WorkflowEntry(r["name"], r["task"], int(r["version"]), int(r["n"]), float(r["created"]),
                          bool(r["valid"])) for r in rows]


def versions(ws: Workspace, name: str) -> list[tuple[int, float, bool]]:
    """(version, created, valid) of every stored version of ``name``, newest first."""
    _schema(ws)
    rows = ws.query("SELECT version, created, valid FROM workflows WHERE name=? ORDER BY version DESC",
                    (name,))
    return [(int(r["version"]), float(r["created"]), bool(r["valid"])) for r in rows]


def authors(ws: Workspace, name: str) -> dict[int, str]:
    """version -> who saved it ("local" for versions saved before this was recorded)."""
    _schema(ws)
    rows = ws.query("SELECT version, created_by FROM workflows WHERE name=?", (name,))
    return {int(r["version"]): r["created_by"] or "local" for r in rows}


def load_workflow(ws: Workspace, name: str, version: int | None = None) -> tuple[str, str]:
    """(text, task) of a stored workflow: the latest version unless ``version`` is given."""
    _schema(ws)
    if version is None:
        row = ws.query("SELECT text, task FROM workflows WHERE name=? ORDER BY version DESC LIMIT 1", (name,))
    else:
        row = ws.query("SELECT text, task FROM workflows WHERE name=? AND version=?", (name, int(version)))
    if not row:
        what = f"workflow {name!r}" + (f" version {version}" if version is not None else "")
        raise LibraryError(f"{what} is not in the workspace {ws.path}")
    return row[0]["text"], row[0]["task"]


def task_of_example(stem: str) -> str:
    low = stem.lower()
    return "math" if low.startswith(MATH_PREFIXES) else ("text" if low.startswith("text_") else "code")


def examples(directory: Path | None = None) -> list[tuple[str, str, str]]:
    """(name, task, text) of the bundled example workflows, by name."""
    folder = directory or EXAMPLES_DIR
    return [(p.stem, task_of_example(p.stem), p.read_text(encoding="utf-8"))
            for p in sorted(folder.glob("*.mmd"))]


def table_counts(ws: Workspace) -> dict[str, int]:
    """Row count of every table in the workspace (for a status panel)."""
    names = ws.tables()
    return {n: int(ws.query(f'SELECT COUNT(*) AS n FROM "{n}"')[0]["n"]) for n in names}
