"""flowcore/evaluation/single.py: the Run page's one problem, without Streamlit."""
from __future__ import annotations

import pytest

from flowcore.evaluation import single
from flowcore.llm.client import LLMSettings


def test_sample_problems_come_round_in_order_with_a_reference_only_for_answers():
    first, second = single.sample_problem("gsm8k", 0), single.sample_problem("gsm8k", 1)
    assert first["question"] != second["question"] and first["reference"] and first["entry"] == ""
    code = single.sample_problem("humaneval", 0)
    assert code["entry"] and code["reference"] == ""  # a code task's reference is its tests: nothing to type


def test_problems_for_a_file_without_an_upload_is_a_clear_error_and_a_split_is_named():
    with pytest.raises(ValueError, match="choose a .jsonl file"):
        single.problems_for("gsm8k", "file", 0)
    problems, where = single.problems_for("gsm8k", "validation", 3)
    assert len(problems) == 3 and where == "validation"


def test_a_run_that_cannot_start_is_an_error_in_words_kept_with_its_workflow():
    out = single.run_one(LLMSettings(base_url="http://127.0.0.1:9/v1", api_key="k"), None, "flowchart TD\n  A[",
                         "math", "1+1?", None, benchmark="gsm8k", reference="", sample=None, trace_by="local",
                         workflow_name=None)
    assert set(out) == {"error", "text"} and out["text"].endswith("A[") and "line 2" in out["error"]
