"""Which endpoint and key a session uses (flowcore.ui.endpoints, issue 25.3): on loopback as before; in a team,
the server's key only with the shared endpoint, a typed key only with the endpoint it was typed for, shared
settings only from an admin."""

from __future__ import annotations

import pytest

from flowcore.llm.egress import EndpointRefused
from flowcore.ui import endpoints
from flowcore.ui.endpoints import KEY, Viewer
from flowcore.workspace import settings as store

SHARED, OTHER = "http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"


@pytest.fixture(autouse=True)
def env(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", SHARED)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server")
    monkeypatch.setenv("MERMAIDFLOW_ADMINS", "boss@example.com")
    monkeypatch.setenv("MERMAIDFLOW_ENDPOINTS", OTHER)
    for var in ("MERMAIDFLOW_PRICES", "MERMAIDFLOW_LOGIN"):
        monkeypatch.delenv(var, raising=False)


def test_loopback_is_one_persons_tool(ws):
    me, session = Viewer(team=False), {}
    assert endpoints.effective(ws, me, session)[0].api_key == "sk-server"
    assert endpoints.save(ws, me, session, {"base_url": OTHER}).startswith("Saved to the workspace")
    endpoints.remember_key(ws, me, session, "sk-mine")
    s, _ = endpoints.effective(ws, me, session)
    assert (s.base_url, s.api_key) == (OTHER, "sk-mine") and store.llm_saved_by(ws) == "local"
    assert s.egress is not None and not s.egress.team


def test_in_a_team_keys_follow_only_the_endpoint_they_were_typed_for(ws):
    bob, boss = Viewer(True, "bob@example.com"), Viewer(True, "boss@example.com")
    session: dict = {}
    endpoints.remember_key(ws, bob, session, "sk-bob")
    assert endpoints.effective(ws, bob, session)[0].api_key == "sk-bob"  # typed for the shared endpoint
    assert "your session only" in endpoints.save(ws, bob, {}, {"base_url": OTHER})  # a member: not shared
    assert store.load_llm_settings(ws) is None
    endpoints.save(ws, boss, {}, {"base_url": OTHER})  # the admin moves the shared endpoint
    s, _ = endpoints.effective(ws, bob, session)
    assert (s.base_url, s.api_key) == (OTHER, "sk-server")  # bob's key stayed behind
    assert s.egress is not None and s.egress.team

    own: dict = {KEY: "sk-carol"}
    endpoints.save(ws, Viewer(True, "carol@example.com"), own, {"base_url": OTHER, "models": {"judge": "j"}})
    s, _ = endpoints.effective(ws, Viewer(True, "carol@example.com"), own)
    assert s.models["judge"] == "j" and s.api_key == "sk-carol"  # her own settings, her own key
    own.pop(KEY)
    assert endpoints.effective(ws, Viewer(True, "carol@example.com"), own)[0].api_key is None  # never the server's


def test_a_connection_test_sends_the_server_key_only_to_the_shared_endpoint(ws):
    bob = Viewer(True, "bob@example.com")
    assert endpoints.for_test(ws, bob, {}, {"base_url": SHARED}).api_key == "sk-server"
    assert endpoints.for_test(ws, bob, {}, {"base_url": OTHER}).api_key is None
    assert endpoints.for_test(ws, Viewer(True, "boss@example.com"), {}, {"base_url": OTHER}).api_key == "sk-server"
    with pytest.raises(EndpointRefused):
        endpoints.for_test(ws, bob, {}, {"base_url": "http://169.254.169.254/latest"})
