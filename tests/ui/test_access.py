"""Who may use the app (flowcore.ui.access): loopback needs no login, anything else does; members by address or
@domain, or everyone the provider authenticates when no list is set."""

from __future__ import annotations

import pytest

from flowcore.serve.guard import proxied
from flowcore.ui.access import (
    is_admin,
    is_member,
    login_required,
    member_address,
    parse_address,
    served_names_beyond_loopback,
)


@pytest.mark.parametrize("address, env, required", [
    ("127.0.0.1", {}, False), ("localhost", {}, False), ("::1", {}, False), ("127.0.0.2", {}, False),
    (None, {}, True),  # Streamlit's default binds every interface
    ("0.0.0.0", {}, True), ("10.1.2.3", {}, True), ("studio.example.org", {}, True),
    ("127.0.0.1", {"MERMAIDFLOW_LOGIN": "1"}, True),  # asked for explicitly
    ("0.0.0.0", {"MERMAIDFLOW_LOGIN": "0"}, True),  # a team deployment cannot switch it off
])
def test_login_is_required_beyond_loopback(address, env, required):
    assert login_required(address, env) is required


@pytest.mark.parametrize("hosts, beyond", [
    ("studio.example.org", ["studio.example.org"]), ("*.example.org", ["*.example.org"]),
    ("localhost, studio.example.org:443", ["studio.example.org:443"]),
    ("10.0.0.5", ["10.0.0.5"]),  # another machine's address: it is served to whoever reaches that
    ("localhost", []), ("127.0.0.1:8501, [::1]", []), ("", []), (" , ", []),
])
def test_a_loopback_app_that_answers_to_a_public_name_requires_a_login(hosts, beyond):
    """A reverse proxy in front of 127.0.0.1 serves the app under its own name, which MERMAIDFLOW_HOSTS must list
    (or the Host check refuses it): a name beyond this machine makes the app a team's, for every session."""
    assert served_names_beyond_loopback({"MERMAIDFLOW_HOSTS": hosts}) == beyond
    assert login_required("127.0.0.1", {"MERMAIDFLOW_HOSTS": hosts}) is bool(beyond)


@pytest.mark.parametrize("headers, required", [
    ({"X-Forwarded-For": "203.0.113.7"}, True), ({"x-real-ip": "203.0.113.7"}, True),
    ({"Forwarded": "for=203.0.113.7;proto=https"}, True), ({"X-Forwarded-Proto": "https"}, True),
    ({"X-FORWARDED-HOST": "studio.example.org"}, True),
    ({"Host": "127.0.0.1:8501", "Origin": "http://127.0.0.1:8501"}, False), ({}, False), (None, False),
    ({"X-Forwarded": "x", "Via": "1.1 cache"}, False),  # not a header we read (Via: a cache, not a proxy's client)
])
def test_a_session_whose_request_came_through_a_proxy_requires_a_login(headers, required):
    assert login_required("127.0.0.1", {}, headers) is required
    assert proxied(list((headers or {}).items())) is required  # ASGI's (name, value) pairs read the same


def test_a_forwarding_header_never_lifts_a_login():
    """A local visitor who forges a header can only lock his own session; nothing he sends makes a team
    deployment login-free (no header can, and there is none that means 'local')."""
    for headers in ({"X-Forwarded-For": "127.0.0.1"}, {"X-Real-IP": "::1"}, {"Forwarded": "for=127.0.0.1"}, {}):
        assert login_required("0.0.0.0", {}, headers)
        assert login_required("127.0.0.1", {"MERMAIDFLOW_LOGIN": "1"}, headers)
        assert login_required("127.0.0.1", {"MERMAIDFLOW_HOSTS": "studio.example.org"}, headers)


def test_members_by_address_or_domain():
    env = {"MERMAIDFLOW_MEMBERS": "alice@example.com, @team.example.org"}
    assert is_member(parse_address("Alice@Example.com"), env) and is_member("carol@team.example.org", env)
    assert not is_member("bob@example.com", env) and not is_member("eve@evilteam.example.org.x", env)
    assert not is_member("eve@xteam.example.org", env) and not is_member("eve@team.example.org.evil", env)
    assert not is_member(None, env) and not is_member("", env)
    assert is_member("anyone@anywhere", {}) and not is_member(None, {})


def _claims(email, verified=True, **more):
    return {"sub": "s-1", "email": email, "email_verified": verified, **more}


@pytest.mark.parametrize("claims, why", [
    (_claims("alice@example.com", False), "is verified"),  # issue 25.4: email_verified false was admitted
    (_claims("alice@example.com", None), "is verified"),
    (_claims("alice@example.com", "false"), "is verified"),
    ({"sub": "alice@example.com", "email_verified": True}, "no email address"),  # never the subject
    (_claims("x\n@team.example.org"), "not one plain address"),  # endswith('@team.example.org') matched it
    (_claims("x@evil.example\n@team.example.org"), "not one plain address"),
    (_claims("x @team.example.org"), "not one plain address"),
    (_claims("x\u200b@team.example.org"), "not one plain address"),  # a zero-width space (format character)
    (_claims("x@@team.example.org"), "not one plain address"),
    (_claims("@team.example.org"), "not one plain address"),
    (_claims("x@team.example.org."), "not one plain address"),
    (_claims("mi\u212ae@example.com"), "not one plain address"),  # the Kelvin sign: NFC makes it ASCII 'K'
    (_claims(["alice@example.com"]), "not one plain address"),
])
def test_claims_that_do_not_name_one_verified_plain_address_are_refused(claims, why):
    address, reason = member_address(claims)
    assert address is None and why in reason


def test_a_verified_plain_address_is_read_and_compared_exactly():
    env = {"MERMAIDFLOW_MEMBERS": "mike@example.com, josé@example.com, @team.example.org"}
    assert member_address(_claims("Mike@Example.COM")) == ("mike@example.com", "")
    assert member_address(_claims("alice@example.com", "true")) == ("alice@example.com", "")  # Cognito's string
    assert is_member(member_address(_claims("mike@example.com"))[0], env)
    # non-ASCII: only an exact match after NFC (composed and decomposed é are one address; case is not folded)
    assert is_member(member_address(_claims("jose\u0301@example.com"))[0], env)
    assert not is_member(member_address(_claims("JOSÉ@example.com"))[0], env)
    assert not is_member(member_address(_claims("zoë@team.example.org"))[0], env)  # a domain rule admits ASCII only
    assert "mi\u212ae@example.com".lower() == "mike@example.com"  # what the old comparison did


def test_admins_are_members_and_nobody_is_an_admin_unless_listed():
    env = {"MERMAIDFLOW_MEMBERS": "@team.example.org", "MERMAIDFLOW_ADMINS": "boss@example.com"}
    assert is_admin("boss@example.com", env) and is_member("boss@example.com", env)
    assert not is_admin("carol@team.example.org", env) and is_member("carol@team.example.org", env)
    assert not is_admin("carol@team.example.org", {"MERMAIDFLOW_MEMBERS": "@team.example.org"})
