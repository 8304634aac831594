"""Background jobs (progress, cancel, failures as messages, the registry) and stored evaluations run as jobs
against a scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from flowcore.evaluation import store as es
from flowcore.execution.runtime import WorkflowInvalid
from flowcore.llm.client import LLMSettings
from flowcore.tasks import DataError, Problem, load
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text

MATH_SEED = """flowchart TD
    %% @prompt solver: Solve the problem step by step.
    PROBLEM(["Problem"])
    C1["Custom<br/>(role: solver)"]
    RETURN(["Return"])
    class PROBLEM,RETURN Interface
    class C1 CustomOp
    PROBLEM -->|input| C1
    C1 --> RETURN
"""


@pytest.fixture
def ws(tmp_path) -> Workspace:
    return Workspace(tmp_path / "ws.db")


def settings_for(server: FakeLLMServer) -> LLMSettings:
    return LLMSettings(base_url=server.base_url, api_key="test-key", max_retries=0, timeout=10, cache=False)


# -- jobs --------------------------------------------------------------------------------------------------------

def test_progress_result_and_registry():
    gate = threading.Event()

    def target(ctx: jobs.JobContext) -> str:
        for i in range(1, 4):
            ctx.progress(i, 3, f"step {i}", data={"i": i})
        ctx.log("waiting")
        gate.wait(5)
        return "finished"

    job = jobs.Job(target, "unit-progress")
    assert job.status == "queued"
    job.start()
    deadline = time.time() + 5
    while job.snapshot().done < 3 and time.time() < deadline:
        time.sleep(0.01)
    snap = job.snapshot()
    assert snap.status == "running" and (snap.done, snap.total, snap.message) == (3, 3, "step 3")
    assert snap.data == {"i": 3} and snap.fraction == 1.0
    snap.data["i"] = 99  # a snapshot is a copy
    assert job.snapshot().data == {"i": 3}
    assert jobs.get(job.id) is job and jobs.find("unit-progress") is job
    gate.set()
    assert job.wait(5)
    assert (job.status, job.result, job.error) == ("done", "finished", None)
    texts = [m for _, m in job.snapshot().events]
    assert texts[0] == "started" and "step 2" in texts and "waiting" in texts and texts[-1] == "done"


def test_async_target_runs_on_its_own_loop():
    async def target(ctx: jobs.JobContext) -> int:
        await asyncio.sleep(0.01)
        return 7

    job = jobs.Job(target, "unit-async").start()
    assert job.wait(5) and job.status == "done" and job.result == 7


def test_cancel_stops_a_cooperative_target_and_keeps_its_partial_result():
    started = threading.Event()

    def target(ctx: jobs.JobContext) -> int:
        n = 0
        started.set()
        while not ctx.cancelled.is_set():
            n += 1
            time.sleep(0.005)
        return n

    job = jobs.Job(target, "unit-cancel").start()
    assert started.wait(5)
    job.cancel()
    assert job.wait(5)
    assert job.status == "cancelled" and isinstance(job.result, int) and job.result > 0
    assert "cancel requested" in [m for _, m in job.snapshot().events]


def test_check_raises_job_cancelled():
    def target(ctx: jobs.JobContext) -> None:
        while True:
            ctx.check()
            time.sleep(0.005)

    job = jobs.Job(target, "unit-check").start()
    time.sleep(0.02)
    job.cancel()
    assert job.wait(5) and job.status == "cancelled" and job.error is None


def test_failure_is_a_one_line_message_not_a_traceback():
    def target(ctx: jobs.JobContext) -> None:
        raise ValueError("the data file is empty\nsecond line")

    job = jobs.Job(target, "unit-fail").start()
    assert job.wait(5)
    assert job.status == "failed" and job.error == "the data file is empty"
    assert "Traceback" not in (job.snapshot().error or "")

    job = jobs.Job(lambda ctx: 1 / 0, "unit-fail").start()
    assert job.wait(5) and job.error == "division by zero"
    job = jobs.Job(lambda ctx: (_ for _ in ()).throw(KeyError()), "unit-fail").start()
    assert job.wait(5) and job.error == "KeyError"


def test_start_twice_is_refused_and_unknown_ids_are_none():
    job = jobs.Job(lambda ctx: None, "unit-twice").start()
    with pytest.raises(RuntimeError, match="already started"):
        job.start()
    assert jobs.get("nope") is None and jobs.get(None) is None


# -- evaluation store ---------------------------------------------------------------------------------------------

def gsm8k_problems(n: int) -> list[Problem]:
    return load("gsm8k", "validation", limit=n)


def answer_first_right(problems: list[Problem]):
    """Replies with the right number for the first problem and a wrong one for the others."""
    def respond(request: dict) -> str:
        text = message_text(request)
        for i, p in enumerate(problems):
            if p.question in text:
                return f"The answer is {p.reference}" if i == 0 else "The answer is -12345"
        return "no idea"
    return respond


def test_evaluation_job_scores_and_stores(ws):
    problems = gsm8k_problems(3)
    with FakeLLMServer(answer_first_right(problems)) as srv:
        job = es.start_evaluation(ws, settings_for(srv), workflow_text=MATH_SEED, benchmark="gsm8k",
                                  problems=problems, split="validation", workflow_name="seed", concurrency=2)
        assert job.wait(30), "evaluation did not finish"
    assert job.status == "done", job.error
    snap = job.snapshot()
    assert (snap.done, snap.total) == (3, 3) and snap.data["solved"] == 1 and snap.data["errors"] == 0
    rec = es.load_evaluation(ws, job.meta["eval_id"])
    assert (rec.status, rec.benchmark, rec.split, rec.n, rec.total, rec.workflow_name) == \
        ("done", "gsm8k", "validation", 3, 3, "seed")
    assert rec.score == pytest.approx(1 / 3) and rec.ci_low <= rec.score <= rec.ci_high
    assert [r["id"] for r in rec.results] == [p.id for p in problems]
    assert [r["correct"] for r in rec.results] == [True, False, False]
    assert rec.workflow_text == MATH_SEED and rec.cost >= 0
    listed = es.list_evaluations(ws)
    assert [r.id for r in listed] == [rec.id] and listed[0].results == []


def test_cancelled_evaluation_is_stored_with_partial_results(ws):
    problems = gsm8k_problems(6)
    with FakeLLMServer("The answer is 1", latency=0.3) as srv:
        job = es.start_evaluation(ws, settings_for(srv), workflow_text=MATH_SEED, benchmark="gsm8k",
                                  problems=problems, split="validation", concurrency=1)
        deadline = time.time() + 10
        while job.snapshot().done < 1 and time.time() < deadline:
            time.sleep(0.02)
        job.cancel()
        assert job.wait(15)
    assert job.status == "cancelled"
    rec = es.load_evaluation(ws, job.meta["eval_id"])
    assert rec.status == "cancelled" and 1 <= rec.n < 6 and len(rec.results) == rec.n and rec.total == 6


def test_failing_endpoint_records_errors_per_problem(ws):
    problems = gsm8k_problems(2)
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2, cache=False)
    job = es.start_evaluation(ws, settings, workflow_text=MATH_SEED, benchmark="gsm8k", problems=problems,
                              split="validation")
    assert job.wait(30) and job.status == "done"
    rec = es.load_evaluation(ws, job.meta["eval_id"])
    assert all("cannot connect" in (r["error"] or "") and r["errored"] for r in rec.results)
    assert rec.score is None and rec.n == 0  # a server error is never a wrong answer: no score was measured


def test_invalid_workflow_is_refused_before_anything_is_stored(ws):
    with pytest.raises(WorkflowInvalid):
        es.start_evaluation(ws, LLMSettings(base_url="http://127.0.0.1:9/v1"),
                            workflow_text=MATH_SEED.replace("C1 --> RETURN\n", ""), benchmark="gsm8k",
                            problems=gsm8k_problems(1), split="validation")
    assert es.list_evaluations(ws) == []
    with pytest.raises(ValueError, match="no problems"):
        es.start_evaluation(ws, LLMSettings(base_url="http://127.0.0.1:9/v1"), workflow_text=MATH_SEED,
                            benchmark="gsm8k", problems=[], split="validation")


def test_reconcile_marks_orphaned_running_evaluations(ws):
    eval_id = es.create_evaluation(ws, workflow_text=MATH_SEED, benchmark="gsm8k", split="test", total=5,
                                   job_id="gone-with-the-server")
    assert es.reconcile(ws) == 1
    rec = es.load_evaluation(ws, eval_id)
    assert rec.status == "interrupted" and rec.error == es.INTERRUPTED
    with pytest.raises(KeyError, match="#999"):
        es.load_evaluation(ws, 999)
    with pytest.raises(ValueError, match="status"):
        es.finish_evaluation(ws, eval_id, None, status="weird")


def test_run_problem_returns_answer_cost_and_trace():
    with FakeLLMServer("The answer is 42") as srv:
        res = es.run_problem(settings_for(srv), None, MATH_SEED, "math", "What is 6 times 7?")
    assert res.answer == "The answer is 42" and res.calls == 1
    assert [t["node"] for t in res.trace] == ["C1"]


def test_upload_reads_the_benchmark_format_and_names_the_file():
    rows = [{"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    problems = es.problems_from_upload("gsm8k", "mine.jsonl", data)
    assert len(problems) == 1 and problems[0].reference == "4"
    with pytest.raises(DataError, match="mine.jsonl"):
        es.problems_from_upload("gsm8k", "mine.jsonl", b'{"question": "no answer"}\n')


def test_default_benchmark():
    assert es.default_benchmark("math", "math_seed") == "gsm8k"
    assert es.default_benchmark("code", "mbpp_case_study") == "mbpp"
    assert es.default_benchmark("code", None) == "humaneval"
    assert es.benchmarks_for("math") == ["gsm8k", "math"]
