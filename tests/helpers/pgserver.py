"""A real PostgreSQL server for tests: Debian's binaries, a cluster in a temporary directory (initdb + pg_ctl),
listening on 127.0.0.1 only, owned by an unprivileged user (PostgreSQL refuses to run as root).

``start()`` returns a ``PgServer`` whose ``new_schema()`` hands each test its own empty schema as a
``postgresql://`` URL (``options=-csearch_path=...``), which is much faster than a database per test.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

UNPRIVILEGED = 65534  # nobody


def bindir() -> Path | None:
    """Where Debian's PostgreSQL binaries are (newest major version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    exe = shutil.which("pg_ctl")
    return Path(exe).resolve().parent if exe else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    root: Path
    port: int
    bin: Path
    demote: list[str]
    opts: str = ""
    user: str = "mf"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def new_schema(self) -> str:
        """A fresh schema and the workspace URL that uses it."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}?options={quote(f'-csearch_path={name}')}"

    def crash(self) -> None:
        """Stop the server as a crash would (immediate mode); the data stays for start_again(), with every
        transaction committed before the crash (as in a real server's crash)."""
        subprocess.run([*self.demote, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60, check=True)

    def start_again(self) -> None:
        subprocess.run([*self.demote, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-o", self.opts, "-l",
                        str(self.root / "log"), "-w", "-t", "120", "start"], capture_output=True, timeout=180,
                       cwd=self.root, env={**os.environ, "LC_ALL": "C", "LANG": "C"}, check=True)

    def stop(self) -> None:
        subprocess.run([*self.demote, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def start() -> PgServer:
    """initdb + pg_ctl start in a new temporary directory; RuntimeError saying what is missing or failed."""
    b = bindir()
    if b is None:
        raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install -y postgresql; "
                           "`make test` does it when run as root)")
    root = Path(tempfile.mkdtemp(prefix="mf-pg-"))
    demote: list[str] = []
    if os.geteuid() == 0:
        demote = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups"]
        os.chmod(root, 0o755)
        os.chown(root, UNPRIVILEGED, UNPRIVILEGED)
    port = _free_port()
    data = root / "data"
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    init = subprocess.run([*demote, str(b / "initdb"), "-D", str(data), "-U", "mf", "--auth=trust", "-E", "UTF8",
                           "--locale=C", "--no-sync"], capture_output=True, text=True, env=env, timeout=180,
                          cwd=root)
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
    # fsync=off only matters when the machine itself goes down. synchronous_commit stays on (the default): off, a
    # commit returns before its WAL leaves the server's memory, so crash() (an immediate stop) dropped the last
    # ~200 ms of committed transactions - a table the workspace had created and remembered vanished ("relation
    # evo_leases does not exist"), which no real server does. With fsync=off, keeping it on costs only a write().
    opts = (f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
            "-c full_page_writes=off -c max_connections=100 -c shared_buffers=32MB")
    started = subprocess.run([*demote, str(b / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"),
                              "-w", "-t", "120", "start"], capture_output=True, text=True, env=env, timeout=180,
                             cwd=root)
    if started.returncode != 0:
        log = (root / "log").read_text(errors="replace")[-800:] if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()[-300:]} {log}")
    return PgServer(root, port, b, demote, opts)
