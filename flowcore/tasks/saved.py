"""Tasks by name: the built-in four, tasks read in this process (``--task-file``), and tasks saved in the
workspace (shared by every app process and worker on a PostgreSQL workspace).

The evaluation, evolution and storage layers name a task by a string, as they always named a benchmark; this
module turns the name back into the task. ``find(name, ws)`` looks in the workspace and remembers what it
found, so code that loads problems by name alone (``load``) sees it; a task saved again under the same name
is read afresh (its digest changed).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowcore.tasks import data as builtin_data
from flowcore.tasks.data import DataError
from flowcore.tasks.metrics import make_metric
from flowcore.tasks.problem import TASK_OF, Problem
from flowcore.tasks.rows import Table, read_table
from flowcore.tasks.task import BUILTIN, Task, build_task, read_task

_DDL = """
CREATE TABLE IF NOT EXISTS tasks(
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, digest TEXT NOT NULL, spec_json TEXT NOT NULL,
    rows_json TEXT NOT NULL, lines_json TEXT NOT NULL, unit TEXT NOT NULL, metric_source TEXT NOT NULL,
    n INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, author TEXT)
"""


@dataclass
class _Known:
    kind: str
    digest: str
    task: Task | None = None
    ws: Any = None  # where to read it from when it is first needed


_known: dict[str, _Known] = {}
_lock = threading.Lock()


def register(task: Task) -> Task:
    """Make ``task`` findable by name in this process (a task read from a file)."""
    if not task.builtin:
        with _lock:
            _known[task.name] = _Known(task.kind, "", task)  # its digest is computed only when it is needed
    return task


def _schema(ws: Any) -> None:
    ws.ensure_schema("tasks", _DDL)


def saved(ws: Any, kind: str | None = None) -> list[dict]:
    """The workspace's tasks (name, kind, rows, digest, when), newest first; each becomes findable by name."""
    _schema(ws)
    rows = ws.query("SELECT name, kind, digest, n, updated, author FROM tasks ORDER BY updated DESC, name")
    out = []
    for r in rows:
        _remember(ws, r["name"], r["kind"], r["digest"])
        if kind is None or r["kind"] == kind:
            out.append({"name": r["name"], "kind": r["kind"], "digest": r["digest"], "rows": int(r["n"]),
                        "updated": float(r["updated"]), "author": r["author"]})
    return out


def _remember(ws: Any, name: str, kind: str, digest: str) -> None:
    with _lock:
        k = _known.get(name)
        if k is None or k.digest != digest:
            _known[name] = _Known(kind, digest, None, ws)


def save(ws: Any, task: Task, *, author: str | None = None, replace: bool = True) -> None:
    """Store the whole task (definition, rows, metric code) in one transaction; never a built-in name."""
    if task.builtin or task.name in BUILTIN:
        raise DataError(f"'{task.name}' is a built-in task; choose another name")
    _schema(ws)
    now = time.time()
    with ws.transaction() as c:
        old = c.execute("SELECT created, digest FROM tasks WHERE name = ?", (task.name,)).fetchone()
        if old is not None and not replace and old["digest"] != task.digest:
            raise DataError(f"a different task named '{task.name}' is already saved in this workspace")
        c.execute("DELETE FROM tasks WHERE name = ?", (task.name,))
        c.execute("INSERT INTO tasks(name, kind, digest, spec_json, rows_json, lines_json, unit, metric_source, n,"
                  " created, updated, author) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                  (task.name, task.kind, task.digest, json.dumps(task.spec()),
                   json.dumps(task.rows, ensure_ascii=False, default=str), json.dumps(task.lines), task.unit,
                   task.metric.source, len(task.rows), old["created"] if old else now, now, author))
    with _lock:
        _known[task.name] = _Known(task.kind, task.digest, task, ws)


def delete(ws: Any, name: str) -> bool:
    _schema(ws)
    with ws.transaction() as c:
        gone = c.execute("DELETE FROM tasks WHERE name = ?", (name,)).rowcount
    with _lock:
        k = _known.get(name)
        if k is not None and k.ws is ws:
            _known.pop(name, None)
    return bool(gone)


def _load(ws: Any, name: str) -> Task | None:
    _schema(ws)
    rows = ws.query("SELECT * FROM tasks WHERE name = ?", (name,))
    if not rows:
        return None
    r = rows[0]
    spec = json.loads(r["spec_json"])
    table = Table(spec.pop("data", "") or f"{name} (saved)", [], json.loads(r["rows_json"]),
                  json.loads(r["lines_json"]), r["unit"])
    table.columns = list(dict.fromkeys(k for row in table.rows for k in row))
    task = build_task(spec, table, where=f"task '{name}' in the workspace", source=r["metric_source"] or "")
    with _lock:
        _known[name] = _Known(task.kind, task.digest, task, ws)
    return task


def find(name: str, ws: Any = None) -> Task | None:
    """The task called ``name``: built in, read in this process, or saved in ``ws`` (None if none)."""
    if name in BUILTIN:
        return BUILTIN[name]
    if ws is not None:
        _schema(ws)
        rows = ws.query("SELECT kind, digest FROM tasks WHERE name = ?", (name,))
        if rows:
            _remember(ws, name, rows[0]["kind"], rows[0]["digest"])
    with _lock:
        k = _known.get(name)
    if k is None:
        return None
    if k.task is None and k.ws is not None:
        return _load(k.ws, name)
    return k.task


def get(name: str, ws: Any = None) -> Task:
    """``find`` or a ValueError naming what there is."""
    task = find(name, ws)
    if task is None:
        there = sorted(set(BUILTIN) | set(_known))
        raise ValueError(f"unknown benchmark or task '{name}' (known here: {', '.join(there)}; a task of your own is given with "
                         "--task-file TASK.toml or saved in the workspace on the Tasks page)")
    return task


def kind_of(name: str | None, ws: Any = None) -> str | None:
    """math, code or text for a task's name; None when no such task is known."""
    if name is None:
        return None
    if name in TASK_OF:
        return TASK_OF[name]
    with _lock:
        k = _known.get(name)
    if k is None and ws is not None:
        task = find(name, ws)
        return task.kind if task else None
    return k.kind if k else None


def known_names(kind: str | None = None) -> list[str]:
    with _lock:
        extra = sorted(n for n, k in _known.items() if kind is None or k.kind == kind)
    return [b for b in BUILTIN if kind is None or TASK_OF[b] == kind] + extra


# -- problems by name (what flowcore.tasks.load is) -----------------------------------------------------------------

def load(benchmark: str, split: str | None = "validation", *, data_path: str | Path | None = None,
         limit: int | None = None, seed: int = 42, split_file: str | Path | None = None) -> list[Problem]:
    """Problems of a task by name (see flowcore.tasks.data.load, which the built-in four still use)."""
    if benchmark in BUILTIN:
        return builtin_data.load(benchmark, split, data_path=data_path, limit=limit, seed=seed,
                                 split_file=split_file)
    task = get(benchmark)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if data_path is not None:
        problems = with_rows(task, data_path).problems()
    else:
        problems = task.problems()
        if split not in (None, "all"):
            if split not in builtin_data.SPLITS:
                raise ValueError(f"unknown split '{split}' (choose from validation, test, all)")
            if split_file is not None:
                parts = builtin_data.read_split_file(split_file, benchmark, [p.id for p in problems])
                keep = set(parts[split])
                if not keep:
                    raise DataError(f"{split_file}: field '{split}' is empty: the split file names no {split} rows")
            else:
                val, test = task.split()
                keep = set(val if split == "validation" else test)
            problems = [p for p in problems if p.id in keep]
    return problems[:limit] if limit is not None else problems


def with_rows(task: Task, path: str | Path) -> Task:
    """The same task over another file's rows (``--data``): the same fields, template and metric."""
    table = read_table(path)
    spec = task.spec()
    spec.pop("data", None)
    return build_task(spec, table, where=str(path), source=task.metric.source)


def split_info(benchmark: str, split: str | None, *, data_path: str | Path | None = None,
               split_file: str | Path | None = None, limit: int | None = None) -> dict[str, Any]:
    if benchmark in BUILTIN:
        return builtin_data.split_info(benchmark, split, data_path=data_path, split_file=split_file, limit=limit)
    task = get(benchmark)
    if data_path is not None:
        return {"benchmark": benchmark, "split": "file", "source": f"the rows of {Path(data_path).name}",
                "limit": limit}
    if split_file is not None:
        parts = builtin_data.read_split_file(split_file, benchmark, task.ids())
        val, test, source = parts["validation"], parts["test"], f"split file {Path(split_file).name}"
    else:
        (val, test), source = task.split(), (f"the task's split: {task.validation:g} of the rows for validation, "
                                             f"the rest for the test (seed {task.seed})")
    return {"benchmark": benchmark, "split": split or "all", "source": source, "validation_n": len(val),
            "test_n": len(test), "limit": limit, "papers": None, "task": task.name, "metric": task.metric.name,
            "note": f"your task '{task.name}' ({task.data}, metric {task.metric.name})"}


def read_problems(benchmark: str, path: str | Path) -> list[Problem]:
    if benchmark in BUILTIN:
        return builtin_data.read_problems(benchmark, path)
    return with_rows(get(benchmark), path).problems()


def from_file(path: str | Path) -> Task:
    """Read a TOML task and make it findable by name in this process."""
    return register(read_task(path))


def metric_of(spec: dict, where: str) -> Any:
    """The metric a definition names (for the page's option form), or DataError."""
    return make_metric(spec.get("metric"), spec.get("metric_options"), where=where,
                       kind=spec.get("kind", "text"))
