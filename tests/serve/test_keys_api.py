"""Keys on a server that requires them (as every server bound beyond loopback does): no key, a wrong key, a
revoked key and the right key, through the real ``openai`` client; the key's owner is recorded in the trace."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from flowcore.cli.main import main
from flowcore.serve.guard import is_loopback
from tests.helpers.served import stored_trace
from tests.serve.test_openai_api import server_db


def ask(keyed, key: str) -> openai.types.chat.ChatCompletion:
    c = openai.OpenAI(base_url=keyed.base_url, api_key=key, max_retries=0)
    return c.chat.completions.create(model="solver", messages=[{"role": "user", "content": "keyed?"}])


def test_no_key_a_wrong_key_and_the_right_key(keyed):
    with pytest.raises(urllib.error.HTTPError) as e:  # no Authorization header at all
        urllib.request.urlopen(keyed.base_url + "/models", timeout=10)
    assert e.value.code == 401 and json.loads(e.value.read())["error"]["code"] == "missing_api_key"
    assert e.value.headers["WWW-Authenticate"] == "Bearer"
    for wrong in ("unused", keyed.key[:-2] + "xx", "mf_" + "0" * 8 + "_" + "a" * 43, keyed.key + "z"):
        with pytest.raises(openai.AuthenticationError) as err:
            ask(keyed, wrong)
        assert err.value.body["code"] == "invalid_api_key"
    r = ask(keyed, keyed.key)
    assert r.choices[0].message.content.startswith("ECHO ")
    t = stored_trace(server_db(keyed), r.model_extra["mermaidflow"]["trace_id"])
    assert t.created_by == "alice@example.com"  # the key's owner
    with urllib.request.urlopen(keyed.url + "/health", timeout=10) as h:  # the one open route
        assert json.loads(h.read()) == {"status": "ok"}


def test_a_revoked_key_is_refused_at_once(keyed, capsys):
    db = server_db(keyed)
    assert main(["keys", "create", "short-lived", "--owner", "bob", "--db", db]) == 0
    key = capsys.readouterr().out.strip()
    assert ask(keyed, key).choices
    assert main(["keys", "revoke", "short-lived", "--db", db]) == 0
    assert "revoked key" in capsys.readouterr().out
    with pytest.raises(openai.AuthenticationError):
        ask(keyed, key)
    assert main(["keys", "list", "--json", "--db", db]) == 0
    listed = {k["name"]: k for k in json.loads(capsys.readouterr().out)["keys"]}
    assert listed["short-lived"]["revoked"] and listed["alice-ci"]["last_used"] and "hash" not in listed["alice-ci"]


def test_keys_are_required_beyond_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.8.0.1")
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.2", "example.org", "", None))
