"""History's round detail as the page shows it (the page only lays these out): the figures above a round, its
caption, its candidates and re-evaluations, and the run's own line."""

from __future__ import annotations

from types import SimpleNamespace

from flowcore.evolution.session import candidates_frame
from flowcore.ui.history import candidates_table, reeval_rows, round_caption, round_metrics, run_caption


def _row(**kw) -> dict:
    return {"round": 3, "score": 0.875, "ci_low": 0.62, "ci_high": 0.97, "cost": 0.0004275000000000001,
            "judge": "rules", "detail": "insert: Review R1 -> C2", "per_problem": None, **kw}


def test_a_measured_round_reads_as_percent_interval_dollars_and_judge_total():
    figures = round_metrics(_row(per_problem=[{"errored": True}, {"errored": False}]), 41.25)
    assert [(label, value) for label, value, _ in figures] == [
        ("Score", "87.5% · 1 not run"), ("95% interval", "62–97%"), ("Cost", "$0.00043"), ("Judge total", "41.2 / 50")]
    assert figures[3][2] == "judge: rules"


def test_an_unmeasured_round_shows_dashes_not_none():
    figures = round_metrics(_row(score=None, ci_low=None, ci_high=None, cost=None, judge=None), None)
    assert [value for _, value, _ in figures] == ["—", "—", "$0.00000", "—"]
    assert "None" not in " ".join(f"{value} {why or ''}" for _, value, why in figures)


def test_the_caption_names_the_round_author_else_the_runs():
    assert round_caption(_row(created_by="alice"), SimpleNamespace(created_by="bob")).endswith("made by alice")
    assert round_caption(_row(), SimpleNamespace(created_by="bob")).endswith("made by bob")


def test_candidates_are_named_in_words_with_their_reasons():
    row = {"chosen": 1, "candidates": [
        {"operator": "review_revise", "detail": "ensemble_branch: new Custom C6 -> E1", "reason": "same workflow"},
        {"operator": "insert:review_revise", "detail": "", "scores": {"total": 40}}]}
    table = candidates_table(candidates_frame(row))
    assert list(table["operator"]) == ["review and revise", "insert a step (review and revise)"]
    assert list(table["detail"]) == ["one more voter: new Custom C6 → E1", ""]
    assert list(table["dropped"]) == ["same workflow", ""] and list(table["chosen"]) == [False, True]


def test_reevaluations_are_rows_with_their_cache_use():
    done = [SimpleNamespace(id=7, status="ok", score=0.5, n=4, total=4, cost=0.01),
            SimpleNamespace(id=9, status="running", score=None, n=1, total=4, cost=0.0)]
    rows = reeval_rows(done, lambda i: f"{i} cached")
    assert {k: [r[k] for r in rows] for k in rows[0]} == {
        "evaluation": ["#7", "#9"], "status": ["ok", "running"], "score": [0.5, None], "n": ["4/4", "1/4"],
        "cost": [0.01, 0.0], "answers": ["7 cached", "9 cached"]}


def test_the_run_line_says_settings_in_words_and_why_it_stopped():
    info = SimpleNamespace(benchmark="gsm8k", task="math", config={"candidates": 3, "top_k": 4}, reason="budget spent")
    assert run_caption(info, "stopped") == ("Benchmark **gsm8k** (math) · 3 candidates a round · parents from the top 4"
                                            " · status **stopped** (budget spent)")
    assert run_caption(SimpleNamespace(**{**vars(info), "reason": None}), "ok").endswith("status **ok**")


def test_the_diff_is_coloured_html_with_every_character_of_the_texts_escaped():
    from flowcore.ui.history import diff_html

    diff = "--- round 1\n+++ round 2\n@@ -1,2 +1,2 @@\n a\n-B[\"<img src=x onerror=alert(1)>\"]\n+C & D\n"
    out = diff_html(diff)
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)&gt;" in out and "C &amp; D" in out
    assert out.startswith("<pre") and out.count("<span") == 6  # one per line
    assert 'background:#ffebe9">-B[&quot;' in out and 'background:#dafbe1">+C' in out  # removed red, added green
    assert "font-weight:600\">--- round 1" in out and "color:#0550ae\">@@" in out
    assert "(no textual change)" in diff_html("")
