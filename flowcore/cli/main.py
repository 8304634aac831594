"""``python -m flowcore``: the stable command-line surface (DESIGN §10), one table of commands.

Each command lives in the module COMMANDS names; that module's ``register(subparsers)`` adds it (a module may
add several). Running one command imports only its module, so ``check`` starts without the rest of the engine;
``--help`` imports them all. A module that fails to import is an error, never a command silently missing.
"""

from __future__ import annotations

import argparse
import importlib
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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for ``command`` alone (only its module is imported), or for every command."""
    p = argparse.ArgumentParser(prog="python -m flowcore", description="MermaidFlow Studio engine")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for mod in modules:
        importlib.import_module(mod).register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(first).parse_args(argv)
    return guarded(args.func)(args)
