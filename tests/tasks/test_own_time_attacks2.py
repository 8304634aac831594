"""Attacks on the problem clock, round two (issue #25): a candidate must never reach, dodge or inflate its
verdict. Through the real path: evaluate_workflow -> runtime -> flowcore's LLM client (the real openai client)
-> the scripted server on 127.0.0.1 -> scorer. Each test fails on the commit under attack (b1a4cf1)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks.problem import Problem
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

BASELINES = Path(__file__).resolve().parents[2] / "assets" / "baselines"
IO = parse((BASELINES / "math_io.mmd").read_text())


def _problems(*questions: str) -> list[Problem]:
    return [Problem(id=f"q{i}", benchmark="gsm8k", question=q, reference="7") for i, q in enumerate(questions)]


def _llm(srv: FakeLLMServer, ws, **kw) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="k", **{"max_retries": 0, **kw}), ws)


def test_a_sampled_model_that_writes_a_replacement_character_is_graded_not_errored(ws):
    # The ANSI fix of round one, with U+FFFD instead of ESC. A candidate's prompt can ask the model to write
    # "�" (a valid UTF-8 character, EF BF BD, or the JSON escape \ufffd): at a sampling temperature every
    # attempt differs, so "the same odd text twice" never applies, every reply is "garbled", the call ends in a
    # transient LLMError and the wrong answer is "not run", out of the score (and each attempt's wall time is
    # given back on the clock, feeding BusyTimeout). The transfer was intact: the JSON parsed.
    # Fix direction: call a transfer garbled only from the raw bytes (httpx saw invalid UTF-8 in the body, or
    # the JSON failed to parse), never from characters in a well-formed, parsed completion.
    count = itertools.count()
    with FakeLLMServer(lambda r: f"I think it is {next(count)} \ufffd") as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=2)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error


def _refused(reason: str, refusal: str | None) -> Fault:
    msg = {"role": "assistant", "content": None, **({"refusal": refusal} if refusal else {})}
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": msg, "finish_reason": reason}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}}
    return Fault(malformed=True, body=json.dumps(body))


def test_a_prompt_the_model_refuses_is_a_wrong_answer_not_errored(ws):
    # A candidate whose prompt makes the model refuse (OpenAI's `refusal` field with content null) or trips
    # the provider's content filter (finish_reason "content_filter", content null) gets "malformed reply: no
    # message content", treated as a garbled transfer: retried, given back, then a transient LLMError, so the
    # problem is "not run". A workflow on a hard problem can dodge its verdict by adding text the model
    # refuses. The endpoint worked; the workflow's prompt got no answer: a wrong answer, like an overflow.
    # Fix direction: a well-formed completion with a refusal or finish_reason content_filter is an empty
    # answer (graded wrong, reason kept), not a malformed reply; likewise HTTP 400 content_policy_violation
    # (Azure) next to ContextOverflow in by_workflow.
    with FakeLLMServer(_refused("stop", "I can't help with that.")) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=1)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error


def test_a_content_filtered_reply_is_a_wrong_answer_not_errored(ws):
    with FakeLLMServer(_refused("content_filter", None)) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=1)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error


def test_a_content_policy_refusal_by_the_endpoint_is_a_wrong_answer_not_errored(ws):
    # Azure OpenAI answers a prompt its filter refuses with HTTP 400, code "content_filter" ("The response
    # was filtered due to the prompt triggering Azure OpenAI's content management policy"). That is a plain,
    # non-transient LLMError: errored, out of the score. The prompt is the workflow's.
    body = {"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's "
                                 "content management policy.", "type": None, "param": "prompt",
                      "code": "content_filter", "status": 400}}
    with FakeLLMServer(Fault(status=400, body=json.dumps(body))) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error



def _programs_beside_a_custom():
    return parse('flowchart TD\n    PROBLEM(["Problem"])\n    P1["Programmer"]\n    P2["Programmer"]\n    C1["Custom"]\n'
                 '    E1["ScEnsemble"]\n    RETURN(["Return"])\n    class PROBLEM,RETURN Interface\n'
                 '    class P1,P2 ProgrammerOp\n    class C1 CustomOp\n    class E1 ScEnsembleOp\n'
                 '    PROBLEM -->|problem| P1 & P2\n    PROBLEM -->|input| C1\n'
                 '    P1 & P2 & C1 -->|solutions| E1\n    PROBLEM -->|problem| E1\n    E1 --> RETURN\n')


def test_a_slot_wait_on_one_branch_does_not_hide_own_work_on_another(ws):
    # The given-back spans are a union over the problem's whole timeline, so a sandbox-slot wait on one branch
    # also erases the time the problem's *other* branches spent on their own work meanwhile. Problem Y runs two
    # Programmers beside a Custom whose call takes 3 s (its own model call: a 2 s timeout makes it wrong, as it
    # is alone). Beside it, problem X (same candidate, another question) takes both sandbox slots with programs
    # that sleep; Y holds 0 < its share, so its slot wait (0 .. X's cancellation at ~2 s) is given back, and
    # with it 2 s of its Custom's own call: own time ~1 s, graded instead of timed out. A candidate can farm
    # this by sacrificing one problem to hold the slots.
    # Fix direction: give back a slot wait (or any blocked span) only while the problem has nothing of its own
    # running (no held slot, no answered-or-pending HTTP attempt, no running sandbox): i.e. measure own time as
    # the union of its own activity, not wall time less the union of its waits.
    def respond(request: dict):
        q = message_text(request)
        if "Several candidate solutions" in q:
            return "Answer: A"
        if "Write a Python program" in q:
            if "HOG" in q:
                return "```python\nimport time\n\ndef solve():\n    time.sleep(30)\n    return 7\n```"
            return Fault(body="```python\ndef solve():\n    return 7\n```", delay=0.3)
        return Fault(body="It is \\boxed{7}", delay=3.0)

    wf = _programs_beside_a_custom()
    with FakeLLMServer(respond) as srv:
        alone = asyncio.run(evaluate_workflow(wf, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, cache=False),
                                              timeout=2.0))
        assert alone.results[0].error and alone.results[0].error.startswith("OwnTimeout"), alone.results[0].error
        rep = asyncio.run(evaluate_workflow(wf, "gsm8k", _problems("HOG 3+4?", "3+4?"),
                                            llm=_llm(srv, ws, cache=False), timeout=2.0, concurrency=2))
    y = rep.results[1]
    assert y.error is not None and y.error.startswith("OwnTimeout"), (y.correct, y.errored, y.error, y.latency)


def test_an_honest_pair_of_programs_is_not_made_wrong_by_a_neighbour_at_its_share(ws):
    # The sandbox has one slot per CPU (2 here). Honest Y runs two 1.2 s programs in parallel: alone it is
    # right in ~1.5 s of a 2.5 s timeout. Beside X, whose program sleeps (the model's code) in one slot, Y holds
    # 1 slot = its share (2 slots / 2 problems), so Pool gives nothing back: its second program waits for X's
    # slot (X is cancelled at its own 2.5 s) or for Y's first, and Y, serialised, passes 2.5 s of "own" time: a
    # right answer scored wrong because a neighbour holds a slot. "At its share it waits for itself" is not
    # true when the slot it waits for would have been free without the neighbour. (This is the trade-off
    # waits.py documents; it breaks the promise "never made wrong by a neighbour" on a 2-CPU host.)
    # Fix direction: give back a slot wait while any slot it could have had is held by another problem
    # beyond what the problem itself could use, or make per-problem slot budgets (a problem's runs never wait
    # for another problem's slot: ceil(size/problems) reserved each, or scale the timeout by slots/share).
    import os

    if len(os.sched_getaffinity(0)) != 2:
        import pytest

        pytest.skip("the numbers assume 2 sandbox slots")

    hog = itertools.count()

    def respond(request: dict):
        q = message_text(request)
        if "Several candidate solutions" in q:
            return "Answer: A"
        if "Write a Python program" in q:
            if "HOG" in q:  # one of X's programs sleeps, the other is quick: X holds one slot, its share
                quick = next(hog) % 2
                nap = 0 if quick else 30
                return f"```python\nimport time\n\ndef solve():\n    time.sleep({nap})\n    return 7\n```"
            return Fault(body="```python\nimport time\n\ndef solve():\n    time.sleep(1.2)\n    return 7\n```",
                         delay=0.3)
        return "\\boxed{7}"

    wf = _wide_programmers2()
    with FakeLLMServer(respond) as srv:
        alone = asyncio.run(evaluate_workflow(wf, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, cache=False),
                                              timeout=2.5))
        assert [(r.correct, r.errored) for r in alone.results] == [(True, False)], alone.results[0].error
        rep = asyncio.run(evaluate_workflow(wf, "gsm8k", _problems("HOG 3+4?", "3+4?"),
                                            llm=_llm(srv, ws, cache=False), timeout=2.5, concurrency=2))
    y = rep.results[1]
    assert y.correct or y.errored, (y.error, y.latency)


def _wide_programmers2():
    return parse('flowchart TD\n    PROBLEM(["Problem"])\n    P1["Programmer"]\n    P2["Programmer"]\n'
                 '    E1["ScEnsemble"]\n    RETURN(["Return"])\n    class PROBLEM,RETURN Interface\n'
                 '    class P1,P2 ProgrammerOp\n    class E1 ScEnsembleOp\n'
                 '    PROBLEM -->|problem| P1 & P2\n    P1 & P2 -->|solutions| E1\n    PROBLEM -->|problem| E1\n'
                 '    E1 --> RETURN\n')


def test_a_call_slower_than_the_client_timeout_does_not_turn_an_own_timeout_into_not_run(ws):
    # A candidate that asks the model for a very long answer makes its own call slow. Its own time passes the
    # 0.5 s problem timeout while the attempt is in flight ("pending"), so _within waits in overtime (up to
    # 2 x 3 x 0.5 = 3 s). At 1 s the client's own read timeout ends the attempt with no response: the whole
    # second is given back as the endpoint's, own time drops to ~0, and the LLMError that follows makes the
    # problem "not run". Alone, with a client timeout above 3 s, the same workflow is a wrong answer
    # (OwnTimeout): which verdict it gets depends on a setting, and a candidate can pick the favourable one by
    # the length it asks for. (Judgement call: a silent endpoint and a long generation look alike without
    # streaming.) Fix direction: a client read timeout that fires after the problem's own time ran out is
    # the workflow's (its call was still being answered); or stream, so a generating model is seen as
    # answering (tokens flow) and only silence is the endpoint's.
    with FakeLLMServer(Fault(body="\\boxed{8}", delay=2.0)) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, timeout=1.0),
                                            timeout=0.5))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error
