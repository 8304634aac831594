"""Data files are read as a bounded stream (issue 25.6): a 199 KB .jsonl.gz holding 200 MB of newlines took the
Run page's upload path to 1.9 GB RSS; now reading stops at the decompressed-size cap with a message naming the file
and the cap, and the process stays small. Line numbers and rows are those of the file, chunk boundaries or not."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore.evaluation.store import problems_from_upload
from flowcore.tasks import data
from flowcore.tasks.data import DataError

ROOT = Path(__file__).resolve().parents[2]

_UPLOAD = r'''
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from flowcore.evaluation.store import problems_from_upload
blob = open(sys.argv[2], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
t = time.monotonic()
try:
    problems_from_upload("math", "bomb.jsonl.gz", blob)
    error = None
except ValueError as exc:
    error = str(exc)
print(json.dumps({"error": error, "seconds": time.monotonic() - t, "before_mb": before,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
'''


def test_a_gzip_bomb_upload_stops_at_the_cap_and_the_process_stays_small(tmp_path):
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(200):
            f.write(b"\n" * (1 << 20))  # 200 MB of newlines, written a megabyte at a time
    assert bomb.stat().st_size < 250_000  # the 199 KB file
    p = subprocess.run([sys.executable, "-c", _UPLOAD, str(ROOT), str(bomb)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.splitlines()[-1])
    print(got)
    assert got["error"] == ("bomb.jsonl.gz: more than 50 MB once decompressed (the limit for a data file; "
                            "MERMAIDFLOW_MAX_DATA_MB sets it)"), got
    assert got["peak_mb"] - got["before_mb"] < 60, got  # was 1,876 MB peak


def _rows(n: int) -> list[dict]:
    return [{"problem": f"What is {i} + 1?", "solution": f"It is \\boxed{{{i + 1}}}."} for i in range(n)]


def test_rows_and_line_numbers_survive_the_stream(tmp_path):
    # blank lines, a BOM, a row straddling the 1 MB read size, and an unterminated last line
    filler = {"problem": "x" * (1 << 20), "solution": "\\boxed{1}"}
    lines = ["", json.dumps(_rows(1)[0]), "   ", json.dumps(filler), "", json.dumps(_rows(3)[2])]
    path = tmp_path / "rows.jsonl"
    path.write_text("\ufeff" + "\n".join(lines), encoding="utf-8")
    got = data._read_rows(path)
    assert [n for n, _ in got] == [2, 4, 6] and got[2][1]["problem"] == "What is 2 + 1?"
    path.write_text("\n".join(lines[:4] + ["{not json"] + lines[5:]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"rows.jsonl: line 5, column 2: invalid JSON"):
        data._read_rows(path)
    gz = tmp_path / "rows.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in _rows(40)))
    assert len(problems_from_upload("math", "rows.jsonl.gz", gz.read_bytes())) == 40
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps(_rows(5)))
    assert [n for n, _ in data._read_rows(listed)] == [1, 2, 3, 4, 5]


def test_the_cap_is_a_setting_and_a_json_list_is_capped_too(tmp_path, monkeypatch):
    monkeypatch.setenv("MERMAIDFLOW_MAX_DATA_MB", "1")
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_rows(30_000)))  # ~2 MB
    with pytest.raises(DataError, match=r"big.json: more than 1 MB once decompressed"):
        data._read_rows(path)
    monkeypatch.setenv("MERMAIDFLOW_MAX_DATA_MB", "lots")
    with pytest.raises(DataError, match="MERMAIDFLOW_MAX_DATA_MB='lots' is not a number"):
        data._read_rows(path)
    monkeypatch.delenv("MERMAIDFLOW_MAX_DATA_MB")
    assert len(data._read_rows(path)) == 30_000


_TASK_ROWS = r'''
import gzip, json, resource, sys
sys.path.insert(0, sys.argv[1])
from flowcore.tasks.rows import read_table
blob = gzip.compress(b"\n" * (49 << 20) + b'{"q": "x"}\n', 9)  # just under the 50 MB cap: read, not refused
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
table = read_table(blob, "rows.jsonl.gz")
print(json.dumps({"rows": len(table.rows), "line": table.lines[0], "before_mb": before,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
'''


def test_a_task_file_of_newlines_under_the_cap_is_read_without_a_line_list():
    # The task files' reader (flowcore/tasks/rows.py) holds the text, but no longer a list of its 49 million lines
    p = subprocess.run([sys.executable, "-c", _TASK_ROWS, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["rows"] == 1 and got["line"] == (49 << 20) + 1, got
    assert got["peak_mb"] - got["before_mb"] < 200, got  # was +400 MB for the line list alone
