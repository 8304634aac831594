"""Characters ``str.splitlines`` ends a line at but Mermaid 11 does not: U+2028, U+2029, U+0085, '\\v', '\\f',
'\\x1c'-'\\x1e'. Mermaid ends a line at '\\n' ('\\r\\n' and '\\r' become one), so a '%%' comment holding one of them
runs on to the '\\n': a '%% @prompt' keeps all of its text, and the diagnostics and the Editor count one line there.
Each text is checked against the bundled Mermaid 11 (tests/helpers/mermaid_oracle.py)."""

from __future__ import annotations

import re

import pytest

from flowcore import check, parse, parse_lenient, to_mermaid
from flowcore.ui import canvas as cv
from tests.helpers.mermaid_oracle import agrees, rejected_at

SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
IDS = [f"U+{ord(s):04X}" for s in SEPARATORS]


def _editor_rows(text: str) -> list[str]:
    """The lines as the Editor (Ace) and Mermaid count them."""
    return re.split(r"\r\n|\r|\n", text)


@pytest.mark.parametrize("sep", SEPARATORS, ids=IDS)
def test_a_prompt_keeps_its_text_past_a_line_separator(sep):
    """Before, the prompt was cut at the separator: 'Solve it.' alone."""
    prompt = f"Solve it.{sep}Then B --> C, and check it."
    text = f'flowchart TD\n    %% @prompt solver: {prompt}\n    A["Custom (role: solver)"] --> B\n'
    agrees(text)  # Mermaid 11 draws A --> B only (the rest of the line is comment), as the reader reads it; fmt safe
    w = parse(text)
    assert w.prompts == {"solver": prompt} and not w.extras
    assert parse(to_mermaid(w)).prompts == {"solver": prompt}  # printed and read back whole


@pytest.mark.parametrize("sep", SEPARATORS, ids=IDS)
def test_a_comment_with_a_line_separator_is_kept_whole_by_fmt(sep):
    text = f"flowchart TD\n    %% a note{sep}A --> B is no edge\n    C --> D\n"
    agrees(text)
    assert parse(text).extras == [f"%%early %% a note{sep}A --> B is no edge"]


def test_a_prompt_with_a_carriage_return_is_printed_on_one_comment_line():
    """Mermaid ends a line at '\\r' too: printed raw, the rest of the prompt became a statement (a parse error)."""
    w = parse("flowchart TD\n    A --> B\n")
    w.prompts["solver"] = "First line.\r\nSecond line.\rThird (x) --> y."
    out = to_mermaid(w)
    agrees(out)
    assert parse(out).prompts == {"solver": "First line.\nSecond line.\nThird (x) --> y."}
    assert cv.set_prompt_text("flowchart TD\n    A --> B\n", "solver", "a\rb").count("\r") == 0


@pytest.mark.parametrize("sep", SEPARATORS, ids=IDS)
def test_a_diagnostic_after_a_line_separator_names_the_editors_line_and_column(sep):
    """The subgraph opened on line 3 is not closed: Mermaid names the line only, and the column is the first
    non-blank of that line. Before, it was taken from the line str.splitlines numbered 3 ('Check it.', column 1)."""
    text = f"flowchart TD\n    %% @prompt solver: Solve it.{sep}Check it.\n    subgraph X\n      A --> B\n"
    rejected_at(text, 3)
    for diags in (parse_lenient(text)[1], check(text)):  # the reader's and the Editor's (the checker's) diagnostics
        d = next(d for d in diags if d.code == "M001")
        assert (d.line, d.column) == (3, 5), d
        mark = cv.annotations([d])[0]  # Ace's gutter mark: 0-based row and column
        assert _editor_rows(text)[mark["row"]][mark["column"]:].startswith("subgraph X")
