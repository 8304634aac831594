"""Execution without any LLM: steps, clones, inspector rules, localized repairs, human decisions, storage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flowcore.aov import (
    AOVError,
    AOVGraph,
    EchoAgent,
    Execution,
    ManualAgent,
    Op,
    RuleInspector,
    apply_ops,
    compute,
    diff,
    load_execution,
    propose_repairs,
    run_sync,
    save_execution,
)
from flowcore.aov.inspector import rule_verdict
from flowcore.aov.store import ExecutionStore
from flowcore.workspace.store import Workspace

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "aov"


def diamond(**status) -> AOVGraph:
    """a -> {b, c} -> d; b and c both need the coder."""
    subs = {
        "a": {"subtask_requirement": "plan the page", "agent": "planner", "child": ["b", "c"]},
        "b": {"subtask_requirement": "write index.html", "agent": "coder"},
        "c": {"subtask_requirement": "write style.css", "agent": "coder"},
        "d": {"subtask_requirement": "review the site", "agent": "reviewer", "parents": ["b", "c"]},
    }
    for sid, st in status.items():
        subs[sid]["status"] = st
    agents = [{"id": "planner", "role": "plans"}, {"id": "coder", "role": "codes"},
              {"id": "reviewer", "role": "reviews"}]
    return AOVGraph.from_dict({"goal": "a small website", "subtasks": subs, "agents": agents})


class Counting(ManualAgent):
    """A manual agent that also counts how often each subtask ran."""

    def __init__(self, outputs: dict) -> None:
        super().__init__(outputs)
        self.calls: dict[str, int] = {}

    async def run(self, graph, subtask, agent_id, attempt):  # noqa: ANN001, ANN201
        self.calls[subtask.id] = self.calls.get(subtask.id, 0) + 1
        return await super().run(graph, subtask, agent_id, attempt)


OK = {"a": "plan: header, body", "b": "<html>index</html>", "c": "body { margin: 0 }", "d": "looks good"}
FAIL_ONCE = {**OK, "b": ["ERROR: nope", "<html>ok</html>"]}


def run(coro):  # noqa: ANN001, ANN201
    return run_sync(coro)  # asyncio.run fails where a session fixture left a loop running


# ---- steps and clones -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["website.json", "report.json", "gobang.json"])
def test_run_takes_exactly_T_steps_following_the_generations(name: str) -> None:
    g = AOVGraph.load(ASSETS / name)
    m = compute(g)
    ex = Execution(g, EchoAgent())
    reports = run(ex.run())
    assert len(reports) == m.T and ex.step_index == m.T
    assert [r.subtasks for r in reports] == m.steps
    assert ex.status == "completed"
    assert all(st.status == "completed" and st.data for st in ex.graph.subtasks.values())
    assert run(ex.step()) is None  # nothing left


def test_same_agent_in_one_step_gets_a_clone_recorded_in_the_log() -> None:
    ex = Execution(AOVGraph.load(ASSETS / "website.json"), EchoAgent())
    reports = run(ex.run())
    step2 = reports[1]
    assert step2.agents == {"copy": "writer", "html": "coder", "css": "coder#2", "js": "coder#3"}
    assert step2.clones == [{"agent": "coder", "clone": "coder#2", "subtask": "css"},
                            {"agent": "coder", "clone": "coder#3", "subtask": "js"}]
    assert "[coder#3, offline]" in ex.graph.subtasks["js"].data
    logged = [e["payload"] for e in ex.events if e["kind"] == "clone"]
    assert logged == step2.clones
    assert all(r.clones == [] for r in reports if r.index != 2)  # one coder per step elsewhere


def test_subtasks_of_a_step_run_concurrently() -> None:
    running = {"now": 0, "max": 0}

    async def slow(graph, subtask, agent_id, attempt):  # noqa: ANN001, ANN202
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(0.05)
        running["now"] -= 1
        return f"did {subtask.id}"

    ex = Execution(AOVGraph.load(ASSETS / "website.json"), ManualAgent(slow))
    run(ex.run())
    assert running["max"] == 4 and ex.status == "completed"


# ---- manual mode ----------------------------------------------------------------------------------
def test_manual_outputs_become_the_subtasks_data() -> None:
    ex = Execution(diamond(), ManualAgent(OK))
    reports = run(ex.run())
    assert [r.subtasks for r in reports] == [["a"], ["b", "c"], ["d"]]
    assert {s: st.data for s, st in ex.graph.subtasks.items()} == OK
    assert reports[1].verdicts["b"].passed and reports[1].verdicts["b"].source == "rules"


def test_outputs_supplied_per_step_override_the_agent() -> None:
    ex = Execution(diamond(), EchoAgent())
    run(ex.step())
    rep = run(ex.step(outputs={"b": "typed by hand"}))
    assert rep.outputs["b"] == "typed by hand" and "offline" in rep.outputs["c"]


def test_missing_manual_output_fails_the_subtask_with_a_reason() -> None:
    ex = Execution(diamond(), ManualAgent({"a": "plan"}), mode="interactive")
    run(ex.step())
    rep = run(ex.step())
    assert not rep.verdicts["b"].passed
    assert "no manual output supplied for subtask 'b'" in rep.verdicts["b"].reason
    assert ex.status == "paused"


# ---- the rule inspector ---------------------------------------------------------------------------
@pytest.mark.parametrize("output,passed,why", [
    ("", False, "empty output"),
    ("  \n ", False, "empty output"),
    ("ERROR: disk full", False, "error marker"),
    ("done\nFAILED to compile", False, "error marker"),
    ("result: ERROR: bad input", False, "error marker"),
    ("Traceback (most recent call last):\n  File x", False, "error marker"),
    ("Added error handling; tests failed before, now pass.", True, "no error marker"),
    ("All good", True, "no error marker"),
])
def test_rule_inspector(output: str, passed: bool, why: str) -> None:
    st = diamond().subtasks["b"]
    v = rule_verdict(st, output)
    assert v.passed is passed and why in v.reason


def test_rule_inspector_expect_keywords() -> None:
    g = diamond()
    g.subtasks["b"].expect = ["<html>", "footer"]
    v = run(RuleInspector().inspect(g, g.subtasks["b"], "<html>no foot</html>"))
    assert not v.passed and "'footer'" in v.reason
    assert run(RuleInspector().inspect(g, g.subtasks["b"], "<HTML> with FOOTER")).passed


# ---- localized operations -------------------------------------------------------------------------
def failed_b() -> AOVGraph:
    g = diamond(a="completed")
    g.subtasks["a"].data = "the plan"
    g.subtasks["b"].status, g.subtasks["b"].data = "failed", "ERROR: x"
    return g


def test_each_operation_is_local_and_keeps_completed_work() -> None:
    g = failed_b()
    e = apply_ops(g, [Op("edit", "b", "write index.html with a header")], "b")
    assert e.subtasks["b"].subtask_requirement.endswith("header") and e.subtasks["b"].status == "pending"
    r = apply_ops(g, [Op("reassign", "b", agent="reviewer")], "b")
    assert r.subtasks["b"].agent == "reviewer" and r.subtasks["b"].data == ""
    add = apply_ops(g, [Op("add", "b", "collect the plan's sections", new_id="prep")], "b")
    assert add.subtasks["prep"].parents == ["a"] and add.subtasks["b"].parents == ["a", "prep"]
    assert compute(add).steps == [["a"], ["c", "prep"], ["b"], ["d"]]
    dele = apply_ops(g, [Op("delete", "b")], "b")
    assert "b" not in dele.subtasks and dele.subtasks["d"].parents == ["c", "a"]
    rerun = apply_ops(g, [Op("rerun", "b")], "b")
    assert rerun.subtasks["b"].status == "pending"
    for new in (e, r, add, dele, rerun):
        assert new.subtasks["a"].data == "the plan" and new.subtasks["a"].status == "completed"
    child_edit = apply_ops(g, [Op("edit", "b", "retry"), Op("edit", "d", "review what exists")], "b")
    assert child_edit.subtasks["d"].subtask_requirement == "review what exists"
    assert g.subtasks["b"].status == "failed"  # the original is untouched


@pytest.mark.parametrize("ops,pattern", [
    ([Op("edit", "a", "redo the plan")], "not local"),           # completed parent
    ([Op("edit", "c", "other")], "not local"),                   # a sibling
    ([Op("delete", "d")], "only the failed subtask"),            # a child may only be edited/reassigned
    ([Op("reassign", "b", agent="ghost")], "unknown agent 'ghost'"),
    ([Op("reassign", "b", agent="coder")], "already uses"),
    ([Op("edit", "b", "  ")], "non-empty"),
    ([Op("rerun", "zz")], "does not exist"),
    ([], "at least one operation"),
])
def test_operations_that_are_not_local_or_not_valid_are_refused(ops, pattern) -> None:
    with pytest.raises(AOVError, match=pattern):
        apply_ops(failed_b(), ops, "b")


def test_rule_proposals_are_ranked_by_the_selection_rule() -> None:
    rs = run(propose_repairs(failed_b(), "b", "error marker", k=5))
    kinds = [p.ops[0].op for p in rs.proposals]
    # edit/reassign/rerun keep the structure (P_avg 4/3); add lowers P_avg to 5/4; delete to 1
    assert kinds == ["edit", "reassign", "rerun", "add", "delete"]
    assert [round(p.metrics.P_avg, 4) for p in rs.proposals] == [1.3333, 1.3333, 1.3333, 1.25, 1.0]
    top3 = run(propose_repairs(failed_b(), "b", "error marker", k=3))
    assert len(top3.proposals) == 3
    lines = rs.proposals[3].diff.lines(rs.proposals[3].graph)
    assert any(line.startswith("+ subtask b_prep (coder):") for line in lines)
    assert "+ edge b_prep -> b" in lines and "+ edge a -> b_prep" in lines
    assert "~ b.status: 'failed' -> 'pending'" in lines
    d = rs.proposals[4].diff.to_dict()
    assert d["removed"] == ["b"] and ["a", "d"] in d["added_edges"] and ["b", "d"] in d["removed_edges"]


def test_diff_of_identical_graphs_is_empty() -> None:
    g = diamond()
    assert diff(g, g.copy()).lines() == []


# ---- repairs during a run -------------------------------------------------------------------------
def test_auto_repair_completes_and_keeps_completed_data() -> None:
    agent = Counting({**OK, "b": ["ERROR: could not write", "<html>fixed</html>"]})
    ex = Execution(diamond(), agent, mode="auto", schedule="steps")
    reports = run(ex.run())
    assert ex.status == "completed"
    assert [r.subtasks for r in reports] == [["a"], ["b", "c"], ["b"], ["d"]]
    assert reports[1].repairs[0]["subtask"] == "b" and reports[1].repairs[0]["ops"][0]["op"] == "edit"
    assert agent.calls == {"a": 1, "b": 2, "c": 1, "d": 1}  # nothing outside the repair ran again
    assert ex.graph.subtasks["c"].data == OK["c"] and ex.graph.subtasks["a"].data == OK["a"]
    assert ex.graph.subtasks["b"].data == "<html>fixed</html>"
    assert [e["kind"] for e in ex.events].count("repair") == 1


def test_repairs_are_bounded_then_the_subtask_stays_failed() -> None:
    agent = Counting({**OK, "b": "ERROR: always"})
    ex = Execution(diamond(), agent, mode="auto", max_repairs=2)
    run(ex.run())
    assert ex.status == "failed" and agent.calls["b"] == 3 and "d" not in agent.calls
    assert ex.graph.subtasks["b"].status == "failed" and ex.graph.subtasks["c"].status == "completed"
    assert any(e["kind"] == "give_up" and e["payload"]["subtask"] == "b" for e in ex.events)
    assert ex.events[-1]["kind"] == "done" and ex.events[-1]["payload"]["not_completed"] == ["b", "d"]


def test_interactive_pause_accept_and_continue() -> None:
    ex = Execution(diamond(), ManualAgent(FAIL_ONCE), mode="interactive", schedule="steps")
    reports = run(ex.run())
    assert ex.status == "paused" and len(reports) == 2
    assert len(ex.pending_proposals) == 3 and reports[-1].proposals == ex.pending_proposals
    assert ex.pending_failure.failed == "b" and "error marker" in ex.pending_failure.reason
    with pytest.raises(AOVError, match="decision"):
        run(ex.step())
    with pytest.raises(AOVError, match="does not exist"):
        ex.accept(7)
    chosen = ex.pending_proposals[1]
    ex.accept(1)
    assert ex.status == "ready" and ex.graph.subtasks["b"].agent == chosen.graph.subtasks["b"].agent
    run(ex.run())
    assert ex.status == "completed" and ex.step_index == 4
    assert ex.graph.subtasks["c"].data == OK["c"]


def test_interactive_accept_an_edited_proposal() -> None:
    ex = Execution(diamond(), ManualAgent(FAIL_ONCE), mode="interactive")
    run(ex.run())
    edited = ex.pending_proposals[0].graph.to_dict()
    edited["subtasks"]["b"]["subtask_requirement"] = "write index.html, valid HTML5"
    bad = json.loads(json.dumps(edited))
    bad["subtasks"]["c"]["data"] = "tampered"
    with pytest.raises(AOVError, match="completed subtask 'c'"):
        ex.accept(0, edited_graph=bad)
    cyclic = json.loads(json.dumps(edited))
    cyclic["subtasks"]["a"]["parents"], cyclic["subtasks"]["d"]["child"] = ["d"], ["a"]
    with pytest.raises(AOVError, match="cycle"):
        ex.accept(0, edited_graph=cyclic)
    ex.accept(0, edited_graph=edited)
    assert ex.graph.subtasks["b"].subtask_requirement == "write index.html, valid HTML5"
    assert [e for e in ex.events if e["kind"] == "repair"][-1]["payload"]["how"] == "edited"
    run(ex.run())
    assert ex.status == "completed"


def test_reject_keeps_the_failure_and_runs_what_does_not_depend_on_it() -> None:
    g = AOVGraph.load(ASSETS / "report.json")
    outs = {s: f"text of {s}" for s in g.subtasks}
    outs["numbers"] = "ERROR: no data"
    agent = Counting(outs)
    ex = Execution(g, agent, mode="interactive")
    run(ex.run())
    assert ex.pending_failure.failed == "numbers"
    ex.reject()
    run(ex.run())
    assert ex.status == "failed"
    assert ex.graph.subtasks["numbers"].status == "failed"
    assert ex.graph.subtasks["background"].status == "completed"  # independent of the failure
    assert "analysis" not in agent.calls and "final" not in agent.calls
    with pytest.raises(AOVError):
        ex.reject()


def test_two_failures_in_one_step_are_decided_one_after_the_other() -> None:
    agent = Counting({**OK, "b": ["ERROR: b1", "b ok"], "c": ["FAILED: c1", "c ok"]})
    ex = Execution(diamond(), agent, mode="interactive")
    run(ex.run())
    assert ex.pending_failure.failed == "b"
    ex.accept(0)
    assert ex.status == "paused" and ex.pending_failure.failed == "c"
    # c's proposals were rebuilt on the graph that already holds b's repair
    assert all("Previous attempt failed: error marker in output: ERROR: b1" in
               p.graph.subtasks["b"].subtask_requirement for p in ex.pending_proposals)
    ex.accept(0)
    run(ex.run())
    assert ex.status == "completed" and agent.calls == {"a": 1, "b": 2, "c": 2, "d": 1}


# ---- persistence ----------------------------------------------------------------------------------
def test_saved_execution_reopens_and_continues(tmp_path) -> None:
    ws = Workspace(tmp_path / "ws.db")
    ex = Execution(diamond(), ManualAgent(OK), schedule="steps")
    eid = save_execution(ws, ex)
    run(ex.run(max_steps=2))
    assert ex.step_index == 2
    ws.close()

    ws2 = Workspace(tmp_path / "ws.db")
    again = load_execution(ws2, eid, ManualAgent(OK))
    assert again.step_index == 2 and again.status == "ready"
    assert again.graph.subtasks["b"].data == OK["b"] and again.graph.subtasks["d"].status == "pending"
    rest = run(again.run())
    assert [r.subtasks for r in rest] == [["d"]] and again.status == "completed"
    store = ExecutionStore(ws2)
    assert store.row(eid)["status"] == "completed"
    kinds = [e["kind"] for e in store.events(eid)]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("result") == 4
    assert [e["seq"] for e in store.events(eid)] == list(range(1, len(kinds) + 1))
    assert json.loads(store.row(eid)["graph_json"])["subtasks"]["d"]["data"] == OK["d"]
    assert store.list()[0]["id"] == eid
    with pytest.raises(AOVError, match="no AOV execution"):
        load_execution(ws2, "nope")


def test_paused_execution_reopens_with_its_proposals(tmp_path) -> None:
    ws = Workspace(tmp_path / "ws.db")
    outs = {**OK, "b": ["ERROR: nope", "<html>ok</html>"]}
    ex = Execution(diamond(), ManualAgent(outs), mode="interactive", store=ExecutionStore(ws))
    run(ex.run())
    summaries = [p.summary for p in ex.pending_proposals]
    again = load_execution(Workspace(tmp_path / "ws.db"), ex.id, ManualAgent(outs))
    assert again.status == "paused" and [p.summary for p in again.pending_proposals] == summaries
    again.accept(0)
    run(again.run())
    assert again.status == "completed" and again.graph.subtasks["c"].data == OK["c"]


def test_repair_escalates_through_untried_kinds_and_deletes_only_as_a_last_resort() -> None:
    g = AOVGraph.load(ASSETS / "report.json")
    # deleting `numbers` would raise P_avg from 1.5 to 5/3, yet the first repair keeps the deliverable
    assert compute(apply_ops(g, [Op("delete", "numbers")], "numbers")).P_avg > compute(g).P_avg
    outs = {s: f"text of {s}" for s in g.subtasks}
    outs["numbers"] = "ERROR: no data"
    agent = Counting(outs)
    ex = Execution(g, agent, mode="auto", max_repairs=3)
    run(ex.run())
    kinds = [e["payload"]["ops"][0]["op"] for e in ex.events if e["kind"] == "repair"]
    assert kinds == ["edit", "reassign", "delete"]
    assert agent.calls["numbers"] == 3 and "numbers" not in ex.graph.subtasks
    assert ex.graph.subtasks["analysis"].parents == ["outline", "sources"]
    assert ex.status == "completed" and ex.graph.subtasks["analysis"].data == "text of analysis"


def test_a_whole_repaired_graph_is_read_as_localized_operations() -> None:
    from flowcore.aov.repair import parse_proposal

    g = failed_b()
    g.subtasks["c"].status, g.subtasks["c"].data = "completed", "css"

    def proposal(mutate) -> str:  # noqa: ANN001 - the optimizer's reply: the whole graph, statuses reset
        doc = g.to_dict()
        for rec in doc["subtasks"].values():
            rec.update(status="pending", data="")
        mutate(doc["subtasks"])
        return "```json\n" + json.dumps(doc) + "\n```"

    def edit_b(s: dict) -> None:
        s["b"]["subtask_requirement"] = "write valid index.html"
    ops = parse_proposal(proposal(edit_b), g, "b")
    assert [o.to_dict() for o in ops] == [{"op": "edit", "subtask": "b",
                                           "requirement": "write valid index.html"}]

    def add_helper(s: dict) -> None:
        s["h"] = {"subtask_requirement": "fetch the template", "agent": "planner", "parents": [],
                  "child": ["b"]}
        s["b"]["parents"].append("h")
    ops = parse_proposal(proposal(add_helper), g, "b")
    assert [(o.op, o.new_id, o.agent) for o in ops] == [("add", "h", "planner")]

    def edit_child_only(s: dict) -> None:
        s["d"]["subtask_requirement"] = "review what exists"
    ops = parse_proposal(proposal(edit_child_only), g, "b")
    applied = apply_ops(g, ops, "b")
    assert applied.subtasks["b"].status == "pending"  # a repair never leaves the failure in place

    def rewire(s: dict) -> None:
        s["a"]["child"].append("d")
        s["d"]["parents"].append("a")
    with pytest.raises(AOVError, match="rewires edges beyond localized operations: a -> d"):
        parse_proposal(proposal(rewire), g, "b")

    def drop_sibling(s: dict) -> None:
        del s["c"]
        s["a"]["child"].remove("c")
        s["d"]["parents"].remove("c")
    with pytest.raises(AOVError, match="removes c"):
        parse_proposal(proposal(drop_sibling), g, "b")

    def stranger(s: dict) -> None:
        s["b"]["agent"] = "designer"
    with pytest.raises(AOVError, match="unknown agent 'designer'"):
        parse_proposal(proposal(stranger), g, "b")
