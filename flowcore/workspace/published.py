"""Published workflows: immutable versions ``NAME@vN`` that the server answers as models (DESIGN §12).

A published version is never changed or removed: this module only inserts and reads. A name belongs to whoever
published its first version: only they (and the server's own command line) add versions to it, since ``NAME``
runs its latest. Publishing the same text again under a name still adds a version (a publish is an event someone made, with its own note and
scores), so ``NAME@v3`` means the same text forever and ``NAME`` means the latest. Each row records who
published it, when, from which evolution run and round, the note, and its latest validation and test scores.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from flowcore.workspace.library import NAME_RE, validate_name
from flowcore.workspace.store import Workspace

_DDL = """
CREATE TABLE IF NOT EXISTS published(
    name TEXT NOT NULL, version INTEGER NOT NULL, task TEXT NOT NULL, text TEXT NOT NULL,
    created REAL NOT NULL, created_by TEXT NOT NULL, run_id INTEGER, round INTEGER, note TEXT,
    validation_score REAL, test_score REAL, scores_json TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY(name, version));
CREATE INDEX IF NOT EXISTS published_ids ON published(name, version, created, created_by);
"""
# A model id: NAME or NAME@vN. Names follow the library's rule (letters, digits, space, _ - .), so '@' is free.
MODEL_RE = re.compile(r"^(?P<name>[^@]+?)(?:@v(?P<version>[1-9][0-9]{0,8}))?$")


LOCAL = "local"  # who the command line on the server is (and a caller of a loopback server without a key)
_published_here = [0]  # versions this process published (a change token does not see its own connection's writes)


class PublishError(ValueError):
    """A bad name, task or text, or a model id that names no published version."""


@dataclass(frozen=True)
class Published:
    name: str
    version: int
    task: str
    text: str
    created: float
    created_by: str
    run_id: int | None = None
    round: int | None = None
    note: str | None = None
    validation_score: float | None = None
    test_score: float | None = None
    scores: dict = field(default_factory=dict)  # where each score came from (evaluation or round, n, split)

    @property
    def model_id(self) -> str:
        return f"{self.name}@v{self.version}"


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("published", _DDL)


def _row(r: object) -> Published:
    d = dict(r)  # type: ignore[call-overload]
    try:
        scores = json.loads(d.get("scores_json") or "{}")
    except ValueError:
        scores = {}
    return Published(d["name"], int(d["version"]), d["task"], d["text"], float(d["created"]), d["created_by"],
                     d["run_id"], d["round"], d["note"], d["validation_score"], d["test_score"], scores)


def publish(ws: Workspace, name: str, text: str, task: str, *, created_by: str, run_id: int | None = None,
            round: int | None = None, note: str | None = None, validation_score: float | None = None,
            test_score: float | None = None, scores: dict | None = None) -> Published:
    """Insert the next version of ``name`` (1, 2, ...) and return it. Never updates an existing row."""
    try:
        name = validate_name(name)
    except ValueError as exc:
        raise PublishError(str(exc)) from None
    if not isinstance(task, str) or not task.strip():
        raise PublishError("publish: the task is empty; name the task the workflow is for (e.g. math)")
    if not isinstance(text, str) or not text.strip():
        raise PublishError(f"publish {name!r}: the workflow text is empty")
    who = (created_by or "").strip() or LOCAL
    _schema(ws)
    with ws.transaction() as conn:
        first = conn.execute("SELECT created_by FROM published WHERE name=? AND version=1", (name,)).fetchone()
        if first is not None and who not in (LOCAL, first["created_by"]):
            # ``NAME`` means the latest version: anyone else's version would become what every caller of NAME
            # runs. A name is its first publisher's (the command line on the server, 'local', may add to any).
            raise PublishError(f"publish {name!r}: the name {name} belongs to {first['created_by']}, who published "
                               f"{name}@v1; only they add versions to it. Publish yours under another name")
        last = conn.execute("SELECT MAX(version) AS v FROM published WHERE name=?", (name,)).fetchone()
        version = int(last["v"] or 0) + 1
        conn.execute("INSERT INTO published(name, version, task, text, created, created_by, run_id, round, note, "
                     "validation_score, test_score, scores_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (name, version, task.strip(), text, time.time(), who, run_id, round, (note or None),
                      validation_score, test_score, json.dumps(scores or {}, sort_keys=True)))
    _published_here[0] += 1
    return resolve(ws, f"{name}@v{version}")


def published_here() -> int:
    """How many versions this process has published so far (a server's cache of latest versions starts over
    when it changes)."""
    return _published_here[0]


def parse_model(model: str) -> tuple[str, int | None]:
    """'NAME' -> (NAME, None); 'NAME@v3' -> (NAME, 3). PublishError when it is neither."""
    m = MODEL_RE.match(model.strip()) if isinstance(model, str) else None
    if m is None or not m.group("name").strip():
        raise PublishError(f"model {model!r} is not NAME or NAME@vN")
    # No published name has other characters; one with a NUL, sent to PostgreSQL, was a 500 instead of a 404.
    if not NAME_RE.match(m.group("name").strip()):
        raise PublishError(f"no published workflow is named {m.group('name').strip()!r}: a name is letters, "
                           "digits, spaces, '_', '-' or '.'")
    return m.group("name").strip(), int(m.group("version")) if m.group("version") else None


def resolve(ws: Workspace, model: str) -> Published:
    """The published version a model id names (NAME: the latest). PublishError when there is none."""
    name, version = parse_model(model)
    _schema(ws)
    if version is None:
        rows = ws.query("SELECT * FROM published WHERE name=? ORDER BY version DESC LIMIT 1", (name,))
    else:
        rows = ws.query("SELECT * FROM published WHERE name=? AND version=?", (name, version))
    if not rows:
        raise PublishError(f"the model {model!r} does not exist: no published workflow has that name"
                           + (" and version" if version is not None else ""))
    return _row(rows[0])


def latest_version(ws: Workspace, name: str) -> int | None:
    """The latest version number of ``name`` (from the index alone, never a text), or None when there is none."""
    _schema(ws)
    row = ws.query("SELECT MAX(version) AS v FROM published WHERE name=?", (name,))
    return int(row[0]["v"]) if row and row[0]["v"] is not None else None


_LISTED = ("name, version, task, {text} AS text, created, created_by, run_id, round, note, validation_score, "
           "test_score, scores_json")


def list_published(ws: Workspace, name: str | None = None, *, text: bool = True) -> list[Published]:
    """Every published version (of ``name``), newest first within a name, names in order. ``text=False``: without
    the workflows' texts ('' each), for listings: /v1/models read every version's text (300 of 0.9 MB: 1.6 s
    with the server's event loop waiting) to print their ids."""
    _schema(ws)
    cols = _LISTED.format(text="text" if text else "''")
    if name is None:
        rows = ws.query(f"SELECT {cols} FROM published ORDER BY name, version DESC")
    else:
        rows = ws.query(f"SELECT {cols} FROM published WHERE name=? ORDER BY version DESC", (name,))
    return [_row(r) for r in rows]


def list_ids(ws: Workspace) -> list[tuple[str, int, float, str]]:
    """(name, version, created, created_by) of every version, newest first within a name, names in order: read
    from the index published_ids alone. In SQLite a row's columns after a large text sit in its overflow pages,
    so even a listing without the text walked them all (/v1/models: 300 versions of 0.9 MB, 1.0 s)."""
    _schema(ws)
    rows = ws.query("SELECT name, version, created, created_by FROM published ORDER BY name, version DESC")
    return [(r["name"], int(r["version"]), float(r["created"]), r["created_by"]) for r in rows]


def count_since(ws: Workspace, created_by: str, since: float) -> int:
    """How many versions ``created_by`` published at or after ``since`` (epoch seconds): a rate bound's count,
    read from the index published_ids alone (never the texts)."""
    _schema(ws)
    rows = ws.query("SELECT COUNT(*) AS n FROM published WHERE created_by=? AND created>=?", (created_by, since))
    return int(rows[0]["n"]) if rows else 0


def model_ids(ws: Workspace) -> list[str]:
    """Every ``NAME`` (its latest version) and every ``NAME@vN``, as /v1/models lists them."""
    out: list[str] = []
    for name, version, _, _ in list_ids(ws):
        if name not in out:
            out.append(name)
        out.append(f"{name}@v{version}")
    return out
