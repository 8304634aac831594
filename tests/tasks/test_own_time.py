"""A workflow's own failures are wrong answers; waiting for others is not its time (issue #25, the policy left
open: a candidate that timed out or failed in its own node was "errored", left out of its score).

Through the real path: evaluate_workflow -> runtime -> flowcore's LLM client (the real openai client) -> the
scripted server on 127.0.0.1, whose per-prompt delays make one problem slow and hold the only slot."""

from __future__ import annotations

import asyncio
from pathlib import Path

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.execution._standalone_ops import NodeError, Unanswerable
from flowcore.llm.client import LLM, ContextOverflow, LLMError, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks.harness import evaluate
from flowcore.tasks.problem import Problem
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

BASELINES = Path(__file__).resolve().parents[2] / "assets" / "baselines"
IO = parse((BASELINES / "math_io.mmd").read_text())
COT_SC = parse((BASELINES / "math_cot_sc.mmd").read_text())


def _problems(*questions: str) -> list[Problem]:
    return [Problem(id=f"q{i}", benchmark="gsm8k", question=q, reference="7") for i, q in enumerate(questions)]


def _llm(srv: FakeLLMServer, ws, **kw) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="k", **{"max_retries": 0, **kw}), ws)


def _right(request: dict) -> str:
    return "\\boxed{7}"


def _outcomes(report) -> list[tuple[bool, bool]]:
    return [(r.correct, r.errored) for r in report.results]


def test_a_workflow_slower_than_its_timeout_is_wrong_not_errored(ws):
    with FakeLLMServer(_right, delays={"SLOW": 2.0}) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("SLOW 3+4?", "3+4?"), llm=_llm(srv, ws),
                                            timeout=0.8))
    slow, fast = rep.results
    assert (slow.correct, slow.errored) == (False, False), slow
    assert "own work took more than 0.8s" in slow.error
    assert (fast.correct, fast.errored) == (True, False)
    assert (rep.n, rep.errors, rep.score) == (2, 0, 0.5)  # in the score: 1 of 2, nothing "not run"


def test_waiting_for_the_slot_another_problem_holds_is_given_back(ws):
    # One client slot. The slow problem holds it for 2 s; the others wait that long for it, then answer at
    # once: they were blocked by another problem, not by their own work, so their timeout (1 s) is not spent.
    with FakeLLMServer(_right, delays={"SLOW": 2.0}) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("SLOW 3+4?", "3+4?", "4+3?"),
                                            llm=_llm(srv, ws, concurrency=1), timeout=1.0, concurrency=3))
        assert srv.max_in_flight == 1
    assert _outcomes(rep) == [(False, False), (True, False), (True, False)], [r.error for r in rep.results]


def test_a_wide_ensemble_queued_behind_its_own_calls_is_timed_out_not_busy(ws):
    # Five samples through one slot: whichever waits, one of the problem's own calls holds the slot, so none
    # of that waiting is given back. A sum of every call's waiting made this "errored (too busy)".
    with FakeLLMServer(_right, latency=0.5) as srv:
        rep = asyncio.run(evaluate_workflow(COT_SC, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, concurrency=1),
                                            timeout=1.0))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error
    assert r.error.startswith("OwnTimeout: timed out: the workflow's own work took more than 1s")
    assert (rep.n, rep.errors) == (1, 0)


def test_an_endpoint_retrying_503s_is_not_the_workflows_time(ws):
    # The endpoint fails twice with 503 before answering; the openai client's own retries and backoff take
    # longer than the timeout, but they are the endpoint's time: the answer is graded.
    calls: dict[str, int] = {}

    def flaky(request: dict):
        q = message_text(request)
        calls[q] = calls.get(q, 0) + 1
        return Fault(status=503, delay=0.4, body="overloaded") if calls[q] <= 2 else "\\boxed{7}"

    with FakeLLMServer(flaky) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=3),
                                            timeout=0.7))
        assert len(srv.requests) == 3
    assert _outcomes(rep) == [(True, False)], rep.results[0].error


def test_an_endpoint_that_never_answers_in_time_is_errored_not_wrong(ws):
    # Every attempt fails (each within the timeout, so the failure is seen): past 3x the timeout the problem
    # is the endpoint's (errored, transient).
    with FakeLLMServer(Fault(status=503, delay=0.2, body="overloaded")) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=8),
                                            timeout=0.5))
    (r,) = rep.results
    assert (r.correct, r.errored, r.transient) == (False, True, True), r.error
    assert (rep.n, rep.errors) == (0, 1)


def test_a_prompt_too_long_for_the_model_is_a_wrong_answer(ws):
    # The workflow's own prompt does not fit the model's window (even trimmed): its answer is wrong, as a
    # proposal's is in evolution, never "not run".
    with FakeLLMServer(_right, context=40, advertise_context=True) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4? " + "and so on " * 400),
                                            llm=_llm(srv, ws)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error
    assert "ContextOverflow" in r.error or "context" in r.error.lower()


def test_node_failures_of_the_workflow_are_wrong_and_the_engines_are_errored():
    async def runner(p):
        if p.id == "q0":
            raise NodeError("RETURN", "Interface", "no branch reached RETURN (every input was skipped)")
        if p.id == "q1":
            raise NodeError("E1", "ScEnsemble", Unanswerable("no solutions reached the ensemble"))
        if p.id == "q2":
            raise NodeError("C1", "Custom", TypeError("'NoneType' object is not subscriptable"))  # our bug
        if p.id == "q3":
            try:
                raise LLMError("HTTP 503", transient=True)
            except LLMError as e:
                raise NodeError("C1", "Custom", e) from e
        try:
            raise ContextOverflow("too long")
        except ContextOverflow as e:
            raise NodeError("C1", "Custom", e) from e

    rep = asyncio.run(evaluate(runner, _problems(*["3+4?"] * 5)))
    assert [(r.correct, r.errored) for r in rep.results] == [(False, False), (False, False), (False, True),
                                                               (False, True), (False, False)]
    assert (rep.n, rep.errors, rep.score) == (3, 2, 0.0)
    assert rep.results[2].error == "NodeError: node C1 (Custom) failed: TypeError: 'NoneType' object is not subscriptable"
