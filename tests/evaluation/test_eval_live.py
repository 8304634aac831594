"""A running evaluation's live score and its stored partial result leave endpoint failures out: a server error
is never a wrong answer, not even while the evaluation is still going or after it was interrupted."""

from __future__ import annotations

import pytest

from flowcore.evaluation import store as es
from flowcore.llm.client import LLMSettings
from flowcore.tasks import ProblemResult, load
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

SEED = open("assets/examples/math_seed.mmd", encoding="utf-8").read()


def _result(pid: str, correct: bool, errored: bool = False) -> ProblemResult:
    return ProblemResult(pid, correct, "", None, 0.0, 0.1, "LLMError: HTTP 503" if errored else None, errored)


def test_an_interrupted_evaluation_keeps_a_score_without_its_endpoint_failures(ws):
    """save_progress stored 1 solved of 2 (50%) when the second problem was an endpoint failure."""
    eval_id = es.create_evaluation(ws, workflow_text=SEED, benchmark="gsm8k", split="validation", total=5)
    es.save_progress(ws, eval_id, [_result("gsm8k/2", True), _result("gsm8k/11", False, errored=True)], 0.0)
    es.reconcile(ws)  # the server that ran it is gone
    rec = es.load_evaluation(ws, eval_id)
    assert rec.status == "interrupted" and rec.n == 1 and rec.score == 1.0 and len(rec.results) == 2
    es.save_progress(ws, es.create_evaluation(ws, workflow_text=SEED, benchmark="gsm8k", split="validation",
                                              total=5), [_result("gsm8k/2", False, errored=True)], 0.0)
    assert es.list_evaluations(ws)[0].score is None  # nothing scored: no score, not 0%


def test_the_running_score_divides_by_the_problems_scored(ws):
    problems = load("gsm8k", "validation", limit=3)

    def respond(request: dict):  # right for problems 0 and 2, an outage for problem 1
        text = message_text(request)
        return Fault(status=503, body="overloaded") if problems[1].question in text else \
            next(f"The answer is {p.reference}" for p in problems if p.question in text)

    with FakeLLMServer(respond) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0)
        job = es.start_evaluation(ws, settings, workflow_text=SEED, benchmark="gsm8k", problems=problems,
                                  split="validation", concurrency=1)
        assert job.wait(60) and job.status == "done", job.error
    snap = job.snapshot()
    assert snap.data == pytest.approx({"solved": 2, "scored": 2, "errors": 1, "cost": snap.data["cost"]})
    assert es.running_score(snap.data, snap.done) == 1.0  # was 2 / 3: the outage counted as a wrong answer
    assert es.running_score({"solved": 0, "scored": 0}, 1) is None
