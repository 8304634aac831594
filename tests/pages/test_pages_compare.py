"""The Compare page under AppTest, and the protocol sections of Evolve and History: without an endpoint the page
says so and disables Compare; with the scripted endpoint a comparison runs as a job and shows the table, the
Pareto plot and the agreement; the Evolve page's protocol options reach the run's config; a finished run offers
"continue N more rounds" and History shows validation and test side by side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.evaluation.compare import COMPARE_JOB, list_comparisons
from flowcore.evolution import History
from flowcore.ui.compare import short_name, split_caption, workflow_sources
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace
from tests.evaluation.test_compare import PROBLEMS, hand_mcnemar, scripted, seed_variant
from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.markdown import read_table
from tests.helpers.vega import app_charts

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


def page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"pages/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def button(at: AppTest, key: str):
    return next(b for b in at.button if b.key == key)


def test_without_an_endpoint_compare_is_disabled_and_says_why(db):
    at = page("compare")
    assert "No LLM endpoint is configured" in " ".join(i.value for i in at.info)
    assert button(at, "cmp_start").disabled
    picked = at.multiselect(key="cmp_pick_math").value
    assert picked == ["baseline · IO (math)", "baseline · CoT (math)"]
    assert "No comparisons yet" in " ".join(c.value for c in at.caption)


def test_a_comparison_runs_and_shows_table_plot_and_agreement(db, monkeypatch):
    with FakeLLMServer(scripted) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        ws = Workspace(db)
        from flowcore.workspace import library

        library.save_workflow(ws, "mark-a", seed_variant("MARK-A"), "math")
        library.save_workflow(ws, "mark-b", seed_variant("MARK-B"), "math")
        at = page("compare")
        at.multiselect(key="cmp_pick_math").set_value(["saved · mark-a v1", "saved · mark-b v1"]).run()
        at.number_input(key="cmp_limit").set_value(len(PROBLEMS)).run()
        button(at, "cmp_start").click().run()
        assert not at.exception, [e.value for e in at.exception]
        (job,) = jobs.jobs(COMPARE_JOB)
        assert job.wait(60) and job.snapshot().status == "done", job.snapshot().error
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    (stored,) = list_comparisons(ws)
    assert stored.status == "done" and stored.names == ["mark-a v1", "mark-b v1"]
    assert stored.split["split"] == "test" and stored.split["limit"] == len(PROBLEMS)
    # the result opens on its table; the plot and the agreement are built only when their tab is open
    assert [t.label for t in at.tabs] == ["Table", "Score vs cost", "Per problem"]
    assert not at.dataframe  # the stakeholder table is markdown; the agreement grid is not built
    assert not app_charts(at) and not any("Per-problem agreement" in m.value for m in at.markdown)
    table = read_table(next(m.value for m in at.markdown if m.value.startswith("| workflow |")))
    assert [r["workflow"] for r in table] == ["mark-a v1", "mark-b v1"] and [r["best"] for r in table] == ["★", ""]
    assert [r["score %"] for r in table] == [f"{100 * 10 / 12:.1f}", f"{100 * 6 / 12:.1f}"]
    assert table[1]["McNemar p"] == f"{hand_mcnemar(6, 2):.3f}"  # 6 solved only by A, 2 only by B
    assert table[0]["McNemar p"] == "—" and table[0]["Δ vs best (pts)"] == "— (the best)"  # no None
    assert all(v != "None" and v != "nan" for r in table for v in r.values())  # a missing cell reads "—"
    assert any("1055 test" in c.value for c in at.caption)
    assert any(m.value.startswith("**Best: mark-a v1**") for m in at.markdown)  # the headline above the tabs

    at.session_state["cmp_view"] = "Per problem"
    at.run()
    (agree_grid,) = at.dataframe  # now the agreement only
    agree = agree_grid.value
    assert len(agree) == len(PROBLEMS) and int((~agree["agree"]).sum()) == 8 and agree_grid.proto.placeholder == "—"
    assert any("disagree on 8 of 12 problems" in m.value for m in at.markdown) and not app_charts(at)

    at.session_state["cmp_view"] = "Score vs cost"
    at.run()
    assert not at.dataframe
    (chart,) = app_charts(at)  # the score-vs-cost figure, every scored workflow on it
    points = [la.data for la in chart["layers"] if la.mark["type"] == "point"]
    assert "Score vs cost" in chart["title"] and sum(len(d) for d in points) == 2

    # the new-comparison form folds once a comparison exists, and opens on request with its values
    assert not any(b.key == "cmp_start" for b in at.button) and [e.label for e in at.expander] == ["New comparison"]
    at.session_state["cmp_new_open"] = True
    at.run()
    assert button(at, "cmp_start") and at.number_input(key="cmp_limit").value == len(PROBLEMS)
    assert not at.exception, [e.value for e in at.exception]


def test_engine_helpers_of_the_page(db):
    ws = Workspace(db)
    sources = workflow_sources(ws, "code")
    assert "baseline · CoT-SC (5 samples) (code)" in sources and "example · code_seed" in sources
    assert not any("math" in k for k in sources)
    assert short_name("baseline · CoT (math)") == "CoT (math)"
    assert short_name("run #3 · round 5 · validation 50.0%") == "run #3 · round 5"
    cap = split_caption({"split": "test", "validation_n": 121, "test_n": 484, "source": "ours",
                         "papers": {"validation_n": 119, "test_n": 486}, "note": "not the papers' files"})
    assert "121 validation / 484 test" in cap and "119 / 486" in cap


def test_evolve_options_reach_the_run_and_a_finished_run_can_continue(db):
    at = page("evolve")
    at.session_state["evo_more"] = True  # the search settings' box, built when opened
    at.run()
    assert at.number_input(key="evo_val_rounds").disabled  # repeats need an endpoint
    at.number_input(key="evo_rounds").set_value(1).run()
    button(at, "evo_launch").click().run()
    run = History(Workspace(db)).runs()[-1]
    for job in jobs.jobs():
        job.wait(60)
    assert run.config["validation_rounds"] == 1 and run.config["test_top"] == 0
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.number_input(key=f"evo_more_{run.id}").set_value(2).run()
    button(at, "evo_continue").click().run()
    for job in jobs.jobs():
        job.wait(60)
    assert History(Workspace(db)).last_round(run.id) == 3 and History(Workspace(db)).run(run.id).status == "finished"
    h = page("history")
    assert not h.exception


def test_a_page_run_with_test_top_reports_the_test_phase_and_history_shows_both(db, monkeypatch):
    from flowcore.evolution import EvolutionConfig
    from flowcore.evolution import session as evs
    from flowcore.llm.client import LLMSettings
    from flowcore.ui.compare import validation_test_frame
    from tests.evolution.test_protocol_evolve import answer

    with FakeLLMServer(answer) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        ws = Workspace(db)
        settings = LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0)
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=1, limit=4, mode="programmatic", test_top=2, test_limit=5)
        job = evs.start_run(ws, settings, cfg)
        assert job.wait(60) and job.snapshot().status == "done", job.snapshot().error
        assert any("on the test split" in text for _, text in job.snapshot().events)
        frame = validation_test_frame(ws, job.meta["run_id"])
        assert len(frame) == 2 and frame["test %"].tolist() == [60.0, 60.0] and (frame["test n"] == 5).all()
        h = page("history")
        h.session_state["hist_tab"] = "Validation → test"  # the section is built when opened
        h.run()
    assert not h.exception
    assert any(df.value.columns.tolist()[:4] == ["round", "result", "edit", "validation %"] for df in h.dataframe)
    assert any("Validation → test" in m.value for m in h.markdown)
    assert any(m.value.startswith("**Result: round ") and "Test: " in m.value for m in h.markdown)
    assert next(b for b in h.button if b.key == "hist_test_go")  # on demand, too
