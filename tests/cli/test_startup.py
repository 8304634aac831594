"""#13 start-up: `python -m flowcore check` keeps heavy and unneeded modules off its path, `import flowcore`
imports its public names on first use, and what was made cheaper to compile still means the same.
The time itself is measured by benchmarks/startup.py, not here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import flowcore
from flowcore.mermaid import lexdfa
from flowcore.mermaid import reader as mermaid
from flowcore.mermaid.grammar import _TABLES, _ConditionRegexes, grammar, parse_flowchart

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "assets" / "examples" / "math_seed.mmd"


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_check_from_the_command_line_imports_only_the_reader_and_checker():
    mods = _modules_after(f"import runpy, sys\nsys.argv = ['flowcore', 'check', {str(SEED)!r}]\ntry:\n"
                          "    runpy.run_module('flowcore', run_name='__main__')\nexcept SystemExit as e:\n"
                          "    assert e.code == 0, e.code")
    ours = {m for m in mods if m.startswith("flowcore")}
    assert ours == {"flowcore", "flowcore.catalogue", "flowcore.checker", "flowcore.checker.check",
                    "flowcore.cli", "flowcore.cli.common", "flowcore.cli.main", "flowcore.cli.check",
                    "flowcore.mermaid", "flowcore.mermaid.reader", "flowcore.mermaid.grammar",
                    "flowcore.mermaid.text", "flowcore.mermaid.unclosed", "flowcore.model",
                    "flowcore.mermaid.lalr", "flowcore.mermaid.errors",
                    "flowcore.mermaid.compiled", "flowcore.mermaid.lexdfa", "flowcore.mermaid.flowdb",
                    "flowcore.mermaid.convert"}, ours
    for heavy in ("networkx", "pandas", "numpy", "plotly", "openai", "sqlite3", "subprocess", "difflib"):
        assert heavy not in mods, heavy


def test_import_flowcore_loads_its_names_on_first_use():
    assert _modules_after("import flowcore") & {"flowcore.mermaid.reader", "flowcore.checker.check", "flowcore.model"} == set()
    from flowcore.checker.check import check
    from flowcore.mermaid.reader import parse

    assert flowcore.check is check and flowcore.parse is parse
    assert set(flowcore.__all__) <= set(dir(flowcore))
    assert "check" in flowcore.__dict__  # resolved once, then an ordinary attribute
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        flowcore.nope  # noqa: B018


def test_cli_errors_of_modules_it_did_not_import_at_start_still_exit_2(tmp_path):
    # a fresh interpreter: the storage module is imported by the command, after `guarded` was set up
    bad = tmp_path / "notadb"
    bad.write_text("my notes\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    out = subprocess.run([sys.executable, "-m", "flowcore", "evolve", "--benchmark", "gsm8k", "--rounds", "1",
                          "--limit", "1", "--db", str(bad)], cwd=ROOT, capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"error: {bad}: not usable as the workspace database" in out.stderr and "Traceback" not in out.stderr


def test_the_lexer_compiles_only_the_start_conditions_it_enters():
    conditions = _ConditionRegexes(grammar().condition_res._rules, grammar().condition_rules)
    assert len(conditions) == 0
    full = conditions["string"]
    assert list(conditions) == ["string"] and conditions["string"] is full
    rules = grammar().condition_rules["string"]
    assert list(full.groupindex) == [f"r{k}" for k in rules]  # one group per rule, in jison's order
    # a text with a quoted label and an edge label enters those conditions and reads the same as before
    res = parse_flowchart('flowchart TD\n  A["x"] -- "y" --> B{"z"}\n  style A fill:#fff\n')
    assert not res.errors
    assert res.db.vertices["B"].text == "z" and res.db.edges[0].text == "y"


def test_the_stored_tables_are_in_the_form_the_driver_reads():
    with open(_TABLES, encoding="utf-8") as f:
        raw = json.load(f)
    g = grammar()
    assert len(g.table) == raw["table"]["states"] and all(isinstance(k, int) for row in g.table for k in row)
    assert len(g.flat) == raw["table"]["states"] * raw["table"]["symbols"] == len(g.table) * g.nsym
    assert all(re.compile(r) for r in raw["rules"])  # Python patterns already, each valid alone
    # the lexer's program is stored as built from those rules (building it costs more than the rest of a cold check)
    assert lexdfa.Program(raw["rules"]).dump() == raw["lexer"]


def test_safe_id_complement_matches_the_plain_definition():
    plain = re.compile(r"[A-Za-z0-9_\u00c0-\uffff][A-Za-z0-9_\-.\u00c0-\uffff]*")
    fast = mermaid._SAFE_ID
    for code in [*range(0x3000), *range(0xF000, 0x10100), 0x1F600, 0x10FFFF]:
        c = chr(code)
        for s in (c, "a" + c, c + "a", "a" + c + "b"):
            assert bool(plain.fullmatch(s)) == bool(fast.fullmatch(s)), hex(code)
