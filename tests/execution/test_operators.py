"""Every operator through the real openai client against the scripted FakeLLMServer (no patching)."""

from __future__ import annotations

import asyncio

import pytest

from flowcore import catalogue as cat
from flowcore.execution._standalone_ops import (
    examples_from_problem,
    extract_code,
    guess_entry_point,
    last_boxed,
    majority,
    parse_choice,
    program_for,
)
from flowcore.execution.operators import OPERATORS, NodeError, Value, required_ports, run_operator
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer, Fault, by_keyword, message_text

ADD_STUB = 'def add(a, b):\n    """Add two numbers.\n    >>> add(1, 2)\n    3\n    """\n'
WRONG_ADD = "```python\ndef add(a, b):\n    return a - b\n```"
RIGHT_ADD = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."


def make_llm(server: FakeLLMServer, **kw) -> LLM:
    return LLM(LLMSettings(base_url=server.base_url, api_key="test-key", timeout=10, **kw))


def run(op: str, ports: dict, server: FakeLLMServer, **kw) -> Value:
    return asyncio.run(run_operator(op, ports, llm=make_llm(server), **kw))


def user_texts(server: FakeLLMServer) -> list[str]:
    return [message_text(r) for r in server.requests]


# -- the catalogue drives the dispatch -----------------------------------------------------------------------

def test_every_catalogue_operator_has_one_implementation_reading_its_ports():
    ops = {n for n in cat.CATALOGUE if n not in (cat.INTERFACE, cat.DECISION)}
    assert set(OPERATORS) == ops
    for name in ops:
        assert OPERATORS[name][1] == tuple(p.name for p in cat.CATALOGUE[name].inputs)
    assert required_ports(["CustomCodeGenerateOp"]) == {"CustomCodeGenerateOp": ("problem", "entry_point")}
    assert required_ports(["ScEnsembleOp"]) == {"ScEnsembleOp": ("solutions",)}


def test_unknown_operator_or_port_is_a_clear_error():
    with FakeLLMServer("x") as srv:
        with pytest.raises(ValueError, match="unknown operator"):
            run("Nope", {}, srv)
        with pytest.raises(ValueError, match="has no port 'bogus'"):
            run("Custom", {"bogus": ["x"]}, srv)
        assert srv.requests == []


# -- Custom / AnswerGenerate ------------------------------------------------------------------------------------

def test_custom_puts_the_prompt_before_its_joined_inputs_and_records_usage():
    with FakeLLMServer("The answer is 7.") as srv:
        llm = make_llm(srv)
        out = asyncio.run(run_operator("CustomOp", {"input": [Value("What is 3+4?", "Problem"), "draft: 7"]},
                                       llm=llm, prompt="Solve carefully."))
        assert out.text == "The answer is 7." and out.kind == "Text"
        [text] = user_texts(srv)
        assert text.startswith("Solve carefully.")
        assert text.index("Solve carefully.") < text.index("What is 3+4?") < text.index("draft: 7")
        assert llm.usage.calls == 1 and llm.usage.cost > 0 and llm.calls[0]["latency"] >= 0


def test_answer_generate_asks_for_step_by_step_reasoning():
    with FakeLLMServer("Step 1... Final answer: \\boxed{5}") as srv:
        out = run("AnswerGenerate", {"input": [Value("2+3?", "Problem")]}, srv)
        assert out.text.endswith("\\boxed{5}")
        assert "step by step" in user_texts(srv)[0] and "2+3?" in user_texts(srv)[0]


# -- Programmer ------------------------------------------------------------------------------------------------

def test_programmer_feeds_the_error_back_and_retries():
    bad = "```python\ndef solve():\n    return 1 / 0\n```"
    good = "```python\ndef solve():\n    return sum(range(10))\n```"
    with FakeLLMServer([bad, good]) as srv:
        out = run("Programmer", {"problem": [Value("Sum 0..9", "Problem")], "analysis": ["add them"]}, srv)
        texts = user_texts(srv)
    assert len(texts) == 2
    assert "ZeroDivisionError" in texts[1] and "1 / 0" in texts[1]
    assert "add them" in texts[0] and "solve()" in texts[0]
    assert "The program printed: 45" in out.text and out.text.endswith("\\boxed{45}")
    assert "sum(range(10))" in out.text


def test_programmer_gives_up_after_three_tries():
    with FakeLLMServer("```python\ndef solve():\n    raise ValueError('nope')\n```") as srv:
        out = run("Programmer", {"problem": [Value("?", "Problem")]}, srv)
        assert len(srv.requests) == 3
    assert "The program failed" in out.text and "ValueError" in out.text


# -- ScEnsemble ------------------------------------------------------------------------------------------------

def test_sc_ensemble_returns_the_lettered_choice_unchanged():
    sols = [Value("def f():\n    return 1", "Code"), Value("def f():\n    return 2", "Code"),
            Value("def f():\n    return 3", "Code")]
    with FakeLLMServer("B and C disagree with A... Answer: C") as srv:
        out = run("ScEnsemble", {"solutions": sols, "problem": [Value("f", "Problem")]}, srv)
        [text] = user_texts(srv)
    assert out == sols[2]
    assert out.text == sols[2].text and out.kind == "Code"
    assert "Solution A:" in text and "Solution C:" in text and "return 2" in text


def test_sc_ensemble_falls_back_to_the_majority_when_the_reply_names_no_letter():
    with FakeLLMServer("I cannot tell.") as srv:
        out = run("ScEnsemble", {"solutions": ["x = 5", "x = 7", "x  =  7"]}, srv)
    assert out.text == "x = 7"


def test_sc_ensemble_makes_no_call_when_all_solutions_agree():
    with FakeLLMServer("Answer: A") as srv:
        out = run("ScEnsemble", {"solutions": ["same", " same "]}, srv)
        assert srv.requests == []
    assert out.text == "same"


def test_parse_choice_and_majority():
    labels = ["A", "B", "C"]
    assert parse_choice("Answer: B", labels) == 1
    assert parse_choice("**Answer:** (c)", labels) == 2
    assert parse_choice("The answer is a careful pick... Answer: A\n", labels) == 0
    assert parse_choice("the answer is a mystery", labels) is None
    assert parse_choice("Answer: Z", labels) is None
    assert parse_choice("reasoning\nB", labels) == 1
    assert majority(["1", "2", "2", "1"]) == 0 and majority(["1", "2", "2"]) == 1


# -- CustomCodeGenerate ----------------------------------------------------------------------------------------

def test_custom_code_generate_names_the_entry_point_and_extracts_the_code():
    with FakeLLMServer(RIGHT_ADD) as srv:
        out = run("CustomCodeGenerate", {"problem": [Value(ADD_STUB, "Problem")], "entry_point": [
            Value("add", "EntryPoint")]}, srv, prompt="Write it clearly.")
        [text] = user_texts(srv)
    assert out.kind == "Code" and out.text == "def add(a, b):\n    return a + b"
    assert text.startswith("Write it clearly.") and "must be named add" in text and "Add two numbers" in text


# -- Test ------------------------------------------------------------------------------------------------------

def test_test_operator_fixes_failing_code_using_only_public_examples():
    hidden = "assert add(100, 1) == 101"
    with FakeLLMServer(RIGHT_ADD) as srv:
        out = run("Test", {"solution": [Value("def add(a, b):\n    return a - b", "Code")],
                           "problem": [Value(ADD_STUB, "Problem")], "entry_point": [Value("add", "EntryPoint")]},
                  srv, problem=ADD_STUB, entry_point="add")
        [fix_request] = user_texts(srv)
    assert out.kind == "Code" and "a + b" in out.text
    assert out.verdict["passed"] is True and out.verdict["fixes"] == 1
    assert "assert add(1, 2) == 3" in fix_request and "assertion failed" in fix_request
    assert hidden not in fix_request and "100" not in fix_request


def test_test_operator_gives_a_failed_verdict_after_three_fix_loops():
    with FakeLLMServer(WRONG_ADD) as srv:
        out = run("Test", {"solution": [Value("def add(a, b):\n    return a * b", "Code")]}, srv,
                  problem="Write add.", entry_point="add", public_tests="assert add(1, 2) == 3")
        assert len(srv.requests) == 3
    assert out.verdict["passed"] is False and "assert add(1, 2) == 3" in out.verdict["details"]
    assert "a - b" in out.text


def test_test_operator_passes_without_a_call_when_the_examples_pass():
    with FakeLLMServer("unused") as srv:
        out = run("Test", {"solution": [Value("def add(a, b):\n    return a + b", "Code")]}, srv,
                  problem=ADD_STUB, entry_point="add")
        assert srv.requests == []
    assert out.verdict == {"passed": True, "details": "passed 1 public example(s)", "fixes": 0}


def test_public_examples_come_from_the_problem_text_only():
    assert examples_from_problem(ADD_STUB, "add") == "assert add(1, 2) == 3"
    mbpp = "Write a function.\nYour code should pass this test:\nassert add(2, 2) == 4"
    assert examples_from_problem(mbpp, "add") == "assert add(2, 2) == 4"
    assert examples_from_problem("no examples here", "add") == ""
    assert guess_entry_point(ADD_STUB) == "add" and guess_entry_point(mbpp) == "add"
    assert program_for(ADD_STUB, "def add(a, b):\n    return a + b", "add").startswith("def add(a, b):\n    \"\"\"")
    assert program_for("Write add.", "code", "add") == "code"


# -- Review / Revise / Format ----------------------------------------------------------------------------------

def test_review_returns_feedback_on_the_solution():
    with FakeLLMServer("Step 2 is wrong: 3*4 is 12. Verdict: incorrect") as srv:
        out = run("Review", {"solution": ["3*4 = 13"], "problem": [Value("3*4?", "Problem")]}, srv)
        [text] = user_texts(srv)
    assert out.text.endswith("Verdict: incorrect") and "3*4 = 13" in text and "3*4?" in text


def test_revise_keeps_the_type_of_its_solution():
    with FakeLLMServer(RIGHT_ADD) as srv:
        code = run("Revise", {"solution": [Value("def add(a, b):\n    return a - b", "Code")],
                              "feedback": ["use +"]}, srv, entry_point="add")
        assert "use +" in user_texts(srv)[0]
    assert code.kind == "Code" and code.text == "def add(a, b):\n    return a + b"
    with FakeLLMServer("Revised: 3*4 = 12, so \\boxed{12}") as srv:
        text = run("Revise", {"solution": ["3*4 = 13"], "feedback": ["recompute"]}, srv)
    assert text.kind == "Text" and text.text.endswith("\\boxed{12}")


def test_format_keeps_only_the_boxed_answer():
    with FakeLLMServer("Sure. The final answer is \\boxed{\\frac{1}{2}}.") as srv:
        out = run("Format", {"solution": ["long derivation ... 1/2"]}, srv)
    assert out.text == "\\boxed{\\frac{1}{2}}"
    assert last_boxed("a \\boxed{\\frac{6\\sqrt{10}}{7}} b") == "\\frac{6\\sqrt{10}}{7}"


def test_extract_code_prefers_the_block_defining_the_entry_point():
    text = "```python\nimport math\n```\n```python\ndef f(x):\n    return x\n```"
    assert extract_code(text, "f") == "def f(x):\n    return x"
    assert extract_code("def g():\n    pass") == "def g():\n    pass"


# -- failures --------------------------------------------------------------------------------------------------

def test_an_endpoint_failure_names_the_node():
    with FakeLLMServer(Fault(status=500, body="backend down")) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0))
        with pytest.raises(NodeError, match=r"node C7 \(CustomOp\) failed: .*500.*backend down"):
            asyncio.run(run_operator("Custom", {"input": ["hi"]}, llm=llm, node="C7"))
        assert llm.usage.errors == 1


def test_keywords_reach_the_right_operator():
    """One endpoint, several operators: the scripted replies are chosen by the operators' own wording."""
    table = {"Several candidate": "Answer: B", "solve()": "```python\ndef solve():\n    return 3\n```"}
    with FakeLLMServer(by_keyword(table, "fallback")) as srv:
        prog = run("Programmer", {"problem": [Value("1+2", "Problem")]}, srv)
        pick = run("ScEnsemble", {"solutions": ["one", prog]}, srv)
    assert pick.text == prog.text
