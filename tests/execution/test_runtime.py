"""The runtime: checked before running, concurrent branches, Decision routing, failures naming the node."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from flowcore import parse
from flowcore.execution.runtime import NodeError, WorkflowInvalid, note_of, prepare, run_workflow
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer, Fault, by_keyword, message_text

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"
ADD_STUB = 'def add(a, b):\n    """Add two numbers.\n    >>> add(1, 2)\n    3\n    """\n'
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"


def example(name: str):
    return parse((EXAMPLES / f"{name}.mmd").read_text())


def make_llm(server: FakeLLMServer, **kw) -> LLM:
    return LLM(LLMSettings(base_url=server.base_url, api_key="test-key", timeout=10, **kw))


def go(workflow, problem: str, server: FakeLLMServer, **kw):
    return asyncio.run(run_workflow(workflow, problem, llm=make_llm(server), **kw))


def test_math_seed_answers_with_cost_calls_and_trace():
    with FakeLLMServer("6*7 = 42, so \\boxed{42}") as srv:
        res = go(example("math_seed"), "What is 6*7?", srv, task="math")
        [req] = srv.requests
    assert res.answer == "6*7 = 42, so \\boxed{42}" and res.calls == 1 and res.cost > 0
    text = message_text(req)
    assert text.startswith("Solve the math problem step by step") and "What is 6*7?" in text
    [rec] = res.trace
    assert rec["node"] == "C1" and rec["op"] == "CustomOp" and not rec["skipped"] and rec["calls"] == 1
    assert rec["cost"] == pytest.approx(res.cost)


def test_an_invalid_workflow_is_refused_before_any_call():
    bad = parse("flowchart TD\n  PROBLEM([P])\n  C1[Custom]\n  PROBLEM --> C1\n  class PROBLEM Interface\n")
    with FakeLLMServer("x") as srv:
        with pytest.raises(WorkflowInvalid, match="M004") as info:
            go(bad, "q", srv)
        assert srv.requests == []
    assert any(d.code == "M004" for d in info.value.diagnostics)
    with pytest.raises(WorkflowInvalid, match="M011"):
        prepare(example("code_seed"), "math")  # CustomCodeGenerate is not allowed in math tasks


TWO_BRANCHES = """flowchart TD
    %% @prompt a: Branch alpha.
    %% @prompt b: Branch beta.
    PROBLEM([Problem])
    C1["Custom (role: a)"]
    C2["Custom (role: b)"]
    E1[ScEnsemble]
    RETURN([Return])
    class PROBLEM,RETURN Interface
    PROBLEM -->|input| C1 & C2
    C1 & C2 -->|solutions| E1
    E1 --> RETURN
"""


def test_independent_branches_run_concurrently():
    replies = by_keyword({"Several candidate": "Answer: B", "Branch alpha": "alpha 1", "Branch beta": "beta 2"})
    with FakeLLMServer(replies, latency=0.3) as srv:
        res = go(parse(TWO_BRANCHES), "q", srv)
        assert srv.max_in_flight == 2  # C1 and C2 were in flight together
        assert len(srv.requests) == 3
    assert res.answer == "beta 2" and res.calls == 3
    assert [r["node"] for r in res.trace] == ["C1", "C2", "E1"]


def test_decision_passed_returns_the_tested_solution_and_skips_the_failed_branch():
    with FakeLLMServer(by_keyword({"def add": RIGHT}, "unexpected")) as srv:
        res = go(example("humaneval_case_study"), ADD_STUB, srv, entry_point="add", task="code")
        assert len(srv.requests) == 3  # G1..G3; the ensemble sees three equal candidates; tests pass
    assert res.answer == "def add(a, b):\n    return a + b" and res.calls == 3
    by_node = {r["node"]: r for r in res.trace}
    assert by_node["D1"]["route"] == "Passed"
    assert by_node["G4"]["skipped"] and by_node["T2"]["skipped"]
    assert by_node["T1"]["verdict"]["passed"] is True


def test_decision_failed_runs_the_gated_branch_with_the_failed_attempt_as_context():
    table = {"previous solution failed": RIGHT, "Fix the code": WRONG, "def add": WRONG}
    with FakeLLMServer(by_keyword(table, "unexpected")) as srv:
        res = go(example("humaneval_case_study"), ADD_STUB, srv, entry_point="add", task="code")
        texts = [message_text(r) for r in srv.requests]
    improve = [t for t in texts if "previous solution failed" in t]
    assert len(improve) == 1
    assert "did not pass its tests" in improve[0] and "return a - b" in improve[0]
    assert "assertion failed" in improve[0]  # the test report travels with the failed attempt
    by_node = {r["node"]: r for r in res.trace}
    assert by_node["D1"]["route"] == "Failed" and by_node["T1"]["verdict"]["passed"] is False
    assert not by_node["G4"]["skipped"] and by_node["T2"]["verdict"]["passed"] is True
    assert res.answer == "def add(a, b):\n    return a + b"
    assert res.calls == len(texts) == 3 + 3 + 1  # three candidates, three fixes, the improved candidate


GATED_CHAIN = """flowchart TD
    PROBLEM([Problem])
    ENTRY_POINT([Entry])
    G1[CustomCodeGenerate]
    T1[Test]
    D1{Decision}
    G2[CustomCodeGenerate]
    R1[Review]
    V1[Revise]
    RETURN([Return])
    class PROBLEM,ENTRY_POINT,RETURN Interface
    PROBLEM -->|problem| G1 & G2 & T1 & R1
    ENTRY_POINT -->|entry_point| G1 & G2 & T1
    G1 --> T1
    T1 -->|verdict| D1
    D1 -->|Passed| RETURN
    D1 -->|Failed| G2
    G2 --> R1
    G2 --> V1
    R1 -->|feedback| V1
    V1 --> RETURN
"""


def test_everything_fed_only_through_a_gated_node_is_skipped():
    with FakeLLMServer(by_keyword({"def add": RIGHT}, "unexpected")) as srv:
        res = go(parse(GATED_CHAIN), ADD_STUB, srv, entry_point="add", task="code")
        assert len(srv.requests) == 1
    skipped = {r["node"] for r in res.trace if r["skipped"]}
    assert skipped == {"G2", "R1", "V1"} and res.answer.endswith("return a + b")


def test_a_failing_node_raises_an_error_naming_it():
    with FakeLLMServer(Fault(status=500, body="overloaded")) as srv:
        with pytest.raises(NodeError, match=r"node C1 \(CustomOp\) failed.*overloaded"):
            asyncio.run(run_workflow(example("math_seed"), "q", llm=make_llm(srv, max_retries=0)))


def test_label_notes_guide_operators_without_prompts():
    w = example("gsm8k_case_study")
    assert note_of(w.nodes["P2"]) == "edge cases" and note_of(w.nodes["C1"]) == ""
    plan = {n.id: n for n in prepare(w, "math").nodes}
    assert plan["P5"].note == "alternative method" and plan["E1"].note == ""
    assert [sorted(n.id for n in step) for step in prepare(w, "math").steps] == [
        ["C1", "P3", "P4", "P5"], ["P1", "P2"], ["E1"], ["C2"]]


@pytest.mark.parametrize("name,task,problem,entry", [
    ("math_seed", "math", "What is 6*7?", None),
    ("math_case_study", "math", "What is 6*7?", None),
    ("gsm8k_case_study", "math", "What is 6*7?", None),
    ("code_seed", "code", ADD_STUB, "add"),
    ("humaneval_case_study", "code", ADD_STUB, "add"),
    ("mbpp_case_study", "code", "Write add.\nYour code should pass this test:\nassert add(1, 2) == 3", "add"),
])
def test_every_example_runs(name, task, problem, entry):
    table = {"Several candidate": "Answer: A", "solve()": "```python\ndef solve():\n    return 42\n```",
             "add": RIGHT}
    with FakeLLMServer(by_keyword(table, "The answer is \\boxed{42}")) as srv:
        res = go(example(name), problem, srv, entry_point=entry, task=task)
    assert ("42" in res.answer) if task == "math" else ("return a + b" in res.answer)
    assert res.calls == len(srv.requests) and res.calls >= 1
