"""The app runs with Streamlit's "magic" off (.streamlit/config.toml): a first view paid for rewriting every
script it ran, and no page relied on it. A bare expression in a page would now show nothing: none may be there."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
from streamlit.runtime.scriptrunner import magic

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


def test_magic_is_off_in_the_apps_config():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["magicEnabled"] is False


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_no_script_writes_a_bare_expression(path):
    """What magic would add to the script beyond its own import: the expressions it would have written."""
    source = path.read_text(encoding="utf-8")
    before = ast.unparse(ast.parse(source)).splitlines()
    after = [line for line in ast.unparse(magic.add_magic(source, str(path))).splitlines()
             if line != "import streamlit.runtime.scriptrunner.magic_funcs as __streamlitmagic__"]
    assert after == before, [line for line in after if line not in before][:5]
