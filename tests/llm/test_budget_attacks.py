"""An outsider's attacks on LLM cost accounting (attack17): a hostile or broken OpenAI-compatible server on 127.0.0.1
(tests/helpers/fakellm.py) reached through the real ``openai`` client tries to make a call cost less than what it
generated, to mis-flag an estimate, or to break the accounting. Prices: $1 a prompt token, $2 a reply token."""

from __future__ import annotations

import math

import pytest

from flowcore.llm.client import LLM, BudgetExceeded, LLMError, run_usage
from tests.helpers.fakellm import FakeLLMServer, Fault
from tests.llm.test_unreported_usage import _log, _quarter, _settings

PROMPT = "Explain photosynthesis in one sentence, please."
TEXT = "Photosynthesis: chlorophyll-containing organisms transform electromagnetic radiation into carbohydrates"
LONG = " ".join(f"w{i}" for i in range(60))  # 60 chunks when streamed, ~45 tokens by 4 characters a token


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("into", ["reasoning_content", "tool_calls"])
def test_tokens_sent_outside_content_are_charged(ws, stream, into):
    """A reasoning model's thinking (``reasoning_content``: DeepSeek-R1 behind vLLM) or a tool call's arguments, with
    no usage, or a usage of 0 completion tokens: the tokens were made and billed. Before, only ``content`` was
    counted: 0 completion tokens, and the 0 was believed (no text in ``content``) and not flagged."""
    with FakeLLMServer([Fault(body=LONG, into=into, no_usage=True),
                        Fault(body=LONG, into=into, usage={"prompt_tokens": 5, "completion_tokens": 0})]) as srv:
        llm = LLM(_settings(srv, stream=stream), ws, run_id="r")
        unreported = llm.chat_sync(PROMPT)
        zero = llm.chat_sync(PROMPT + " Again.")
    least = len(LONG.split()) if stream else _quarter(LONG)  # streamed: a token a chunk at least
    for reply in (unreported, zero):
        assert reply.estimated and reply.completion_tokens >= least, (reply.completion_tokens, least)
    assert zero.prompt_tokens == 5  # the reported prompt count is kept
    assert llm.usage.estimated == 2 and all(r[3] == 1 and r[1] >= least for r in _log(ws, "r"))


def test_a_usage_sent_before_the_text_is_not_the_replys_count(ws):
    """A streamed usage chunk that comes first (1 completion token), then 60 chunks of text and no usage at the end.
    Before, the early usage was the bill: 1 token for 60 chunks, not flagged."""
    early = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    with FakeLLMServer(Fault(body=LONG, early_usage=True, usage=early)) as srv:
        llm = LLM(_settings(srv, stream=True), ws, run_id="e")
        reply = llm.chat_sync(PROMPT)
    assert reply.text == LONG and reply.estimated
    assert reply.completion_tokens >= len(LONG.split()) and reply.prompt_tokens == 5
    assert _log(ws, "e")[0][1:4] == (reply.completion_tokens, pytest.approx(reply.cost), 1)


def test_a_final_usage_below_the_chunks_received_is_not_believed():
    """A usage that says 3 completion tokens for a stream of 60 chunks of text (each a token at least)."""
    with FakeLLMServer(Fault(body=LONG, usage={"prompt_tokens": 5, "completion_tokens": 3})) as srv:
        reply = LLM(_settings(srv, stream=True)).chat_sync(PROMPT)
    assert reply.estimated and reply.completion_tokens >= len(LONG.split())


def test_a_stream_past_max_tokens_is_charged_every_chunk_it_sent():
    """max_tokens 10; the server streams 60 chunks and no usage. The estimate is capped at max_tokens (4 characters a
    token is too many for a small model's short tokens), but never below the chunks that came: before, 10 tokens."""
    with FakeLLMServer(Fault(body=LONG, no_usage=True)) as srv:
        reply = LLM(_settings(srv, stream=True, max_tokens={"executor": 10})).chat_sync(PROMPT)
    assert srv.requests[0]["max_tokens"] == 10
    assert reply.estimated and reply.completion_tokens == len(LONG.split())


def test_a_stream_within_max_tokens_is_still_capped_there():
    """The cap still bounds an estimate of long words: 4 chunks of ~25 tokens by 4 characters, cap 8: 8 tokens."""
    with FakeLLMServer(Fault(body=TEXT, no_usage=True)) as srv:
        reply = LLM(_settings(srv, stream=True, max_tokens={"executor": 8})).chat_sync(PROMPT)
    assert reply.estimated and reply.completion_tokens == 8


def test_a_plain_body_cut_off_on_its_way_is_charged_each_time(ws):
    """Every reply's body stops halfway (Content-Length promised, a hang-up): the openai client asks again by itself
    (max_retries 2) and the call fails. The server made (and billed) three completions; before, the call was $0, so
    a run whose replies kept breaking never reached its budget. Now each cut body is charged, estimated."""
    with FakeLLMServer([Fault(body=LONG, cut=True)]) as srv:
        llm = LLM(_settings(srv, max_retries=2), ws, run_id="cut")
        with pytest.raises(LLMError, match="cannot connect|cut off"):
            llm.chat_sync(PROMPT)
    assert len(srv.requests) == 3
    rows = _log(ws, "cut")
    assert len(rows) == 3 and all(r[1] > 0 and r[2] > 0 and r[3] == 1 and r[4] == 1 for r in rows), rows
    assert llm.usage.errors == 3 and llm.usage.estimated == 3
    assert llm.usage.cost == pytest.approx(sum(r[2] for r in rows)) == pytest.approx(run_usage(ws, "cut").cost)


def test_a_cut_body_then_a_whole_one_charges_both():
    """The first body is cut off, the client's retry gets a whole reply: the call succeeds, and costs both."""
    with FakeLLMServer([Fault(body=LONG, cut=True), LONG]) as srv:
        llm = LLM(_settings(srv, max_retries=1))
        reply = llm.chat_sync(PROMPT)
    assert reply.text == LONG and not reply.estimated and len(srv.requests) == 2
    assert llm.usage.errors == 1 and llm.usage.estimated == 1 and llm.usage.cost > reply.cost > 0


def test_the_budget_stops_a_run_of_cut_off_bodies():
    """A $300 budget, every body cut off: the budget is reached (before: every call free, for ever)."""
    with FakeLLMServer([Fault(body=LONG * 3, cut=True)]) as srv:
        llm = LLM(_settings(srv, max_retries=0, budget_usd=300.0))
        for i in range(20):
            try:
                llm.chat_sync(f"{PROMPT} {i}")
            except BudgetExceeded:
                break
            except LLMError:
                pass
        else:
            pytest.fail(f"20 cut-off replies and the budget never stopped them (spent ${llm.usage.cost:g})")
    assert llm.usage.cost >= 300.0


JUNK = {  # usage a broken server sends -> whether its completion count stands (else estimated from the text)
    "nan": ({"prompt_tokens": float("nan"), "completion_tokens": float("nan")}, False),
    "inf": ({"prompt_tokens": float("inf"), "completion_tokens": float("-inf")}, False),
    "negative": ({"prompt_tokens": -5, "completion_tokens": -10**9}, False),
    "huge": ({"prompt_tokens": 10**30, "completion_tokens": 10**30}, False),
    "bool": ({"prompt_tokens": True, "completion_tokens": True}, False),
    "string": ({"prompt_tokens": "9", "completion_tokens": "100"}, False),
    "float": ({"prompt_tokens": 9.0, "completion_tokens": 100.5}, False),
    "no-completion": ({"prompt_tokens": 9}, False),
    "details": ({"prompt_tokens": 9, "completion_tokens": 100,
                 "completion_tokens_details": {"reasoning_tokens": "lots"}, "prompt_tokens_details": None}, True),
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("kind", list(JUNK))
def test_a_usage_no_call_can_have_is_estimated_never_a_crash_or_a_credit(ws, kind, stream):
    """Withstood: each junk count is no bill (estimated, flagged), the cost stays a finite amount above 0 (never a
    credit, never NaN), the call log takes it and agrees with the run's totals."""
    usage, stands = JUNK[kind]
    with FakeLLMServer(Fault(body=LONG, usage=usage)) as srv:
        llm = LLM(_settings(srv, stream=stream), ws, run_id=kind)
        reply = llm.chat_sync(PROMPT)
    assert reply.text == LONG and reply.estimated == (not stands)
    assert isinstance(reply.completion_tokens, int) and reply.completion_tokens >= len(LONG.split()) * stream
    assert isinstance(reply.prompt_tokens, int) and 0 < reply.prompt_tokens <= 2**31
    assert math.isfinite(reply.cost) and reply.cost > 0
    rows = _log(ws, kind)
    assert rows == [(reply.prompt_tokens, reply.completion_tokens, pytest.approx(reply.cost), int(reply.estimated), 0)]
    u = run_usage(ws, kind)
    assert (u.prompt_tokens, u.completion_tokens, u.estimated) == rows[0][:2] + (rows[0][3],)
    assert u.cost == pytest.approx(llm.usage.cost)
