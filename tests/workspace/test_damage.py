"""Damage found at open (issue 28.5): 8 KB of random bytes in the middle of a real workspace file (its header
intact). Each process's first open runs PRAGMA quick_check; the commands refuse the file (exit 2, nothing
written) with the command that recovers it, the pages show a panel instead of "database disk image is malformed",
and `python -m flowcore workspace recover` rebuilds what the file still holds into a new file that opens."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.workspace import health, library
from flowcore.workspace.store import Workspace, WorkspaceDamaged
from tests.helpers.fakellm import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
SEED = dict((n, x) for n, _, x in library.examples())["math_seed"]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """A workspace with an offline evolution run and 300 library versions, then 8 KB of noise at its middle."""
    db = tmp_path_factory.mktemp("damage") / "ws.db"
    ws = Workspace(db)
    Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=12, seed=1, offline=True, mode="programmatic")).run()
    for i in range(300):
        library.save_workflow(ws, f"flow {i % 7}", SEED + f"%% note {i}\n" + "%% padding\n" * 20, "math")
    ws.close_all()
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0  # all of it in the file
    size = db.stat().st_size
    assert size > 200_000
    with open(db, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(random.Random(28).randbytes(8192))
    conn = sqlite3.connect(db)
    try:
        assert health.quick_check(conn) is not None  # the damage is real (quick_check finds it, or fails on it)
    finally:
        conn.close()
    health.forget_checks()
    return db


def _bytes(db: Path) -> bytes:
    return db.read_bytes()


def test_opening_a_damaged_file_is_refused_with_how_to_recover(damaged):
    health.forget_checks()
    before = _bytes(damaged)
    with pytest.raises(WorkspaceDamaged) as err:
        Workspace(damaged).query("SELECT 1")
    assert "is damaged" in str(err.value) and f"workspace recover {damaged}" in str(err.value)
    assert _bytes(damaged) == before and not Path(f"{damaged}-wal").exists()


@pytest.mark.parametrize("command", [["queue"], ["worker", "--once"], ["run", "{seed}", "--task", "math",
                                                                       "--problem", "What is 1+1?"],
                                     ["evaluate", "{seed}", "--benchmark", "gsm8k", "--limit", "2"]])
def test_the_commands_refuse_a_damaged_workspace_and_write_nothing(damaged, tmp_path, command):
    seed = tmp_path / "seed.mmd"
    seed.write_text(SEED)
    before = _bytes(damaged)
    with FakeLLMServer("The answer is \\boxed{2}.") as srv:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))},
               "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-test"}
        args = [a.format(seed=seed) for a in command]
        p = subprocess.run([sys.executable, "-m", "flowcore", *args, "--db", str(damaged)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        assert not srv.requests  # refused before any paid call
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-1500:])  # was 0, writing into the file
    assert "is damaged" in p.stderr and "python -m flowcore workspace recover" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and _bytes(damaged) == before


@pytest.mark.parametrize("page", [None, "pages/history.py"])
def test_home_and_history_show_a_panel_not_an_exception(damaged, monkeypatch, page):
    health.forget_checks()
    monkeypatch.setenv("MERMAIDFLOW_DB", str(damaged))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]  # was "database disk image is malformed"
    errors = " ".join(e.value for e in at.error)
    assert "is damaged" in errors and "workspace recover" in errors, errors


@pytest.mark.parametrize("use_cli", [True, False])  # the shell's .recover when it works, else the row copy
def test_recover_rebuilds_what_the_file_still_holds(damaged, tmp_path, use_cli):
    before = _bytes(damaged)
    out = tmp_path / "recovered.db"
    args = ["workspace", "recover", str(damaged), "--out", str(out), "--json"] + ([] if use_cli else ["--no-cli"])
    p = subprocess.run([sys.executable, "-m", "flowcore", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-1500:]
    assert _bytes(damaged) == before  # the damaged file is left as it was
    health.forget_checks()
    ws = Workspace(out)
    try:
        assert ws.query("PRAGMA integrity_check")[0][0] == "ok"
        kept = ws.query("SELECT COUNT(*) AS n FROM workflows")[0]["n"]
        assert 0 < kept <= 300  # most rows are back (what the noise destroyed is not)
        runs = History(ws).runs()
        library.save_workflow(ws, "after recovery", SEED, "math")  # usable for writing again
        assert len(runs) <= 1
    finally:
        ws.close_all()
    check = subprocess.run([sys.executable, "-m", "flowcore", "workspace", "check", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and "ok" in check.stdout
    bad = subprocess.run([sys.executable, "-m", "flowcore", "workspace", "check", str(damaged)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "is damaged" in bad.stderr
