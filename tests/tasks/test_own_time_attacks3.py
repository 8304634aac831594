"""Attacks on the problem clock and the verdict, round three (issue #25): a candidate must never reach, dodge or
inflate its verdict. Through the real path: evaluate_workflow -> runtime -> flowcore's LLM client (the real
openai client) -> the scripted server on 127.0.0.1 -> scorer. Each test fails on the commit under attack
(f543947)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks.problem import Problem
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

BASELINES = Path(__file__).resolve().parents[2] / "assets" / "baselines"
IO = parse((BASELINES / "math_io.mmd").read_text())
COT_SC = parse((BASELINES / "math_cot_sc.mmd").read_text())


def _problems(*questions: str) -> list[Problem]:
    return [Problem(id=f"q{i}", benchmark="gsm8k", question=q, reference="7") for i, q in enumerate(questions)]


def _llm(srv: FakeLLMServer, ws, **kw) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="k", **{"max_retries": 0, **kw}), ws)


def _completion(message: dict, reason: str) -> Fault:
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": reason}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1024, "total_tokens": 1029}}
    return Fault(malformed=True, body=json.dumps(body))


def test_a_reasoning_model_that_thinks_past_its_token_cap_is_a_wrong_answer_not_errored(ws):
    # A reasoning model served by vLLM with a reasoning parser (Qwen3, DeepSeek-R1, Gemma 4) puts its thinking in
    # `reasoning_content`; when the token cap (executor: 1024) runs out before the thinking ends, the reply is a
    # well-formed 200 with `content: null`, finish_reason "length" (vllm-project/vllm#42635, #48865). A candidate's
    # prompt decides how long the model thinks ("verify every step twice, consider every case"). The client calls
    # this "malformed reply: no message content", i.e. a garbled transfer: each attempt's whole generation time
    # is given back on the clock, it is retried, and the call ends in a *transient* LLMError: the problem is
    # "not run", left out of the score. A hard problem the model cannot finish becomes invisible instead of wrong.
    # Fix direction: a well-formed completion whose content is null with finish_reason "length" (or with a
    # reasoning field) is an empty answer from the model (graded wrong, paid, not given back), never a garbled
    # transfer; only bytes that are not UTF-8/JSON are the endpoint's.
    thought = _completion({"content": None, "reasoning_content": "Let me verify every step twice. " * 100}, "length")
    with FakeLLMServer(thought) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws, max_retries=1)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error
    assert (rep.n, rep.errors) == (1, 0)


def test_a_prompt_openai_flags_as_a_usage_policy_violation_is_a_wrong_answer_not_errored(ws):
    # OpenAI's reasoning models answer a prompt their safety check flags with HTTP 400, code "invalid_prompt":
    # "Invalid prompt: your prompt was flagged as potentially violating our usage policy" (seen in the wild:
    # alan-turing-institute/t0-1#69, openai/codex#7250). `_refused_status` knows only "content_filter" /
    # "content policy", so this is a plain non-transient LLMError: the problem is "not run". A candidate whose
    # prompt trips the check on the problems it would get wrong dodges its verdict, as round two's content
    # filter did. Fix direction: code "invalid_prompt" (and "usage policy" in the message) is a Refused, a wrong
    # answer; more generally, any 400 about the prompt's content is the workflow's.
    body = {"error": {"message": "Invalid prompt: your prompt was flagged as potentially violating our usage "
                                 "policy. Please try again with a different prompt: "
                                 "https://platform.openai.com/docs/guides/reasoning#advice-on-prompting",
                      "type": "invalid_request_error", "param": None, "code": "invalid_prompt"}}
    with FakeLLMServer(Fault(status=400, body=json.dumps(body))) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"), llm=_llm(srv, ws)))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, False), r.error


def test_identical_slow_answers_get_the_same_verdict_whatever_their_place_in_the_slot_queue(ws):
    # Three copies of one problem, each asking the model for an answer that takes 20 s (the workflow's own long
    # generation: alone it is a wrong answer, OwnTimeout). One client slot. The first takes the slot; its own time
    # runs out at 0.5 s, but its attempt is "pending" (it might yet be a 504), so the harness waits in overtime up
    # to 2 x 3 x 0.5 = 3 s, holding the slot all along. The two behind it wait for the slot, which is given back
    # as a neighbour's time, until their 3x cap (1.5 s): BusyTimeout, "errored (the machine was too busy)".
    # Same workflow, same answer, same slowness: one is wrong, two are "not run". A candidate that is slow on the
    # problems it cannot solve sees most of them left out of its score (its own problems are the "neighbours"
    # that keep each other from the slot); an honest neighbour of a slow problem is "not run" too.
    # Fix direction: a problem in overtime holds no shared slot's worth of others' grace (its pending attempt
    # should not keep neighbours' caps running: e.g. stop the cap while the slot is held by a problem of the
    # same evaluation that is past its own time, or cancel the attempt and decide it when it ends without
    # holding the slot); a wait for the same evaluation's own problems is bounded by their timeouts and need
    # not count toward the 3x cap.
    with FakeLLMServer(Fault(body="\\boxed{8}", delay=20.0)) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?", "3+4? ", "3+4?  "),
                                            llm=_llm(srv, ws, concurrency=1), timeout=0.5, concurrency=3))
    got = [(r.correct, r.errored) for r in rep.results]
    assert got == [(False, False)] * 3, [(r.errored, r.error) for r in rep.results]
    assert (rep.n, rep.errors) == (3, 0)


def test_an_honest_answer_is_not_left_out_because_a_slow_neighbour_holds_the_slot_in_overtime(ws):
    # The same mechanism against an honest problem: its neighbour's own 20 s generation holds the only client
    # slot through the neighbour's overtime (6x the timeout); the honest problem, whose own call answers at once,
    # reaches its 3x cap waiting and is "not run" (BusyTimeout) instead of right. A candidate can always sit
    # beside a rival's problems on a shared server (the Run page, the team server) and leave them out of scores.
    # Fix direction: as above; a problem past its own time should not keep a shared slot for its overtime.
    def respond(request: dict):
        return Fault(body="\\boxed{8}", delay=20.0) if "SLOW" in message_text(request) else "\\boxed{7}"

    with FakeLLMServer(respond) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("SLOW 3+4?", "3+4?"),
                                            llm=_llm(srv, ws, concurrency=1), timeout=0.5, concurrency=2))
    slow, honest = rep.results
    assert (slow.correct, slow.errored) == (False, False), slow.error
    assert (honest.correct, honest.errored) == (True, False), honest.error


def test_a_call_slower_than_the_client_timeout_is_not_turned_into_not_run_before_own_time_runs_out(ws):
    # Round two's fix made an attempt that times out *after* the problem's own time ran out the workflow's. One
    # that times out *before* is still given back whole as the endpoint's, and the call ends in a transient
    # LLMError: "not run". A problem timeout above the client's (--timeout 300 with the client's 60 s default is
    # ordinary) leaves a window: a candidate that asks the model for an answer longer than the client timeout
    # (each attempt 5 s here, the client's timeout 0.6 s, the problem's 4 s) never spends its own time and gets
    # every such problem left out of its score, where alone, with a client timeout above 5 s, it is graded (or
    # timed out: wrong). Which verdict it gets depends on a setting, and the candidate picks it by the length it
    # asks for. (Judgement call: without streaming, a long generation and a silent endpoint look alike.)
    # Fix direction: a timed-out attempt is pending until decided, and decided like the others: its time counts
    # as the workflow's while the endpoint kept the connection (it was answering); give back only attempts that
    # got a refused connection, a reset or a 5xx; or stream, so tokens tell a generating model from silence.
    # Decided (lead), after round four: a timeout within the problem's own time is the endpoint's, "not run",
    # never wrong. The standard says a timeout under load is never a wrong answer, and nothing on the client's
    # side tells a long answer from a batching server slowed by another tenant (round four made a one-token probe
    # call an honest, load-slowed answer wrong: test_own_time_attacks4). The dodge stays visible: the row is
    # counted as "not run" beside the score and against --max-error-rate; with a problem timeout below the
    # client's, the same call is the workflow's own time and a wrong answer (round two's test).
    def respond(request: dict):
        return Fault(body="\\boxed{8}", delay=5.0) if "3+4?" in message_text(request) else "OK"

    with FakeLLMServer(respond) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"),
                                            llm=_llm(srv, ws, timeout=0.6, max_retries=2), timeout=4.0))
    (r,) = rep.results
    assert (r.correct, r.errored, r.transient) == (False, True, True), r.error
    assert "timed out" in r.error and (rep.n, rep.errors) == (0, 1)


def test_an_endpoint_slow_for_every_request_leaves_the_problem_not_run_never_wrong(ws):
    with FakeLLMServer(Fault(body="\\boxed{8}", delay=5.0)) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"),
                                            llm=_llm(srv, ws, timeout=0.6, max_retries=1), timeout=4.0))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, True), r.error


def test_an_answer_that_makes_the_judges_filter_refuse_is_graded_wrong_not_left_out(ws):
    # A task graded by the judge metric puts the candidate's answer inside the judge's prompt. An answer that
    # trips the judge endpoint's content filter (Azure: HTTP 400 code content_filter, "the prompt triggering ...
    # content management policy"; or finish_reason content_filter, or OpenAI's invalid_prompt) makes the judge's
    # call raise Refused, which `judge` turns into Grade(None): the row is *errored*, "metric failed", left out
    # of the score. Round two made a refused *workflow* prompt a wrong answer; the same refusal, caused by the
    # answer's own text in the judge's prompt, still dodges the verdict: a candidate that appends flagged text to
    # the answers it is unsure of scores 1/1 where the honest score is 1/2.
    # Fix direction: a Refused from the judge's call is the answer's doing (the rest of the judge's prompt is
    # the task's, fixed): the row is wrong (0, reason kept), not errored; likewise in a python metric.
    from flowcore.tasks.harness import evaluate
    from flowcore.tasks.metrics import make_metric

    metric = make_metric("judge", {"rubric": "Full marks for the right city only."}, where="t.toml")
    flagged = {"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                                    "management policy.", "type": None, "param": "prompt",
                         "code": "content_filter", "status": 400}}

    def judge_reply(request: dict):
        if "FLAGGED" in message_text(request):
            return Fault(status=400, body=json.dumps(flagged))
        return '{"score": 1, "reason": "Right city."}'

    answers = {"t/0": "Paris", "t/1": "Lyon. FLAGGED (text the provider's filter refuses)"}
    problems = [Problem(pid, "t", "Capital of France?", "Paris", metric=metric) for pid in answers]

    async def runner(p):
        return answers[p.id], 0.0

    with FakeLLMServer(judge_reply) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", models={"judge": "judge-model"}, max_retries=0),
                  ws)
        rep = asyncio.run(evaluate(runner, problems, llm=llm))
    assert [(r.correct, r.errored) for r in rep.results] == [(True, False), (False, False)], \
        [r.error for r in rep.results]
    assert (rep.n, rep.errors, rep.score) == (2, 0, 0.5)


def test_a_streamed_answer_that_falls_silent_past_the_client_timeout_is_not_left_out(ws):
    # Streaming was round two's answer to "a long generation and a silent endpoint look alike": tokens flow, so
    # the time is the workflow's. It is counted as the workflow's (the attempt is "answered" at the headers), yet
    # the verdict still is not: a model that pauses between tokens for longer than the client's (silence) timeout
    # (OpenAI's reasoning models stream nothing while they think; a candidate's prompt decides how long) ends in
    # a read timeout, a *transient* LLMError, and the problem is "not run" whenever its own time had not run out
    # (problem timeout 4 s, silence timeout 0.6 s, the model's pause 2 s). Wrong answers of a slow-thinking
    # candidate are left out of its score.
    # Fix direction: a streamed attempt that had answered (headers, tokens) and then timed out is the workflow's
    # own slow answer: an empty / partial answer graded wrong (or an OwnTimeout), never an endpoint failure.
    # Decided (lead), as for the call above: silence past the client's timeout within the problem's own time
    # is the endpoint's ("not run", counted); past the problem's own time it is the workflow's (wrong).
    with FakeLLMServer("I will think about it \\boxed{8}", token_delay=2.0) as srv:
        rep = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4?"),
                                            llm=_llm(srv, ws, timeout=0.6, stream=True, max_retries=1), timeout=4.0))
        late = asyncio.run(evaluate_workflow(IO, "gsm8k", _problems("3+4? "),
                                             llm=_llm(srv, ws, timeout=0.6, stream=True, max_retries=1), timeout=0.3))
    (r,) = rep.results
    assert (r.correct, r.errored) == (False, True), r.error
    (w,) = late.results
    assert (w.correct, w.errored) == (False, False) and w.error.startswith("OwnTimeout"), w.error


def test_a_wide_candidate_queued_behind_its_own_other_problems_is_timed_out_not_busy(ws):
    # Round one's rule "a wide ensemble queued behind its own calls waits for itself" holds inside one problem,
    # not across the candidate's problems. CoT-SC (five samples, then a choice) through one client slot, each call
    # 0.5 s: alone, a problem is timed out (1 s), wrong (test_own_time). Four such problems at once: the same
    # candidate's calls fill the slot queue; while a problem holds no slot its waits are "a neighbour's" and given
    # back whole, so its own time grows only while it holds the slot, a quarter of the wall clock: the later
    # problems reach the 3x cap first and are "errored (the machine was too busy)". The machine was busy with the
    # candidate's own width: a wide (or deliberately flooding) candidate gets its slow problems left out of its
    # score where a narrow one gets them wrong.
    # Fix direction: a slot wait for the same evaluation's problems (the same candidate) is not "others' work"
    # toward BusyTimeout: give it back (it is bounded by their own timeouts) but do not let it run the 3x cap; or
    # bound the candidate's slots per problem (size / concurrent problems) so its own width is always its own
    # queue.
    with FakeLLMServer("\\boxed{8}", latency=0.5) as srv:
        rep = asyncio.run(evaluate_workflow(COT_SC, "gsm8k", _problems("3+4?", "3+4? ", "3+4?  ", "3+4?   "),
                                            llm=_llm(srv, ws, concurrency=1), timeout=1.0, concurrency=4))
    got = [(r.correct, r.errored) for r in rep.results]
    assert got == [(False, False)] * 4, [r.error for r in rep.results]


def test_a_long_answer_cannot_hide_its_wrong_part_from_the_judge_in_the_trimmed_middle(ws):
    # The judge's prompt holds the candidate's answer. An answer too long for the judge model's context is not
    # refused: the client's `_fit` trims the prompt, cutting the *middle* of its longest message and keeping the
    # head and tail, i.e. the middle of the answer. The candidate decides what the judge reads: an answer that
    # hedges across every city ("Or maybe Lyon, Marseille or Nice", in its middle) between two long runs of
    # "Paris." (~60 KB in all, what a Programmer's printed output carries) is shown to the judge as
    # "Paris. Paris. ... [cut] ... Paris. Paris." and graded right; the strict judge (here: 0 when any other city is named in
    # what it sees) would have failed the whole answer.
    # Fix direction: never trim the answer inside a judge's prompt: an answer that does not fit the judge's
    # context is graded wrong (or on its end only, if the task says so), never on a part of it the candidate
    # chose; more generally, `_fit` should trim only text the caller marks as trimmable.
    from flowcore.tasks.harness import evaluate
    from flowcore.tasks.metrics import make_metric

    metric = make_metric("judge", {"rubric": "Full marks for naming the right city, and only that city."},
                         where="t.toml")
    # ~60 KB: what a Programmer node's printed output carries into its answer (the sandbox keeps 64 KB of stdout)
    hedge = "Paris. " * 3000 + "Or maybe Lyon, Marseille or Nice. " * 600 + "Paris. " * 3000

    def strict_judge(request: dict) -> str:
        seen = message_text(request)
        if "Lyon" in seen or "Marseille" in seen:
            return '{"score": 0, "reason": "Names several cities."}'
        return '{"score": 1, "reason": "Right city."}'

    problems = [Problem("t/0", "t", "Capital of France?", "Paris", metric=metric)]

    async def runner(p):
        return hedge, 0.0

    with FakeLLMServer(strict_judge, context=4096, advertise_context=True) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", models={"judge": "judge-model"}, max_retries=0),
                  ws)
        rep = asyncio.run(evaluate(runner, problems, llm=llm))
    (r,) = rep.results
    assert not r.correct, (r.score, r.grade, r.error)


def test_a_candidate_whose_answers_read_as_transient_failures_does_not_stop_an_evolution_run(tmp_path):
    # What the verdict rules above cost an evolution run: a round whose problems are errored *transiently* beyond
    # max_error_rate (10 %) is taken for an endpoint outage, retried after each back-off, then the run stops with
    # EndpointDown ("the LLM endpoint ... kept failing round 1; run the same command again to resume") and the
    # resumed run draws the same proposal (the optimizer's reply is cached) and stops again. The endpoint never
    # failed: the optimizer proposed a prompt ("verify every step again and again") that makes a reasoning model
    # think past its token cap (content null, finish_reason length: "malformed", transient, see the first test).
    # One proposal the optimizer writes halts the run for good; the same holds for any transient verdict a
    # candidate can cause (BusyTimeout from its own width, a silent stream).
    # Fix direction: the verdict fixes above, and a round retried only when the endpoint was seen failing (the
    # seed's or a probe call's health), not when one candidate's problems errored.
    from tests.helpers.evolve import evolve, scripted

    thought = _completion({"content": None, "reasoning_content": "Let me check that again. " * 100}, "length")
    respond = scripted("Verify every step of your reasoning again and again before you answer.", lambda: thought,
                       why="I ask the solver to double-check.")
    result, _, _ = evolve(tmp_path, respond, rounds=1)
    assert result["status"] == "finished", result.get("reason")


def _programmer():
    return parse('flowchart TD\n    PROBLEM(["Problem"])\n    P1["Programmer"]\n    RETURN(["Return"])\n'
                 '    class PROBLEM,RETURN Interface\n    class P1 ProgrammerOp\n    PROBLEM -->|problem| P1\n'
                 '    P1 --> RETURN\n')


def test_a_candidate_whose_programs_hang_is_wrong_on_every_problem_not_busy_on_the_later_ones(ws):
    # The sandbox twin of the wide-candidate attack, with the defaults: one sandbox slot per CPU (2 here) and more
    # problems than CPUs at once (the harness's default concurrency is 8). The candidate's program never returns
    # (its solve() sleeps: its own doing; alone it is a timed-out, wrong answer). The first two problems hold both
    # slots until their own 1.5 s run out; the others wait for a slot (given back: "a neighbour's") and the last
    # ones reach the 3x cap: "errored (the machine was too busy)". A candidate whose programs hang on the
    # problems it cannot solve has a share of those left out of its score, growing with the number of problems
    # run at once; every slot it waited for was held by its own hanging programs.
    # Fix direction: as for the client slots, a wait for a slot the same evaluation's problems hold does not run
    # the 3x cap (it is bounded by their own timeouts), or the harness runs no more problems at once than a
    # problem's share of slots allows.
    import os

    import pytest

    if len(os.sched_getaffinity(0)) != 2:
        pytest.skip("the numbers assume 2 sandbox slots")
    hang = "```python\nimport time\n\ndef solve():\n    time.sleep(60)\n    return 7\n```"
    with FakeLLMServer(hang) as srv:
        rep = asyncio.run(evaluate_workflow(_programmer(), "gsm8k", _problems(*[f"3+4? {i}" for i in range(6)]),
                                            llm=_llm(srv, ws, cache=False), timeout=1.5, concurrency=6))
    got = [(r.correct, r.errored) for r in rep.results]
    assert got == [(False, False)] * 6, [r.error for r in rep.results]


def test_a_problem_that_timed_out_reports_what_its_calls_cost(ws):
    # A problem cancelled at its own timeout records cost 0: the runner attaches the spend to an Exception it
    # sees (`exc.cost`), but a timeout cancels the runner (CancelledError is no Exception) and `_within` raises a
    # fresh OwnTimeout with no cost. The first node's paid call ($0.0015 here) vanishes from the problem's row and from EvalReport.cost (the Run page's and `run`'s cost, the per-problem
    # rows kept by evolution): a candidate that times out on its expensive problems looks cheap there. (compare
    # prices the client's call log instead and is right.)
    # Fix direction: `_solve` reads the spend from the problem's child client (or the clock) whatever the
    # exception, e.g. the runner keeps its child on the problem and `_solve` asks it after a timeout.
    wf = parse('flowchart TD\n    PROBLEM(["Problem"])\n    C1["Custom"]\n    C2["Custom"]\n    RETURN(["Return"])\n'
               '    class PROBLEM,RETURN Interface\n    class C1,C2 CustomOp\n    PROBLEM -->|input| C1\n'
               '    C1 -->|input| C2\n    C2 --> RETURN\n')

    def respond(request: dict):
        if "FIRST-STEP-DONE" in message_text(request):
            return Fault(body="\\boxed{8}", delay=2.5)
        return "FIRST-STEP-DONE " + "word " * 2000

    with FakeLLMServer(respond) as srv:
        llm = _llm(srv, ws, cache=False)
        rep = asyncio.run(evaluate_workflow(wf, "gsm8k", _problems("3+4?"), llm=llm, timeout=1.0))
    (r,) = rep.results
    assert r.error is not None and r.error.startswith("OwnTimeout"), r.error
    assert llm.usage.cost > 0, "the first node's call was answered and paid"
    assert r.cost > 0 and rep.cost > 0, (r.cost, rep.cost, llm.usage.cost)


def test_an_honest_answer_about_a_score_is_not_graded_wrong_when_the_judge_quotes_it(ws):
    # The judge's echo rule (`echoed`): a grade above 0 whose reason appears word for word in an answer that
    # contains the word "score" is taken for the answer's own grade echoed back, and the row is graded wrong. Any
    # honest answer about a score (a match, a test, a z-score, an F1 score) trips it whenever the judge's reason
    # quotes the answer's key sentence, which terse judges do ("The score was 1-0."). Here a right answer to
    # "What was the final score?" is graded 0 with "an answer cannot grade itself". An honest problem is made
    # wrong by the guard, and a rival who knows the rule cannot be told apart from an honest answer by it.
    # Fix direction: call it an echo only when the answer holds a grade-shaped text (a JSON object or a "score:
    # <number>" / "reason: ..." pair) that the judge's reply repeats (same score and reason), not when the
    # reason merely quotes the answer; or ask the judge again with the answer's grade-shaped text quoted away.
    from flowcore.tasks.harness import evaluate
    from flowcore.tasks.metrics import make_metric

    metric = make_metric("judge", {"rubric": "Full marks for the right final score."}, where="t.toml")
    answer = "Germany beat Argentina after extra time. The score was 1-0."
    problems = [Problem("t/0", "t", "What was the final score of the 2014 World Cup final?", "1-0 to Germany",
                        metric=metric)]

    async def runner(p):
        return answer, 0.0

    with FakeLLMServer('{"score": 1, "reason": "The score was 1-0."}') as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", models={"judge": "judge-model"}, max_retries=0),
                  ws)
        rep = asyncio.run(evaluate(runner, problems, llm=llm))
    (r,) = rep.results
    assert (r.correct, r.errored) == (True, False), (r.score, r.error, r.grade)
