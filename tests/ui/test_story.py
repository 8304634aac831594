"""The Evolve page's wording (flowcore.ui.story): one unambiguous progress phrase; missing candidates say why."""

from __future__ import annotations

from flowcore.ui.story import candidate_rows, progress_phrase


def test_the_progress_phrase_counts_rounds_one_way():
    assert progress_phrase(3, {"phase": "starting", "round": 0}, 0) == "Starting: scoring the seed workflow · 0 of 3 rounds done"
    assert progress_phrase(3, {"phase": "evaluating", "round": 0, "done": 2, "n": 5}, 0) == \
        "Seed: evaluating the seed workflow, problem 2 of 5 · 0 of 3 rounds done"
    assert progress_phrase(3, {"phase": "stored", "round": 1}, 2) == \
        "Round 2 of 3: making and judging candidates · 1 of 3 rounds done"
    assert progress_phrase(3, {"phase": "evaluating", "round": 2, "done": 1, "n": 5}, 2) == \
        "Round 2 of 3: evaluating the chosen candidate, problem 1 of 5 · 1 of 3 rounds done"
    assert progress_phrase(1, {"phase": "stored", "round": 1}, 2) == "All 1 round done · finishing"
    assert progress_phrase(3, None, 9) == "All 3 rounds done · finishing"


def test_candidates_that_were_not_produced_say_why():
    row = {"chosen": 1, "candidates": [
        {"text": "flowchart TD\n", "operator": "insert", "detail": "inserted a Review", "scores": {"total": 30.0}},
        {"text": "flowchart TD\n", "operator": "prompt", "detail": "rewrote solver", "scores": {"total": 41.0}},
        {"operator": None, "reason": "the optimizer's 3 proposals were invalid: M006 cycle C1 -> C2 -> C1"},
        {"text": "flowchart TD\n", "operator": "rewire", "reason": "the same workflow as an earlier round"}]}
    rows = candidate_rows(row)
    assert [r["status"] for r in rows] == ["candidate", "chosen", "not produced", "dropped"]
    assert rows[2]["operator"] == "—" and rows[2]["what happened"].startswith("not produced: the optimizer's 3")
    assert rows[2]["what happened"].endswith("C1 → C2 → C1")  # the whole reason, not cut
    assert rows[3]["what happened"] == "dropped: the same workflow as an earlier round"
    assert rows[0]["what happened"] == "inserted a Review" and rows[1]["judge total"] == 41.0
    assert candidate_rows({}) == []


def test_run_summary_says_what_a_run_measured():
    from types import SimpleNamespace

    from flowcore.evolution.session import curve_frame
    from flowcore.ui.story import run_summary

    rows = [{"round": 0, "score": 0.5, "status": "ok", "cost": 0.01, "judge_total": None},
            {"round": 1, "score": 0.75, "status": "ok", "cost": 0.02, "judge_total": None},
            {"round": 2, "score": None, "status": "failed", "cost": 0.0, "judge_total": None}]
    measured = SimpleNamespace(offline=False, config={"rounds": 5})
    got = {label: value for label, value, _ in run_summary(measured, rows, curve_frame(rows))}
    assert got["Rounds done"] == "2 / 5" and got["Best score"] == "75.0%" and got["Failed rounds"] == "1"
    offline = SimpleNamespace(offline=True, config={"rounds": 2})
    got = {label: value for label, value, _ in run_summary(offline, rows, curve_frame(rows))}
    assert got["Best score"] == "not measured"
    exact = {label: (value, why) for label, value, why in run_summary(measured, rows, curve_frame(rows))}
    guessed = {label: (value, why) for label, value, why in run_summary(measured, rows, curve_frame(rows), 3)}
    assert exact["Cost so far"] == ("$0.0300", "")  # the server reported every call's usage
    assert guessed["Cost so far"][0] == "~$0.0300" and "for 3 paid calls;" in guessed["Cost so far"][1]


def test_the_judges_pick_reads_as_one_plain_sentence():
    from flowcore.ui.story import judge_sentence

    assert judge_sentence("rule", 2) == "The rule-based judge picked candidate 2."
    assert judge_sentence("llm", 0) == "The LLM judge picked candidate 0."
    fallback = judge_sentence("rule (fallback: the judge scored no candidates, expected 3)", 2)
    assert fallback == ("The LLM judge could not decide (scored no candidates, expected 3), so the rule-based "
                        "judge picked candidate 2.")
    assert "(fallback" not in fallback


def test_the_judges_criteria_are_headed_in_words():
    from flowcore.evolution.session import candidates_frame

    row = {"chosen": 0, "candidates": [{"operator": "insert", "text": "x", "scores": {
        "coherence": 9, "innovation": 5, "complexity_balance": 7, "prompt_quality": 6, "rationale": 5, "total": 32}}]}
    (cand,) = candidate_rows(row)
    assert cand["prompt quality"] == 6 and cand["complexity balance"] == 7
    assert not any("_" in k for k in cand)
    frame = candidates_frame(row)
    assert frame["prompt quality"].tolist() == [6] and not any("_" in c for c in frame.columns)


def test_who_picked_a_round_reads_in_words():
    from flowcore.ui.story import judge_words

    assert judge_words("rule") == "picked by the rule-based judge"
    assert judge_words("llm") == "picked by the LLM judge"
    assert judge_words("rule (fallback: the judge scored no candidates)") == \
        "the LLM judge could not decide: rule-based pick"
    assert judge_words(None) == "no judge"
