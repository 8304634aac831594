"""The settings every page uses: environment, then what is saved in the workspace, then the key typed this
session; what cannot be used is reported, never raised (flowcore.workspace.settings.effective_llm_settings)."""

from __future__ import annotations

from flowcore.workspace import settings as store


def test_saved_settings_overlay_the_environment_and_the_typed_key_wins(ws, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.delenv("MERMAIDFLOW_PRICES", raising=False)
    s, problems = store.effective_llm_settings(ws)
    assert problems == [] and s.base_url == "http://127.0.0.1:9/v1" and s.api_key == "sk-env"
    store.save_llm_settings(ws, {**s.to_public_dict(), "base_url": "http://127.0.0.1:8/v1"})
    s, problems = store.effective_llm_settings(ws, "sk-typed")
    assert problems == [] and s.base_url == "http://127.0.0.1:8/v1" and s.api_key == "sk-typed"


def test_a_bad_environment_variable_is_reported_and_ignored(ws, monkeypatch):
    monkeypatch.setenv("MERMAIDFLOW_PRICES", "{not json")
    s, problems = store.effective_llm_settings(ws)
    assert len(problems) == 1 and "MERMAIDFLOW_PRICES" in problems[0] and s is not None
