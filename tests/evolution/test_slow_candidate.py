"""A candidate whose own calls outlast the client's timeout, on an endpoint that answers everything else: the
round is the candidate's failure, said by name, and the run goes on (it is no outage: retrying after back-offs
and then stopping with EndpointDown halted the run for good, since a resumed run draws the same cached proposal).
A timeout stays the endpoint's for the verdict (never a wrong answer); what changes is only whether the run
waits and stops, which a short probe of the endpoint decides."""

from __future__ import annotations

import json
import re
from pathlib import Path

from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

ROOT = Path(__file__).resolve().parents[2]


def _setup(tmp_path, monkeypatch, respond_slow):
    data = tmp_path / "gsm8k_small.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": f"... #### {a}"}) + "\n"
                            for q, a in [("What is 40 + 2?", "42"), ("What is 6 * 7?", "42"),
                                         ("What is 10 - 3?", "7"), ("What is 2 + 2?", "4")]))
    seed = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()
    proposal = seed.replace("Solve the math problem step by step.",
                            "Write out every intermediate value at length. Solve the math problem step by step.")
    assert proposal != seed

    def respond(request: dict):
        text = message_text(request)
        if "workflow optimizer of MermaidFlow" in text:
            return f"I ask the solver to show its work.\n```mermaid\n{proposal}```"
        if "judge of MermaidFlow" in text:
            n = len(re.findall(r"^Candidate \d+ \(", text, re.MULTILINE))
            return json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": 5, "complexity_balance": 7,
                                           "prompt_quality": 6, "rationale": 5} for i in range(n)]})
        if "intermediate value at length" in text and "MermaidFlow" not in text:
            return respond_slow()
        return "The answer is \\boxed{42}."

    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MERMAIDFLOW_BUDGET_USD"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
    monkeypatch.setenv("MERMAIDFLOW_TIMEOUT", "0.6")
    return data, respond


def test_a_candidate_whose_calls_outlast_the_timeout_fails_its_round_and_the_run_goes_on(tmp_path, monkeypatch):
    data, respond = _setup(tmp_path, monkeypatch, lambda: Fault(body="\\boxed{42}", delay=3.0))
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=2, data_path=str(data)))
        evo.outage_waits = (0.01, 0.02)
        result = evo.run()
    assert result["status"] == "finished", result.get("reason")
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert sorted(rounds) == [0, 1, 2] and rounds[0]["status"] == "ok"
    r1 = rounds[1]
    assert r1["status"] == "failed" and r1["score"] is None, r1
    assert "timed out" in r1["reason"] and "probe" in r1["reason"], r1["reason"]


def test_when_the_probe_fails_too_the_run_still_stops_as_an_outage(tmp_path, monkeypatch):
    state = {"down": False}

    data, respond = _setup(tmp_path, monkeypatch, lambda: Fault(body="\\boxed{42}", delay=3.0))

    def flaky(request: dict):
        if state["down"]:
            return Fault(status=503, body="overloaded")
        reply = respond(request)
        if isinstance(reply, Fault) and reply.delay:
            state["down"] = True  # the endpoint goes down as the candidate is measured: a real outage
        return reply

    with FakeLLMServer(flaky) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=1, data_path=str(data)))
        evo.outage_waits = (0.01, 0.02)
        result = evo.run()
    assert result["status"] != "finished", result
    assert "kept failing" in (result.get("reason") or ""), result
