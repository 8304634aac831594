"""Settings: the saved public LLM settings, the session-only API key (never on disk), the connection test."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.llm.client import LLMSettings
from flowcore.workspace import settings as store
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault

APP = str(Path(__file__).resolve().parents[2] / "app.py")
SECRET = "sk-test-NEVER-ON-DISK-8c1f7e"


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "ws.db"
    monkeypatch.setenv("MERMAIDFLOW_DB", str(path))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "MERMAIDFLOW_BUDGET_USD"):
        monkeypatch.delenv(var, raising=False)
    return path


def settings_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/settings.py").run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Settings"]
    return at


def submit(at: AppTest, label: str) -> None:
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, at.exception


def disk_bytes(db: Path) -> bytes:
    """Everything SQLite may have written: the database, its write-ahead log and shared memory."""
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


def texts(elements) -> list[str]:
    return [e.value for e in elements]


def test_without_an_endpoint_the_page_says_so_plainly(db):
    at = settings_page()
    assert any("No LLM endpoint is configured" in i for i in texts(at.info))
    assert any("LLM endpoint: not configured" in c for c in texts(at.sidebar.caption))
    submit(at, "Test connection")
    assert any("No endpoint to test" in w for w in texts(at.warning))


def test_saved_settings_come_back_and_the_typed_key_never_reaches_the_disk(db):
    with FakeLLMServer("OK") as fake:
        at = settings_page()
        at.text_input(key="set_key_input").set_value(SECRET).run()
        assert at.session_state["llm_api_key"] == SECRET
        at.text_input(key="set_url").set_value(fake.base_url)
        at.text_input(key="set_model_judge").set_value("judge-model-x")
        at.number_input(key="set_budget").set_value(2.5)
        at.number_input(key="set_concurrency").set_value(3)
        at.number_input(key="set_cap_judge").set_value(300)
        at.number_input(key="set_context").set_value(2048)
        at.checkbox(key="set_stream").check()
        submit(at, "Save settings")
        assert any("Saved to the workspace" in s for s in texts(at.success)), texts(at.error)
        assert any(fake.base_url in c for c in texts(at.caption))  # this session shows the new endpoint at once
        submit(at, "Test connection")
        assert any("The endpoint answered" in s and "OK" in s for s in texts(at.success)), texts(at.error)
        assert fake.headers[-1].get("authorization") == f"Bearer {SECRET}"  # the session key was used
        assert fake.requests[-1]["model"] == "gpt-4o-mini"  # the executor's model
        assert fake.requests[-1]["stream"] is True and fake.requests[-1]["max_tokens"] == 8  # streamed, capped

        fresh = settings_page()  # a new browser session: saved settings are back, the key is not
        assert fresh.text_input(key="set_url").value == fake.base_url
        assert fresh.text_input(key="set_model_judge").value == "judge-model-x"
        assert fresh.number_input(key="set_budget").value == 2.5
        assert fresh.number_input(key="set_cap_judge").value == 300 and fresh.checkbox(key="set_stream").value
        assert "llm_api_key" not in fresh.session_state
        assert any(fake.base_url in c for c in texts(fresh.sidebar.caption))

    saved = store.load_llm_settings(Workspace(db))
    assert saved["base_url"] == fake.base_url and saved["models"]["judge"] == "judge-model-x"
    assert saved["budget_usd"] == 2.5 and saved["concurrency"] == 3
    assert saved["max_tokens"]["judge"] == 300 and saved["context_tokens"] == 2048 and saved["stream"] is True
    raw = disk_bytes(db)
    assert b"judge-model-x" in raw  # the check below looks at the right bytes
    assert SECRET.encode() not in raw and SECRET.encode("utf-16-le") not in raw


def test_a_failing_endpoint_is_reported_without_a_traceback_or_the_key(db):
    with FakeLLMServer(Fault(status=401, body="invalid api key")) as fake:
        at = settings_page()
        at.text_input(key="set_key_input").set_value(SECRET).run()
        at.text_input(key="set_url").set_value(fake.base_url)
        submit(at, "Test connection")
    errors = texts(at.error)
    assert any(e.startswith("Connection test failed") and "401" in e for e in errors), errors
    assert not any(SECRET in e for e in errors)


def test_forgetting_the_key(db):
    at = settings_page()
    at.text_input(key="set_key_input").set_value(SECRET).run()
    assert any("key typed here is in use" in c for c in texts(at.caption))
    at.button(key="set_forget").click().run()
    assert "llm_api_key" not in at.session_state
    assert any("No key set" in c for c in texts(at.caption))


def test_a_bad_value_is_refused_with_a_message(db):
    at = settings_page()
    at.text_input(key="set_model_optimizer").set_value("")
    at.text_input(key="set_url").set_value("http://127.0.0.1:9/v1")
    at.number_input(key="set_timeout").set_value(5.0)
    submit(at, "Save settings")
    assert store.load_llm_settings(Workspace(db))["models"]["optimizer"] == "gpt-4o-mini"  # blank -> default


# -- settings_store -----------------------------------------------------------------------------------------

def test_store_strips_secret_fields_and_url_credentials(tmp_path):
    ws = Workspace(tmp_path / "s.db")
    public = LLMSettings(base_url="https://user:pw@example.test/v1?api-version=2&key=abc", api_key=SECRET)
    stored = store.save_llm_settings(ws, {**public.to_public_dict(), "api_key": SECRET, "token": "t"},
                                     secret=SECRET)
    assert "api_key" not in stored and "token" not in stored
    assert stored["base_url"] == "https://example.test/v1?api-version=2"
    assert store.load_llm_settings(ws) == stored
    assert LLMSettings.from_public_dict(stored).api_key is None
    raw = disk_bytes(tmp_path / "s.db")
    assert SECRET.encode() not in raw and b"pw@" not in raw


def test_store_refuses_a_save_that_would_contain_the_key(tmp_path):
    ws = Workspace(tmp_path / "s.db")
    with pytest.raises(store.SettingsError, match="never stored"):
        store.save_llm_settings(ws, {"base_url": None, "models": {"judge": SECRET}}, secret=SECRET)
    assert store.load_llm_settings(ws) is None
    store.save_llm_settings(ws, {"timeout": 5.0})
    store.clear_llm_settings(ws)
    assert store.load_llm_settings(ws) is None


def test_price_rows_from_the_grid():
    rows = [{"model": "m1", "input": 1, "output": "2.5"}, {"model": None, "input": math.nan, "output": None},
            {"model": " m2 ", "input": 0, "output": 0}]
    assert store.prices_from_rows(rows) == {"m1": (1.0, 2.5), "m2": (0.0, 0.0)}
    for bad, why in (([{"model": "m", "input": 1, "output": math.nan}], "both an input and an output"),
                     ([{"model": "m", "input": -1, "output": 1}], "negative"),
                     ([{"model": "m", "input": "x", "output": 1}], "must be numbers"),
                     ([{"model": "", "input": 1, "output": 1}], "without a model"),
                     ([{"model": "m", "input": 1, "output": 1}] * 2, "listed twice")):
        with pytest.raises(store.SettingsError, match=why):
            store.prices_from_rows(bad)


@pytest.mark.parametrize("url, why", [
    ("127.0.0.1:8000/v1", "must start with http:// or https://"),
    ("ftp://example.test/v1", "must start with http:// or https://"),
    ("http://127.0.0.1:99999/v1", "Port out of range"),
    ("http://[::1/v1", "Invalid IPv6 URL"),
    ("http:///v1", "names no valid host"),
])
def test_a_bad_endpoint_url_is_refused_naming_it_and_keeps_the_saved_one(db, url, why):
    store.save_llm_settings(Workspace(db), {"base_url": "http://127.0.0.1:9/v1"})
    at = settings_page()
    at.text_input(key="set_url").set_value(url)
    submit(at, "Save settings")  # no traceback (a port out of range used to crash the page)
    assert any("endpoint URL" in e and repr(url) in e and why in e for e in texts(at.error)), texts(at.error)
    assert store.load_llm_settings(Workspace(db))["base_url"] == "http://127.0.0.1:9/v1"


def test_endpoint_url_spaces_are_trimmed_and_blank_model_names_mean_the_default(db):
    at = settings_page()
    at.text_input(key="set_url").set_value("  http://127.0.0.1:9/v1 ")
    at.text_input(key="set_model_executor").set_value("   ")
    submit(at, "Save settings")
    saved = store.load_llm_settings(Workspace(db))
    assert saved["base_url"] == "http://127.0.0.1:9/v1" and saved["models"]["executor"] == "gpt-4o-mini"


def test_a_bad_endpoint_in_the_environment_names_the_variable(monkeypatch):
    with pytest.raises(ValueError, match="OPENAI_BASE_URL.*'localhost:8000'.*http://"):
        LLMSettings.from_env({"OPENAI_BASE_URL": "localhost:8000"})
    assert LLMSettings.from_env({"OPENAI_BASE_URL": " http://h:1/v1 "}).base_url == "http://h:1/v1"


@pytest.mark.parametrize("var, value", [("MERMAIDFLOW_TIMEOUT", "nan"), ("MERMAIDFLOW_TIMEOUT", "inf"),
                                        ("MERMAIDFLOW_BUDGET_USD", "nan")])
def test_a_timeout_or_budget_that_is_not_a_number_is_refused(var, value):
    with pytest.raises(ValueError, match="timeout|budget_usd"):  # nan passed every comparison: no timeout, no cap
        LLMSettings.from_env({var: value})
    field = "timeout" if var.endswith("TIMEOUT") else "budget_usd"
    with pytest.raises(ValueError, match=field):
        LLMSettings.from_public_dict({field: float(value)})


def test_two_sessions_saving_different_fields_both_keep_theirs_and_the_same_field_is_told(db):
    """Issue 28.1: two Settings sessions on one workspace. Different fields: both changes stay (before: the first
    was silently gone while both were told "Saved"). The same field: the later save is refused, naming the field
    with both values, and one click merges (keeping mine or theirs) or reloads."""
    a, b = settings_page(), settings_page()  # both open the page on the same stored settings
    a.number_input(key="set_timeout").set_value(33.0)
    submit(a, "Save settings")
    b.number_input(key="set_concurrency").set_value(5)
    submit(b, "Save settings")
    assert any("Saved to the workspace" in s for s in texts(b.success))
    saved = store.load_llm_settings(Workspace(db))
    assert (saved["timeout"], saved["concurrency"]) == (33.0, 5)  # both kept
    assert b.number_input(key="set_timeout").value == 33.0  # B's form now shows A's change too
    a.number_input(key="set_concurrency").set_value(7)  # A's form still shows its old concurrency: 8
    submit(a, "Save settings")
    warning = " ".join(texts(a.warning))
    assert "concurrency: yours 7, theirs 5" in warning and store.load_llm_settings(Workspace(db))["concurrency"] == 5
    submit(a, "Merge, keeping mine")
    assert store.load_llm_settings(Workspace(db))["concurrency"] == 7 and not a.warning
    assert a.number_input(key="set_concurrency").value == 7
    b.number_input(key="set_concurrency").set_value(9)
    submit(b, "Save settings")
    submit(b, "Reload (drop my changes)")
    assert store.load_llm_settings(Workspace(db))["concurrency"] == 7 and b.number_input(key="set_concurrency").value == 7


def test_the_price_grid_is_built_only_when_its_section_is_open(db):
    """Issue 30: the editable grid was the page's most expensive element in the browser; it is now a section of
    its own, outside the endpoint form (a container in a form cannot rerun the page), built when opened."""
    at = settings_page()
    (prices,) = [e for e in at.expander if e.label.startswith("Token prices")]
    assert "Token prices · " in prices.label and not at.dataframe  # folded: no grid in the page
    assert not any(b.label == "Save prices" for b in at.button)
    at.session_state["set_show_prices"] = True
    at.run()
    (grid,) = at.dataframe
    assert set(grid.value["model"]) >= {"gpt-4o-mini"} and list(grid.value.columns) == ["model", "input", "output"]
    assert any(b.label == "Save prices" for b in at.button)


def test_each_section_saves_its_own_fields_and_keeps_the_others_stored_values(db):
    """The prices' Save does not send the endpoint form's unsaved values, nor undo another session's save of a
    field it does not show; the endpoint form's Save keeps the stored prices."""
    other, at = settings_page(), settings_page()
    other.number_input(key="set_timeout").set_value(33.0)
    submit(other, "Save settings")  # another session saves a limit after this one opened the page
    at.session_state["set_show_prices"] = True
    at.run()
    at.number_input(key="set_concurrency").set_value(5)  # typed in the endpoint form, not saved
    submit(at, "Save prices")
    assert any("Saved to the workspace" in s for s in texts(at.success)), texts(at.error) + texts(at.warning)
    saved = store.load_llm_settings(Workspace(db))
    assert saved["timeout"] == 33.0 and saved["concurrency"] == LLMSettings().concurrency
    assert saved["prices"]["gpt-4o-mini"] == list(LLMSettings().prices["gpt-4o-mini"])
    assert at.dataframe, "the price section stays open after its save"
    at.number_input(key="set_retries").set_value(4)
    submit(at, "Save settings")
    saved = store.load_llm_settings(Workspace(db))
    assert (saved["max_retries"], saved["timeout"]) == (4, 33.0) and "gpt-4o-mini" in saved["prices"]
