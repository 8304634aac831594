"""`python -m flowcore check|fmt`: exit codes, JSON shape, messages on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore import parse, to_mermaid
from flowcore.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "assets" / "examples" / "math_seed.mmd"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowcore", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_check_valid_json_shape():
    p = run("check", str(SEED), "--task", "math", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc == {"valid": True, "diagnostics": []}


def test_check_invalid_exit_1_with_located_diagnostics(tmp_path, capsys):
    bad = tmp_path / "bad.mmd"
    bad.write_text(SEED.read_text().replace("C1 --> RETURN", "C1 -->|banana| RETURN"))
    assert main(["check", str(bad), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False
    assert all(set(d) == {"code", "severity", "message", "line", "column", "node"} for d in doc["diagnostics"])
    d = next(d for d in doc["diagnostics"] if d["code"] == "M007")
    assert (d["line"], d["node"], d["severity"]) == (9, "RETURN", "error") and "banana" in d["message"]


def test_check_human_output_names_file_line_and_code(tmp_path, capsys):
    bad = tmp_path / "bad.mmd"
    bad.write_text("flowchart TD\n  PROBLEM --> C1[Custom (role: x)]\n")
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:2:" in out and "M001" in out and "invalid" in out


def test_task_restrictions_reach_the_cli():
    p = run("check", str(ROOT / "assets/examples/humaneval_case_study.mmd"), "--task", "math")
    assert p.returncode == 1 and "M011" in p.stdout


def test_usage_and_io_errors_exit_2_without_traceback(tmp_path):
    p = run("check", str(tmp_path / "missing.mmd"))
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
    p = run("check", str(SEED), "--task", "poetry")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = run("frobnicate")
    assert p.returncode == 2
    binary = tmp_path / "bin.mmd"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    p = run("check", str(binary))
    assert p.returncode == 2 and f"{binary}:1:1: not UTF-8" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("command", ["check", "fmt", "compile", "link"])
def test_a_file_in_another_encoding_or_a_folder_is_named_with_its_place(tmp_path, command):
    latin1 = tmp_path / "latin1.mmd"
    latin1.write_bytes('flowchart TD\n    A["café"] --> B\n'.encode("latin-1"))
    p = run(command, str(latin1))
    assert p.returncode == 2 and f"{latin1}:2:11: not UTF-8 text (byte 0xe9)" in p.stderr, p.stderr
    assert "save it as UTF-8" in p.stderr and "position" not in p.stderr  # a line and column, not a byte offset
    p = run(command, str(tmp_path))
    assert p.returncode == 2 and f"{tmp_path}: is a folder, not a file" in p.stderr, p.stderr


def test_fmt_prints_the_canonical_text(tmp_path, capsys):
    messy = tmp_path / "messy.mmd"
    messy.write_text("graph LR;PROBLEM([Problem]);C1[\"Custom\"]\nPROBLEM -- input --> C1 --> RETURN([Return])\n")
    assert main(["fmt", str(messy)]) == 0
    out = capsys.readouterr().out
    assert out == to_mermaid(parse(messy.read_text()))
    assert "PROBLEM -->|input| C1" in out and out.startswith("flowchart LR\n")
    broken = tmp_path / "broken.mmd"
    broken.write_text("flowchart TD\n  A -> B\n")
    assert main(["fmt", str(broken)]) == 1
    assert "M001" in capsys.readouterr().err


def test_fmt_keeps_the_authors_comments(tmp_path, capsys):
    noted = tmp_path / "noted.mmd"
    noted.write_text("flowchart TD\n    %% why: one solver is enough for GSM8K\n    %% @prompt solver: Solve it.\n"
                     '    PROBLEM(["Problem"]) -->|input| C1["Custom<br/>(role: solver)"]\n'
                     "    %% TODO add a ScEnsemble\n    C1 --> RETURN([\"Return\"])\n")
    assert main(["fmt", str(noted)]) == 0
    out = capsys.readouterr().out
    assert "    %% why: one solver is enough for GSM8K\n" in out and "    %% TODO add a ScEnsemble\n" in out
    assert to_mermaid(parse(out)) == out  # the canonical text is stable with its comments
