"""Hostile data files (attacks a09, a10 of issue 25's fresh attacker): JSON nested past the decoder's recursion
limit, integers past Python's 4,300-digit limit and a CSV header of tens of thousands of columns. Before: a
RecursionError or ValueError out of the reader (a traceback on the Tasks page, a bare "RecursionError" from
`task check`), and a quadratic duplicate-column check (40,000 columns: 42 s). Now each is a DataError naming the
file and the line, the same through the task reader, the benchmark reader and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcore.tasks import data
from flowcore.tasks.data import DataError
from flowcore.tasks.rows import MAX_COLUMNS, read_table

ROOT = Path(__file__).resolve().parents[2]
BIG = b"9" * 5000


@pytest.mark.parametrize("name,blob,where", [
    ("deep.json", b"[" * 200_000, "deep.json: line 1, column 501"),
    ("deep.jsonl", b'{"q": 1}\n' + b'{"a":' * 200_000 + b"\n", "deep.jsonl: line 2, column 2501"),
    ("deep.json", b'[{"q": "[[[["},\n{"q": ' + b"[" * 200_000 + b"]", "deep.json: line 2, column 505"),
])
def test_json_nested_too_deeply_is_a_data_error_naming_the_line(name, blob, where):
    with pytest.raises(DataError) as exc:
        read_table(blob, name)
    assert str(exc.value).startswith(where + ": JSON nested too deeply"), exc.value


@pytest.mark.parametrize("name,blob,where", [
    ("big.jsonl", b'{"q": "x", "a": ' + BIG + b'}\n{"q": "y", "a": 1}\n', "big.jsonl: line 1, column 17"),
    ("big.jsonl", b'{"q": "1"}\n\n{"q": "' + BIG + b'", "a": -' + BIG + b"}\n", "big.jsonl: line 3, column 5016"),
    ("big.json", b'[{"q": "x"},\n {"q": 1, "a": ' + BIG + b"}]", "big.json: line 2, column 16"),
])
def test_an_integer_past_the_digit_limit_is_a_data_error_naming_the_line(name, blob, where):
    with pytest.raises(DataError) as exc:
        read_table(blob, name)
    assert str(exc.value).startswith(where + ": a number of more than 4300 digits"), exc.value


def test_a_long_number_in_a_string_is_read():
    table = read_table(b'{"q": "' + BIG + b'", "a": 1}\n', "ok.jsonl")
    assert table.rows[0]["q"] == BIG.decode()


def test_the_benchmark_reader_names_file_and_line_too(tmp_path):
    (tmp_path / "deep.jsonl").write_bytes(b'{"problem": "1", "solution": "\\\\boxed{1}"}\n' + b"[" * 200_000)
    with pytest.raises(DataError, match=r"deep.jsonl: line 2, column 501: JSON nested too deeply"):
        data.read_problems("math", tmp_path / "deep.jsonl")
    (tmp_path / "big.json").write_bytes(b'[{"question": 1, "answer": ' + BIG + b"}]")
    with pytest.raises(DataError, match=r"big.json: line 1, column 28: a number of more than 4300 digits"):
        data.read_problems("gsm8k", tmp_path / "big.json")


def test_task_check_names_the_file_and_line_of_deep_json(tmp_path):
    (tmp_path / "rows.json").write_bytes(b"[" * 200_000)
    (tmp_path / "t.toml").write_text('name = "t"\nkind = "text"\ndata = "rows.json"\nproblem = "q"\n'
                                     'reference = "a"\nmetric = "exact"\n')
    p = subprocess.run([sys.executable, "-m", "flowcore", "task", "check", str(tmp_path / "t.toml")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "rows.json: line 1, column 501: JSON nested too deeply" in p.stderr
    assert "Traceback" not in p.stderr and "RecursionError" not in p.stderr


def _csv(columns: list[str]) -> bytes:
    return (",".join(columns) + "\n" + ",".join("x" for _ in columns) + "\n").encode()


def test_a_header_at_the_column_cap_is_read_and_one_past_it_is_refused():
    table = read_table(_csv([f"c{i}" for i in range(MAX_COLUMNS)]), "wide.csv")
    assert len(table.columns) == MAX_COLUMNS
    with pytest.raises(DataError, match=rf"^wide.csv: line 1: the header has {MAX_COLUMNS + 1} columns, more than "
                                        rf"{MAX_COLUMNS}"):
        read_table(_csv([f"c{i}" for i in range(MAX_COLUMNS + 1)]), "wide.csv")


def test_a_header_of_40000_columns_is_refused_at_once():
    blob = b"\n\n" + _csv(["q", "a", *(f"c{i}" for i in range(40_000))])
    t = time.process_time()
    with pytest.raises(DataError, match=r"^wide.csv: line 3: the header has 40002 columns"):
        read_table(blob, "wide.csv")
    assert time.process_time() - t < 1.0  # was 42 s of CPU


def test_a_duplicate_column_is_still_named_at_the_end_of_a_full_header():
    cols = [f"c{i}" for i in range(MAX_COLUMNS)]
    cols[-1] = "c3"
    with pytest.raises(DataError, match=r"^dup.csv: line 1: column 'c3' is named twice in the header"):
        read_table(_csv(cols), "dup.csv")


def test_json_rows_with_too_many_fields_name_the_row_that_passes_the_cap():
    rows = "".join(json.dumps({"q": 1, f"k{i}": 1}) + "\n" for i in range(MAX_COLUMNS + 200))
    with pytest.raises(DataError, match=rf"^w.jsonl: line {MAX_COLUMNS}: the rows have {MAX_COLUMNS + 201} "
                                        rf"different fields, more than {MAX_COLUMNS}"):
        read_table(rows.encode(), "w.jsonl")
