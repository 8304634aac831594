"""What every command shares: its errors and exit codes, reading a workflow file, JSON output, argparse types.

Exit status: 0 success/valid, 1 invalid input or failed job, 2 usage or I/O error (message on stderr,
never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from flowcore.checker.check import check
from flowcore.mermaid.reader import WorkflowSyntaxError, parse


class CliError(Exception):
    """A usage or I/O problem: exit 2 with this message."""


class JobFailed(Exception):
    """The input is invalid or the job failed: exit 1 with this message."""


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:  # not pathlib: `check` starts without importing it
            return f.read()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}:{_not_utf8(exc)}") from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read ({exc})") from None


def _not_utf8(exc: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 is, as line:column (a byte offset means nothing to a person)."""
    head = exc.object[:exc.start]
    line = head.count(b"\n") + 1
    column = len(head[head.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
    return (f"{line}:{column}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); a binary file, or text saved in "
            "another encoding: save it as UTF-8")


def load_workflow(path: str, task: str | None = None):  # noqa: ANN201
    """Read and parse a workflow file; an unreadable or invalid one is a JobFailed naming the problem."""
    text = read_text(path)
    try:
        w = parse(text)
    except WorkflowSyntaxError as exc:
        raise JobFailed("\n".join(f"{path}:{d}" for d in exc.diagnostics)) from None
    errors = [d for d in check(w, task) if d.severity == "error"]
    if errors:
        raise JobFailed("\n".join(f"{path}:{d}" for d in errors))
    return w


def emit(obj: dict) -> None:
    print(json.dumps(obj, ensure_ascii=False), flush=True)


def _raised_by(module: str, name: str) -> type[Exception] | tuple[()]:
    """``module``'s exception class ``name`` if that module was imported, else nothing to catch (what was
    never imported cannot have raised): `check` and `fmt` start without the sandbox and storage modules."""
    mod = sys.modules.get(module)
    return getattr(mod, name) if mod is not None else ()


def guarded(fn: Callable[[argparse.Namespace], int], failures: tuple[type[Exception], ...] = (JobFailed,)
            ) -> Callable[[argparse.Namespace], int]:
    """Every path of a command ends in an exit code with a message, never a traceback: a usage or I/O problem
    exits 2, one of ``failures`` (invalid input, failed job) exits 1 with its own message."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args) or 0)
        except CliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        # --db names a file that is not a database, or cannot be opened
        except _raised_by("flowcore.workspace.store", "WorkspaceError") as exc:
            print(f"error: {exc.path}: {exc}", file=sys.stderr)
            return 2
        # the workspace opened but a write failed (a read-only file or folder, a full disk, a broken file)
        except _raised_by("sqlite3", "Error") as exc:
            db, storage = getattr(args, "db", None), sys.modules.get("flowcore.workspace.store")
            db = db or (storage.default_target() if storage else "the workspace")
            print(f"error: {db}: the workspace database cannot be used ({exc})", file=sys.stderr)
            return 2
        # the machine lacks bubblewrap: code is refused, never run unconfined
        except _raised_by("flowcore.execution.sandbox", "SandboxUnavailable") as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except failures as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 1
        except Exception as exc:  # the last guard: a message, never a traceback
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1

    return run


def _whole(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {v}")
    return v


def positive(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    return _whole(text, 1)


def nonnegative(text: str) -> int:
    """argparse type: a whole number of at least 0."""
    return _whole(text, 0)


def load_problems(args: argparse.Namespace, split: str) -> tuple[list, dict]:
    """The problems of ``--benchmark`` (``--data``, ``--limit``, ``--split-file``) and what they are (split_info);
    a file that cannot be read is a usage error naming it."""
    from flowcore.tasks import DataError, load, split_info

    try:
        problems = load(args.benchmark, split, data_path=args.data, limit=args.limit, split_file=args.split_file)
        info = split_info(args.benchmark, split, data_path=args.data, split_file=args.split_file, limit=args.limit)
    except (DataError, ValueError) as exc:
        raise CliError(str(exc)) from None
    return problems, info


# -- which task: --benchmark NAME (built in, or saved in the workspace) or --task-file TASK.toml ------------------

def add_task_args(parser: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    """``--benchmark NAME`` or ``--task-file TASK.toml``, one of them required (every command that takes a task);
    the group, for a command with a third choice (``submit --resume RUN``)."""
    g = parser.add_mutually_exclusive_group(required=True)
    g.add_argument("--benchmark", metavar="NAME",
                   help="gsm8k, math, humaneval, mbpp, or the name of a task saved in the workspace (--db)")
    g.add_argument("--task-file", metavar="TASK.toml",
                   help="a task of your own: data + problem template + reference + metric (docs/tasks.md)")
    return g


def _lookup_workspace(db: str | None):  # noqa: ANN202
    """The workspace a saved task is looked up in: --db, else $MERMAIDFLOW_DB or workspace.db when it exists
    (a lookup never creates a workspace)."""
    import os

    from flowcore.workspace.store import Workspace, default_target, is_postgres

    target = db or default_target()
    if not db and not is_postgres(target) and not os.path.exists(target):
        return None
    return Workspace(target)


def resolve_task(args: argparse.Namespace, ws=None):  # noqa: ANN001, ANN201
    """The task the arguments name, made findable by name; ``args.benchmark`` becomes its name. A bad task file
    is invalid input (exit 1, naming file, row and field); an unknown name is a usage error (exit 2)."""
    from flowcore.tasks import BUILTIN, DataError, find, from_file, known_names

    if getattr(args, "task_file", None):
        try:
            task = from_file(args.task_file)
        except DataError as exc:
            raise JobFailed(str(exc)) from None
        args.benchmark = task.name
        return task
    name = args.benchmark
    if name in BUILTIN:
        return BUILTIN[name]
    try:
        task = find(name, ws if ws is not None else _lookup_workspace(getattr(args, "db", None)))
    except DataError as exc:  # a saved task that no longer reads (hand-edited rows)
        raise JobFailed(str(exc)) from None
    if task is None:
        raise CliError(f"--benchmark {name}: no such task (built in: {', '.join(BUILTIN)}; saved: "
                       f"{', '.join(n for n in known_names() if n not in BUILTIN) or 'none'}); give a task of your "
                       "own with --task-file TASK.toml, or --db the workspace it is saved in")
    return task
