"""Flow against an endpoint that goes away (issue #9 item 5): a subtask whose agent could not reach the LLM
is retried after a back-off, never "repaired" by rewriting its requirement with the connection error."""

from __future__ import annotations

import json
import re

from flowcore.aov import Execution, LLMAgent, LLMInspector, run_sync
from tests.aov.test_aov_llm import diamond, make_llm
from tests.helpers.fakellm import FakeLLMServer, message_text


def respond(req: dict) -> str:
    text = message_text(req)
    if req["model"] == "exec-model":
        sid = re.search(r"Your subtask \((\w+)\)", text).group(1)
        return f"result of {sid}"
    if req["model"] == "judge-model":
        return json.dumps({"passed": True, "reason": "fine"})
    return '{"operations": [{"op": "edit", "subtask": "b", "requirement": "cannot connect"}]}'


def test_a_short_outage_is_ridden_out_without_a_repair():
    with FakeLLMServer(respond) as srv:
        llm = make_llm(srv)
        ex = Execution(diamond(), LLMAgent(llm), LLMInspector(llm), repair_llm=llm, mode="auto")
        ex.endpoint_waits = (0.5, 1.0, 1.0, 1.0)
        first = run_sync(ex.run(schedule="steps", until_done=False))[0]  # a runs
        srv.outage(1.2)  # b and c meet a refused connection, then the server is back
        run_sync(ex.run())
        optimizer_calls = [r for r in srv.requests if r["model"] == "opt-model"]
    assert first.subtasks == ["a"] and ex.status == "completed"
    assert ex.graph.subtasks["b"].subtask_requirement == "write index.html"  # untouched
    assert optimizer_calls == [] and ex.graph.subtasks["b"].data == "result of b"
    assert llm.usage.errors >= 2  # b and c did meet the outage


def test_an_endpoint_that_stays_away_fails_the_subtask_without_a_repair():
    with FakeLLMServer(respond) as srv:
        llm = make_llm(srv)
        ex = Execution(diamond(), LLMAgent(llm), LLMInspector(llm), repair_llm=llm, mode="auto")
        ex.endpoint_waits = (0.05,)
        run_sync(ex.run(schedule="steps", until_done=False))
        srv.stop()
        run_sync(ex.run())
    gave_up = [e["payload"] for e in ex.events if e["kind"] == "give_up"]
    assert {g["subtask"] for g in gave_up} == {"b", "c"}
    assert all("the LLM endpoint kept failing, so it was not repaired" in g["reason"] for g in gave_up)
    assert not [e for e in ex.events if e["kind"] == "proposals"]
    assert ex.graph.subtasks["b"].subtask_requirement == "write index.html"
