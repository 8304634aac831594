"""Counted nouns (issue #30, item 10: 'plurals right')."""

from flowcore.ui.words import count


def test_singular_only_for_one_and_numbers_grouped():
    assert count(1, "repeat") == "1 repeat" and count(3, "repeat") == "3 repeats"
    assert count(0, "warning") == "0 warnings"
    assert count(1204, "row") == "1,204 rows"
    assert count(2, "query") == "2 queries" and count(2, "match") == "2 matches"
    assert count(2, "LLM call") == "2 LLM calls"
    assert count(2, "person", "people") == "2 people" and count(2, "key") == "2 keys"


def test_a_runs_settings_read_as_the_evolve_form_names_them():
    from flowcore.ui.history import config_text

    text = config_text({"mode": "llm", "candidates": 1, "top_k": 4, "alpha": 0.2, "lam": 0.3})
    assert text == ("candidates from the LLM optimizer · 1 candidate a round · parents from the top 4 · "
                    "favour the best 0.2 (α) · 30% picked at random (λ)")
    assert "K=" not in text and "top-k" not in text and "None" not in text
    assert config_text({"mode": "programmatic", "candidates": 3}) == \
        "candidates from the programmatic operators · 3 candidates a round"
    assert config_text({}) == ""


def test_operators_and_trace_columns_read_as_people_write_them():
    import dataclasses

    from flowcore.ui.traces import span_rows
    from flowcore.ui.words import operator_name
    from flowcore.workspace.traces import Span, Trace

    assert operator_name("CustomOp") == "Custom" and operator_name("ScEnsembleOp") == "ScEnsemble"
    assert operator_name("Op") == "Op" and operator_name(None) == ""
    span = Span("C1", "CustomOp", "m", prompt_tokens=3, completion_tokens=2, cost=0.1, calls=1, latency=1.5)
    t = Trace(**{f.name: None for f in dataclasses.fields(Trace)} | {"spans": [span]})
    (row,) = span_rows(t)
    assert row["operator"] == "Custom" and row["latency (s)"] == 1.5 and not any("_" in k for k in row)
    from flowcore.ui.traces import timeline_figure

    t = dataclasses.replace(t, workflow="w", status="ok", latency=1.5)

    assert list(timeline_figure(t).data[0].y) == ["C1 · Custom"]  # the timeline's rows too, not 'CustomOp'


def test_edits_read_as_words_with_the_internal_name_kept_in_the_help():
    from flowcore.evolution.ops import OPERATORS
    from flowcore.ui.words import EDIT_HELP, edit_detail, edit_name

    assert edit_name("review_revise") == "review and revise" and edit_name(None) == "—"
    assert edit_name("insert:review_revise") == "insert a step (review and revise)"
    assert all("_" not in edit_name(op) for op in OPERATORS)  # every operator the optimizer has, in words
    assert all(f"= {op}" in EDIT_HELP for op in OPERATORS)
    assert edit_detail("ensemble_branch: new Custom C6 (solver_2) into E1") == \
        "one more voter: new Custom C6 (solver_2) into E1"
    assert edit_detail("test_retry: the answer has no single source") == "test and retry: the answer has no single source"
    assert edit_detail("C1: Custom -> AnswerGenerate") == "C1: Custom → AnswerGenerate"
    assert edit_detail(None) == ""
