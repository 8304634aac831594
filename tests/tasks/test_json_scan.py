"""The json metric's scan (flowcore.tasks.jsonscan): linear on hostile text, and it takes the last complete
top-level object of an answer. Before: a decode from every '{' (3.4 s at 120 KB of hostile text) that kept the
innermost object."""
from __future__ import annotations

import time

import pytest

from flowcore.tasks.jsonscan import last_object, top_level_spans
from flowcore.tasks.metrics import _json_object, grade_text, make_metric

MB = 1 << 20
HOSTILE = {
    "open braces": "{" * MB,
    "unclosed strings": '{"a": "' * (MB // 7),
    "escaped quotes": "{" + '"x\\' * (MB // 3),
    "deep nesting": '{"a":' * (MB // 5),
    "deep, closed at the end": '{"a":' * (MB // 10) + "1" + "}" * (MB // 10),
    "arrays in objects": '{"a":[' * (MB // 6),
    "braces in keys": '{"{' * (MB // 3),
    "objects that never close": '{"a":1 {' * (MB // 8),
    "closes": "}" * MB,
    "fences": "```" * (MB // 3) + "x",
    "json fences": "```json {" * (MB // 9),
    "an unclosed fence before whitespace": "```json" + "\n" * MB + "{",  # 9.6 s at 40 KB before
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_megabyte_of_hostile_text_grades_in_under_a_second_of_cpu(name):
    metric = make_metric("json", {}, where="t.toml")
    start = time.process_time()
    g = grade_text(metric, "Here it is: " + HOSTILE[name], '{"a": 1}')
    took = time.process_time() - start
    assert g.score == 0.0 and took < 1.0, (name, took)


def test_a_prose_preamble_and_a_final_object_still_work():
    metric = make_metric("json", {}, where="t.toml")
    answer = 'Let me think. The city {of light} is "Paris {the capital}".\nAnswer: {"city": "Paris", "n": 2}'
    assert grade_text(metric, answer, '{"city": "paris", "n": 2}').score == 1.0
    fenced = 'Sure:\n```json\n{"city": "Paris", "n": 3}\n```\nDone {really}.'
    assert grade_text(metric, fenced, '{"city": "Paris", "n": 2}').score == 0.5


def test_the_last_top_level_object_wins_never_an_inner_one():
    assert _json_object('First {"a": 1}, then {"a": 2, "b": {"c": 3}} and done.') == {"a": 2, "b": {"c": 3}}
    assert _json_object('Result: {"city": {"name": "Paris"}}') == {"city": {"name": "Paris"}}  # was the inner
    assert _json_object('{"a": 1} then a stray { and {"b": "} {"}') == {"b": "} {"}
    assert _json_object('Not JSON {see {"a": 1}} at all') is None  # a top-level span that is no JSON
    assert _json_object('{"a": 1} then {bad}') == {"a": 1}


def test_spans_skip_braces_inside_strings_and_stray_braces():
    text = 'x { y {"k": "a}b{"} z {"m": [1, {"n": 2}]} }} w'
    spans = top_level_spans(text)
    assert [text[s:e] for s, e in spans] == ['{ y {"k": "a}b{"} z {"m": [1, {"n": 2}]} }']
    found = last_object('prefix {"a": "line\nbreak"} {"b": 1}')
    assert found is not None and found[0] == {"b": 1}


def test_a_string_that_never_closes_costs_one_scan_of_its_line():
    text = '{"' + '{\\"' * (MB // 3)  # each escaped quote would start another scan to the end of the line
    start = time.process_time()
    assert top_level_spans(text) == []
    # one scan of 1 MB takes ~0.3 s of CPU (more when a busy host shares the core's caches); a rescan per escaped
    # quote would take hours, so the bound tells the two apart at any load
    assert time.process_time() - start < 2.0
