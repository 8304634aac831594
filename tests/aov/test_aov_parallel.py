"""Flow's parallel calls and whole-log prompts, against the scripted server through the real openai client:
K candidate graphs and K repair proposals are requested concurrently (the server sees K at once); repair
prompts hold the whole log fitted to the context budget; the scripted server's per-prompt delays."""

from __future__ import annotations

import json
import re

import pytest

from flowcore.aov import AOVError, AOVGraph, generate_candidates, propose_repairs, run_sync
from flowcore.aov.context import event_line, log_text
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer, message_text


def make_llm(srv: FakeLLMServer, concurrency: int = 16) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=20,
                           concurrency=concurrency, cache=False))


def plan(n: int) -> dict:
    return {"goal": "g", "agents": [{"id": "w", "role": "worker"}],
            "subtasks": {f"s{i}": {"subtask_requirement": f"part {i}", "agent": "w"} for i in range(n)}}


@pytest.mark.parametrize("k", [5, 10])
def test_k_candidates_are_requested_concurrently(k: int) -> None:
    def respond(req: dict) -> str:  # candidate i proposes i+1 independent subtasks
        i = int(re.search(r"candidate (\d+) of", message_text(req)).group(1))
        return json.dumps(plan(i))

    with FakeLLMServer(respond, latency=0.4) as srv:
        cands = run_sync(generate_candidates(make_llm(srv), "split it", k=k))
    assert srv.max_in_flight == k and len(srv.requests) == k  # one after another: never more than 1
    assert [len(c.graph.subtasks) for c in cands] == list(range(1, k + 1))  # each reply is its candidate's
    assert {f"candidate {i} of {k}" for i in range(1, k + 1)} == {
        re.search(r"candidate \d+ of \d+", message_text(r)).group(0) for r in srv.requests}


def test_concurrency_limit_of_the_settings_still_applies() -> None:
    with FakeLLMServer(json.dumps(plan(2)), latency=0.2) as srv:
        run_sync(generate_candidates(make_llm(srv, concurrency=2), "split it", k=6))
    assert srv.max_in_flight == 2 and len(srv.requests) == 6


def test_bad_k_is_refused() -> None:
    with pytest.raises(AOVError, match="K must be at least 1"):
        run_sync(generate_candidates(None, "x", k=0))


def diamond() -> AOVGraph:
    g = AOVGraph.from_dict({"goal": "site", "agents": [{"id": "coder", "role": "c"}, {"id": "rev", "role": "r"}],
                            "subtasks": {"a": {"subtask_requirement": "plan", "agent": "coder", "child": ["b"]},
                                         "b": {"subtask_requirement": "write html", "agent": "coder"}}})
    g.subtasks["a"].status, g.subtasks["a"].data = "completed", "the plan"
    g.subtasks["b"].status = "failed"
    return g


def long_log(n: int, output_chars: int) -> list[dict]:
    events = [{"seq": 1, "step": 0, "kind": "start", "payload": {"goal": "site", "graph": {"big": "x" * 5000}}}]
    for i in range(2, n + 2):
        events.append({"seq": i, "step": i, "kind": "result",
                       "payload": {"subtask": f"t{i}", "output": f"MARK{i} " + "y" * output_chars}})
    return events


def test_k_repair_proposals_are_requested_concurrently_and_see_the_whole_log() -> None:
    reply = json.dumps({"operations": [{"op": "edit", "subtask": "b", "requirement": "write index.html"}]})
    with FakeLLMServer(reply, latency=0.4) as srv:
        rs = run_sync(propose_repairs(diamond(), "b", "empty output", k=4, llm=make_llm(srv),
                                      log=long_log(30, 50)))
    assert srv.max_in_flight == 4 and len(srv.requests) == 4
    assert rs.proposals[0].source == "llm" and rs.proposals[0].summary == "edit b: write index.html"
    prompt = message_text(srv.requests[0])
    assert all(f"MARK{i} " in prompt for i in range(2, 32))  # every event, not only the last 12
    assert "x" * 100 not in prompt  # the start event's graph is not repeated (the prompt has the graph)


def test_log_fits_the_budget_cutting_long_outputs_first() -> None:
    events = long_log(20, 5000)
    events.insert(5, {"seq": 99, "step": 3, "kind": "give_up", "payload": {"subtask": "z", "reason": "short"}})
    text = log_text(events, budget=8000)
    assert len(text) <= 8000
    assert all(f"MARK{i} " in text for i in range(2, 22))  # every event keeps its line
    assert event_line(events[5]) in text  # a short line is not cut at all
    assert "chars cut" in text


def test_log_drops_the_oldest_events_only_when_short_lines_cannot_fit() -> None:
    events = long_log(200, 300)
    text = log_text(events, budget=4000)
    assert len(text) <= 4000
    lines = text.splitlines()
    assert lines[0].startswith("#1 step 0 start") and "earlier events left out" in lines[1]
    assert "MARK201 " in text and "MARK2 " not in text  # the newest kept, the oldest after the start gone
    assert log_text([], 100) == "(no events yet)"
    assert log_text(events[:3], 100_000) == "\n".join(event_line(e) for e in events[:3])


def test_scripted_server_delays_by_keyword_and_records_spans() -> None:
    with FakeLLMServer("ok", delays={"slow one": 0.5, "slow": 0.05}) as srv:
        llm = make_llm(srv)

        async def both() -> None:
            import asyncio
            await asyncio.gather(llm.chat("the slow one"), llm.chat("quick"))

        run_sync(both())
    spans = {message_text(r): s for r, s in zip(srv.requests, srv.spans, strict=True)}
    slow, quick = spans["the slow one"], spans["quick"]
    assert slow[1] - slow[0] >= 0.5 > quick[1] - quick[0]  # the first matching keyword wins
    assert quick[1] < slow[1] and srv.in_flight == 0
