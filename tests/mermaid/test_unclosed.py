"""An unclosed label, bracket or quote is reported where it was opened, with Mermaid's own position kept as a
second note (flowcore/mermaid/unclosed.py, through the reader and the hard check)."""

from __future__ import annotations

import pytest

from flowcore.checker.check import check
from flowcore.mermaid.unclosed import opener
from flowcore.workspace import library

GSM8K = dict((n, t) for n, _, t in library.examples())["gsm8k_case_study"]


def _with(line: int, row: str) -> str:
    rows = GSM8K.splitlines()
    rows[line - 1] = row
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("line, row, at, what, mermaid_line", [
    (20, "    PROBLEM -->|problem P1 & P2 & P3 & P4 & P5", (20, 16), "edge label opened here with '|'", 21),
    (6, '    C1["Custom<br/>(role: step_by_step)', (6, 8), "quote opened here with '\"'", 7),
    (12, '    E1{"ScEnsemble"', (12, 7), "brace opened here with '{'", 12),
    (26, "    C2 -->|x RETURN", (26, 11), "edge label opened here with '|'", 26),
    (20, '    PROBLEM -- "problem --> P1', (20, 16), "quote opened here with '\"'", 20),
])
def test_the_error_is_where_the_label_bracket_or_quote_was_opened(line, row, at, what, mermaid_line):
    text = _with(line, row)
    (d,) = [d for d in check(text, "math") if d.code == "M001"]
    assert (d.line, d.column) == at and what in d.message
    assert d.mermaid_at[0] == mermaid_line and f"Mermaid's own position: line {mermaid_line}" in d.message
    assert d.to_dict()["mermaid_at"][0] == mermaid_line
    hard = [x for x in check(text, "math", hard=True) if x.code == "M001"]
    assert [(x.line, x.column) for x in hard] == [at]  # Mermaid 11's own verdict lands on the same line: one


@pytest.mark.parametrize("text, line", [
    ("flowchart TD\n  PROBLEM([Problem])\n  C1[Custom (role: x)]\n", 3),  # an error inside a closed bracket
    ("flowchart TD\n  PROBLEM -->|problem| P1 &\n", 2),  # a dangling '&': nothing is open
    ("flowchart TD\n  A -> B\n", 2),
])
def test_other_errors_stay_where_mermaid_puts_them(text, line):
    (d,) = [d for d in check(text, "math") if d.code == "M001"]
    assert d.line == line and d.mermaid_at is None and "opened here" not in d.message


def test_a_multi_line_quoted_label_that_closes_is_not_blamed():
    text = 'flowchart TD\n  A["two\n  lines"] --> B\n  B --> C -> D\n'
    assert opener(text, 4, 12) is None  # the quote closed on line 3, before the error's line
    assert opener(text, None, None) is None
    assert opener("---\ntitle: \"x\n---\nflowchart TD\n  A[\n", 5, 5).line == 5  # front matter is skipped
