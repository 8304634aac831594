"""#14 item 6: workspace files are private (0600, WAL and SHM too), a --db that is not a database is an I/O
error (exit 2), an evaluation stopped mid-run keeps what it finished, and a harness killed mid-run leaves no
scratch and no process behind."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcore.cli.main import main
from flowcore.evaluation import store as es
from flowcore.tasks import ProblemResult
from flowcore.workspace.store import Workspace, WorkspaceError

ROOT = Path(__file__).resolve().parents[2]


def test_workspace_files_are_created_0600(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    es.create_evaluation(ws, workflow_text="flowchart TD\n", benchmark="gsm8k", split="validation", total=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ws.db", "ws.db-reserve", "ws.db-shm", "ws.db-wal"]  # -reserve: room kept for a full disk
    assert {oct(stat.S_IMODE(os.stat(tmp_path / n).st_mode)) for n in names} == {"0o600"}
    ws.close()


@pytest.mark.parametrize("argv", [["evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "1"],
                                  ["aov", "run", str(ROOT / "assets" / "aov" / "gobang.json")]])
def test_a_db_that_is_not_a_database_exits_2_naming_it(argv, tmp_path, capsys, monkeypatch):
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(var)
    bad = tmp_path / "notadb"
    bad.write_text("my notes, not a database\n")
    assert main([*argv, "--db", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"error: {bad}: not usable as the workspace database (file is not a database)" in err
    assert "Traceback" not in err and bad.read_text() == "my notes, not a database\n"  # left as it was
    with pytest.raises(WorkspaceError):
        Workspace(tmp_path).conn  # a folder  # noqa: B018


def _result(i: int, correct: bool) -> ProblemResult:
    return ProblemResult(f"p{i}", correct, "42", "42", 0.001, 0.1, None)


def test_an_evaluation_stopped_mid_run_keeps_what_it_finished(ws):
    eid = es.create_evaluation(ws, workflow_text="flowchart TD\n", benchmark="gsm8k", split="validation",
                               total=5, job_id="gone")
    es.save_progress(ws, eid, [_result(0, True), _result(1, False), _result(2, True)], cost=0.003)
    assert es.reconcile(ws) == 1  # its job is not alive in this process: the server was stopped
    rec = es.load_evaluation(ws, eid)
    assert rec.status == "interrupted" and rec.n == 3 and rec.score == pytest.approx(2 / 3)
    assert [r["id"] for r in rec.results] == ["p0", "p1", "p2"] and rec.cost == pytest.approx(0.003)
    eid2 = es.create_evaluation(ws, workflow_text="flowchart TD\n", benchmark="gsm8k", split="validation",
                                total=5, job_id="gone2")
    es.save_progress(ws, eid2, [_result(0, True)], cost=0.001)
    es.finish_evaluation(ws, eid2, None, status="failed", error="endpoint gone", cost=0.002)
    rec = es.load_evaluation(ws, eid2)  # a failure keeps the finished problems too
    assert rec.status == "failed" and rec.n == 1 and rec.results[0]["id"] == "p0" and rec.cost == 0.002


def test_a_harness_killed_mid_run_leaves_no_scratch_and_no_process():
    if not Path("/usr/bin/bwrap").exists():
        pytest.skip("bubblewrap is not installed")
    marker = f"{random.randint(100000, 999999)}.{random.randint(1000, 9999)}"
    name = f"scratch-{marker}"
    code = (f"import subprocess\nopen('/tmp/{name}', 'w').write('x' * 1000)\n"
            f"subprocess.Popen(['/usr/bin/setsid', '/usr/bin/sleep', '{marker}'])\n"
            "import time\ntime.sleep(60)\n")
    harness = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom flowcore.execution.sandbox import run_untrusted\n"
         "print('go', flush=True)\nrun_untrusted(sys.argv[1], timeout=120)", code],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert harness.stdout.readline() == "go\n"
    deadline = time.monotonic() + 15
    while not _running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(marker), "the sandboxed program did not start"
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 5
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(marker)  # bwrap --die-with-parent: the whole PID namespace went with the harness
    assert not [p for d in ("/tmp", "/dev/shm", "/var/tmp") for p in Path(d).glob(f"**/{name}")]


def _running(marker: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if cmd.startswith(b"/usr/bin/sleep\0") and marker.encode() in cmd:  # the sandbox's child
                return True
        except OSError:
            continue
    return False
