"""Attacks on the problem clock (issue #25, flowcore/execution/waits.py): a candidate must never reach, dodge
or inflate its verdict, and an honest problem must never be made wrong by load or the endpoint's failures.

Through the real path: evaluate_workflow -> runtime -> flowcore's LLM client (the real openai client) -> the
scripted server on 127.0.0.1. Each test fails on the commit under attack and says what it shows."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time

import pytest

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text
from tests.tasks.test_own_time import COT_SC, IO, _llm, _problems  # the same workflows, problems and client


def _outcomes(report) -> list[tuple[bool, bool]]:
    return [(r.correct, r.errored) for r in report.results]


def _closed_port() -> str:
    """A base URL on 127.0.0.1 where nothing listens: every connection is refused (an endpoint that is down)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


def test_an_endpoint_that_refuses_every_connection_is_errored_not_wrong(ws):
    # The endpoint is down. The openai client retries the refused connection after its own backoff
    # (0.5 s, 1 s, 2 s): no HTTP response ever arrives, so the clock's "failing" state is never entered and
    # each backoff is given back only when the next attempt starts. The deadline falls inside a backoff and
    # the outage is scored as the workflow's own timeout: every problem "wrong", the score 0 instead of
    # "1 not run".
    llm = LLM(LLMSettings(base_url=_closed_port(), api_key="k", max_retries=3), ws)
    rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=llm, timeout=1.0))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, True), r.error
    assert (rep.n, rep.errors) == (0, 1)


def test_a_gateway_timeout_that_arrives_after_the_deadline_is_not_a_wrong_answer(ws):
    # A proxy in front of the model answers 504 after 1.5 s (the endpoint failed). The failed attempt is
    # given back only once its 504 has arrived; the problem's 1 s deadline passes first, so the endpoint's
    # failure is scored as the workflow's own timeout.
    with FakeLLMServer(Fault(status=504, delay=1.5, body="upstream timed out")) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=1),
                                            timeout=1.0))
    (r,) = rep.results
    assert r.errored, r.error


def test_a_garbled_transfer_slower_than_the_timeout_is_given_back(ws):
    # The first reply is garbled (the endpoint's fault, asked again) and takes 1.5 s; the second is right
    # and immediate. Own time ~0 s, yet the garbled attempt is credited only after it has arrived, past the
    # 1 s deadline: a right answer scored wrong.
    replies = iter([Fault(body="\\boxed{7}", garbled=True, delay=1.5)])
    with FakeLLMServer(lambda r: next(replies, "\\boxed{7}")) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=2),
                                            timeout=1.0))
    assert _outcomes(rep) == [(True, False)], rep.results[0].error


def test_parallel_garbled_replies_are_given_back_once_not_once_per_call(ws):
    # Credit farming. Five samples run at once and each first reply is garbled after 0.6 s: 0.6 s of wall
    # clock went to the endpoint, but clock_give adds each call's latency, 3.0 s. Then the ensemble's own
    # call takes 4 s: ~4 s of the workflow's own time against a 1.5 s timeout, a wrong answer. With 3.0 s
    # "given back" the deadline reaches the 3x cap, and past it more than a quarter of the timeout was
    # "waiting for others": BusyTimeout, errored, out of the score.
    count = itertools.count()
    lock = threading.Lock()

    def respond(request: dict):
        if "Several candidate solutions" in message_text(request):
            return Fault(body="Answer: A", delay=4.0)
        with lock:
            k = next(count)
        if k < 5:
            return Fault(body=f"sample {k}", garbled=True, delay=0.6)
        return f"\\boxed{{{k}}}"  # five different answers: the ensemble has to be asked

    with FakeLLMServer(respond) as srv:
        rep = asyncio.run(evaluate_workflow(COT_SC, "gsm8k", _problems("3+4?"),
                                            llm=_llm(srv, ws, max_retries=2, cache=False), timeout=1.5))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error
    assert r.error.startswith("OwnTimeout"), r.error


def test_an_honest_problem_is_not_made_wrong_by_a_neighbour_holding_client_slots(ws):
    # CoT-SC: five 1 s samples. Alone, with the default 8 client slots, they run at once: right in ~1 s of a
    # 1.5 s timeout. Beside a slow problem whose five samples hold five slots, only three of its samples get a
    # slot; the other two wait behind its own three (so nothing is given back) and it ends at ~2 s: its
    # right answer is scored wrong because of another problem's load.
    def respond(request: dict):
        return Fault(body="\\boxed{7}", delay=6.0 if "SLOW" in message_text(request) else 1.0)

    with FakeLLMServer(respond) as srv:
        alone = asyncio.run(evaluate_workflow(COT_SC, "gsm8k", _problems("3+4?"),
                                              llm=_llm(srv, ws, cache=False), timeout=1.5))
        assert _outcomes(alone) == [(True, False)], alone.results[0].error
        rep = asyncio.run(evaluate_workflow(COT_SC, "gsm8k", _problems("SLOW 3+4?", "3+4?"),
                                            llm=_llm(srv, ws, cache=False), timeout=1.5, concurrency=2))
    honest = rep.results[1]
    assert not (not honest.correct and not honest.errored), honest.error  # right, or "not run": never wrong


def _wide_programmers(k: int):
    nodes = [f"P{i}" for i in range(k)]
    return parse("flowchart TD\n    PROBLEM([\"Problem\"])\n" + "".join(f"    {n}[\"Programmer\"]\n" for n in nodes)
                 + "    E1[\"ScEnsemble\"]\n    RETURN([\"Return\"])\n    class PROBLEM,RETURN Interface\n"
                 + f"    class {','.join(nodes)} ProgrammerOp\n    class E1 ScEnsembleOp\n"
                 + f"    PROBLEM -->|problem| {' & '.join(nodes)}\n    {' & '.join(nodes)} -->|solutions| E1\n"
                 + "    PROBLEM -->|problem| E1\n    E1 --> RETURN\n")


@pytest.mark.slow
def test_a_neighbours_orphaned_sandbox_runs_never_make_an_honest_problem_wrong(ws):
    # One problem's programs sleep (the model's code; no CPU used). Its own timeout cancels it, but the runs
    # live on in asyncio.to_thread's worker threads (min(32, cpus + 4) of them, all taken) for 10 s each,
    # two at a time. The honest problem's Programmer runs then queue for a worker thread: neither "waiting"
    # nor "active" on its clock, so that queue is its own time and its right answer is scored wrong (alone it
    # is right in under a second). Either it is right, or "not run": never wrong.
    k = min(32, (os.cpu_count() or 1) + 4)

    def respond(request: dict):
        if "HANG" in message_text(request):
            return "```python\nimport time\n\ndef solve():\n    time.sleep(60)\n    return 7\n```"
        # the honest program arrives 0.5 s later, so the hanging runs take the worker threads first
        return Fault(body="```python\ndef solve():\n    return 7\n```", delay=0.5)

    wide = _wide_programmers(k)
    with FakeLLMServer(respond) as srv:
        alone = asyncio.run(evaluate_workflow(wide, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, cache=False),
                                              timeout=3.0))
        assert _outcomes(alone) == [(True, False)], alone.results[0].error
        rep = asyncio.run(evaluate_workflow(wide, "gsm8k", _problems("HANG 3+4?", "3+4?"),
                                            llm=_llm(srv, ws, cache=False), timeout=3.0, concurrency=2))
    honest = rep.results[1]
    assert honest.correct or honest.errored, honest.error


def test_a_reply_that_stalls_the_event_loop_is_charged_to_its_own_problem_not_a_neighbours(ws):
    # The model answers one problem's FormatOp with "\\boxed{" x 3000 (21 KB, far under the 1 MB reply cap).
    # last_boxed parses it on the event loop in quadratic time (seconds). Meanwhile the honest neighbour's
    # call is in flight ("active"), so the stall is charged as its own time: wrong. And the hostile problem,
    # whose own work took several times its timeout, is graded (right here), because _within only looks at
    # the clock when the loop is free again and then finds the task done.
    fmt = parse('flowchart TD\n    PROBLEM(["Problem"])\n    C1["Custom"]\n    F1["Format"]\n    RETURN(["Return"])\n'
                '    class PROBLEM,RETURN Interface\n    class C1 CustomOp\n    class F1 FormatOp\n'
                '    PROBLEM -->|input| C1\n    C1 -->|solution| F1\n    PROBLEM -->|problem| F1\n    F1 --> RETURN\n')

    def respond(request: dict):
        q = message_text(request)
        if "Give only the final answer" in q:
            return "\\boxed{" * 3000 + "7" if "HOSTILE" in q else "\\boxed{7}"
        return Fault(body="The answer is 7.", delay=0.2 if "HOSTILE" in q else 1.0)

    with FakeLLMServer(respond) as srv:
        t0 = time.monotonic()
        rep = asyncio.run(evaluate_workflow(fmt, "gsm8k", _problems("HOSTILE 3+4?", "3+4?"),
                                            llm=_llm(srv, ws, cache=False), timeout=2.5, concurrency=2))
        took = time.monotonic() - t0
    hostile, honest = rep.results
    assert honest.correct or honest.errored, (took, honest.error)
    assert took < 2.5 * 1.5 or not hostile.correct, (took, hostile.error)


def test_a_context_overflow_the_server_states_without_a_number_is_a_wrong_answer(ws):
    # llama.cpp's server refuses a prompt over its context with HTTP 400 "the request exceeds the available
    # context size, try increasing it" (no size in it). lc.is_overflow needs a number after "context size"
    # (or "too long"), so this is a plain LLMError: errored, out of the score. A workflow that builds a
    # prompt too long for the model (policy: a wrong answer) dodges its verdict on llama.cpp.
    refusal = Fault(status=400, body="the request exceeds the available context size, try increasing it")
    with FakeLLMServer(refusal) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4? " + "and so on " * 400),
                                            llm=_llm(srv, ws)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error


def test_a_sampled_model_that_writes_control_characters_is_graded_not_errored(ws):
    # At temperature 0.7 the model's text differs on every attempt, so "the same odd text twice is the
    # model's" never applies: a model (or a candidate's prompt: "mark the answer in bold with ANSI escapes")
    # writing an escape character makes every attempt "garbled", the call a transient LLMError and the
    # problem "not run", out of the score, instead of graded. Only bytes that are not UTF-8 (or not JSON) are
    # what a broken transfer leaves; anything in a body that parsed is text the model wrote.
    count = itertools.count()
    with FakeLLMServer(lambda r: f"\x1b[1mI think it is {next(count)}\x1b[0m") as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=2)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error
