"""Flow as its authors run it, against the scripted server through the real openai client: event-driven
execution (a subtask starts the moment its last parent completes), periodic refinement that never touches
completed work, decisions taken from another thread while the run goes on, pause and resume."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest

from flowcore.aov import AOVError, AOVGraph, Execution, LLMAgent, ManualAgent, RuleInspector, run_sync
from flowcore.aov.refine import merge_update
from flowcore.aov.store import ExecutionStore, load_execution
from flowcore.llm.client import LLM, LLMSettings
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text


def make_llm(srv: FakeLLMServer) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=20,
                           concurrency=16, cache=False))


def graph(subtasks: dict[str, list[str]], agent: str = "w") -> AOVGraph:
    """``{id: [parents]}`` with one agent (``w``) and a second one (``v``) to reassign to."""
    return AOVGraph.from_dict({"goal": "ship it", "agents": [{"id": "w", "role": "worker"},
                                                             {"id": "v", "role": "reviewer"}],
                               "subtasks": {s: {"subtask_requirement": f"do {s}", "agent": agent, "parents": ps}
                                            for s, ps in subtasks.items()}})


def executor(req: dict) -> str:
    sid = re.search(r"Your subtask \((\w+)\)", message_text(req)).group(1)
    return f"result of {sid}"


def subtask_of(req: dict) -> str | None:
    m = re.search(r"Your subtask \((\w+)\)", message_text(req))
    return m.group(1) if m else None


def span(srv: FakeLLMServer, sid: str) -> list[float]:
    return next(s for r, s in zip(srv.requests, srv.spans, strict=True) if subtask_of(r) == sid)


# ---- event-driven execution --------------------------------------------------------------------

def test_a_subtask_starts_before_a_slow_sibling_finishes() -> None:
    g = graph({"root": [], "slow": ["root"], "fast": ["root"], "after_fast": ["fast"], "end": ["slow", "after_fast"]})
    with FakeLLMServer(executor, delays={"Your subtask (slow)": 1.2}) as srv:
        ex = Execution(g, LLMAgent(make_llm(srv)), RuleInspector())
        reports = run_sync(ex.run())
    assert ex.status == "completed"
    slow, after = span(srv, "slow"), span(srv, "after_fast")
    assert after[0] < slow[1] - 0.5  # started (and finished) while its parent's slow sibling still ran
    assert after[1] < slow[1]
    assert span(srv, "end")[0] >= slow[1]  # but never before its own last parent
    # the step view: after_fast belongs to step 3 although it ran inside step 2's time
    assert [r.subtasks for r in reports] == [["root"], ["slow", "fast"], ["after_fast"], ["end"]]
    starts = [e["payload"]["subtask"] for e in ex.events if e["kind"] == "subtask_start"]
    assert starts.index("after_fast") < starts.index("end")


def test_lock_step_waits_for_the_slowest_of_a_step() -> None:
    g = graph({"root": [], "slow": ["root"], "fast": ["root"], "after_fast": ["fast"]})
    with FakeLLMServer(executor, delays={"Your subtask (slow)": 0.6}) as srv:
        ex = Execution(g, LLMAgent(make_llm(srv)), schedule="steps")
        run_sync(ex.run())
    assert span(srv, "after_fast")[0] >= span(srv, "slow")[1]


def test_busy_agent_gets_a_clone_and_the_clone_is_freed_again() -> None:
    g = graph({"a": [], "b": [], "c": ["a"]})

    async def slow_b(graph, st, agent_id, attempt):
        await asyncio.sleep(0.3 if st.id == "b" else 0.0)
        return f"{st.id} by {agent_id}"

    ex = Execution(g, ManualAgent(slow_b))
    run_sync(ex.run())
    data = {s: st.data for s, st in ex.graph.subtasks.items()}
    assert data == {"a": "a by w", "b": "b by w#2", "c": "c by w"}  # c starts when a is done: w is free
    clones = [e["payload"] for e in ex.events if e["kind"] == "clone"]
    assert clones == [{"agent": "w", "clone": "w#2", "subtask": "b"}]


def test_failure_of_one_branch_does_not_stop_the_others_and_pauses_when_nothing_can_run() -> None:
    g = graph({"a": [], "bad": ["a"], "good": ["a"], "good2": ["good"], "end": ["bad", "good2"]})
    ex = Execution(g, ManualAgent(lambda graph, st, agent_id, attempt: "ERROR: nope" if (st.id, attempt) == (
        "bad", 0) else f"{st.id} ok"), mode="interactive")
    reports = run_sync(ex.run())
    assert ex.status == "paused" and ex.pending_failure.failed == "bad"
    assert ex.graph.subtasks["good2"].status == "completed"  # ran although 'bad' awaits a decision
    assert ex.graph.subtasks["end"].status == "pending"
    assert reports[-1].proposals == ex.pending_proposals
    # the proposals were rebuilt on the graph as it is now: good2 shows completed in them
    assert ex.pending_proposals[0].graph.subtasks["good2"].status == "completed"
    ex.accept(0)
    run_sync(ex.run())
    assert ex.status == "completed"


def test_decision_and_pause_from_another_thread_while_the_run_goes_on() -> None:
    g = graph({"bad": [], "long": [], "after_bad": ["bad"], "after_long": ["long"]})
    release = threading.Event()

    async def agent(graph, st, agent_id, attempt):
        if st.id == "long":
            await asyncio.to_thread(release.wait, 10)
        if st.id == "bad" and attempt == 0:
            return "ERROR: first try"
        return f"{st.id} ok"

    ex = Execution(g, ManualAgent(agent), mode="interactive")
    done = threading.Event()
    worker = threading.Thread(target=lambda: (run_sync(ex.run()), done.set()), daemon=True)
    worker.start()
    deadline = time.monotonic() + 5
    while ex.pending_failure is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ex.pending_failure is not None and ex.status == "running"
    assert ex.running_now() == ["long"]
    ex.accept(0)  # from this thread, while 'long' still runs: applied on the run's own loop
    deadline = time.monotonic() + 5
    while ex.graph.subtasks["after_bad"].status != "completed" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ex.graph.subtasks["after_bad"].status == "completed" and ex.running_now() == ["long"]
    ex.request_stop()  # Pause: nothing new starts; the running subtask finishes
    release.set()
    assert done.wait(5)
    assert ex.status == "ready" and ex.graph.subtasks["after_long"].status == "pending"
    run_sync(ex.run())
    assert ex.status == "completed"


def test_a_cancelled_run_leaves_no_subtask_running(tmp_path) -> None:
    ws = Workspace(tmp_path / "ws.db")
    g = graph({"a": [], "b": ["a"]})

    async def agent(graph, st, agent_id, attempt):
        if st.id == "b":
            await asyncio.sleep(30)
        return "ok"

    ex = Execution(g, ManualAgent(agent), store=ExecutionStore(ws))

    async def run_then_cancel() -> None:
        task = asyncio.create_task(ex.run())
        while ex.graph.subtasks["b"].status != "running":
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_sync(run_then_cancel())
    assert ex.graph.subtasks["b"].status == "pending" and ex.status == "ready"
    again = load_execution(ws, ex.id, ManualAgent({"b": "ok"}))
    run_sync(again.run())
    assert again.status == "completed" and again.graph.subtasks["a"].data == "ok"


# ---- periodic refinement -----------------------------------------------------------------------

def refine_reply(req: dict) -> str:
    """Update i: tries to rewrite completed subtask a (ignored), edits pending 'd', adds 'i_extra' that
    needs the completed 'b', and (update 2) deletes 'e'."""
    text = message_text(req)
    i = int(re.search(r"This is update (\d+) of", text).group(1))
    subs = {"a": {"subtask_requirement": "REWRITTEN", "agent": "w", "parents": []},
            "b": {"subtask_requirement": "do b", "agent": "w", "parents": []},
            "c": {"subtask_requirement": "do c", "agent": "w", "parents": []},
            "d": {"subtask_requirement": f"do d better ({i})", "agent": "v", "parents": ["a"]},
            "e": {"subtask_requirement": "do e", "agent": "w", "parents": ["d"]},
            f"extra{i}": {"subtask_requirement": "use b", "agent": "w", "parents": ["b"]}}
    if i == 2:
        del subs["e"]
    return json.dumps({"subtasks": subs})


def responder(req: dict) -> str:
    return refine_reply(req) if "This is update" in message_text(req) else executor(req)


def record(g: AOVGraph, sid: str) -> str:
    rec = dict(g.to_dict()["subtasks"][sid])
    rec.pop("child")
    return json.dumps(rec, sort_keys=True, ensure_ascii=False)


def test_refinement_after_m_completions_keeps_completed_work_byte_identical() -> None:
    g = graph({"a": [], "b": [], "c": [], "d": ["a", "b", "c"], "e": ["d"]})  # d waits for all three
    with FakeLLMServer(responder, latency=0.2) as srv:
        llm = make_llm(srv)
        ex = Execution(g, LLMAgent(llm), RuleInspector(), refine_llm=llm, refine_every=3, k=3)
        before: dict[str, str] = {}
        children: dict[str, list[str]] = {}

        def snapshot(e: dict) -> None:
            if e["kind"] == "refine_proposals":
                done = [s for s, st in ex.graph.subtasks.items() if st.status == "completed"]
                before.update({s: record(ex.graph, s) for s in done})
                children.update({s: list(ex.graph.subtasks[s].child) for s in done})
                assert not ex.running_now()  # refinement waits until nothing runs

        ex.on_event = snapshot
        run_sync(ex.run())
        refine_calls = [(r, s) for r, s in zip(srv.requests, srv.spans, strict=True)
                        if "This is update" in message_text(r)]
    assert ex.status == "completed"
    assert sorted(before) == ["a", "b", "c"]  # after exactly M = 3 completions
    for sid, rec in before.items():
        assert record(ex.graph, sid) == rec, sid  # byte for byte
        now = ex.graph.subtasks[sid].child  # children still there keep their order; new ones come after
        kept = [c for c in children[sid] if c in now]
        assert now[: len(kept)] == kept
    assert ex.graph.subtasks["a"].subtask_requirement == "do a"
    # the three updates were requested at once; update 2 (deletes e) is the most parallel
    assert len(refine_calls) == 3
    starts, ends = [s[0] for _, s in refine_calls], [s[1] for _, s in refine_calls]
    assert max(starts) < min(ends)
    assert "e" not in ex.graph.subtasks and ex.graph.subtasks["d"].subtask_requirement == "do d better (2)"
    assert ex.graph.subtasks["d"].agent == "v" and ex.graph.subtasks["extra2"].parents == ["b"]
    assert ex.graph.subtasks["extra2"].data == "result of extra2"
    refine = [e["payload"] for e in ex.events if e["kind"] == "refine"]
    assert len(refine) == 1 and refine[0]["how"] == "auto" and "kept as it was" in refine[0]["summary"]
    # the refinement prompt held the whole log and the results so far
    prompt = message_text(refine_calls[0][0])
    assert "result of a" in prompt and "result of c" in prompt


def test_refinement_happens_at_most_max_times_and_not_when_off() -> None:
    g = graph({f"s{i}": ([f"s{i - 1}"] if i else []) for i in range(8)})  # a chain of 8
    seen = []

    def reply(req: dict) -> str:
        text = message_text(req)
        if "This is update" not in text:
            return executor(req)
        seen.append(text)
        doc = json.loads(text.split("Current graph:\n", 1)[1].split("\nReply with JSON", 1)[0])
        pend = [s for s, r in doc["subtasks"].items() if r["status"] == "pending"]
        doc["subtasks"][pend[-1]]["subtask_requirement"] += " (refined)"  # a real change each time
        return json.dumps(doc)

    with FakeLLMServer(reply) as srv:
        llm = make_llm(srv)
        ex = Execution(g, LLMAgent(llm), refine_llm=llm, refine_every=2, max_refinements=2, k=1)
        run_sync(ex.run())
        assert ex.status == "completed" and len(seen) == 2 and ex.refinements_done == 2
        off = Execution(g, LLMAgent(llm), refine_llm=llm, refine_every=0)
        run_sync(off.run())
        assert len(seen) == 2 and off.status == "completed"


def test_interactive_refinement_is_a_proposal_to_accept_or_reject(tmp_path) -> None:
    ws = Workspace(tmp_path / "ws.db")
    g = graph({"a": [], "b": [], "c": [], "d": ["a", "b", "c"], "e": ["d"]})  # d waits for all three
    with FakeLLMServer(responder) as srv:
        llm = make_llm(srv)
        ex = Execution(g, LLMAgent(llm), refine_llm=llm, refine_every=3, k=2, mode="interactive",
                       store=ExecutionStore(ws))
        run_sync(ex.run())
        assert ex.status == "paused"
        rs = ex.pending_failure
        assert rs.kind == "refine" and len(rs.proposals) == 2 and rs.failed == ""
        assert all(st.status in ("completed", "pending") for st in ex.graph.subtasks.values())
        assert {"d", "e"} <= {s for s, st in ex.graph.subtasks.items() if st.status == "pending"}
        assert rs.proposals[0].summary.startswith("re-plan: 1 added, 1 removed")
        with pytest.raises(AOVError, match="decision"):
            run_sync(ex.step())
        # reopened from the workspace, the decision is still there, with the same graphs
        again = load_execution(ws, ex.id, LLMAgent(llm), refine_llm=llm)
        assert again.status == "paused" and again.pending_failure.kind == "refine"
        assert [p.graph.to_dict() for p in again.pending_proposals] == [p.graph.to_dict() for p in rs.proposals]
        edited = again.pending_proposals[1].graph.to_dict()
        edited["subtasks"]["a"]["data"] = "tampered"
        with pytest.raises(AOVError, match="completed subtask 'a'"):
            again.accept(1, edited_graph=edited)
        again.accept(1)
        assert "extra2" not in again.graph.subtasks and "extra1" in again.graph.subtasks  # proposal 2 = update 1
        run_sync(again.run())
        assert again.status == "completed"
        # rejecting keeps the plan as it was
        ex2 = Execution(g, LLMAgent(llm), refine_llm=llm, refine_every=3, k=2, mode="interactive")
        run_sync(ex2.run())
        plan = ex2.graph.to_dict()
        ex2.reject()
        assert ex2.graph.to_dict() == plan and ex2.status == "ready"
        run_sync(ex2.run())
        assert ex2.status == "completed" and set(ex2.graph.subtasks) == set(g.subtasks)


def test_bad_updates_are_set_aside_with_the_reason() -> None:
    g = graph({"a": [], "b": ["a"]})
    g.subtasks["a"].status, g.subtasks["a"].data = "completed", "A"
    with pytest.raises(AOVError, match="unknown agent 'ghost'"):
        merge_update(g, {"subtasks": {"b": {"subtask_requirement": "x", "agent": "ghost", "parents": ["a"]}}})
    with pytest.raises(AOVError, match="cycle"):
        merge_update(g, {"subtasks": {"b": {"subtask_requirement": "x", "agent": "w", "parents": ["c"]},
                                      "c": {"subtask_requirement": "y", "agent": "w", "parents": ["b"]}}})
    with pytest.raises(AOVError, match="no 'subtasks'"):
        merge_update(g, {"plan": []})
    new, notes = merge_update(g, {"subtasks": {"b": {"subtask_requirement": "x", "agent": "w",
                                                     "parents": ["a", "ghost"]}}})
    assert new.subtasks["b"].parents == ["a"] and any("'ghost'" in n for n in notes)
    replies = ["not json", json.dumps({"subtasks": {"b": {"subtask_requirement": "do b", "agent": "w",
                                                          "parents": ["a"]}}})]

    def reply(req: dict) -> str:
        return replies[int(re.search(r"This is update (\d+)", message_text(req)).group(1)) - 1]

    from flowcore.aov.refine import propose_refinements
    with FakeLLMServer(reply) as srv:
        rs = run_sync(propose_refinements(g, 2, make_llm(srv), []))
    assert rs.proposals == [] and len(rs.dropped) == 2
    assert "no JSON" in rs.dropped[0] and "changes nothing" in rs.dropped[1]
