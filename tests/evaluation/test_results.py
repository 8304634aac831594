"""Results that explain themselves (flowcore.evaluation.results): verdicts with references, the failure filter, intervals
that say n, cache use of a repeated evaluation, a fresh measurement, and one problem's trace replayed."""

from __future__ import annotations

import pytest

from flowcore.evaluation import results as rs
from flowcore.evaluation import store as es
from flowcore.llm.client import LLMSettings
from flowcore.tasks import load
from flowcore.workspace.library import examples
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

SEED = next(t for n, _, t in examples() if n == "math_seed")


def record(results: list[dict], n: int | None = None, **kw) -> es.EvalRecord:
    n = len(results) if n is None else n
    base = dict(id=1, created=0.0, workflow_name="w", workflow_text=SEED, benchmark="gsm8k", split="validation",
                total=n, n=n, score=None, ci_low=None, ci_high=None, cost=0.0, status="done", error=None,
                job_id=None, finished=None, results=results)
    base.update(kw)
    return es.EvalRecord(**base)


def test_rows_have_verdict_extracted_reference_and_filter_to_failures():
    rec = record([{"id": "a", "correct": True, "prediction": "so 4", "extracted": "4", "reference": "4"},
                  {"id": "b", "correct": False, "prediction": "Let me work through it... 7", "extracted": "7",
                   "reference": "8"},
                  {"id": "c", "correct": False, "prediction": "", "extracted": None, "error": "LLM timed out"}])
    rows = rs.result_rows(rec)
    assert [r["verdict"] for r in rows] == ["correct", "wrong", "error"]
    assert (rows[1]["extracted"], rows[1]["reference"]) == ("7", "8")
    assert [r["id"] for r in rs.result_rows(rec, "failures")] == ["b", "c"]
    assert [r["id"] for r in rs.result_rows(rec, "wrong")] == ["b"]
    assert [r["id"] for r in rs.result_rows(rec, "errors")] == ["c"] and rows[2]["error"] == "LLM timed out"
    with pytest.raises(ValueError, match="unknown filter 'bad'"):
        rs.result_rows(rec, "bad")


def test_intervals_say_n_and_are_exact_at_the_edges():
    none = record([{"id": str(i), "correct": False} for i in range(10)], score=0.0, ci_low=0.0, ci_high=0.0)
    text = rs.interval_text(none)
    assert "n = 10" in text and "exact" in text and "0–31%" in text  # 1 - 0.025**(1/10) = 0.308
    every = record([{"id": str(i), "correct": True} for i in range(10)], score=1.0, ci_low=1.0, ci_high=1.0)
    assert "69–100%" in rs.interval_text(every) and "all 10 solved" in rs.interval_text(every)
    some = record([{"id": "a", "correct": True}, {"id": "b", "correct": False}], score=0.5, ci_low=0.0, ci_high=1.0)
    assert rs.interval_text(some) == "95% interval 0–100% (bootstrap, n = 2)"
    assert rs.interval_text(record([], n=0)) == "no problem finished"


def test_single_runs_are_judged_against_a_reference():
    p = load("gsm8k", "validation", limit=1)[0]
    sample = {"benchmark": "gsm8k", "id": p.id, "question": p.question}
    right = rs.single_verdict("gsm8k", f"The answer is {p.reference}", p.question, "", sample)
    assert right.correct and right.reference == p.reference and "Correct" in right.text()
    wrong = rs.single_verdict("gsm8k", "The answer is -1", p.question, "", sample)
    assert not wrong.correct and wrong.extracted == "-1" and "Wrong" in wrong.text()
    typed = rs.single_verdict("math", "so \\boxed{\\frac12}", "my own problem", "0.5")
    assert typed.correct and typed.reference == "0.5"
    assert rs.single_verdict("gsm8k", "42", "my own problem", "  ") is None


def test_a_repeated_evaluation_says_it_came_from_the_cache_and_a_fresh_one_does_not(ws):
    problems = load("gsm8k", "validation", limit=2)
    with FakeLLMServer(lambda r: "The answer is 3") as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="k")

        def evaluate(s: LLMSettings) -> es.EvalRecord:
            job = es.start_evaluation(ws, s, workflow_text=SEED, benchmark="gsm8k", problems=problems,
                                      split="validation", workflow_name="seed")
            assert job.wait(30) and job.status == "done", job.error
            return es.load_evaluation(ws, job.meta["eval_id"])

        first, again = evaluate(settings), evaluate(settings)
        assert len(srv.requests) == 2
        fresh = evaluate(rs.fresh(settings))
        assert len(srv.requests) == 4  # the fresh measurement asked the endpoint again
    assert rs.cache_use(ws, first.id) == rs.CacheUse(2, 0) and "fresh" in rs.cache_use(ws, first.id).text()
    use = rs.cache_use(ws, again.id)
    assert use.all_cached and "came from the cache ($0)" in use.text()
    assert rs.cache_use(ws, fresh.id) == rs.CacheUse(2, 0)
    assert [r["reference"] for r in again.results] == [p.reference for p in problems]


def test_a_replayed_call_whose_first_cost_was_estimated_says_so(ws):
    """A call the endpoint answered without token counts was charged on estimated tokens; its replay from the
    cache shows that first cost, and now says it is an estimate (it was shown as exact)."""
    problems = load("gsm8k", "validation", limit=2)
    with FakeLLMServer(Fault(body="The answer is 3", no_usage=True)) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="k")
        job = es.start_evaluation(ws, settings, workflow_text=SEED, benchmark="gsm8k", problems=problems,
                                  split="validation")
        assert job.wait(30)
        rec = es.load_evaluation(ws, job.meta["eval_id"])
        res = rs.trace_problem(settings, ws, rec, rs.find_problem(rec, problems[0].id))
        assert len(srv.requests) == 2  # the replay came from the cache
    node = res.trace[0]
    assert node["cached"] == 1 and node["estimated"] == 1 and node["cost"] > 0
    assert rs.trace_rows(res.trace)[0]["answered by"] == "cached, cost estimated"
    exact = {"node": "C1", "op": "X", "calls": 1, "cached": 1, "cost": 0.1}
    assert rs.trace_rows([exact])[0]["answered by"] == "cached"  # a first cost the endpoint reported: as it was


def test_one_problems_trace_is_replayed_from_the_cache(ws):
    """The replay says its call came from the cache, with the cost and time the call had when first made (it
    read $0.00000 and 0.00 s beside a table that listed $0.00001 and 1.50 s for the same problem)."""
    problems = load("gsm8k", "validation", limit=2)
    with FakeLLMServer(lambda r: "The answer is " + ("5" if problems[1].question in message_text(r) else "3"),
                       latency=0.3) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="k")
        job = es.start_evaluation(ws, settings, workflow_text=SEED, benchmark="gsm8k", problems=problems,
                                  split="validation")
        assert job.wait(30)
        rec = es.load_evaluation(ws, job.meta["eval_id"])
        problem = rs.find_problem(rec, problems[1].id)
        res = rs.trace_problem(settings, ws, rec, problem)
        assert len(srv.requests) == 2  # no new call: the replay came from the cache
    assert res.answer == "The answer is 5" and [t["node"] for t in res.trace] == ["C1"]
    first = next(r for r in rec.results if r["id"] == problems[1].id)
    assert first["cost"] > 0 and first["latency"] >= 0.3
    node = res.trace[0]
    assert node["cached"] == 1 and node["cost"] == pytest.approx(first["cost"])
    assert 0.3 <= node["latency"] <= first["latency"] + 0.05  # the call's own time, not the replay's ~0 s
    row = rs.trace_rows(res.trace)[0]
    assert row["answered by"] == "cached" and row["operator"] == "Custom" and row["cost"] == pytest.approx(first["cost"])
    assert "cost nothing now" in rs.trace_caption(res.trace)
    assert rs.trace_rows([{"node": "C1", "op": "X", "calls": 1, "cost": 0.1}])[0]["answered by"] == "endpoint"
    assert rs.trace_caption([{"node": "C1", "calls": 1}]) == "Per-node trace (in execution order)"
    assert rs.find_problem(record([], split="file:mine.jsonl"), "x") is None


def test_a_workflows_own_failure_reads_wrong_with_its_reason_and_only_errored_rows_read_error():
    from flowcore.evaluation.results import verdict_of

    own = {"correct": False, "errored": False, "error": "OwnTimeout: timed out: the workflow's own work took more than 5s"}
    assert verdict_of(own) == "wrong"
    assert verdict_of({"correct": False, "errored": True, "error": "LLMError: HTTP 503"}) == "error"
    assert verdict_of({"correct": False, "error": "TimeoutError: timed out after 5s"}) == "error"  # an older record
    assert verdict_of({"correct": True, "errored": False, "error": None}) == "correct"
