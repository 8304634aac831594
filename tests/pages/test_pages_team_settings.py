"""Settings in a team deployment (issue 25.3), the app as it runs for signed-in members (AppTest with a login),
against recording listeners on 127.0.0.1: the shared endpoint (OPENAI_BASE_URL with the server's key) and an
attacker's. Each attack asserts what the attacker's listener received.

Before this work: a member's "Test connection" sent ``Bearer <server key>`` to the URL they typed, "Save" sent
every other member's runs (and the keys they typed) there, and the server posted to any URL at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.ui import endpoints
from flowcore.workspace import settings as store
from flowcore.workspace.store import Workspace
from tests.helpers.listener import Listener

APP = str(Path(__file__).resolve().parents[2] / "app.py")
SERVER_KEY = "sk-server-SHARED-7d41a9"
BOB_KEY = "sk-bob-OWN-55e0c2"
ADMIN = "boss@example.com"


@pytest.fixture
def team(tmp_path, monkeypatch):
    """A team deployment whose shared endpoint is one listener; yields (shared, evil, db)."""
    for var in ("OPENAI_MODEL", "MERMAIDFLOW_BUDGET_USD", "MERMAIDFLOW_ENDPOINTS", "MERMAIDFLOW_HOSTS"):
        monkeypatch.delenv(var, raising=False)
    with Listener() as shared, Listener() as evil:
        monkeypatch.setenv("MERMAIDFLOW_DB", str(tmp_path / "ws.db"))
        monkeypatch.setenv("MERMAIDFLOW_LOGIN", "1")
        monkeypatch.setenv("MERMAIDFLOW_MEMBERS", "@team.example.org")
        monkeypatch.setenv("MERMAIDFLOW_ADMINS", ADMIN)
        monkeypatch.setenv("OPENAI_BASE_URL", shared.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
        yield shared, evil, tmp_path / "ws.db"


def settings_as(email: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["auth"] = {"redirect_uri": "http://127.0.0.1/oauth2callback", "cookie_secret": "x" * 32,
                          "client_id": "mermaidflow", "client_secret": "s",
                          "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"}
    at.user = {"is_logged_in": True, "email": email, "email_verified": True}
    at.run()
    at.switch_page("pages/settings.py").run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Settings"], [e.value for e in at.error]
    return at


def press(at: AppTest, label: str) -> None:
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, at.exception


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_a_member_cannot_send_the_server_key_or_anything_to_a_private_url(team):
    shared, evil, db = team
    carol = settings_as("carol@team.example.org")
    assert any("set by its admins" in i.value for i in carol.info)
    carol.text_input(key="set_url").set_value(evil.base_url)  # a listener of hers, on the server's loopback
    press(carol, "Test connection")
    assert any("Not sent" in e and "loopback" in e for e in errors(carol)), errors(carol)
    press(carol, "Use for my session")
    assert any("Not sent" in e for e in errors(carol))
    assert evil.received == []  # the server posted nothing there
    assert store.load_llm_settings(Workspace(db)) is None


def test_a_members_own_endpoint_never_gets_the_server_key_nor_anyone_elses_runs(team, monkeypatch):
    shared, evil, db = team
    monkeypatch.setenv("MERMAIDFLOW_ENDPOINTS", evil.base_url)  # as if her listener were a public endpoint
    carol = settings_as("carol@team.example.org")
    carol.text_input(key="set_url").set_value(evil.base_url)
    press(carol, "Test connection")
    assert evil.received and SERVER_KEY not in str(evil.received)  # reached, without the server's key
    press(carol, "Use for my session")
    assert store.load_llm_settings(Workspace(db)) is None  # nothing shared was changed
    assert endpoints.effective(Workspace(db), endpoints.Viewer(True, "carol@team.example.org"),
                               carol.session_state)[0].base_url == evil.base_url  # her session uses it

    bob = settings_as("bob@team.example.org")  # another member: his runs still go to the shared endpoint
    bob.text_input(key="set_key_input").set_value(BOB_KEY).run()
    assert bob.text_input(key="set_url").value == shared.base_url
    press(bob, "Test connection")
    assert shared.keys()[-1] == f"Bearer {BOB_KEY}"
    assert BOB_KEY not in str(evil.received) and SERVER_KEY not in str(evil.received)


def test_only_an_admin_changes_the_shared_endpoint_and_a_members_key_does_not_follow_it(team, monkeypatch):
    shared, evil, db = team
    monkeypatch.setenv("MERMAIDFLOW_ENDPOINTS", f"{shared.base_url}, {evil.base_url}")
    bob = settings_as("bob@team.example.org")
    bob.text_input(key="set_key_input").set_value(BOB_KEY).run()  # typed for the shared endpoint
    boss = settings_as(ADMIN)
    assert not boss.info or not any("set by its admins" in i.value for i in boss.info)
    boss.text_input(key="set_url").set_value(evil.base_url)
    press(boss, "Save settings")
    assert store.load_llm_settings(Workspace(db))["base_url"] == evil.base_url
    assert store.llm_saved_by(Workspace(db)) == ADMIN

    # bob's session now runs on the admin's endpoint, with the server's key: never with the key he typed
    ws, viewer = Workspace(db), endpoints.Viewer(True, "bob@team.example.org")
    now, _ = endpoints.effective(ws, viewer, bob.session_state)
    assert now.base_url == evil.base_url and now.api_key == SERVER_KEY
    bob.text_input(key="set_url").set_value(evil.base_url)  # the team's endpoint now, typed into his form
    press(bob, "Test connection")
    assert evil.keys()[-1] == f"Bearer {SERVER_KEY}"  # the shared endpoint gets the server's key (an admin's choice)
    assert BOB_KEY not in str(evil.received)  # and never the key bob typed for the endpoint before


def test_settings_a_member_saved_before_admins_existed_are_ignored(team):
    shared, evil, db = team
    store.save_llm_settings(Workspace(db), {"base_url": evil.base_url}, saved_by="mallory@team.example.org")
    carol = settings_as("carol@team.example.org")
    assert any("Ignoring the LLM settings saved in the workspace by mallory@team.example.org" in w.value
               for w in carol.warning)
    assert carol.text_input(key="set_url").value == shared.base_url
