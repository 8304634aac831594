"""Answers built to make the text metrics' own text handling slow (issue 25, found by an outside attacker): each
metric grades a 1 MB answer within a small CPU bound, in the interpreter that serves pages and `serve` (a
quadratic regex there held every request: /health waited 29 s behind one 40 KB answer). The json metric's scan
has its own tests (test_metrics.py); the MATH and GSM8K scorers' in test_pathological_answers.py."""
from __future__ import annotations

import time

import pytest

from flowcore.tasks.metrics import final_answer, grade_text, make_metric

MB = 1 << 20
CPU_BOUND = 2.0

FAMILIES = {
    "answer and spaces": "answer" + " " * MB + "x",
    "final and spaces": "final" + " " * MB + "x",
    "answer is and spaces": "answer is" + " " * MB,
    "markers": "Answer: " * (MB // 8),
    "answer words": "answer " * (MB // 7),
    "digits": "1" * MB,
    "digit runs": "1,2" * (MB // 3),
    "dots and minus": "-.-." * (MB // 4),
    "boxed openers": "\\boxed{" * (MB // 7),
    "unicode spaces": "answer" + "\u2003" * MB + "：",
}
METRICS = {
    "exact": {}, "contains": {}, "number": {}, "f1": {}, "choice": {"choices": ["A", "B", "C", "answer x"]},
    "regex": {"pattern": "x$"},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_text_metric_grades_a_hostile_megabyte_within_its_cpu_bound(family):
    text = FAMILIES[family]
    for name, opts in METRICS.items():
        metric = make_metric(name, opts, where="test")
        start = time.process_time()
        grade = grade_text(metric, text, "City7")
        spent = time.process_time() - start
        assert spent < CPU_BOUND, f"{name} on {family}: {spent:.2f} s CPU"
        assert grade.score in (0.0, None) or name == "regex", (name, family, grade)  # never graded right


def test_the_marker_still_finds_the_final_answer_in_ordinary_text():
    assert final_answer("Let me think.\nThe answer is: Paris") == "Paris"
    assert final_answer("reasoning...\nFinal   Answer :  **42**") == "42"
    assert final_answer("answer is 7") == "answer is 7"  # no colon: no marker, the whole text
    assert final_answer("Answer：東京") == "東京"
    assert final_answer("answer:\n  first\nAnswer: second") == "second"
