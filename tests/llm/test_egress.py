"""Where the LLM client may connect (flowcore.llm.egress, issue 25.3): the allowlist, private and link-local
addresses refused to a team server, and the same rules at connection time, through the real openai client to a
recording listener on 127.0.0.1: a redirect and a name that re-resolves to 127.0.0.1 after the check (DNS
rebinding of the endpoint) reach nothing."""

from __future__ import annotations

import socket

import pytest

from flowcore.llm import egress
from flowcore.llm.client import LLM, LLMError, LLMSettings, list_models
from flowcore.llm.egress import Egress, EndpointRefused, Origin
from tests.helpers.listener import Listener


@pytest.mark.parametrize("address, public", [
    ("8.8.8.8", True), ("2001:4860:4860::8888", True),
    ("127.0.0.1", False), ("127.8.9.10", False), ("::1", False), ("0.0.0.0", False), ("::", False),
    ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False), ("fd00::1", False),
    ("169.254.169.254", False), ("fe80::1", False), ("100.64.0.1", False), ("224.0.0.1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:169.254.169.254", False), ("64:ff9b::7f00:1", False),
    ("64:ff9b::808:808", True), ("240.0.0.1", False),
])
def test_public_addresses(address, public):
    assert egress.public_address(address) is public


def test_a_team_server_refuses_private_loopback_and_link_local_endpoints_unless_listed():
    team = Egress(team=True)
    for url in ("http://127.0.0.1:8000/v1", "http://localhost:8000/v1", "http://2130706433:8000/v1",
                "http://0x7f.1:8000/v1", "http://[::1]:8000/v1", "http://169.254.169.254/latest/meta-data",
                "http://10.0.0.5:8000/v1", "http://0.0.0.0:8000/v1"):
        with pytest.raises(EndpointRefused, match="private, loopback or link-local"):
            team.check_url(url)
    listed = Egress.from_env(team=True, env={"MERMAIDFLOW_ENDPOINTS": "http://127.0.0.1:8000/v1"})
    listed.check_url("http://127.0.0.1:8000/v1")
    listed.check_url("http://127.0.0.1:8000/v1/")
    with pytest.raises(EndpointRefused, match="not one of the endpoints"):
        listed.check_url("http://127.0.0.1:8001/v1")  # another port: another service
    with pytest.raises(EndpointRefused, match="not one of the endpoints"):
        listed.check_url("http://127.0.0.1:8000/v1x")  # a path under it only at a '/' boundary
    own = Egress.from_env(team=True, env={"OPENAI_BASE_URL": "http://127.0.0.1:9000/v1"})
    own.check_url("http://127.0.0.1:9000/v1")  # the operator's own endpoint is always allowed
    Egress(team=False).check_url("http://127.0.0.1:8000/v1")  # one person's machine: their local server
    assert not Egress().active and Egress(team=True).active and listed.active
    with pytest.raises(ValueError, match="MERMAIDFLOW_ENDPOINTS"):
        Egress.from_env(env={"MERMAIDFLOW_ENDPOINTS": "ftp://x"})
    assert Origin.of("HTTPS://Api.OpenAI.com/v1/") == Origin("https", "api.openai.com", 443, "/v1")


def _settings(url: str, policy: Egress | None, key: str = "sk-server-0123456789") -> LLMSettings:
    return LLMSettings(base_url=url, api_key=key, max_retries=0, timeout=5.0, cache=False, egress=policy)


def test_the_client_refuses_at_connection_time_too_and_nothing_is_received():
    with Listener() as evil:
        policy = Egress(team=True)
        with pytest.raises(LLMError, match="refused by the endpoint policy") as refused:
            LLM(_settings(evil.base_url, policy)).chat_sync("hi", max_tokens=4)
        assert refused.value.transient is False  # not an outage to wait out: evolution stops instead of retrying
        with pytest.raises(LLMError, match="refused by the endpoint policy"):
            list_models(_settings(evil.base_url, policy))
        assert evil.received == []
        LLM(_settings(evil.base_url, Egress(team=False))).chat_sync("hi", max_tokens=4)  # control: it listens
        assert evil.keys() == ["Bearer sk-server-0123456789"]


def test_a_redirect_to_another_endpoint_is_not_followed():
    with Listener() as target, Listener() as hop:
        hop.redirect_to = target.base_url  # the listed endpoint answers 307 to an unlisted one
        policy = Egress.from_env(team=True, env={"MERMAIDFLOW_ENDPOINTS": hop.base_url})
        with pytest.raises(LLMError):
            LLM(_settings(hop.base_url, policy)).chat_sync("hi", max_tokens=4)
        assert len(hop.received) >= 1 and target.received == []


def test_a_name_rebound_to_loopback_after_the_check_reaches_nothing(monkeypatch):
    """A DNS server under the attacker's control answers a public address when the URL is checked and
    127.0.0.1 afterwards (TTL 0). The guarded client connects only to an address it checked."""
    with Listener() as evil:
        real = socket.getaddrinfo
        answers = {"n": 0}

        def rebinding(host, port, *args, **kwargs):  # noqa: ANN001, ANN202 - socket.getaddrinfo's signature
            if host != "rebind.example":
                return real(host, port, *args, **kwargs)
            answers["n"] += 1
            address = "9.9.9.9" if answers["n"] % 2 else "127.0.0.1"  # a public address (unreachable here), then ours
            return real(address, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        url = f"http://rebind.example:{evil.port}/v1"
        policy = Egress(team=True)
        policy.check_url(url)  # first answer: public, so the URL is accepted
        with pytest.raises(LLMError):
            LLM(_settings(url, policy)).chat_sync("hi", max_tokens=4)
        assert evil.received == []
        # control: a check when the URL is typed and a client that resolves the name again to connect
        answers["n"] = 0
        policy.check_url(url)  # public again
        with pytest.raises(LLMError):  # (the listener has no model list: a 404, after the key arrived)
            list_models(_settings(url, Egress(team=False)))  # resolves the name again: 127.0.0.1
        assert evil.keys() == ["Bearer sk-server-0123456789"]  # what a check without the guard lets through
