"""``check``, ``fmt`` and ``sandbox``: the commands that need only the reader and checker (fast to start)."""

from __future__ import annotations

import argparse
import sys

from flowcore import catalogue as cat
from flowcore.checker.check import check, is_valid
from flowcore.cli.common import emit, read_text
from flowcore.mermaid.reader import WorkflowSyntaxError, parse, to_mermaid

TYPE_CHECKING = False  # not typing's: `check` starts without importing typing
if TYPE_CHECKING:
    from typing import Any


def _cmd_check(args: argparse.Namespace) -> int:
    text = read_text(args.file)
    diags = check(text, args.task, hard=args.hard)
    valid = is_valid(diags)
    if args.json:
        emit({"valid": valid, "diagnostics": [d.to_dict() for d in diags]})
    else:
        for d in diags:
            print(f"{args.file}:{d}")
        print(f"{args.file}: {'valid' if valid else 'invalid'} ({len(diags)} diagnostic{'s' * (len(diags) != 1)})")
    return 0 if valid else 1


def _cmd_fmt(args: argparse.Namespace) -> int:
    text = read_text(args.file)
    try:
        w = parse(text)
    except WorkflowSyntaxError as exc:
        for d in exc.diagnostics:
            print(f"{args.file}:{d}", file=sys.stderr)
        return 1
    sys.stdout.write(to_mermaid(w))
    return 0


def _cmd_sandbox(args: argparse.Namespace) -> int:
    from flowcore.execution.sandbox import sandbox_status

    ready, message = sandbox_status()
    if args.json:
        emit({"ready": ready, "message": message})
    else:
        print(message if ready else f"not ready: {message}")
    return 0 if ready else 1


def register(sub: Any) -> None:
    c = sub.add_parser("check", help="check a workflow and print diagnostics")
    c.add_argument("file")
    c.add_argument("--task", choices=cat.TASKS)
    c.add_argument("--hard", action="store_true", help="also parse with the real Mermaid 11 library")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_check)
    f = sub.add_parser("fmt", help="print the canonical text of a workflow")
    f.add_argument("file")
    f.set_defaults(func=_cmd_fmt)
    s = sub.add_parser("sandbox", help="say whether generated code can run here (bubblewrap sandbox)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_sandbox)
