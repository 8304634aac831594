"""``flowcore serve`` on 127.0.0.1 without keys, behind a reverse proxy. The Host check kept rebinding pages out,
but nginx's default sets ``Host`` to the upstream's 127.0.0.1:port, so everyone the proxy served ran the
workflows on the server's LLM key and drove /mcp (publish, evolve) with no key: 200. Now a request that carries
a proxy's forwarding header needs a key (401 without one, an OpenAI placeholder key is refused too), while a
caller on this machine without the proxy is served as before."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from flowcore.workspace import keys
from flowcore.workspace.store import Workspace
from tests.helpers.revproxy import ReverseProxy
from tests.serve.test_openai_api import server_db

ASK = {"model": "solver", "messages": [{"role": "user", "content": "proxied?"}]}


def _post(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(ASK).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def key(server):
    ws = Workspace(server_db(server))
    _, k = keys.create_key(ws, "proxied-ci", "carol@example.com")
    ws.close_all()
    return k


def test_a_request_through_a_forwarding_proxy_needs_a_key(server, key):
    with ReverseProxy(server.port, forward=True, rewrite_host=True) as proxy:
        status, body = _post(proxy.url)
        assert status == 401 and body["error"]["code"] == "missing_api_key"
        assert "reverse proxy" in body["error"]["message"]
        status, body = _post(proxy.url, {"Authorization": "Bearer sk-placeholder"})  # not ours: refused here
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        mcp = urllib.request.Request(proxy.url + "/mcp", data=b"{}", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(mcp, timeout=20)
        assert refused.value.code == 401
        c = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)
        r = c.chat.completions.create(**ASK)
        assert r.choices[0].message.content.startswith("ECHO ")
        assert all(b"x-forwarded-for: 127.0.0.1" in h.lower() for h in proxy.heads)
        with urllib.request.urlopen(proxy.url + "/health", timeout=10) as h:  # still the one open route
            assert h.status == 200


def test_on_this_machine_without_the_proxy_no_key_is_needed(server):
    status, body = _post(f"http://127.0.0.1:{server.port}")
    assert status == 200 and body["choices"][0]["message"]["content"].startswith("ECHO ")
    # A local caller who forges the header asks for a key for himself only: the next plain call is served.
    assert _post(f"http://127.0.0.1:{server.port}", {"X-Forwarded-For": "127.0.0.1"})[0] == 401
    assert _post(f"http://127.0.0.1:{server.port}")[0] == 200
