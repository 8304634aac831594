"""``python -m flowcore workspace check|recover DB``: is a SQLite workspace intact, and recover one that is not.

    python -m flowcore workspace check workspace.db          integrity check (exit 1 when damaged)
    python -m flowcore workspace recover workspace.db         what it still holds, into workspace.recovered.db
    python -m flowcore workspace recover workspace.db --replace   ... and put it in the damaged file's place
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

from flowcore.cli.common import CliError, JobFailed, emit


def _cmd_check(args: argparse.Namespace) -> int:
    from flowcore.workspace import health

    path = Path(args.db)
    if not path.is_file():
        raise CliError(f"{path}: no such workspace file")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        finding = health.quick_check(conn, seconds=args.seconds)
    finally:
        conn.close()
    if args.json:
        emit({"db": str(path), "ok": finding is None, "finding": finding})
    if finding is not None:
        raise JobFailed(health.damaged_message(path, finding))
    if not args.json:
        print(f"{path}: ok")
    return 0


def _cmd_recover(args: argparse.Namespace) -> int:
    from flowcore.workspace import recover
    from flowcore.workspace.store import WorkspaceError

    try:
        result = recover.recover(Path(args.db), Path(args.out) if args.out else None, use_cli=not args.no_cli)
    except WorkspaceError as exc:
        raise JobFailed(f"{exc.path}: {exc}") from None
    aside = recover.replace(result) if args.replace else None
    if args.json:
        emit({"db": str(result.source), "out": str(result.out if aside is None else result.source),
              "method": result.method, "rows": result.rows, "damaged_kept_as": str(aside) if aside else None})
        return 0
    print(result.describe())
    if aside is not None:
        print(f"{result.source} is now the recovered workspace; the damaged one is kept as {aside}")
    else:
        print(f"to use it: MERMAIDFLOW_DB={result.out} (or run again with --replace to put it in place of "
              f"{result.source}, keeping the damaged file beside it)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("workspace", help="check a SQLite workspace's integrity, or recover a damaged one")
    ws = w.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = ws.add_parser("check", help="PRAGMA quick_check (exit 1 when the file is damaged)")
    c.add_argument("db", help="the SQLite workspace file")
    c.add_argument("--seconds", type=float, default=60.0, help="stop checking after this long (default 60)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_check)
    r = ws.add_parser("recover", help="copy what a damaged workspace still holds into a new file")
    r.add_argument("db", help="the damaged SQLite workspace file (left as it is)")
    r.add_argument("--out", help="the new file (default: DB's name with .recovered)")
    r.add_argument("--replace", action="store_true", help="then put the new file in DB's place (DB kept aside)")
    r.add_argument("--no-cli", action="store_true", help="copy row by row even when the sqlite3 shell is there")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_cmd_recover)
