"""flowcore.llm.client through the real openai client against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import json
import time

import pytest

from flowcore.llm.client import (
    LLM,
    ROLES,
    BudgetExceeded,
    LLMError,
    LLMSettings,
    NotConfigured,
    list_models,
    run_usage,
)
from tests.helpers.fakellm import FakeLLMServer, Fault, by_keyword

SECRET = "sk-test-SECRET-0123456789abcdef"


def settings(server: FakeLLMServer | None, **kw) -> LLMSettings:
    base = {"base_url": server.base_url if server else None, "api_key": SECRET,
            "models": {r: "test-model" for r in ROLES}, "prices": {"test-model": (1_000_000.0, 2_000_000.0)},
            "timeout": 5.0, "max_retries": 2}
    base.update(kw)
    return LLMSettings(**base)


def test_reply_records_tokens_cost_latency(ws):
    with FakeLLMServer(["The answer is 42"]) as srv:
        llm = LLM(settings(srv), ws, run_id="r1")
        reply = llm.chat_sync("What is six times seven?", role="judge")
    assert reply.text == "The answer is 42"
    assert (reply.prompt_tokens, reply.completion_tokens) == (5, 4)  # server-reported usage
    assert reply.cost == pytest.approx(5 * 1.0 + 4 * 2.0)  # price table: USD per 1M tokens
    assert reply.latency > 0 and not reply.cached and reply.model == "test-model"
    assert srv.requests[0]["model"] == "test-model"
    assert srv.requests[0]["messages"] == [{"role": "user", "content": "What is six times seven?"}]
    assert srv.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert llm.usage.calls == 1 and llm.usage.cost == pytest.approx(13.0)
    assert llm.calls[0]["role"] == "judge" and llm.calls[0]["error"] is None
    rows = ws.query("SELECT run_id, role, model, prompt_tokens, completion_tokens, cost, cached"
                    " FROM llm_calls")
    assert [tuple(r) for r in rows] == [("r1", "judge", "test-model", 5, 4, pytest.approx(13.0), 0)]
    assert run_usage(ws, "r1").cost == pytest.approx(13.0)


def test_role_models_and_parameters_are_sent():
    with FakeLLMServer(["{}"]) as srv:
        s = settings(srv, models={"optimizer": "opt-m", "judge": "judge-m", "executor": "exec-m"})
        llm = LLM(s)
        for role in ROLES:
            llm.chat_sync(f"hi {role}", role=role, json_mode=True, max_tokens=33, temperature=0.5)
    assert [r["model"] for r in srv.requests] == ["opt-m", "judge-m", "exec-m"]
    assert all(r["response_format"] == {"type": "json_object"} for r in srv.requests)
    assert all(r["max_tokens"] == 33 for r in srv.requests)
    assert all(r["temperature"] == 0.5 for r in srv.requests)
    with pytest.raises(ValueError, match="unknown LLM role"):
        llm.chat_sync("x", role="writer")


def test_cache_hit_is_free_and_skips_network(ws):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "two plus two"}]
    with FakeLLMServer(["four", "five"]) as srv:
        llm = LLM(settings(srv), ws, run_id="a")
        first = llm.chat_sync(msgs)
        second = llm.chat_sync(msgs)
        assert len(srv.requests) == 1
        # A re-run (new LLM, same workspace) is free too, even with no endpoint configured at all.
        rerun = LLM(LLMSettings(models={r: "test-model" for r in ROLES}), ws, run_id="b").chat_sync(msgs)
        assert len(srv.requests) == 1
        # Another temperature is another key.
        llm.chat_sync(msgs, temperature=0.7)
        assert len(srv.requests) == 2
    assert first.text == second.text == rerun.text == "four"
    assert second.cached and second.cost == 0 and not first.cached
    assert llm.usage.cost == pytest.approx(first.cost + llm.calls[-1]["cost"])
    assert llm.usage.cached == 1 and llm.usage.calls == 3
    assert ws.query("SELECT COUNT(*) FROM llm_cache")[0][0] == 2
    assert [r["cached"] for r in ws.query("SELECT cached FROM llm_calls ORDER BY id")] == [0, 1, 1, 0]


def test_cache_disabled_or_without_workspace_always_calls(ws):
    with FakeLLMServer(["x"]) as srv:
        LLM(settings(srv, cache=False), ws).chat_sync("q")
        LLM(settings(srv, cache=False), ws).chat_sync("q")
        LLM(settings(srv)).chat_sync("q")
        LLM(settings(srv)).chat_sync("q")
        assert len(srv.requests) == 4


def test_cache_salt_makes_distinct_entries(ws):
    with FakeLLMServer(["one", "two", "three"]) as srv:
        llm = LLM(settings(srv), ws)
        a = llm.chat_sync("sample", cache_salt="0")
        b = llm.chat_sync("sample", cache_salt="1")
        again = llm.chat_sync("sample", cache_salt="0")
    assert (a.text, b.text, again.text) == ("one", "two", "one")
    assert len(srv.requests) == 2 and again.cached


def test_http_500_then_success_is_retried_by_the_client():
    with FakeLLMServer([Fault(status=500), Fault(status=500), "recovered"]) as srv:
        reply = LLM(settings(srv, max_retries=2)).chat_sync("hello")
    assert reply.text == "recovered" and len(srv.requests) == 3


def test_persistent_500_raises_llm_error(ws):
    with FakeLLMServer([Fault(status=500, body="backend exploded")]) as srv:
        llm = LLM(settings(srv, max_retries=1), ws, run_id="r")
        with pytest.raises(LLMError) as ei:
            llm.chat_sync("hello", role="optimizer")
    msg = str(ei.value)
    assert "HTTP 500" in msg and "backend exploded" in msg and "test-model" in msg and srv.base_url in msg
    assert SECRET not in msg
    assert len(srv.requests) == 2  # one try + one retry
    assert llm.usage.errors == 1 and llm.usage.calls == 0 and llm.calls[0]["error"] == msg
    assert ws.query("SELECT error FROM llm_calls")[0][0] == msg


def test_429_is_retried_then_reported():
    with FakeLLMServer([Fault(status=429, body="slow down"), "ok"]) as srv:
        assert LLM(settings(srv)).chat_sync("hi").text == "ok"
        assert len(srv.requests) == 2
    with FakeLLMServer([Fault(status=429, body="slow down")]) as srv, \
            pytest.raises(LLMError, match="HTTP 429: slow down"):
        LLM(settings(srv, max_retries=1)).chat_sync("hi")


def test_timeout_raises_llm_error():
    with FakeLLMServer([Fault(delay=1.5, body="too late")]) as srv:
        llm = LLM(settings(srv, timeout=0.3, max_retries=0))
        start = time.perf_counter()
        with pytest.raises(LLMError, match="timed out after 0.3s"):
            llm.chat_sync("hi")
        assert time.perf_counter() - start < 1.4


NO_CONTENT = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "length"}]})


@pytest.mark.parametrize(("body", "expected"), [
    ("<html>oops", "body is not JSON"),
    ('{"foo": 1}', "no choices"),
    ('{"choices": [{"index": 0, "finish_reason": "stop"}]}', "a choice without a message"),
])
def test_malformed_reply_raises_llm_error(body, expected):
    with FakeLLMServer([Fault(malformed=True, body=body)]) as srv, pytest.raises(LLMError, match=expected):
        LLM(settings(srv)).chat_sync("hi")


def test_a_reply_with_no_content_is_the_models_empty_answer():
    # content null, finish_reason length: a reasoning model that thought past its cap said nothing (issue 25,
    # round three); a garbled transfer is only a body that is not UTF-8 or not JSON
    with FakeLLMServer([Fault(malformed=True, body=NO_CONTENT)]) as srv:
        reply = LLM(settings(srv)).chat_sync("hi")
    assert reply.text == "" and reply.accepted and len(srv.requests) == 1


def test_missing_usage_is_estimated():
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "test-model",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "a" * 40},
                                    "finish_reason": "stop"}]})
    with FakeLLMServer([Fault(malformed=True, body=body)]) as srv:
        reply = LLM(settings(srv)).chat_sync("b" * 80)
    assert reply.text == "a" * 40 and reply.prompt_tokens == 20 and reply.completion_tokens == 10


def test_budget_cap_stops_calls():
    with FakeLLMServer(["one two"]) as srv:  # 2 prompt words + 2 reply words = 2*1 + 2*2 = 6 USD
        llm = LLM(settings(srv, budget_usd=10.0))
        llm.chat_sync("hello there")
        llm.chat_sync("hello again")
        with pytest.raises(BudgetExceeded, match=r"budget of \$10\.0000"):
            llm.chat_sync("one more")
        with pytest.raises(LLMError):  # BudgetExceeded is an LLMError
            llm.child().chat_sync("from a child")
        assert len(srv.requests) == 2


def test_not_configured():
    llm = LLM(LLMSettings.from_env({}))
    assert not llm.settings.configured
    with pytest.raises(NotConfigured, match="OPENAI_BASE_URL.*Settings"):
        llm.chat_sync("hi")


def test_concurrency_limit_is_respected():
    async def burst(llm: LLM, n: int) -> list[str]:
        replies = await asyncio.gather(*(llm.chat(f"q{i}") for i in range(n)))
        return [r.text for r in replies]

    with FakeLLMServer(latency=0.15) as srv:
        texts = asyncio.run(burst(LLM(settings(srv, concurrency=2)), 6))
        assert texts == [f"q{i}" for i in range(6)]  # echo server
        assert srv.max_in_flight == 2
    with FakeLLMServer(latency=0.15) as srv:  # the server really sees parallel calls when allowed
        asyncio.run(burst(LLM(settings(srv, concurrency=8)), 6))
        assert srv.max_in_flight > 2


def test_child_usage_adds_to_parent(ws):
    async def run(parent: LLM) -> tuple[LLM, LLM]:
        a, b = parent.child(), parent.child()
        await asyncio.gather(a.chat("alpha one"), b.chat("beta"), b.chat("beta two three"))
        return a, b

    with FakeLLMServer(["ok"]) as srv:
        parent = LLM(settings(srv), ws, run_id="p")
        parent.chat_sync("parent call")
        a, b = asyncio.run(run(parent))
    assert (a.usage.calls, b.usage.calls, parent.usage.calls) == (1, 2, 4)
    assert a.usage.cost == pytest.approx(2 * 1 + 1 * 2)
    assert b.usage.cost == pytest.approx((1 + 3) * 1 + 2 * 2)
    assert parent.usage.cost == pytest.approx(a.usage.cost + b.usage.cost + 2 * 1 + 1 * 2)
    assert len(parent.calls) == 4 and len(a.calls) == 1
    assert run_usage(ws, "p").calls == 4


def test_repeated_asyncio_run_gets_a_client_per_loop(caplog):
    with FakeLLMServer() as srv:
        llm = LLM(settings(srv))
        assert asyncio.run(llm.chat("first")).text == "first"
        client = next(iter(llm._shared.per_loop.values()))[0]
        assert client.is_closed()  # closed by the loop's shutdown, not left to the garbage collector
        assert asyncio.run(llm.chat("second")).text == "second"
        assert len(llm._shared.per_loop) == 1  # the closed loop's entry was dropped

        async def inside_a_loop() -> str:
            return llm.chat_sync("sync from async").text

        assert asyncio.run(inside_a_loop()) == "sync from async"
    gc.collect()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_api_key_never_persisted_or_shown(ws):
    with FakeLLMServer(["fine", Fault(status=401, body=f"Incorrect API key provided: {SECRET}")]) as srv:
        s = settings(srv)
        llm = LLM(s, ws, run_id="k")
        llm.chat_sync("hello")
        with pytest.raises(LLMError) as ei:
            llm.chat_sync("again")
        assert srv.headers[0]["authorization"].endswith(SECRET)  # the key was really used
    assert SECRET not in str(ei.value) and "***" in str(ei.value)
    assert SECRET not in repr(s) and "api_key" not in s.to_public_dict()
    assert SECRET not in json.dumps(s.to_public_dict()) and SECRET not in repr(llm.calls)
    restored = LLMSettings.from_public_dict(json.loads(json.dumps(s.to_public_dict())), api_key=SECRET)
    assert restored == s
    ws.conn.execute("PRAGMA wal_checkpoint(FULL)")
    ws.close()
    for path in ws.path.parent.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


def test_settings_from_env_and_prices():
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "base-m",
           "MERMAIDFLOW_MODEL_JUDGE": "judge-m", "MERMAIDFLOW_BUDGET_USD": "2.5",
           "MERMAIDFLOW_CONCURRENCY": "3",
           "MERMAIDFLOW_PRICES": '{"base-m": [1, 3]}', "MERMAIDFLOW_CACHE": "off"}
    s = LLMSettings.from_env(env)
    assert s.configured and s.api_key is None
    assert s.models == {"optimizer": "base-m", "judge": "judge-m", "executor": "base-m"}
    assert (s.budget_usd, s.concurrency, s.cache) == (2.5, 3, False)
    assert s.cost("base-m", 1_000_000, 1_000_000) == pytest.approx(4.0)
    assert s.price_for("gpt-4o-mini-2024-07-18") == s.prices["gpt-4o-mini"]  # longest prefix wins
    assert s.price_for("openai/gpt-4o") == s.prices["gpt-4o"]
    assert s.price_for("my-local-llama") == (0.0, 0.0)
    assert LLMSettings.from_env({}).models == {r: "gpt-4o-mini" for r in ROLES}
    with pytest.raises(ValueError, match="MERMAIDFLOW_BUDGET_USD"):
        LLMSettings.from_env({"MERMAIDFLOW_BUDGET_USD": "lots"})
    with pytest.raises(ValueError, match="MERMAIDFLOW_PRICES"):
        LLMSettings.from_env({"MERMAIDFLOW_PRICES": '{"m": "cheap"}'})
    with pytest.raises(ValueError, match="unknown role"):
        LLMSettings.from_public_dict({"models": {"writer": "x"}})


def test_fake_server_extras():
    with FakeLLMServer(by_keyword({"capital": "Paris", "sum": "4"}, default="?")) as srv:
        llm = LLM(settings(srv))
        assert llm.chat_sync("the capital of France").text == "Paris"
        assert llm.chat_sync("what is the sum").text == "4"
        assert llm.chat_sync("hello").text == "?"
        assert list_models(settings(srv)) == ["fake-model"]

    def statuses(seed: int) -> list[int]:
        with FakeLLMServer(["ok"], fail_rate=0.5, seed=seed) as srv:
            llm = LLM(settings(srv, max_retries=0))
            out = []
            for i in range(8):
                try:
                    llm.chat_sync(f"q{i}")
                    out.append(200)
                except LLMError:
                    out.append(500)
            return out

    first = statuses(7)
    assert first == statuses(7) and 200 in first and 500 in first
