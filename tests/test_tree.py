"""The tree reads as the pipeline: no import cycle between flowcore's modules (imports inside functions
included), few modules at the root, one command table that matches the parser, and every command module
importable (a broken one is an error, never a missing command)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "flowcore"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    """module -> module for every import anywhere in a module (top level, in functions, under TYPE_CHECKING)."""
    modules = {_module(p): p for p in PKG.rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t in modules and t != name and not name.startswith(t + "."):  # a package's own __init__
                    g.add_edge(name, t, line=node.lineno)
    return g


def test_no_import_cycles_between_modules():
    g = import_graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_finds_a_cycle_made_through_a_function_level_import(tmp_path, monkeypatch):
    """The check is real: two modules importing each other, one of them inside a function, form a cycle."""
    pkg = tmp_path / "flowcore"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from flowcore.a import y\n")
    (pkg / "a" / "y.py").write_text("def f():\n    from . import x\n    return x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == [["flowcore.a.x", "flowcore.a.y"]]


def test_few_modules_at_the_root():
    root = sorted(p.name for p in PKG.glob("*.py"))
    assert root == ["__init__.py", "__main__.py", "catalogue.py", "model.py"], root


def test_one_command_table_matches_the_parser_and_every_module_imports():
    from flowcore.cli.main import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)
    for command, module in COMMANDS.items():  # each command is added by the module the table names
        one = next(a for a in build_parser(command)._actions if a.dest == "command")
        assert command in one.choices, (command, module)


def test_a_command_module_that_fails_to_import_is_an_error_not_a_missing_command(tmp_path):
    code = ("import sys, flowcore.cli.main as m; m.COMMANDS['ghost'] = 'flowcore.cli.no_such_module'; "
            "sys.exit(m.main(['--help']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode != 0 and "No module named 'flowcore.cli.no_such_module'" in p.stderr


# stage -> stages above it that it must never import (layers point down: storage knows no search, the engine no view)
ABOVE = {
    **{stage: ("ui", "cli") for stage in ("mermaid", "checker", "execution", "llm", "tasks", "evaluation",
                                          "evolution", "aov", "export", "serve")},
    "tracing": ("evaluation", "evolution", "serve", "ui", "cli"),
    "workspace": ("evolution", "evaluation", "aov", "serve", "ui", "cli"),
}


def layer_violations(g: nx.DiGraph) -> list[str]:
    bad = []
    for a, b, data in g.edges(data=True):
        stage, target = a.split(".")[1:2], b.split(".")[1:2]
        if stage and target and target[0] in ABOVE.get(stage[0], ()):
            bad.append(f"{a} imports {b} (line {data['line']})")
    return sorted(bad)


def test_layers_point_down():
    assert layer_violations(import_graph()) == []


def test_the_layer_check_finds_storage_importing_search():
    g = nx.DiGraph()
    g.add_edge("flowcore.workspace.queue", "flowcore.evolution.loop", line=7)
    g.add_edge("flowcore.evolution.session", "flowcore.ui.canvas", line=9)
    assert layer_violations(g) == ["flowcore.evolution.session imports flowcore.ui.canvas (line 9)",
                                   "flowcore.workspace.queue imports flowcore.evolution.loop (line 7)"]
