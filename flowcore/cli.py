"""``python -m flowcore``: the stable command-line surface (DESIGN §10).

Exit status: 0 success/valid, 1 invalid input or failed job, 2 usage or I/O error (message on stderr,
never a traceback). Each area of the engine registers its own subcommands.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable

from . import catalogue as cat
from .checker import check, is_valid
from .mermaid import WorkflowSyntaxError, parse, to_mermaid

# Modules that add subcommands through ``register(subparsers)``; missing ones are skipped.
_PLUGINS = ("flowcore.run_cli", "flowcore.evolution.cli", "flowcore.aov.cli", "flowcore.compare_cli",
            "flowcore.link_cli", "flowcore.scale_cli", "flowcore.export_cli")


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
    from .sandbox import sandbox_status

    ready, message = sandbox_status()
    if args.json:
        emit({"ready": ready, "message": message})
    else:
        print(message if ready else f"not ready: {message}")
    return 0 if ready else 1


_CORE = ("check", "fmt", "sandbox")  # commands that need no plugin: their start-up imports none of them


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flowcore", description="MermaidFlow Studio engine")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
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
    for mod in _PLUGINS if plugins else ():
        try:
            register: Callable = importlib.import_module(mod).register
        except ModuleNotFoundError as exc:
            if exc.name and mod.startswith(exc.name):
                continue
            raise
        register(sub)
    return p


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
        except _raised_by("flowcore.storage", "WorkspaceError") as exc:
            print(f"error: {exc.path}: {exc}", file=sys.stderr)
            return 2
        # the workspace opened but a write failed (a read-only file or folder, a full disk, a broken file)
        except _raised_by("sqlite3", "Error") as exc:
            db, storage = getattr(args, "db", None), sys.modules.get("flowcore.storage")
            db = db or (storage.default_target() if storage else "the workspace")
            print(f"error: {db}: the workspace database cannot be used ({exc})", file=sys.stderr)
            return 2
        # the machine lacks bubblewrap: code is refused, never run unconfined
        except _raised_by("flowcore.sandbox", "SandboxUnavailable") as exc:
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(plugins=first not in _CORE).parse_args(argv)
    return guarded(args.func)(args)
