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
