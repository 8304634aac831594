"""The budget is never undercounted by a server that does not say what it billed: a streamed reply without usage
(OpenAI-compatible servers may leave it out even when asked with stream_options.include_usage), a garbled body, a
stream that breaks off after some tokens. Each is charged its usage where it has one, else an estimate (~4
characters a token of the messages and of the text received, at least a token a chunk), flagged ``estimated`` in
the reply, the run's usage and the call log; the budget counts it. Against the scripted OpenAI-compatible server
on 127.0.0.1 (tests/helpers/fakellm.py) through the real ``openai`` client."""

from __future__ import annotations

import math

import pytest

from flowcore.llm.client import LLM, ROLES, BudgetExceeded, LLMError, LLMSettings, run_usage
from tests.helpers.fakellm import FakeLLMServer, Fault

PROMPT = "Explain photosynthesis in one sentence, please."
# long words: one chunk each from the fake server, several tokens each by any tokenizer
TEXT = "Photosynthesis: chlorophyll-containing organisms transform electromagnetic radiation into carbohydrates"


def _settings(srv: FakeLLMServer, **kw) -> LLMSettings:
    base = {"base_url": srv.base_url, "api_key": "k", "models": {r: "m" for r in ROLES},
            "prices": {"m": (1_000_000.0, 2_000_000.0)}, "max_retries": 0}  # $1 a prompt token, $2 a reply token
    return LLMSettings(**{**base, **kw})


def _quarter(text: str) -> int:
    return math.ceil(len(text) / 4)


def _log(ws, run_id: str) -> list[tuple]:
    return [tuple(r) for r in ws.query("SELECT prompt_tokens, completion_tokens, cost, estimated, error IS NOT NULL"
                                       " FROM llm_calls WHERE run_id = ? ORDER BY id", (run_id,))]


def test_a_streamed_reply_without_usage_is_charged_an_estimate_flagged_as_such(ws):
    """Before, the stream's chunks were its token count: 4 here, for a text of ~25 tokens."""
    with FakeLLMServer([Fault(body=TEXT, no_usage=True), TEXT]) as srv:
        llm = LLM(_settings(srv, stream=True), ws, run_id="s")
        guessed = llm.chat_sync(PROMPT)
        told = llm.chat_sync(PROMPT + " Again.")  # the same server with usage: its counts, not an estimate
    assert srv.requests[0]["stream"] and srv.requests[0]["stream_options"] == {"include_usage": True}
    assert guessed.text == TEXT and guessed.estimated and not told.estimated
    pt, ct = _quarter(PROMPT), _quarter(TEXT)
    assert (guessed.prompt_tokens, guessed.completion_tokens) == (pt, ct) and ct > len(TEXT.split())
    assert guessed.cost == pytest.approx(pt * 1 + ct * 2)
    assert (told.prompt_tokens, told.completion_tokens) == (len(PROMPT.split()) + 1, len(TEXT.split()))
    assert llm.usage.estimated == 1 and llm.usage.cost == pytest.approx(guessed.cost + told.cost)
    assert _log(ws, "s") == [(pt, ct, pytest.approx(guessed.cost), 1, 0),
                             (told.prompt_tokens, told.completion_tokens, pytest.approx(told.cost), 0, 0)]
    u = run_usage(ws, "s")
    assert u.estimated == 1 and u.cost == pytest.approx(llm.usage.cost)


def test_a_plain_reply_whose_usage_says_zero_tokens_for_its_text_is_estimated():
    zeros = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    with FakeLLMServer(Fault(body=TEXT, usage=zeros)) as srv:
        reply = LLM(_settings(srv)).chat_sync(PROMPT)
    assert reply.estimated and (reply.prompt_tokens, reply.completion_tokens) == (_quarter(PROMPT), _quarter(TEXT))


@pytest.mark.parametrize("garbled", [False, True], ids=["error-event", "garbled-chunk"])
def test_a_stream_that_breaks_off_is_charged_for_what_it_delivered(ws, garbled):
    """Three words arrive, then an error event (vLLM's, when generation fails) or a chunk that is not JSON: the
    call fails, and before it was charged $0 for the prompt read and the tokens made."""
    with FakeLLMServer(Fault(body=TEXT, fail_after=3, garbled=garbled)) as srv:
        llm = LLM(_settings(srv, stream=True), ws, run_id="b")
        with pytest.raises(LLMError, match="not JSON" if garbled else "generation failed"):
            llm.chat_sync(PROMPT)
    delivered = " ".join(TEXT.split(" ")[:3])
    pt, ct = _quarter(PROMPT), _quarter(delivered)
    assert llm.usage.errors == 1 and llm.usage.estimated == 1 and llm.usage.cost == pytest.approx(pt + 2 * ct)
    assert _log(ws, "b") == [(pt, ct, pytest.approx(pt + 2 * ct), 1, 1)]
    assert run_usage(ws, "b").cost == pytest.approx(pt + 2 * ct)


def test_a_garbled_body_is_charged_what_the_server_billed_else_an_estimate(ws):
    """Bytes that are not UTF-8 in a body whose usage is intact: the server's bill. A body that is no JSON at all
    (no usage to read): the prompt and the body's text, estimated. A 200 without choices: its usage."""
    not_json = '{"id": "x", "choices": [{"message": {"content": "half an answer'
    with FakeLLMServer([Fault(body=TEXT, garbled=True), Fault(malformed=True, body=not_json),
                        Fault(malformed=True, body='{"choices": [], "usage": {"prompt_tokens": 3, '
                                                   '"completion_tokens": 5}}')]) as srv:
        llm = LLM(_settings(srv), ws, run_id="g")
        for _ in range(3):
            with pytest.raises(LLMError, match="malformed reply"):
                llm.chat_sync(PROMPT)
    billed = (len(PROMPT.split()), len(TEXT.split()))  # the fake server's usage: a token a word
    rows = _log(ws, "g")
    assert rows[0] == (*billed, pytest.approx(billed[0] + 2 * billed[1]), 0, 1)
    assert rows[1] == (_quarter(PROMPT), _quarter(not_json),
                       pytest.approx(_quarter(PROMPT) + 2 * _quarter(not_json)), 1, 1)
    assert rows[2] == (3, 5, pytest.approx(3 + 2 * 5), 0, 1)
    assert llm.usage.cost == pytest.approx(sum(r[2] for r in rows)) and llm.usage.estimated == 1


def test_the_budget_stop_counts_estimated_costs():
    """A $100 budget. Streamed replies without usage cost $64 each by the estimate (charged a token a chunk they
    cost $28): the third call is refused. Garbled replies, each charged the prompt it read and the body it sent
    (they were free): the budget stops them too, where before they went on for ever."""
    with FakeLLMServer(Fault(body=TEXT, no_usage=True)) as srv:
        llm = LLM(_settings(srv, stream=True, budget_usd=100.0))
        first = llm.chat_sync(PROMPT)
        llm.chat_sync(PROMPT + " Again.")
        with pytest.raises(BudgetExceeded, match=r"budget of \$100\.0000"):
            llm.chat_sync(PROMPT + " Once more.")
        assert len(srv.requests) == 2 and first.cost == pytest.approx(_quarter(PROMPT) + 2 * _quarter(TEXT))
    body = "<html>busy</html>"
    with FakeLLMServer(Fault(malformed=True, body=body)) as srv:
        llm = LLM(_settings(srv, budget_usd=100.0, max_retries=2))  # three attempts a call, each charged
        for i in range(50):
            try:
                llm.chat_sync(f"{PROMPT} {i}")
            except BudgetExceeded:
                break
            except LLMError as e:
                assert "malformed reply" in str(e)
        else:
            pytest.fail("the budget never stopped the garbled replies")
        spent, attempts = 0.0, 0
        while spent < 100.0:  # the check before each attempt lets one more through while under the budget
            spent += _quarter(f"{PROMPT} {attempts // 3}") + 2 * _quarter(body)
            attempts += 1
        assert len(srv.requests) == attempts and llm.usage.estimated == attempts
        assert llm.usage.cost == pytest.approx(spent)


def test_an_older_workspaces_call_log_gets_the_estimated_column(any_ws):
    """A workspace whose call log predates the flag (SQLite and PostgreSQL): the column is added, its rows count
    as reported, and a new estimated call is flagged among them."""
    from flowcore.llm.client import _DDL

    any_ws.ensure_schema("llm", _DDL)  # the call log as the release before made it
    assert "estimated" not in any_ws.columns("llm_calls")
    with any_ws.transaction() as c:
        c.execute("INSERT INTO llm_calls(run_id, ts, role, model, prompt_tokens, completion_tokens, cost, latency,"
                  " cached, error) VALUES (?,?,?,?,?,?,?,?,?,?)", ("old", 0.0, "executor", "m", 4, 2, 8.0, 0.1, 0, None))
    with FakeLLMServer(Fault(body=TEXT, no_usage=True)) as srv:
        reply = LLM(_settings(srv, stream=True), any_ws, run_id="old").chat_sync(PROMPT)
    assert "estimated" in any_ws.columns("llm_calls")
    u = run_usage(any_ws, "old")
    assert (u.calls, u.estimated) == (2, 1) and u.cost == pytest.approx(8.0 + reply.cost)


def test_an_estimated_reply_is_never_more_tokens_than_the_request_allowed(ws):
    """A small model's tokens are short (SmolLM2 under `make test-real`: 64-token replies estimated at 81, past
    the executor's cap): the estimate stops at the max_tokens the request sent, which no server writes past. Plain:
    a stream's chunks are a token each at least, past the cap too (tests/llm/test_budget_attacks.py)."""
    with FakeLLMServer([Fault(body=TEXT * 4, no_usage=True)]) as srv:
        llm = LLM(_settings(srv, max_tokens={"executor": 20}), ws, run_id="cap")
        reply = llm.chat_sync(PROMPT, role="executor")
    assert srv.requests[0]["max_tokens"] == 20 and _quarter(TEXT * 4) > 20
    assert reply.estimated and reply.completion_tokens == 20 and reply.cost == pytest.approx(_quarter(PROMPT) + 40)
