"""``python -m flowcore``: the stable command-line surface (DESIGN §10), one table of commands.

Each command lives in the module COMMANDS names; that module's ``register(subparsers)`` adds it (a module may
add several). Running one command imports only its module, so ``check`` starts without the rest of the engine;
``--help`` imports them all. A module that fails to import is an error, never a command silently missing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from flowcore.cli.common import guarded

COMMANDS: dict[str, str] = {
    "check": "flowcore.cli.check", "fmt": "flowcore.cli.check", "sandbox": "flowcore.cli.check",
    "compile": "flowcore.cli.run", "run": "flowcore.cli.run", "evaluate": "flowcore.cli.run",
    "score": "flowcore.cli.run",
    "mutate": "flowcore.cli.evolve", "crossover": "flowcore.cli.evolve", "evolve": "flowcore.cli.evolve",
    "aov": "flowcore.cli.aov",
    "compare": "flowcore.cli.compare", "split": "flowcore.cli.compare",
    "link": "flowcore.cli.link",
    "submit": "flowcore.cli.scale", "worker": "flowcore.cli.scale", "queue": "flowcore.cli.scale",
    "export": "flowcore.cli.export",
    "task": "flowcore.cli.task",
    "publish": "flowcore.cli.serve", "serve": "flowcore.cli.serve", "mcp": "flowcore.cli.serve",
    "keys": "flowcore.cli.serve",
    "workspace": "flowcore.cli.workspace",
}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized to the terminal as argparse does but without ``shutil`` (which imports bz2 and
    lzma: ~4 ms of every start, since argparse makes a formatter for each argument added)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            try:
                width = int(os.environ.get("COLUMNS", "0"))
            except ValueError:
                width = 0
            if width <= 0:
                try:
                    width = os.get_terminal_size(sys.__stdout__.fileno()).columns
                except (AttributeError, ValueError, OSError):
                    width = 80
            width -= 2
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose formatter is ``_HelpFormatter`` unless told otherwise (its sub-parsers too)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - argparse's own signature
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for ``command`` alone (only its module is imported), or for every command."""
    p = _Parser(prog="python -m flowcore", description="MermaidFlow Studio engine")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for mod in modules:
        importlib.import_module(mod).register(sub)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line read by the parser of its command (which imports only that command's module)."""
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    return build_parser(first).parse_args(argv)


def run(args: argparse.Namespace) -> int:
    return guarded(args.func)(args)


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))
