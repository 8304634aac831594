"""The Tasks page under AppTest, step by step: rows (the worked example, or bytes as an upload gives them),
preview, problem template and reference column, metric and options, the metric on a few rows with each reference
scored against itself, split sizes, save; each bad input named (file, line, field) with nothing saved; and the
saved task offered on the Evolve, Run and Compare pages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.tasks.saved import saved
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture(autouse=True)
def db(tmp_path, monkeypatch):
    path = tmp_path / "ws.db"
    monkeypatch.setenv("MERMAIDFLOW_DB", str(path))
    for k in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_CACHE", "MERMAIDFLOW_BUDGET"))]:
        monkeypatch.delenv(k, raising=False)
    yield path
    for job in jobs.jobs():
        job.cancel()
        job.wait(10)


def page(name: str, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"pages/{name}.py")
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def button(at: AppTest, key: str):
    return next(b for b in at.button if b.key == key)


def texts(at: AppTest) -> str:
    return " ".join([e.value for e in at.error] + [w.value for w in at.warning] + [s.value for s in at.success]
                    + [i.value for i in at.info] + [c.value for c in at.caption])


def with_example(**choices) -> AppTest:
    at = page("tasks")
    button(at, "tk_example").click().run()
    at.text_input(key="tk_problem").set_value("What is the capital of {country}?").run()
    for key, value in choices.items():
        (at.selectbox if key in ("tk_metric", "tk_reference") else at.text_input)(key=key).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_starts_with_an_upload_and_the_example(db):
    at = page("tasks")
    assert "Upload a file to start" in texts(at) and "None saved yet" in texts(at)
    assert "gsm8k" in texts(at)  # the built-in tasks are named


def test_example_preview_map_metric_check_and_save(db):
    at = with_example()
    preview = at.dataframe[0].value
    assert list(preview.columns) == ["line", "country", "capital", "continent"] and preview.iloc[0]["country"] == \
        "France" and preview.iloc[0]["line"] == 2
    assert at.selectbox(key="tk_reference").value == "capital" and at.radio(key="tk_kind").value == "text"
    assert [m.value for m in at.metric] == ["40", "8", "32"]  # rows, validation (0.2), test
    samples = at.dataframe[1].value
    assert samples.iloc[0]["problem"] == "What is the capital of France?" and samples.iloc[0]["reference"] == "Paris"
    assert list(samples["reference vs itself"]) == [1.0] * 5
    assert "is 1 on all 5 rows shown" in texts(at)
    button(at, "tk_save").click().run()
    assert "Saved task **capitals**" in texts(at)
    ws = Workspace(db)
    assert [t["name"] for t in saved(ws)] == ["capitals"]
    # the split share and the metric's options reach the saved task
    at.slider(key="tk_share").set_value(0.5).run()
    at.selectbox(key="tk_metric").set_value("contains").run()
    assert [m.value for m in at.metric] == ["40", "20", "20"]
    button(at, "tk_save").click().run()
    from flowcore.tasks import find

    task = find("capitals", ws)
    assert task.metric.name == "contains" and task.validation == 0.5 and task.metric.opts == {"case_sensitive": False}


def test_a_metric_whose_reference_does_not_score_1_says_why(db):
    at = with_example(tk_metric="number")  # capitals are not numbers: every reference is refused, by line
    assert "line 2: field 'capital': 'Paris' is not a number" in texts(at)
    assert not [b for b in at.button if b.key == "tk_save"]  # nothing to save
    at = with_example(tk_metric="regex")
    at.text_input(key="tk_opt_regex_pattern").set_value("^{reference} City$").run()
    assert "not 1 on 5 of 5 rows shown" in texts(at) and "capitals.csv: line 2" in texts(at)


def test_judge_is_labelled_graded_by_a_model(db):
    at = with_example(tk_metric="judge")
    assert "graded by a model" in texts(at)
    assert "not run here" in texts(at)


@pytest.mark.parametrize("name,data,expected", [
    ("bad.csv", b"country,capital\nFrance,Paris\nEspa\xf1a,Madrid\n", "bad.csv: line 3, column 5: not UTF-8"),
    ("bad.csv", b'country,capital\nFrance,Paris\n"Spain,Madrid\n', "bad.csv: line 3: a quoted field opened here"),
    ("bad.csv", b"country,capital\n", "bad.csv: no rows"),
    ("bad.xlsx", b"PK", "unknown data format"),
])
def test_an_unreadable_upload_is_named_and_nothing_is_saved(db, name, data, expected):
    at = page("tasks", tk_source=(name, data))
    assert expected in texts(at) and not [b for b in at.button if b.key == "tk_save"]
    assert saved(Workspace(db)) == []


@pytest.mark.parametrize("rows,problem,expected", [
    (b"country,capital\nFrance,Paris\nSpain,\n", "{country}", "rows.csv: line 3: field 'capital' is empty"),
    (b"country,capital\nFrance,Paris\nSpain,Madrid\n", "Capital of {nation}?",
     "field 'problem' names 'nation', which rows.csv lacks"),
])
def test_a_row_or_field_the_task_cannot_use_is_named(db, rows, problem, expected):
    at = page("tasks", tk_source=("rows.csv", rows))
    at.text_input(key="tk_problem").set_value(problem).run()
    assert expected in texts(at) and not [b for b in at.button if b.key == "tk_save"]
    assert saved(Workspace(db)) == []


def test_a_saved_task_is_offered_on_evolve_run_and_compare(db):
    at = with_example()
    button(at, "tk_save").click().run()
    at = page("evolve")
    at.selectbox(key="evo_pick_seed").set_value(("example", "text_seed")).run()
    assert at.selectbox(key="evo_bench_text").options == ["capitals"]
    at = page("compare")
    at.radio(key="cmp_task").set_value("text").run()
    assert at.selectbox(key="cmp_bench_text").options == ["capitals"]
    assert any("baseline · CoT-SC (5 samples) (text)" == o for o in at.multiselect(key="cmp_pick_text").options)
