"""The hostile-program table (tests/helpers/hostile_programs.py) run against the sandbox as root and, through setpriv,
as an unprivileged user: every attack contained, the app's process and data untouched, the key never seen."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.hostile_programs import ATTACKS, FAKE_KEY, SECRET

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_PY = ROOT / "flowcore" / "execution" / "sandbox.py"
NOBODY = 65534
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed "
                                "(make test installs it when run as root)")


def _run_driver(cmd: list[str], cwd: str) -> dict[str, dict]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["name"]: r for r in records}


@pytest.fixture(scope="module")
def as_root() -> dict[str, dict]:
    if os.geteuid() != 0:
        pytest.skip("the root run needs root (the unprivileged run covers this user)")
    return _run_driver([sys.executable, str(ROOT / "tests" / "helpers" / "hostile_programs.py"), str(SANDBOX_PY)], str(ROOT))


@pytest.fixture(scope="module")
def as_nobody() -> dict[str, dict]:
    """The same table from an ordinary user's process: its own Python (Debian's, which that user can read),
    a copy of flowcore/sandbox.py, and bwrap creating the namespaces without privileges."""
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if os.geteuid() != 0 or setpriv is None or not os.access(python, os.X_OK):
        pytest.skip("needs root, setpriv (util-linux) and /usr/bin/python3 to act as an unprivileged user")
    work = tempfile.mkdtemp(prefix="mermaidflow-hostile-")
    try:
        os.chmod(work, 0o755)
        for src in (SANDBOX_PY, ROOT / "tests" / "helpers" / "hostile_programs.py"):
            shutil.copy(src, work)
            os.chmod(os.path.join(work, src.name), 0o644)
        cmd = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python,
               os.path.join(work, "hostile_programs.py"), os.path.join(work, "sandbox.py")]
        return _run_driver(cmd, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _no_such_file(r: dict) -> bool:
    return not r["ok"] and r["error"].startswith("FileNotFoundError")


# Attack name -> what its record must show (on top of the checks every attack gets).
EXPECT = {
    "read /etc/shadow": _no_such_file,
    "list /root": _no_such_file,
    "read the workspace DB": _no_such_file,
    "read a 0600 file in a 0700 dir": _no_such_file,
    "list the secret's folder": _no_such_file,
    "/proc/<parent>/environ": lambda r: r["ok"] and "parent: [Errno 2]" in r["stdout"]
    and "OPENAI_API_KEY" not in r["stdout"],
    "TCP to 127.0.0.1": lambda r: not r["ok"] and r["error"].startswith("ConnectionRefusedError"),
    "UDP to 127.0.0.1": lambda r: r["ok"] and r["stdout"] == "sent\n",
    "unix socket of the app": _no_such_file,
    "abstract unix socket": lambda r: not r["ok"] and r["error"].startswith("ConnectionRefusedError"),
    "DNS / the internet": lambda r: not r["ok"] and r["error"].startswith("URLError"),
    "fork bomb": lambda r: r["timed_out"] and "refused after" in r["stdout"]
    and int(r["stdout"].split()[2]) < (64 if r["uid"] == 0 else 1),
    "memory bomb": lambda r: r["memory_exceeded"] and not r["timed_out"],
    "2 GB to scratch": lambda r: not r["ok"] and ("No space left on device" in r["error"]
                                                   or "File too large" in r["error"]),
    # Without a cgroup (the unprivileged run) the fallback budget allows no second process at all.
    "setsid child outliving the timeout": lambda r: r["timed_out"] and r["stdout"] == "spawned\n"
    if r["uid"] == 0 else not r["ok"] and r["error"].startswith("BlockingIOError"),
    "signal the parent": lambda r: r["stdout"].splitlines()[0].endswith("No such process")
    and not r["ok"],  # the app's pid is not there; pid 1 (its parent) is the sandbox's own init
    "ctypes: kill, setuid, mount, unshare, ptrace": lambda r: r["ok"],
    "writes outside scratch": lambda r: r["ok"],
    "sqlite3 on the workspace": lambda r: not r["ok"]
    and r["error"].startswith("OperationalError: unable to open database file"),
    "the old audit-hook bypass": lambda r: "No such file or directory" in r["stdout"]
    and not r["ok"] and r["error"].startswith("FileNotFoundError") if r["uid"] == 0
    else not r["ok"] and r["error"].startswith("BlockingIOError"),  # the fallback: no subprocess at all
    "secret in an exception message": lambda r: not r["ok"] and r["error"].startswith("RuntimeError: leak: ["),
    "unshare(CLONE_NEWUSER)": lambda r: r["ok"] and r["stdout"] == "-1 1\n",
    "unshare(CLONE_NEWUSER|CLONE_NEWNS), uid_map, a 300 MB tmpfs": lambda r: r["ok"]
    and r["stdout"] == "unshare -1 1\n",
    "clone(CLONE_NEWUSER)": lambda r: r["ok"] and r["stdout"] == "-1 1\n",
    "clone3(CLONE_NEWUSER)": lambda r: r["ok"] and r["stdout"] == "-1 38\n",
    "the host's session keyring": lambda r: r["ok"] and r["stdout"].startswith("request_key -1 1\n")
    and all(line.split()[2:4] == ["-1", "1"] for line in r["stdout"].splitlines()[1:]),
    "io_uring, bpf, perf_event_open, userfaultfd, ptrace, personality": lambda r: r["ok"],
    "/proc is read-only": lambda r: r["ok"] and "30" in r["stdout"],
    "10 forked children of 400 MB each": lambda r: r["memory_exceeded"] and "9" in r["stdout"]
    if r["uid"] == 0 else r["stdout"].startswith("fork refused after 0"),
    "1.3 GB in memfds filled with write()": lambda r: r["ok"] and r["stdout"] == "refused 1\nheld 0\n",
    "1.2 GB in SysV shared memory, attached and detached": lambda r: r["ok"] and r["stdout"] == "refused 1\nheld 0\n",
    # Wrong, not errored: timed out on its own time with no load credit from its 61 processes, which shared one
    # CPU (the run's cgroup quota; before, both cores for 3x the timeout and "the machine was too busy").
    "a HumanEval answer forking 60 spinning children": lambda r: not r["ok"] and not r["overloaded"] and (
        r["timed_out"] and r["error"] == "timed out after 2s"
        and r["cpu_time"] <= r["elapsed"] * r["cpu_quota"] + 0.5 if r["uid"] == 0 else not r["timed_out"] and r["error"].startswith("BlockingIOError")),
}


def test_every_attack_has_an_expected_refusal():
    assert [a.name for a in ATTACKS] == list(EXPECT)


def _check(record: dict, expected_uid: int) -> None:
    name = record["name"]
    text = json.dumps(record)
    assert SECRET not in text and FAKE_KEY not in text, f"{name}: the secret reached what is sent back"
    assert record["uid"] == expected_uid and record["key_in_env"]  # the app runs on, as itself, with its key
    assert record["rows"] == 5 and record["secret_kept"], f"{name}: the app's data was touched"
    assert record["received"] == [], f"{name}: the app's sockets received {record['received']}"
    assert record["left_behind"] == 0, f"{name}: {record['left_behind']} process(es) outlived the sandbox"
    assert record["elapsed"] < next(a.timeout for a in ATTACKS if a.name == name) + 3
    assert EXPECT[name](record), f"{name}: expected {next(a.refusal for a in ATTACKS if a.name == name)}; " \
                                 f"got {record['error']!r} {record['stdout'][-500:]!r}"


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_contained_as_root(as_root, attack):
    _check(as_root[attack.name], 0)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_contained_as_an_unprivileged_user(as_nobody, attack):
    _check(as_nobody[attack.name], NOBODY)
