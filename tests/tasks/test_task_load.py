"""Reading a task is cheap and still names every bad row up front (issue 26's load target, benchmarks/task_cost.py):
the number check is two C scans instead of a parse, a plain .jsonl file goes through json's C scanner, and
neither may accept, reject or number anything differently from the slow, exact path."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore.tasks import DataError, read_task
from flowcore.tasks.metrics import _has_number, _number
from flowcore.tasks.rows import _jsonl, _jsonl_lines


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789.,-$ ax_\u2212\u00b2\u0663\n", max_size=16))
def test_the_cheap_number_check_agrees_with_the_parse(text):
    assert _has_number(text) == (_number(text) is not None)


@pytest.mark.parametrize("text", ["9" * 308, "9" * 309, "9" * 400, "x " + "9" * 400 + " and 5", "9" * 400 + " cats",
                                  ",".join(["999"] * 110), "#### 72", "a1", "1.2.3", "-.5", "$-3", "v2 and x.5"])
def test_the_cheap_number_check_agrees_on_long_and_odd_numbers(text):
    assert _has_number(text) == (_number(text) is not None)


def _rows(n: int) -> list[dict]:
    return [{"question": f"What is {i} + {i}? Show the steps and finish with the number.", "answer": f"#### {2 * i}"}
            for i in range(n)]


def _task(tmp_path, lines: list[str]):
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "t.toml").write_text('name = "sums"\nkind = "math"\ndata = "rows.jsonl"\nproblem = "question"\n'
                                     'reference = "answer"\nmetric = "number"\n')
    return tmp_path / "t.toml"


@pytest.mark.parametrize("row,expected", [
    ({"question": "q", "answer": "n/a"}, r"rows.jsonl: line 317: field 'answer': 'n/a' is not a number"),
    ({"question": "q", "answer": "  "}, r"rows.jsonl: line 317: field 'answer' is empty"),
    ({"question": "q"}, r"rows.jsonl: line 317: field 'answer' is empty"),
    ({"answer": "4"}, r"rows.jsonl: line 317: field 'question' is missing"),
])
def test_a_bad_row_of_a_large_file_is_named_when_the_task_is_read(tmp_path, row, expected):
    lines = [json.dumps(r) for r in _rows(500)]
    assert read_task(_task(tmp_path, lines)).sizes()["rows"] == 500
    lines[316] = json.dumps(row)
    with pytest.raises(DataError, match=expected):
        read_task(_task(tmp_path, lines))


PLAIN = [json.dumps(r) for r in _rows(40)]


@pytest.mark.parametrize("text", [
    "\n".join(PLAIN) + "\n",
    "\n".join(PLAIN),
    "\r\n".join(PLAIN) + "\r\n",
    "\n".join(PLAIN[:5] + [""] + PLAIN[5:]) + "\n",  # a blank line: later rows keep their own line numbers
    "\n".join(PLAIN[:5] + ["   "] + PLAIN[5:]),
    "\n" + "\n".join(PLAIN),
    "\n".join(PLAIN[:5] + ["  " + PLAIN[5] + "  "] + PLAIN[6:]),  # spaces around an object
    "\n".join(PLAIN[:5] + [PLAIN[5] + ", " + PLAIN[6]] + PLAIN[7:]),  # two objects on one line
    "\n".join(PLAIN[:5] + ['{"question": "a", "answer": [1', '2]}'] + PLAIN[5:]),  # one object over two lines
    "\n".join(PLAIN[:5] + ["[1, 2]"] + PLAIN[5:]),  # not an object
    "\n".join(PLAIN[:5] + ['{"question": "a", "answer": }'] + PLAIN[5:]),  # broken JSON
    "\n".join(PLAIN[:5] + [PLAIN[5] + "\u00a0"] + PLAIN[6:]),  # no JSON whitespace after the object
])
def test_the_fast_jsonl_reader_reads_or_refuses_exactly_as_the_line_reader(text):
    def outcome(read):
        try:
            t = read(text, "rows.jsonl")
        except DataError as exc:
            return str(exc)
        return t.rows, t.lines, t.columns

    assert outcome(_jsonl) == outcome(_jsonl_lines)


def test_a_plain_file_takes_the_fast_path(monkeypatch):
    import flowcore.tasks.rows as rows

    def slow(text, name):
        raise AssertionError("the line-by-line reader ran")

    monkeypatch.setattr(rows, "_jsonl_lines", slow)
    for text in ("\n".join(PLAIN) + "\n", "\r\n".join(PLAIN)):
        assert rows._jsonl(text, "rows.jsonl").lines == list(range(1, 41))
