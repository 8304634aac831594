"""A full disk on a real PostgreSQL 15 (issue 28.4): the workspace's schema lives in a tablespace on a 4 MB tmpfs
mounted for the test (root only), which is how a server's data disk fills. PostgreSQL then refuses to extend a
table with SQLSTATE 53100 (disk_full). As on SQLite (test_disk_full.py): named as a full disk within seconds (no
back-offs, nothing blamed on the endpoint), the run is recorded stopped (not left "running"), what is stored can
still be read, and a paid call whose result cannot be stored is reported as exactly that."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from flowcore.evolution.history import History
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.pgserver import UNPRIVILEGED
from tests.workspace.test_disk_full import ROOT, _env, fill

pytestmark = pytest.mark.slow


def LONG(request: dict) -> str:  # noqa: N802 - a reply as test_disk_full's LONG, but one PostgreSQL cannot compress
    """~36 KB a reply of random text (PostgreSQL compresses a repeated one to nothing), then the answer."""
    import base64

    return base64.b64encode(os.urandom(27_000)).decode() + " So the answer is \\boxed{7}."


@pytest.fixture
def pg_small(pg_server):
    """(workspace URL, the small disk): a fresh schema whose tables go to a tablespace on a 4 MB tmpfs."""
    import psycopg

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (make test runs as root)")
    top = Path(tempfile.mkdtemp(prefix="mf-pgdisk-"))
    os.chmod(top, 0o755)  # the server runs as nobody: it must reach the mount point
    disk = top / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=4m,mode=0700,uid={UNPRIVILEGED},"
                              f"gid={UNPRIVILEGED}", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    space, schema = "ts_" + uuid.uuid4().hex[:10], "t_" + uuid.uuid4().hex[:12]
    try:
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {space} LOCATION '{disk}'")
            conn.execute(f"CREATE SCHEMA {schema}")
        yield f"{pg_server.url}?options={quote(f'-csearch_path={schema} -cdefault_tablespace={space}')}", disk
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute(f"DROP TABLESPACE {space}")
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
        subprocess.run(["rm", "-rf", str(top)], capture_output=True)


def _free(disk: Path) -> int:
    return os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize


def test_an_evolution_run_on_a_full_postgresql_disk_stops_by_name_and_stays_readable(pg_small):
    url, disk = pg_small
    Workspace(url).check_usable()
    History(Workspace(url))  # the run tables exist before the disk fills (as on a workspace in use)
    fill(disk, 1_200_000)  # room for the seed round and a round or two
    with FakeLLMServer(LONG) as srv:
        started = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "flowcore", "evolve", "--benchmark", "gsm8k", "--rounds", "8",
                            "--limit", "4", "--candidates", "2", "--mode", "programmatic", "--db", url],
                           cwd=ROOT, env=_env(srv), capture_output=True, text=True, timeout=600)
        took = time.monotonic() - started
    assert p.returncode == 1, (p.stdout[-800:], p.stderr[-1500:])
    assert "stopped" in p.stderr and "is full" in p.stderr, p.stderr[-1500:]
    assert "trying again" not in p.stderr and "LLM endpoint" not in p.stderr, p.stderr[-1500:]
    assert took < 90, took
    assert _free(disk) < 1_200_000  # still full
    reader = subprocess.run([sys.executable, "-c", "import sys; from flowcore.evolution.history import History; "
                             "from flowcore.workspace.store import Workspace; h = History(Workspace(sys.argv[1])); "
                             "i = h.run(1); print(i.status, '|', i.reason, '|', h.last_round(1))", url],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert reader.returncode == 0, reader.stderr[-1500:]  # another process reads it while the disk is full
    status, reason, last = (x.strip() for x in reader.stdout.split("|"))
    assert status == "stopped" and "is full" in reason, reader.stdout  # not left "running"
    assert int(last) >= 0, last


def test_evaluate_on_a_full_postgresql_disk_names_the_paid_call_it_could_not_store(pg_small, tmp_path):
    url, disk = pg_small
    seed = tmp_path / "seed.mmd"
    seed.write_text((ROOT / "assets" / "examples" / "math_seed.mmd").read_text(encoding="utf-8"))
    Workspace(url).check_usable()
    fill(disk, 150_000)
    with FakeLLMServer(LONG) as srv:
        started = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "flowcore", "evaluate", str(seed), "--benchmark", "gsm8k",
                            "--limit", "60", "--concurrency", "2", "--db", url], cwd=ROOT, env=_env(srv),
                           capture_output=True, text=True, timeout=300)
        took, calls = time.monotonic() - started, len(srv.requests)
    assert p.returncode == 2, (p.stdout[-800:], p.stderr[-1500:])
    assert "was made and paid for, but its result could not be stored" in p.stderr, p.stderr[-1500:]
    assert "is full" in p.stderr and "endpoint" not in p.stderr.lower() and "Traceback" not in p.stderr
    assert calls < 20, calls
    assert took < 60, took
