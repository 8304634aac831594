"""``python -m flowcore task check|save|list``: a task of your own (DESIGN §11, docs/tasks.md).

    python -m flowcore task check assets/tasks/capitals/capitals.toml --json
    python -m flowcore task save assets/tasks/capitals/capitals.toml --db workspace.db
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from flowcore.cli.common import CliError, JobFailed, emit


def register(sub: Any) -> None:
    t = sub.add_parser("task", help="check, save or list tasks of your own (data + template + reference + metric)")
    tsub = t.add_subparsers(dest="task_command", metavar="ACTION", required=True)
    c = tsub.add_parser("check", help="read the task file, every row and the metric; score each reference "
                                      "against itself")
    c.add_argument("file", metavar="TASK.toml")
    c.add_argument("--json", action="store_true",
                   help='print {"name", "kind", "rows", "validation", "test", "metric", "self_score"}')
    c.set_defaults(func=_cmd_check)
    s = tsub.add_parser("save", help="save the task in the workspace (the pages and every worker see it)")
    s.add_argument("file", metavar="TASK.toml")
    s.add_argument("--db", help="workspace (default: $MERMAIDFLOW_DB or workspace.db)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_save)
    ls = tsub.add_parser("list", help="the built-in tasks and those saved in the workspace")
    ls.add_argument("--db", help="workspace (default: $MERMAIDFLOW_DB or workspace.db)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_cmd_list)


def _read(path: str) -> Any:
    from flowcore.tasks import DataError, read_task

    try:
        return read_task(path)
    except DataError as exc:
        raise JobFailed(str(exc)) from None


def check_doc(task: Any) -> tuple[dict, list[str]]:
    """What ``task check`` prints, and the rows whose reference does not score 1 against itself."""
    from flowcore.tasks.task import self_score

    sizes = task.sizes()
    s = self_score(task)
    doc = {"name": task.name, "kind": task.kind, "rows": sizes["rows"], "validation": sizes["validation"],
           "test": sizes["test"], "metric": task.metric.name, "metric_options": task.metric.opts,
           "self_score": s.score, "self_scored_rows": s.n}
    if s.note:
        doc["self_score_note"] = s.note
    if s.failures:
        doc["self_score_failures"] = s.failures[:20]
    return doc, s.failures


def _cmd_check(args: argparse.Namespace) -> int:
    task = _read(args.file)
    doc, failures = check_doc(task)
    if args.json:
        emit(doc)
    else:
        score = "not computed (a judge)" if doc["self_score"] is None else f"{doc['self_score']:.3f}"
        print(f"{task.name}: {task.kind} task, {doc['rows']} rows ({doc['validation']} validation, {doc['test']} "
              f"test), metric {task.metric.name}, self-score {score}")
        for f in failures[:5]:
            print(f"  {f}")
    if failures and task.metric.deterministic and task.metric.name != "regex":
        print(f"error: {failures[0]} (the reference must score 1 against itself; {len(failures)} row(s) do not)",
              file=sys.stderr)
        return 1
    return 0


def _workspace(db: str | None) -> Any:
    from flowcore.workspace.store import Workspace

    try:
        return Workspace(db) if db else Workspace()
    except OSError as exc:
        raise CliError(f"{db or 'workspace'}: {exc}") from None


def _cmd_save(args: argparse.Namespace) -> int:
    from flowcore.tasks import DataError
    from flowcore.tasks.saved import save

    task = _read(args.file)
    ws = _workspace(args.db)
    try:
        save(ws, task)
    except DataError as exc:
        raise JobFailed(str(exc)) from None
    out = {"saved": task.name, "kind": task.kind, "rows": len(task.rows), "digest": task.digest}
    if args.json:
        emit(out)
    else:
        print(f"saved task '{task.name}' ({task.kind}, {len(task.rows)} rows) in {ws.path}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from flowcore.tasks import BUILTIN
    from flowcore.tasks.saved import saved

    rows = [{"name": t.name, "kind": t.kind, "metric": t.metric.name, "builtin": True} for t in BUILTIN.values()]
    rows += [{**t, "builtin": False} for t in saved(_workspace(args.db))]
    if args.json:
        emit({"tasks": rows})
    else:
        for r in rows:
            print(f"{r['name']:<24} {r['kind']:<5} {'built in' if r['builtin'] else str(r['rows']) + ' rows'}")
    return 0
