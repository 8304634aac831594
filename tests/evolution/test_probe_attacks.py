"""Attacks on the evolution loop's probe / retry / errored-problem path (flowcore/evolution/loop.py: ``_attempts``,
``_probe``; flowcore/tasks/harness.py: what makes a problem errored). Each test asserts the SAFE behaviour, so it
fails when the attack works: a candidate never dodges or inflates its verdict, a timeout under load is never
blamed on a good candidate, a wrong answer is never an error, and every paid call is counted in the budget.

Each run is a real evolution run (mode llm: the optimizer proposes one candidate, the LLM judge picks it) against
a real OpenAI-compatible server on 127.0.0.1 (tests/helpers/fakellm.py) through the real ``openai`` client. The
candidate is marked by a phrase of its prompt; the responder plays the model (what it answers for which problem)
and the server (how long it takes)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.llm.client import run_usage
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

ROOT = Path(__file__).resolve().parents[2]
MARK = "Check each step twice before answering."  # the candidate's prompt; the seed's lacks it
PROBE = "Reply with the word OK."

# (problem index, is the candidate asking) -> the reply (text or Fault)
Answer = Callable[[int, bool], "str | Fault"]


def _problems(n: int) -> list[tuple[str, str]]:
    return [(f"What is {i} plus {100 + i}?", str(100 + 2 * i)) for i in range(n)]


def _setup(tmp_path: Path, monkeypatch, n: int, answer: Answer, *, timeout: float = 0.6,
           extra: Callable[[dict], str | Fault | None] | None = None):
    """The data file and the responder: optimizer proposes the MARK candidate, judge scores it, the executor's
    reply for problem i comes from ``answer(i, candidate)``; ``extra`` may answer a request first."""
    problems = _problems(n)
    data = tmp_path / "gsm8k_small.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": f"... #### {a}"}) + "\n" for q, a in problems))
    seed = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()
    proposal = seed.replace("Solve the math problem step by step.", f"{MARK} Solve the math problem step by step.")
    assert proposal != seed
    index = {q: i for i, (q, _) in enumerate(problems)}

    def respond(request: dict):
        text = message_text(request)
        if extra is not None:
            got = extra(request)
            if got is not None:
                return got
        if "workflow optimizer of MermaidFlow" in text:
            return f"I ask the solver to check its steps.\n```mermaid\n{proposal}```"
        if "judge of MermaidFlow" in text:
            k = len(re.findall(r"^Candidate \d+ \(", text, re.MULTILINE))
            return json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": 5, "complexity_balance": 7,
                                           "prompt_quality": 6, "rationale": 5} for i in range(k)]})
        if PROBE in text:
            return "OK"
        for q, i in index.items():
            if q in text:
                return answer(i, MARK in text)
        return "I cannot tell."

    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MERMAIDFLOW_BUDGET_USD", "MERMAIDFLOW_CACHE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
    monkeypatch.setenv("MERMAIDFLOW_TIMEOUT", str(timeout))
    return data, respond, problems


def _right(problems: list[tuple[str, str]], i: int, words: int = 0) -> str:
    pad = " ".join(["carefully"] * words)
    return f"{pad} The answer is \\boxed{{{problems[i][1]}}}.".strip()


def _wrong(problems: list[tuple[str, str]], i: int) -> str:
    return f"The answer is \\boxed{{{int(problems[i][1]) + 7}}}."


def _evolve(ws: Workspace, data: Path, *, rounds: int = 1, budget: float | None = None,
            run_id: int | None = None) -> tuple[Evolution, dict]:
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=rounds, data_path=str(data), search="paper", budget=budget)
    evo = Evolution(ws, cfg, run_id=run_id) if run_id is None else Evolution.resume(ws, run_id)
    evo.outage_waits = (0.01, 0.02)
    return evo, evo.run()


# -- a bad candidate inflates its score by turning its wrong answers into errored problems ----------------------


def test_a_candidate_whose_wrong_answers_run_past_the_timeout_is_not_scored_on_its_right_ones_only(tmp_path,
                                                                                                   monkeypatch):
    """20 problems; the candidate answers 16 right and 4 wrong. On 2 of its wrong ones the model 'thinks at
    length' (what a prompt like "if unsure, reason through every case in full" does on the hard problems a model
    gets wrong) and the reply outlasts the client's timeout, every try, while the endpoint answers everything
    else at once. Those 2 problems are the candidate's own doing: they must not leave the score, so the candidate
    scores at most 16/20 (or its round fails by name). Leaving them out makes it 16/18 = 89%."""
    n = 20
    problems = _problems(n)

    def answer(i: int, candidate: bool):
        if not candidate:
            return _right(problems, i) if i < 14 else _wrong(problems, i)  # the seed: 14/20
        if i < 16:
            return _right(problems, i)
        if i < 18:
            return _wrong(problems, i)
        return Fault(body=_wrong(problems, i), delay=3.0)  # a long wrong answer: past the timeout

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, result = _evolve(ws, data)
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert rounds[0]["status"] == "ok" and abs(rounds[0]["score"] - 0.7) < 1e-9, rounds[0]
    r1 = rounds[1]
    honest = 16 / 20
    assert r1["status"] == "failed" or r1["score"] <= honest + 1e-9, (
        f"the candidate's two slow wrong answers were left out of its score: {r1['score']:.3f} > {honest} "
        f"(status {r1['status']}, reason {r1.get('reason')})")


def test_a_refusal_on_the_problems_a_candidate_gets_wrong_counts_as_wrong(tmp_path, monkeypatch):
    """The provider's content filter stops the candidate's answer on 2 of its 4 wrong problems (a prompt can steer
    a model into filtered text when it is unsure): a refusal is the prompt's, answered wrong, never errored."""
    n = 20
    problems = _problems(n)
    filtered = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "fake-model",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": None},
                                        "finish_reason": "content_filter"}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10}})

    def answer(i: int, candidate: bool):
        if not candidate:
            return _right(problems, i) if i < 14 else _wrong(problems, i)
        if i < 16:
            return _right(problems, i)
        return _wrong(problems, i) if i < 18 else Fault(malformed=True, body=filtered)

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, result = _evolve(ws, data)
    r1 = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}[1]
    assert r1["status"] == "ok" and abs(r1["score"] - 0.8) < 1e-9, r1
    errored = [p for p in r1["per_problem"] if p.get("errored")]
    assert errored == [], errored


# -- a good candidate's round is blamed for the endpoint's load ---------------------------------------------------


def test_a_good_candidate_is_not_failed_by_name_when_load_slows_every_normal_answer(tmp_path, monkeypatch):
    """A batching server under another tenant's load (a rival run's flood): every sequence gets a sliver of the
    token rate, so any answer of normal length (the seed's as much as the candidate's: the same length) outlasts
    the timeout, while a one-word reply still comes at once. The good candidate's calls are no longer than the
    seed's; the failures are the load's. Safe: the round is not stored as the candidate's own failure (the run
    stops resumable as for an outage, or the round is measured)."""
    n = 4
    problems = _problems(n)
    load = {"on": False}

    def answer(i: int, candidate: bool):
        if candidate:
            load["on"] = True  # the rival's flood starts as round 1 is measured, and stays
        per_word = 0.15 if load["on"] else 0.001
        text = _right(problems, i, words=30)  # seed and candidate answer at the same length
        return Fault(body=text, delay=per_word * len(text.split()))

    def probe(request: dict):
        if PROBE in message_text(request):
            return Fault(body="OK", delay=(0.15 if load["on"] else 0.001) * 1)  # one word: quick even now
        return None

    monkeypatch.setattr("flowcore.evolution.probe.PROBE_WINDOW", 3.0)  # the load outlasts any window
    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer, extra=probe)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, result = _evolve(ws, data)
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert rounds[0]["status"] == "ok", rounds[0]
    r1 = rounds.get(1)
    assert r1 is None or r1["status"] == "ok", (
        f"a good candidate was stored failed for the endpoint's load: {r1 and r1.get('reason')}")


# -- a bad candidate dodges being stored: its own backlog makes the probe fail ------------------------------------


def test_a_candidate_whose_own_backlog_delays_the_probe_is_still_stored_failed(tmp_path, monkeypatch):
    """A one-slot server that, as many do, finishes a request whose client has gone (non-streamed generation is
    not aborted). The candidate's calls each take 1.5 s of server time; the client gives up on each after 0.6 s,
    and each retry adds more. The probe then waits behind the candidate's own abandoned work and times out, so the
    run stops as an outage with the round unstored: the candidate dodges its failure, and a resume redraws the same
    cached proposal and stops again. Safe (docs/evolution.md): the round is stored failed by name and the run goes
    on."""
    n = 4
    problems = _problems(n)
    slot = threading.Lock()

    def answer(i: int, candidate: bool):
        if candidate:
            with slot:  # the server's one slot, held for the whole generation even after the client left
                time.sleep(1.5)
            return _right(problems, i)
        return _right(problems, i)

    def probe(request: dict):
        if PROBE in message_text(request):
            with slot:
                return "OK"
        return None

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer, extra=probe)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, result = _evolve(ws, data, rounds=2)
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert 1 in rounds and rounds[1]["status"] == "failed", (
        f"the slow candidate's round was not stored; the run {result['status']}: {result.get('reason')}")
    assert result["status"] == "finished", result.get("reason")


# -- the probe itself: never a cached answer, and its cost is charged -------------------------------------------


def test_the_probe_is_never_answered_from_the_cache(tmp_path, monkeypatch):
    """A cached probe answer would say nothing about the endpoint now: every probe reaches the server."""
    data, respond, _ = _setup(tmp_path, monkeypatch, 2, lambda i, c: "The answer is \\boxed{1}.")
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=1, data_path=str(data)))
        evo.start()
        try:
            first = asyncio.run(evo._probe())
            second = asyncio.run(evo._probe())
        finally:
            evo.release()
        probes = [r for r in srv.requests if PROBE in message_text(r)]
    assert first is not None and second is not None
    assert len(probes) == 2, f"{len(probes)} probe(s) reached the server for 2 probes"


def test_every_paid_call_of_a_round_failed_by_the_probe_is_in_the_stored_cost(tmp_path, monkeypatch):
    """The slow candidate's round (failed by name after the probe): the run's stored costs add up to everything the
    endpoint was paid for (the tries, the optimizer, the judge and the probe), none charged nowhere."""
    n = 4
    problems = _problems(n)

    def answer(i: int, candidate: bool):
        if candidate and i >= 2:
            return Fault(body=_right(problems, i), delay=3.0)
        return _right(problems, i, words=20)

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, _ = _evolve(ws, data, rounds=1)
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert rounds[1]["status"] == "failed" and "probe" in rounds[1]["reason"], rounds[1]
    paid = run_usage(ws, f"evo-{evo.run_id}").cost
    stored = History(ws).spent(int(evo.run_id))
    assert paid > 0 and abs(stored - paid) < 1e-12, f"stored ${stored:.9f}, paid ${paid:.9f}"


def test_paid_calls_of_a_round_the_outage_left_unstored_still_count_against_the_budget(tmp_path, monkeypatch):
    """Round 1's candidate is measured; 3 of its 4 problems are answered (paid), the 4th meets an outage that
    outlasts the back-offs and the probe: the run stops, round 1 unstored. Resumed once the endpoint is back,
    the 3 answers come from the cache for free. The budget must still see what the endpoint was paid for them:
    the run's spend as the budget counts it covers every paid call in the call log."""
    n = 4
    problems = _problems(n)
    state = {"phase": "up"}  # up -> down (as problem 3 of the candidate is asked) -> back (for the resume)

    def answer(i: int, candidate: bool):
        if candidate and i == 3 and state["phase"] == "up":
            state["phase"] = "down"
            return Fault(status=503, body="overloaded")
        return _right(problems, i, words=200)

    def outage(request: dict):
        text = message_text(request)
        if state["phase"] == "down" and (MARK in text or PROBE in text):
            return Fault(status=503, body="overloaded")
        return None

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer, extra=outage)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, result = _evolve(ws, data, rounds=1, budget=10.0)
        assert result["status"] == "stopped" and "kept failing" in (result["reason"] or ""), result
        assert History(ws).last_round(int(evo.run_id)) == 0
        state["phase"] = "back"
        evo2, result2 = _evolve(ws, data, rounds=1, budget=10.0, run_id=int(evo.run_id))
    assert result2["status"] == "finished", result2.get("reason")
    paid = run_usage(ws, f"evo-{evo.run_id}").cost
    counted = History(ws).spent(int(evo.run_id))
    assert paid > 0 and counted >= paid - 1e-12, (
        f"the budget counts ${counted:.9f} for run {evo.run_id} but the endpoint was paid ${paid:.9f}: the paid "
        f"calls of the round the outage left unstored vanished from the budget")
