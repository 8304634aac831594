"""The serving parts of the pages: a key made on Settings (shown once, its owner, revoke), Publish on the Editor,
a Run-page run storing its trace, and the Traces page listing, filtering and opening traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.workspace import keys, published, traces
from flowcore.workspace.store import Workspace

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "ws.db"
    monkeypatch.setenv("MERMAIDFLOW_DB", str(path))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "MERMAIDFLOW_CACHE"):
        monkeypatch.delenv(var, raising=False)
    return path


def page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    at.switch_page(f"pages/{name}.py").run()
    assert not at.exception, at.exception
    return at


def click(at: AppTest, key: str) -> None:
    at.button(key=key).click().run()
    assert not at.exception, at.exception


def test_a_key_made_on_settings_is_shown_once_and_can_be_revoked(db):
    at = page("settings")
    at.text_input(key="keys_name").input("laptop").run()
    click(at, "keys_create")
    [shown] = [c.value for c in at.code]
    rec = keys.verify_key(Workspace(db), shown)
    assert rec is not None and rec.owner == "laptop" and rec.name == "laptop"  # never "local" (the operator)
    at = page("settings")  # opened again: the key is not shown any more, only its row
    assert not [c.value for c in at.code if c.value == shown]
    at.selectbox(key="keys_revoke_pick").set_value(rec.id).run()
    click(at, "keys_revoke")
    assert keys.verify_key(Workspace(db), shown) is None


def test_publish_on_the_editor_adds_a_version(db):
    at = page("editor")
    assert not [t for t in at.text_input if t.key == "ed_publish_name"]  # built when the popover is opened
    at.session_state["ed_publish_pop"] = True
    at.run()
    at.text_input(key="ed_publish_name").input("served-solver").run()
    at.text_input(key="ed_publish_note").input("from the editor").run()
    click(at, "ed_publish_go")
    assert any("served-solver@v1" in s.value for s in at.success)
    p = published.resolve(Workspace(db), "served-solver")
    assert (p.model_id, p.note, p.created_by) == ("served-solver@v1", "from the editor", "local")
    click(at, "ed_publish_go")
    assert published.resolve(Workspace(db), "served-solver").version == 2


def test_a_run_page_run_stores_its_trace_and_the_traces_page_opens_it(endpoint, db):  # endpoint first: it clears MERMAIDFLOW_*
    endpoint("6*7 = 42, so \\boxed{42}")
    at = page("run")
    at.text_area(key="run_problem_text").input("What is 6 times 7?").run()
    click(at, "run_one")
    [t] = traces.list_traces(Workspace(db))
    assert (t.source, t.status, t.created_by, t.answer) == ("run-page", "ok", "local", "6*7 = 42, so \\boxed{42}")
    assert traces.load_trace(Workspace(db), t.id).spans[0].calls == 1
    at = page("traces")
    assert at.dataframe[0].value["trace"].tolist() == [t.id]
    assert at.dataframe[1].value["operator"].tolist() == ["Custom"]  # the operator as a stakeholder reads it (Run-page wording)
    assert at.text_area(key=f"tr_answer_{t.id}").value == t.answer


def test_the_traces_page_filters_by_workflow_and_version(db):
    ws = Workspace(db)
    for i, (name, version) in enumerate([("a", 1), ("a", 2), ("b", 1)]):
        traces.save_trace(ws, traces.Trace(f"{i:032x}", 100.0 + i, "api", name, version, "alice", "ok"))
    at = page("traces")
    assert len(at.dataframe[0].value) == 3
    at.selectbox(key="tr_workflow").set_value("a").run()
    assert at.dataframe[0].value["workflow"].tolist() == ["a@v2", "a@v1"]
    at.selectbox(key="tr_version").set_value(1).run()
    assert at.dataframe[0].value["workflow"].tolist() == ["a@v1"]


def test_a_traces_error_is_shown_as_text_not_as_a_link(db):
    """A run's error can quote what an endpoint, a model or a program said. Before, the Traces page showed it as
    markdown (a failed request whose error read ``[Sign in again](https://evil.example/login)`` became a link in
    the operator's red error panel), and the timeline drew a node's error as plotly HTML (``<a href>`` a link)."""
    lure = "[Sign in again](https://evil.example/login) **now** <a href='https://evil.example'>x</a>"
    ws = Workspace(db)
    traces.save_trace(ws, traces.Trace("f" * 32, 100.0, "api", "solver", 1, "mallory", "error", error=lure,
                                       spans=[traces.Span("answer", "CustomOp", error=lure)]))
    at = page("traces")
    [shown] = [e.value for e in at.error]
    assert "](" not in shown.replace("\\](", "") and "**" not in shown.replace("\\*\\*", "")
    assert "Sign in again" in shown and "evil" in shown  # all of it is there, as text
    chart = at.get("plotly_chart")[0].proto.spec
    assert "<a " not in chart and "&lt;a href" in chart  # plotly draws the entity as the '<' typed
