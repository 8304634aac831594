"""Untrusted text on the Run and Tasks pages, under AppTest (attacks a05, a06, a09 of issue 25's fresh attacker):

- an endpoint answering 400 with a markdown image: "The run failed: …" quoted it raw, so the browser fetched it;
- an uploaded CSV whose header names a markdown image: the rows caption quoted it raw;
- a .json/.jsonl upload nested past the decoder's recursion limit: a RecursionError traceback on the Tasks page.

Now the error and the caption carry the text escaped (shown as typed, nothing to load), and the deep upload is a
"Cannot read" error naming the file and line. The browser counterpart (no request reaches a listener) is
tests/browser/test_untrusted_alerts.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.mermaid import safe
from tests.helpers.fakellm import FakeLLMServer, Fault

ROOT = Path(__file__).resolve().parents[2]
BEACON = "![x](http://198.51.100.7/beacon.png)"


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    for k in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MERMAIDFLOW_DB", str(tmp_path / "ws.db"))
    monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")


def tasks_page(name: str, data: bytes) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("pages/tasks.py")
    at.session_state["tk_source"] = (name, data)
    return at.run()


def test_the_endpoints_error_is_escaped_in_the_run_failed_alert(monkeypatch):
    with FakeLLMServer(Fault(status=400, body=f"bad request {BEACON}")) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        at = AppTest.from_file(str(ROOT / "pages" / "run.py"), default_timeout=60).run()
        at.text_area(key="run_problem_text").input("What is 6 times 7?")
        at.button(key="run_one").click().run()
    failed = [e.value for e in at.error if e.value.startswith("The run failed: ")]
    assert len(failed) == 1, [e.value for e in at.error]
    assert BEACON not in failed[0]  # raw, it was an image the browser fetched
    assert safe.plain(BEACON) in failed[0]  # shown as typed


def test_column_names_are_escaped_in_the_rows_caption():
    at = tasks_page("rows.csv", f"country,{BEACON},capital\nFrance,1,Paris\nSpain,2,Madrid\n".encode())
    caption = [c.value for c in at.caption if "rows · columns:" in c.value]
    assert caption == [f"2 rows · columns: country, {safe.plain(BEACON)}, capital"], [c.value for c in at.caption]


@pytest.mark.parametrize("name,data,where", [
    ("deep.json", b"[" * 200_000, "line 1, column 501"),
    ("deep.jsonl", b'{"a":' * 200_000 + b"\n", "line 1, column 2501"),
    ("big.jsonl", b'{"q": "x", "a": ' + b"9" * 5000 + b"}\n", "line 1, column 17"),
])
def test_a_hostile_json_upload_is_named_not_a_traceback(name, data, where):
    at = tasks_page(name, data)
    assert not at.exception, [e.value for e in at.exception][:1]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(f"**Cannot read {name}**: {name}: {where}: "), errors
