"""`python -m flowcore export`: the Export page's files from the command line, and its bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "assets" / "examples" / "math_seed.mmd"


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowcore", "export", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, **(env or {})})


def test_export_writes_the_pages_five_files(tmp_path):
    p = run(str(SEED), "--task", "math", "--out", str(tmp_path / "new"), "--name", "My flow v2", "--json")
    assert p.returncode == 0, p.stderr
    files = sorted(Path(f).name for f in json.loads(p.stdout)["files"])
    assert files == [f"My_flow_v2.{x}" for x in ("json", "mmd", "png", "py", "svg")]
    out = tmp_path / "new"
    assert (out / "My_flow_v2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (out / "My_flow_v2.svg").read_text()
    assert json.loads((out / "My_flow_v2.json").read_text())["name"] == "My flow v2"
    subprocess.run([sys.executable, "-m", "py_compile", str(out / "My_flow_v2.py")], check=True)


def test_formats_choose_the_files(tmp_path):
    p = run(str(SEED), "--out", str(tmp_path), "--formats", "py,.MMD")
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["math_seed.mmd", "math_seed.py"]
    p = run(str(SEED), "--out", str(tmp_path), "--formats", "py,pdf")
    assert p.returncode == 2 and "unknown format(s) pdf" in p.stderr and "Traceback" not in p.stderr


def test_bad_inputs_exit_with_a_message_and_write_nothing(tmp_path):
    out = tmp_path / "out"
    bad = tmp_path / "bad.mmd"
    bad.write_text("flowchart TD\n    A[Custom] --> B{{oops\n")
    p = run(str(bad), "--out", str(out))
    assert p.returncode == 1 and f"{bad}:2:" in p.stderr and "M001" in p.stderr and not out.exists()
    a_file = tmp_path / "x.txt"
    a_file.write_text("keep me")
    p = run(str(SEED), "--out", str(a_file))
    assert p.returncode == 2 and "is a file" in p.stderr and a_file.read_text() == "keep me"
    p = run(str(tmp_path / "missing.mmd"), "--out", str(out))
    assert p.returncode == 2 and "no such file" in p.stderr and not out.exists()


def test_a_key_in_a_prompt_is_never_exported(tmp_path):
    key = "sk-test-export-cli-1234567890"
    leaky = tmp_path / "leaky.mmd"
    leaky.write_text(SEED.read_text().replace("Solve the math problem", f"Use {key} to solve the math problem"))
    p = run(str(leaky), "--out", str(tmp_path / "out"), "--formats", "py,mmd,json",
            env={"OPENAI_API_KEY": key})
    assert p.returncode == 1 and "API key" in p.stderr and key not in p.stderr + p.stdout
    assert not (tmp_path / "out").exists()
