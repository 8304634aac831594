"""Real-endpoint behaviour against the scripted server (issue #9): per-role token caps, a context budget from
/v1/models, a setting or the server's own 400, trimming, JSON mode fallback, streaming with a silence timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from flowcore.llm import context as lc
from flowcore.llm.client import LLM, ContextOverflow, LLMError, LLMSettings
from tests.helpers.fakellm import FakeLLMServer


def _llm(srv: FakeLLMServer, **kw) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0, **kw))


def test_every_call_carries_its_roles_token_cap():
    with FakeLLMServer("ok") as srv:
        llm = _llm(srv, max_tokens={"judge": 200})
        asyncio.run(llm.chat("a", role="judge"))
        asyncio.run(llm.chat("b", role="optimizer"))
        asyncio.run(llm.chat("c", role="executor", max_tokens=50))  # a caller's smaller cap wins
    assert [r["max_tokens"] for r in srv.requests] == [200, 1536, 50]
    env = LLMSettings.from_env({"MERMAIDFLOW_MAX_TOKENS": "300", "MERMAIDFLOW_MAX_TOKENS_JUDGE": "99"})
    assert env.max_tokens == {"optimizer": 300, "judge": 99, "executor": 300}
    with pytest.raises(ValueError, match="MERMAIDFLOW_MAX_TOKENS_JUDGE"):
        LLMSettings.from_env({"MERMAIDFLOW_MAX_TOKENS_JUDGE": "lots"})
    with pytest.raises(ValueError, match="max_tokens"):
        LLMSettings(max_tokens={"judge": 0})


def test_a_stated_context_window_trims_the_prompt_and_caps_the_reply():
    history = " ".join(f"line{i}" for i in range(3000))  # far more than the window
    with FakeLLMServer("fine", context=1200, advertise_context=True) as srv:
        llm = _llm(srv)
        reply = asyncio.run(llm.chat([{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": f"History:\n{history}\nQuestion: 2+2?"}]))
        sent = srv.requests[-1]
    assert reply.text == "fine"
    text = "\n".join(m["content"] for m in sent["messages"])
    assert "left out to fit the model's context" in text and text.endswith("Question: 2+2?")
    assert lc.estimate(text) + sent["max_tokens"] <= 1200  # the prompt (counted on the safe side) and the cap fit


def test_the_servers_overflow_error_teaches_the_window_and_the_call_is_retried_trimmed():
    long = "word " * 900
    with FakeLLMServer("fits now", context=1000) as srv:  # says nothing in /v1/models
        llm = _llm(srv)
        reply = asyncio.run(llm.chat(long + "END"))
        first, second = srv.requests[0], srv.requests[1]
        again = asyncio.run(llm.chat(long + "AGAIN"))  # now known: trimmed before the first try
    assert reply.text == "fits now" and len(first["messages"][0]["content"]) > len(second["messages"][0]["content"])
    assert again.text == "fits now" and len(srv.requests) == 3


def test_a_prompt_that_cannot_fit_is_a_context_overflow_not_a_transient_error():
    with FakeLLMServer("x", context=300) as srv:
        llm = _llm(srv, context_tokens=300)
        msgs = [{"role": r, "content": "x " * 145} for r in ("system", "user", "assistant", "user")]
        with pytest.raises(ContextOverflow, match="context is 300") as info:
            asyncio.run(llm.chat(msgs))
    assert not info.value.transient and srv.requests == []  # never sent


def test_json_mode_falls_back_when_the_server_refuses_response_format():
    with FakeLLMServer('{"a": 1}', json_mode=False) as srv:
        llm = _llm(srv)
        reply = asyncio.run(llm.chat("json please", json_mode=True))
        asyncio.run(llm.chat("json again", json_mode=True))
    assert reply.text == '{"a": 1}'
    assert ["response_format" in r for r in srv.requests] == [True, False, False]  # refused once, remembered


def test_streaming_times_out_on_silence_not_on_length():
    words = " ".join(f"w{i}" for i in range(30))
    with FakeLLMServer(words, token_delay=0.05) as srv:  # 1.5 s in all, never 0.5 s of silence
        llm = _llm(srv, timeout=0.5, stream=True)
        start = time.perf_counter()
        reply = asyncio.run(llm.chat("talk"))
        took = time.perf_counter() - start
    assert reply.text == words and took > 1.0 and reply.completion_tokens == 30 and srv.requests[0]["stream"]
    with FakeLLMServer(words, latency=2.0) as srv:  # silent for 2 s before the first token
        llm = _llm(srv, timeout=0.5, stream=True)
        with pytest.raises(LLMError, match="of silence") as info:
            asyncio.run(llm.chat("talk"))
        time.sleep(0.2)
        assert srv.in_flight == 0
    assert info.value.transient


def test_tokens_per_second_is_measured():
    with FakeLLMServer("one two three four", latency=0.2) as srv:
        llm = _llm(srv)
        asyncio.run(llm.chat("x"))
    assert 5 < llm.usage.tokens_per_s < 25  # 4 tokens in ~0.2 s


def test_an_optimizer_prompt_over_the_context_falls_back_to_the_operators(tmp_path, monkeypatch):
    import json

    from flowcore.evolution import ops
    from flowcore.evolution.loop import Evolution, EvolutionConfig
    from flowcore.workspace.store import Workspace
    from tests.helpers.fakellm import Fault, message_text

    data = tmp_path / "g.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": "#### 4"}) + "\n" for q in ("2+2?", "1+3?")))
    overflow = Fault(status=400, body="This model's maximum context length is 2048 tokens. However, you "
                                      "requested 2600 tokens.")

    def respond(req):
        return overflow if "workflow optimizer of MermaidFlow" in message_text(req) else "The answer is 4."

    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        ws = Workspace(tmp_path / "w.db")
        result = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=1, candidates=2,
                                               data_path=str(data))).run()
    rows = Evolution(ws, EvolutionConfig(benchmark="gsm8k")).history.rounds(result["run_id"])
    assert result["status"] == "finished" and [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[1]["operator"] in ops.OPERATORS  # the graph operators stepped in
    dropped = [c for c in rows[1]["candidates"] if c.get("reason")]
    assert len(dropped) == 2 and all("does not fit the optimizer model's context" in c["reason"] for c in dropped)
