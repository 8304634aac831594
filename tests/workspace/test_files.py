"""No write follows a symlink: every file the command line writes goes through flowcore.workspace.files.write_file (temp
file in the target folder + rename), and a link planted at the target is refused by name (issue 17.5)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore.evolution.ops import MUTATIONS
from flowcore.workspace.files import SymlinkRefused, write_file

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "assets" / "examples" / "math_seed.mmd"
SECRET = "do not overwrite me\n"


def flowcore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowcore", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.fixture
def secret(tmp_path) -> Path:
    p = tmp_path / "secret.txt"
    p.write_text(SECRET)
    p.chmod(0o600)
    return p


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def untouched(secret: Path, link: Path) -> None:
    assert secret.read_text() == SECRET and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert link.is_symlink()  # the planted link is left as it was, for the user to look at
    assert not [p for p in link.parent.iterdir() if p.name.endswith(".part")]  # no temp file left behind


def test_write_file_refuses_a_link_to_a_file_and_a_dangling_one(tmp_path, secret):
    link = plant(tmp_path / "out.py", secret)
    with pytest.raises(SymlinkRefused, match=r"out\.py: is a symbolic link \(to .*secret\.txt\)"):
        write_file(link, "x = 1\n")
    untouched(secret, link)
    dangling = plant(tmp_path / "new.py", tmp_path / "nowhere" / "created.py")
    with pytest.raises(SymlinkRefused):
        write_file(dangling, b"x")
    assert not (tmp_path / "nowhere").exists()


def test_write_file_replaces_a_file_by_rename_keeping_its_mode(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("old")
    p.chmod(0o640)
    inode = p.stat().st_ino
    write_file(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o640
    assert p.stat().st_ino != inode  # a new file renamed into place, not the old one rewritten
    fresh = write_file(tmp_path / "b.txt", "é")
    assert fresh.read_bytes() == "é".encode() and stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~_umask()
    with pytest.raises(IsADirectoryError):
        write_file(tmp_path, "x")


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_export_out_refuses_a_planted_link(tmp_path, secret):
    link = plant(tmp_path / "out" / "math_seed.py", secret)
    p = flowcore("export", str(SEED), "--task", "math", "--out", str(tmp_path / "out"), "--formats", "py,mmd")
    assert p.returncode == 2, p.stderr
    assert f"{link}: cannot write (is a symbolic link (to {secret})" in p.stderr and "Traceback" not in p.stderr
    untouched(secret, link)


def test_compile_o_refuses_a_planted_link(tmp_path, secret):
    link = plant(tmp_path / "flow.py", secret)
    p = flowcore("compile", str(SEED), "--task", "math", "-o", str(link))
    assert p.returncode == 2 and "is a symbolic link" in p.stderr and "Traceback" not in p.stderr, p.stderr
    untouched(secret, link)


def test_split_o_refuses_a_planted_link_even_with_force(tmp_path, secret):
    link = plant(tmp_path / "split.json", secret)
    p = flowcore("split", "--benchmark", "gsm8k", "-o", str(link), "--force")
    assert p.returncode == 2 and "is a symbolic link" in p.stderr, p.stderr
    untouched(secret, link)
    dangling = plant(tmp_path / "split2.json", tmp_path / "made.json")  # exists() is False for a dangling link
    p = flowcore("split", "--benchmark", "gsm8k", "-o", str(dangling))
    assert p.returncode == 2 and "is a symbolic link" in p.stderr and not (tmp_path / "made.json").exists()


def test_mutate_out_refuses_a_planted_link(tmp_path, secret):
    out = tmp_path / "kids"
    links = [plant(out / f"math_seed_001_{op}.mmd", secret) for op in MUTATIONS]  # whichever child comes first
    p = flowcore("mutate", str(SEED), "--task", "math", "--n", "1", "--out", str(out))
    assert p.returncode == 2 and "is a symbolic link" in p.stderr and "Traceback" not in p.stderr, p.stderr
    for link in links:
        untouched(secret, link)
