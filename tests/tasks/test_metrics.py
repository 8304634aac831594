"""Every metric of DESIGN §11 on good and bad input: the deterministic ones here, python in the real sandbox,
judge through the real openai client against the scripted server."""
from __future__ import annotations

import asyncio
import json

import pytest

from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks.data import DataError
from flowcore.tasks.judging import judge, parse_grade
from flowcore.tasks.metrics import final_answer, grade_text, make_metric
from flowcore.tasks.pymetric import PythonBatcher, run_python
from tests.helpers.fakellm import FakeLLMServer


def m(name: str, **options):
    return make_metric(name, options, where="t.toml")


def score(name: str, prediction: str, reference: str, **options) -> float | None:
    return grade_text(m(name, **options), prediction, reference).score


def test_final_answer_is_the_boxed_or_the_text_after_the_last_answer_line():
    assert final_answer("Let me think.\nAnswer: Paris") == "Paris"
    assert final_answer("answer: 1\nFinal answer: **Rome**") == "Rome"
    assert final_answer("so \\boxed{Oslo}.") == "Oslo"
    assert final_answer("  Lima  ") == "Lima"


def test_exact_trims_and_case_folds_unless_case_sensitive():
    assert score("exact", " paris ", "Paris") == 1.0
    assert score("exact", "Reasoning...\nAnswer: PARIS", "Paris") == 1.0
    assert score("exact", "Paris, France", "Paris") == 0.0
    assert score("exact", "paris", "Paris", case_sensitive=True) == 0.0


def test_contains():
    assert score("contains", "The capital is Paris.", "paris") == 1.0
    assert score("contains", "The capital is Lyon.", "Paris") == 0.0


def test_regex_with_and_without_a_pattern_option_and_a_bad_pattern():
    assert score("regex", "Order #12345 shipped", r"#\d{5}\b") == 1.0
    assert score("regex", "Order #12 shipped", r"#\d{5}\b") == 0.0
    assert score("regex", "It is Paris.", "Paris", pattern=r"\b{reference}\b") == 1.0
    assert score("regex", "It is Parisian.", "Paris", pattern=r"\b{reference}\b") == 0.0
    assert score("regex", "a.b", "a.b", pattern=r"^{reference}$") == 1.0 and \
        score("regex", "axb", "a.b", pattern=r"^{reference}$") == 0.0  # the reference is escaped
    bad = grade_text(m("regex"), "x", "(unclosed")
    assert bad.score is None and "not a regular expression" in bad.detail
    with pytest.raises(DataError, match=r"metric_options.pattern.*not a regular expression"):
        m("regex", pattern="([")


def test_number_absolute_and_relative_tolerance():
    assert score("number", "It costs $1,234.50 in all", "1234.5") == 1.0
    assert score("number", "about 101", "100", relative=0.02) == 1.0
    assert score("number", "about 103", "100", relative=0.02) == 0.0
    assert score("number", "3.14", "3.1416", tolerance=0.01) == 1.0
    assert score("number", "no digits here", "5") == 0.0
    with pytest.raises(DataError, match="tolerance.*number >= 0"):
        m("number", tolerance=-1)


def test_choice_takes_the_first_choice_named():
    opts = {"choices": ["billing", "bug", "feature request"]}
    assert score("choice", "This is a bug, not billing.", "bug", **opts) == 1.0
    assert score("choice", "Answer: Feature request", "feature request", **opts) == 1.0
    assert score("choice", "debugging", "bug", **opts) == 0.0  # whole words only
    with pytest.raises(DataError, match="choices.*needs this option"):
        m("choice")
    with pytest.raises(DataError, match="list of non-empty strings"):
        m("choice", choices="a,b")


def test_f1_is_squad_token_f1():
    assert score("f1", "the Eiffel Tower", "Eiffel Tower") == 1.0
    assert score("f1", "Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    assert score("f1", "nothing alike", "Eiffel Tower") == 0.0


def test_json_scores_the_share_of_matching_fields():
    ref = json.dumps({"name": "Ada", "year": 1815, "city": "London"})
    assert score("json", 'Here: {"name": "ada", "year": 1815, "city": "Paris"}', ref) == pytest.approx(2 / 3)
    assert score("json", '```json\n{"name": "Ada"}\n```', ref, fields=["name"]) == 1.0
    assert score("json", "not json at all", ref) == 0.0


def test_unknown_metric_and_unknown_option_name_the_field():
    with pytest.raises(DataError, match=r"t.toml: field 'metric': unknown metric 'exactly'"):
        m("exactly")
    with pytest.raises(DataError, match=r"field 'metric_options.case': unknown option of metric 'exact'"):
        m("exact", case=True)
    with pytest.raises(DataError, match="must be true or false"):
        m("exact", case_sensitive="yes")


# -- python: in the sandbox ------------------------------------------------------------------------------------------

METRIC_PY = '''
import os

def metric(prediction, row):
    if row.get("kind") == "raise":
        raise ValueError("no verdict for " + row["kind"])
    if row.get("kind") == "text":
        return "yes"
    if row.get("kind") == "big":
        return 1.5
    if row.get("kind") == "where":
        return float(os.getpid() == 1 or not os.path.exists("/etc/passwd"))
    return float(prediction.strip().lower() == row["answer"].lower())
'''


def py_metric():
    return make_metric("python", {"file": "metric.py"}, where="t.toml", source=METRIC_PY)


def test_python_metric_runs_in_the_sandbox_and_errors_rows_it_cannot_grade():
    grades = run_python(py_metric(), [("Paris", {"answer": "paris"}), ("Lyon", {"answer": "paris"}),
                                      ("x", {"kind": "raise"}), ("x", {"kind": "text"}), ("x", {"kind": "big"}),
                                      ("x", {"kind": "where"})])
    assert [g.score for g in grades[:2]] == [1.0, 0.0]
    assert grades[2].errored and "raised ValueError: no verdict for raise" in grades[2].detail \
        and "at line 6" in grades[2].detail  # the line of metric.py
    assert grades[3].errored and "returned a str, not a number" in grades[3].detail
    assert grades[4].errored and "not a number from 0 to 1" in grades[4].detail
    assert grades[5].score == 1.0  # inside the sandbox: its own pid namespace, no /etc/passwd


def test_a_python_metric_that_cannot_load_errors_every_row_and_a_bad_file_is_refused():
    broken = make_metric("python", {"file": "m.py"}, where="t.toml", source="def metric(p, r):\n    return 1\n"
                                                                              "import sys\nsys.exit(3)\n")
    grades = run_python(broken, [("a", {}), ("b", {})])
    assert all(g.errored and "m.py: metric() could not be loaded (exit code 3)" in g.detail
               for g in grades)
    with pytest.raises(DataError, match=r"line 1: .*"):
        make_metric("python", {"file": "m.py"}, where="t.toml", source="def metric(:\n")
    with pytest.raises(DataError, match="defines no function 'score"):
        make_metric("python", {"file": "m.py", "function": "score"}, where="t.toml", source=METRIC_PY)


def test_python_rows_are_batched_into_few_sandbox_runs():
    batcher = PythonBatcher(py_metric())

    async def go():
        return await asyncio.gather(*(batcher.grade("paris", {"answer": "Paris"}) for _ in range(300)))

    grades = asyncio.run(go())
    assert all(g.score == 1.0 for g in grades) and batcher.runs == 2  # 250 rows a run


# -- judge: through the real client ------------------------------------------------------------------------------------

def test_judge_grades_with_reason_and_model_and_an_unusable_reply_is_errored(ws):
    replies = ['{"score": 0.75, "reason": "Right city, extra words."}', "I think it is fine", "nope", "nope"]
    with FakeLLMServer(replies) as srv:
        settings = LLMSettings(base_url=srv.base_url, api_key="k", models={"judge": "judge-model"}, max_retries=0)
        llm = LLM(settings, ws)
        metric = m("judge", rubric="Full marks for the city alone.")
        g = asyncio.run(judge(llm, metric, "Capital of France?", "It is Paris, I think", "Paris"))
        assert (g.score, g.reason, g.model) == (0.75, "Right city, extra words.", "judge-model")
        bad = asyncio.run(judge(llm, metric, "Capital of Spain?", "Madrid", "Madrid"))
        assert bad.errored and "not JSON (asked twice)" in bad.detail and len(srv.requests) == 3
        system = srv.requests[0]["messages"][0]["content"]
        assert "rubric" in system.lower() and "Full marks for the city alone." in srv.requests[0]["messages"][1]["content"]
    none = asyncio.run(judge(None, metric, "q", "a", "r"))
    assert none.errored and "needs an LLM endpoint" in none.detail


def test_parse_grade_refuses_out_of_range_and_missing_reason():
    assert parse_grade('{"score": 1, "reason": "ok"}') == (1.0, "ok")
    for bad in ('{"score": 1.5, "reason": "x"}', '{"score": true, "reason": "x"}', '{"score": 0.5}', "[1]"):
        with pytest.raises(ValueError):
            parse_grade(bad)


def test_the_number_cache_holds_no_long_answer():
    """Keyed by at most 64 characters: 1,000 distinct 100 KB answers leave the cache (and the heap) small, where
    keying by the answer kept up to 65,536 of them (6.5 GB of 100 KB answers)."""
    import tracemalloc

    from flowcore.tasks.metrics import _short_number

    metric = m("number")
    _short_number.cache_clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1000):
            answer = f"{i} " + "word " * 20_000 + f"so the answer is {i}"  # 100 KB, distinct
            assert grade_text(metric, answer, str(i)).score == 1.0
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert _short_number.cache_info().currsize <= 1001 and grown < 2_000_000, grown
    assert score("number", "x " * 50_000 + "9" * 100, "9" * 100) == 1.0  # a number running into the tail's start
    assert _short_number.cache_info().currsize <= 1001  # that one is parsed whole, not cached
    assert score("number", "1" * 100 + " then 5", "5") == 1.0
