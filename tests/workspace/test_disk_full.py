"""A full disk (issue 28.4), on a real small filesystem: a 4 MB tmpfs mounted for the test (root only; a
size-limited file via RLIMIT_FSIZE would not do: SQLite reports EFBIG as a plain I/O error, not as a full disk,
and SQLite's max_page_count only limits one connection). The full disk is named as such at once (no back-offs
blaming the endpoint), the run is recorded stopped, what is stored can still be read (a workspace that cannot
open normally opens read-only), and a paid call whose result cannot be stored is reported as exactly that."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from flowcore.evolution.history import History
from flowcore.workspace import health
from flowcore.workspace.store import StorageFull, Workspace
from tests.helpers.fakellm import FakeLLMServer

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text(encoding="utf-8")
LONG = "Let me think. " * 2500 + "So the answer is \\boxed{7}."  # ~35 KB a reply: the cache fills the disk fast


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (make test runs as root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0777", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path, leave: int) -> None:
    """Take all but ``leave`` bytes of the disk with a file of its own."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / f"filler-{uuid.uuid4().hex[:6]}", "wb") as f:
        try:
            f.write(b"\0" * max(0, free - leave))
        except OSError:
            pass


def _env(srv: FakeLLMServer) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    return {**env, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-test", "MERMAIDFLOW_MAX_RETRIES": "0"}


def test_a_workspace_that_cannot_open_on_a_full_disk_opens_read_only(small_disk):
    db = small_disk / "ws.db"
    ws = Workspace(db)
    History(ws).create_run({"rounds": 1}, "k", SEED, "gsm8k", "math", True)
    ws.close_all()  # the log folded in and removed: a new open must create its shared-memory file
    fill(small_disk, 0)
    health.forget_checks()
    again = Workspace(db)
    assert History(again).run(1).status == "running"  # read, although SQLite could not open it normally
    assert again.read_only and "is full" in again.read_only
    with pytest.raises(StorageFull, match="disk holding the workspace .* is full"):
        History(again).set_status(1, "stopped")
    again.close_all()


def test_evaluate_names_the_full_disk_and_the_paid_call_it_could_not_store(small_disk, tmp_path):
    db, seed = small_disk / "ws.db", tmp_path / "seed.mmd"
    seed.write_text(SEED)
    Workspace(db).check_usable()
    fill(small_disk, 150_000)
    with FakeLLMServer(LONG) as srv:
        started = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "flowcore", "evaluate", str(seed), "--benchmark", "gsm8k",
                            "--limit", "60", "--concurrency", "2", "--db", str(db)], cwd=ROOT, env=_env(srv),
                           capture_output=True, text=True, timeout=300)
        took, calls = time.monotonic() - started, len(srv.requests)
    assert p.returncode == 2, (p.stdout[-800:], p.stderr[-1500:])
    assert "was made and paid for, but its result could not be stored" in p.stderr, p.stderr
    assert "is full" in p.stderr and "endpoint" not in p.stderr.lower() and "Traceback" not in p.stderr
    assert calls < 20, calls  # it stopped at the first result it could not keep (was: all 60, 50 "endpoint failures")
    assert took < 60, took


def test_an_evolution_run_on_a_disk_that_fills_stops_by_name_and_stays_readable(small_disk):
    db = small_disk / "ws.db"
    Workspace(db).check_usable()
    fill(small_disk, 1_200_000)  # room for the seed round and a round or two
    with FakeLLMServer(LONG) as srv:
        started = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "flowcore", "evolve", "--benchmark", "gsm8k", "--rounds", "8",
                            "--limit", "4", "--candidates", "2", "--mode", "programmatic", "--db", str(db)],
                           cwd=ROOT, env=_env(srv), capture_output=True, text=True, timeout=600)
        took = time.monotonic() - started
    assert p.returncode == 1, (p.stdout[-800:], p.stderr[-1500:])
    assert "stopped" in p.stderr and "is full" in p.stderr, p.stderr[-1500:]
    assert "trying again" not in p.stderr and "LLM endpoint" not in p.stderr  # no back-offs blaming the endpoint
    assert took < 90, took  # was 150 s after six back-offs
    assert os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize < 1_200_000  # still full
    reader = subprocess.run([sys.executable, "-c", "import sys; from flowcore.evolution.history import History; "
                             "from flowcore.workspace.store import Workspace; h = History(Workspace(sys.argv[1])); "
                             "i = h.run(1); print(i.status, '|', i.reason, '|', h.last_round(1))", str(db)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert reader.returncode == 0, reader.stderr[-1500:]  # another process reads it while the disk is full
    status, reason, last = (x.strip() for x in reader.stdout.split("|"))
    assert status == "stopped" and "is full" in reason, reader.stdout  # not left "running"
    assert int(last) >= 0, last  # the disk filled mid-run, after rounds were stored (they stay)
