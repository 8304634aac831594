"""Who may use the app (flowcore.ui.access): loopback needs no login, anything else does; members by address or
@domain, or everyone the provider authenticates when no list is set."""

from __future__ import annotations

import pytest

from flowcore.ui.access import is_member, login_required


@pytest.mark.parametrize("address, env, required", [
    ("127.0.0.1", {}, False), ("localhost", {}, False), ("::1", {}, False), ("127.0.0.2", {}, False),
    (None, {}, True),  # Streamlit's default binds every interface
    ("0.0.0.0", {}, True), ("10.1.2.3", {}, True), ("studio.example.org", {}, True),
    ("127.0.0.1", {"MERMAIDFLOW_LOGIN": "1"}, True),  # asked for explicitly
    ("0.0.0.0", {"MERMAIDFLOW_LOGIN": "0"}, True),  # a team deployment cannot switch it off
])
def test_login_is_required_beyond_loopback(address, env, required):
    assert login_required(address, env) is required


def test_members_by_address_or_domain():
    env = {"MERMAIDFLOW_MEMBERS": "alice@example.com, @team.example.org"}
    assert is_member("Alice@Example.com", env) and is_member("carol@team.example.org", env)
    assert not is_member("bob@example.com", env) and not is_member("eve@evilteam.example.org.x", env)
    assert not is_member(None, env) and not is_member("", env)
    assert is_member("anyone@anywhere", {}) and not is_member(None, {})
