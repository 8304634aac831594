"""Words a stakeholder reads (issue #30, item 10): no table on any page shows a grey "None" where nothing was
measured; every dataframe / data_editor call (st.'s or a column's) names a dash as its placeholder for missing values."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "pages").glob("*.py")) + [REPO / "app.py"]


def _tables(path: Path) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("dataframe", "data_editor")
            and not (isinstance(n.func.value, ast.Name) and n.func.value.id == "at")]  # st., a column's, not AppTest


def test_every_table_shows_a_dash_for_missing_values():
    missing, seen = [], 0
    for path in SOURCES:
        for call in _tables(path):
            seen += 1
            kw = {k.arg: k.value for k in call.keywords}
            if not (isinstance(kw.get("placeholder"), ast.Constant) and kw["placeholder"].value == "—"):
                missing.append(f"{path.relative_to(REPO)}:{call.lineno}")
    assert seen >= 20, f"only {seen} tables found: the walk no longer sees the pages' st.dataframe calls"
    assert missing == [], f"tables that would show 'None' for a missing value: {missing}"
