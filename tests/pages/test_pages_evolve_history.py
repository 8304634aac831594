"""The Evolve and History pages under Streamlit's AppTest, and the engine side they use
(flowcore.evolution.session): offline structure-only runs, review (veto, invalid and valid edits, choosing
another candidate), cancel and resume, a run measured against a scripted endpoint, the history table with its
filters, pin, note, fork to the Editor and re-evaluation."""

from __future__ import annotations

import html
import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from flowcore.evolution import Evolution, EvolutionConfig, History, Review
from flowcore.evolution import session as evs
from flowcore.evolution.judge import Candidate, Verdict
from flowcore.evolution.loop import Cancelled
from flowcore.mermaid.engines import js as mermaid_js
from flowcore.mermaid.reader import parse
from flowcore.tasks import load
from flowcore.ui import history as hv
from flowcore.ui.words import edit_name
from flowcore.workspace import jobs
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text
from tests.helpers.plots import app_plots
from tests.helpers.plots import read as read_plot
from tests.helpers.vega import app_charts

APP = str(Path(__file__).resolve().parents[2] / "app.py")
PROBLEMS = load("gsm8k", "validation", limit=2)
NEW_PROMPT = "Solve it step by step, check the arithmetic, and end with the final number."


@pytest.fixture(autouse=True)
def db(tmp_path, monkeypatch):
    path = tmp_path / "ws.db"
    monkeypatch.setenv("MERMAIDFLOW_DB", str(path))
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "MERMAIDFLOW_CACHE", "MERMAIDFLOW_BUDGET_USD"):
        monkeypatch.delenv(k, raising=False)
    yield path
    for job in jobs.jobs(evs.EVOLVE_JOB):  # no run may outlive its test (the page finds active runs)
        job.cancel()
        if (gate := evs.gate_of(job.id)) is not None:
            gate.withdraw()
        job.wait(10)


def respond(request: dict) -> str:
    """Right answers for the two validation problems; a new instruction when the optimizer asks for one."""
    text = message_text(request)
    if "You improve one instruction" in text:
        return NEW_PROMPT
    for p in PROBLEMS:
        if p.question in text:
            return f"Adding it up, the answer is {p.reference}."
    return "The answer is 0."


def page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"pages/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def section(at: AppTest, tab: str) -> AppTest:
    """Open one of History's sections (only the open one is built)."""
    at.session_state["hist_tab"] = tab
    return rerun(at)


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click()
    return rerun(at)


def wait_until(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def job_of(at: AppTest) -> jobs.Job:
    job = jobs.get(at.session_state["evo_job_id"])
    assert job is not None
    return job


def waiting(job: jobs.Job, rnd: int) -> evs.ReviewGate:
    gate = evs.gate_of(job.id)
    wait_until(lambda: gate.pending is not None and gate.pending.round == rnd)
    return gate


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def figures(at: AppTest) -> list[dict]:
    """The page's charts in order of kind: the server-drawn ones ({"title", "legend", "plot"}), then Vega-Lite's
    ({"title", "layers"})."""
    return [{"title": p.title, "legend": p.legend, "plot": p} for p in app_plots(at)] + app_charts(at)


def mermaid_args(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.json_args) for c in at.get("component_instance")
            if c.proto.component_name.endswith("mermaid_drawing")]


def offline_run(db: Path, rounds: int = 3) -> int:
    return Evolution(Workspace(db), EvolutionConfig(benchmark="gsm8k", rounds=rounds, seed=1)).run()["run_id"]


# -- Evolve -----------------------------------------------------------------------------------------------------------

def test_evolve_offline_run_completes_and_says_structure_only(db):
    at = page("evolve")
    assert [t.value for t in at.title] == ["Evolve"]
    assert at.radio(key="evo_mode").disabled and at.radio(key="evo_mode").value == "programmatic"
    assert any("structure-only (no score" in c.value for c in at.caption)
    at.number_input(key="evo_rounds").set_value(3)
    click(at, "evo_launch")
    job = job_of(at)
    assert job.wait(30) and job.status == "done", job.error
    rerun(at)
    assert any(s.value == "Run #1: finished" for s in at.subheader)
    assert any("**Structure-only run**" in i.value and "no benchmark score is measured" in i.value for i in at.info)
    m = metrics(at)
    assert m["Rounds done"] == "3 / 3" and m["Best score"] == "not measured"
    fig = figures(at)[0]
    assert fig["legend"] == ["judge total (structure only)"]
    assert "structure only" in fig["title"]
    rows = History(Workspace(db)).rounds(1)
    assert [r["status"] for r in rows] == ["structure-only"] * 4 and all(r["score"] is None for r in rows)
    assert History(Workspace(db)).run(1).offline


def test_evolve_review_veto_edit_and_choose(db):
    at = page("evolve")
    at.number_input(key="evo_rounds").set_value(3)
    at.toggle(key="evo_review").set_value(True)
    click(at, "evo_launch")
    job = job_of(at)

    waiting(job, 1)
    rerun(at)
    assert any("round 1: review before evaluation" in s.value for s in at.subheader)
    cands = evs.gate_of(job.id).pending.candidates
    drawn = mermaid_args(at)
    assert len(drawn) == len(cands) >= 2 and all("flowchart" in d["code"] for d in drawn)
    assert figures(at)  # the curve so far is shown while the run waits
    click(at, "evo_veto")

    gate = waiting(job, 2)
    rerun(at)
    at.text_area(key=f"evo_edit_2_{gate.pending.chosen}").set_value("flowchart TD\n    PROBLEM --> C1\n")
    click(at, "evo_use_edit")
    assert any("Not applied" in e.value for e in at.error)
    assert gate.pending is not None and gate.pending.round == 2  # still waiting
    good = gate.pending.candidates[gate.pending.chosen]["text"].replace("flowchart TD", "flowchart LR", 1)
    at.text_area(key=f"evo_edit_2_{gate.pending.chosen}").set_value(good)
    click(at, "evo_use_edit")

    gate = waiting(job, 3)
    rerun(at)
    other = (gate.pending.chosen + 1) % len(gate.pending.candidates)
    at.radio(key="evo_pick_3").set_value(other)
    click(at, "evo_approve")
    assert job.wait(20) and job.status == "done", job.error
    rows = History(Workspace(db)).rounds(job.meta["run_id"])
    assert rows[1]["status"] == "failed" and "vetoed by you" in rows[1]["reason"]
    assert "edited by the reviewer" in rows[2]["detail"] and rows[2]["workflow_text"].startswith("flowchart LR")
    assert rows[3]["chosen"] == other and rows[3]["status"] == "structure-only"


def test_evolve_cancel_during_review_then_resume(db):
    at = page("evolve")
    at.number_input(key="evo_rounds").set_value(3)
    at.toggle(key="evo_review").set_value(True)
    click(at, "evo_launch")
    job = job_of(at)
    waiting(job, 1)
    rerun(at)
    click(at, "evo_cancel_review")
    assert job.wait(10) and job.status == "cancelled"
    run_id = job.meta["run_id"]
    assert History(Workspace(db)).run(run_id).status == "cancelled"
    rerun(at)
    assert [e.label for e in at.expander if e.label.startswith("Resume")] == ["Resume an unfinished run (1)"]
    assert not any(s.key == "evo_resume_run" for s in at.selectbox)  # the resume box is built when opened
    at.session_state["evo_resume_open"] = True
    rerun(at)
    assert at.selectbox(key="evo_resume_run").value == run_id
    click(at, "evo_resume")
    again = job_of(at)
    assert again.id != job.id and again.wait(30) and again.status == "done", again.error
    rows = History(Workspace(db)).rounds(run_id)
    assert [r["round"] for r in rows] == [0, 1, 2, 3] and History(Workspace(db)).run(run_id).status == "finished"
    rerun(at)
    assert not any(e.label.startswith("Resume") for e in at.expander)


def test_evolve_with_an_endpoint_shows_measured_scores(db, monkeypatch):
    with FakeLLMServer(respond, latency=0.15) as srv:  # slow enough to see the run going on
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = page("evolve")
        assert not at.radio(key="evo_mode").disabled
        at.radio(key="evo_mode").set_value("programmatic")
        at.number_input(key="evo_rounds").set_value(2)
        at.number_input(key="evo_limit").set_value(2)
        assert not at.multiselect  # the search settings are built only when opened
        at.session_state["evo_more"] = True
        rerun(at)
        at.multiselect(key="evo_ops").set_value(["insert", "prompt"])
        at.number_input(key="evo_alpha").set_value(0.5)
        rerun(at)
        at.session_state["evo_more"] = False  # closed again: what was set there still goes to the run
        rerun(at)
        assert not at.multiselect
        click(at, "evo_launch")
        job = job_of(at)
        config = History(Workspace(db)).run(job.meta["run_id"]).config
        assert config["operators"] == ["insert", "prompt"] and config["alpha"] == 0.5 and config["lam"] == 0.3
        bar = at.get("progress")[0].proto  # the live panel while the run goes on
        assert bar.text.startswith(f"Run #{job.meta['run_id']} · ") and " of 2 rounds done" in bar.text
        assert at.button(key="evo_cancel").label == "Cancel run"
        assert job.wait(60) and job.status == "done", job.error
        rerun(at)
    rows = History(Workspace(db)).rounds(job.meta["run_id"])
    assert [r["status"] for r in rows] == ["ok"] * 3 and rows[0]["score"] == 1.0 and rows[0]["n"] == 2
    assert metrics(at)["Best score"] == "100.0%"
    assert not any("Structure-only" in i.value for i in at.info)
    assert figures(at)[0]["legend"] == ["score per round", "best so far"]
    assert any(e[1].startswith("round 2 of 2 stored") for e in job.snapshot().events)
    assert any("evaluated 2/2 problems" in e[1] for e in job.snapshot().events)  # per-problem progress


# -- History ----------------------------------------------------------------------------------------------------------

def test_history_without_runs_points_to_evolve():
    at = page("history")
    assert any("No evolution runs yet" in i.value for i in at.info)


INTERNAL = ("review_revise", "test_retry", "ensemble_branch", "graft_branch", "graft_ensemble", "new_ensemble")


def _shown(at: AppTest) -> str:
    """Every word the page shows: tables' cells and headers, markdown, headers, captions, option labels."""
    parts = [m.value for m in (*at.markdown, *at.subheader, *at.caption)]
    for df in at.dataframe:
        parts += [str(c) for c in df.value.columns] + [str(v) for v in df.value.to_numpy().ravel()]
    parts += [str(o) for box in (*at.selectbox, *at.multiselect) for o in box.options]
    return "\n".join(parts)


def test_edits_read_as_words_on_evolve_and_history_not_internal_names(db):
    """issue #30 item 10: 'review_revise' and 'ensemble_branch: …' in the tables; now words, the names in a tooltip."""
    run_id = offline_run(db, rounds=1)
    h = History(Workspace(db))
    seed = h.rounds(run_id)[0]["workflow_text"]
    cands = [{"text": seed, "operator": "review_revise", "detail": "Review R1 + Revise V1 on C1 -> RETURN",
              "scores": {"total": 40.0}},
             {"text": seed, "operator": "insert", "detail": "ensemble_branch: new Custom C6 (solver_2) into E1",
              "scores": {"total": 30.0}},
             {"text": "", "operator": "test_retry", "reason": "test_retry: the answer has no single source"}]
    h.add_round(run_id, {"round": 2, "workflow_text": seed, "status": "structure-only", "operator": "review_revise",
                         "detail": "Review R1 + Revise V1 on C1 -> RETURN", "parents": [0], "candidates": cands,
                         "chosen": 0, "judge": "rule"})
    ev = page("evolve")
    assert not ev.dataframe  # the candidates' grid is built when its box is opened
    ev.session_state["evo_cands_open_last"] = True
    shown = _shown(rerun(ev))
    assert "review and revise" in shown and "one more voter: new Custom C6 (solver_2) into E1" in shown
    assert not [n for n in INTERNAL if n in shown], [n for n in INTERNAL if n in shown]
    hist = section(page("history"), "Round detail")
    shown = _shown(hist)
    assert "Round #2 · review and revise · structure-only" in [s.value for s in hist.subheader]
    assert not [n for n in INTERNAL if n in shown], [n for n in INTERNAL if n in shown]
    section(hist, "Rounds")
    shown = _shown(hist)
    assert "review and revise" in shown and not [n for n in INTERNAL if n in shown]
    assert set(hist.multiselect(key="hist_ops").options) >= {"review and revise", "seed"}
    # the names stay for developers: the Edit filter's and the columns' tooltip
    assert "review and revise = review_revise" in hist.multiselect(key="hist_ops").help


def test_history_marks_the_cost_of_rounds_whose_calls_had_no_usage(db, endpoint, monkeypatch):
    """'~' before a round's cost in the table and above its detail (why, on hover) when the endpoint reported no
    token counts for some of its calls; the rounds before that say '$' alone."""
    from tests.helpers.fakellm import Fault

    armed: list[bool] = []
    endpoint(lambda req: Fault(body="It is \\boxed{3}.", no_usage=True) if armed else "It is \\boxed{3}.")
    monkeypatch.setenv("MERMAIDFLOW_DB", str(db))  # (the endpoint fixture starts from a clean environment)
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, seed=4, limit=2, candidates=2, mode="programmatic")
    out = Evolution(Workspace(db), cfg, progress=lambda rec: rec["round"] == 0 and armed.append(True)).run()
    assert out["status"] == "finished", out
    at = section(page("history"), "Rounds")
    assert [c[0] for c in at.dataframe[0].value["cost"]] == ["$", "~", "~"]
    section(at, "Round detail")
    cost = next(m for m in at.metric if m.label == "Cost")
    assert cost.value.startswith("~$") and "paid call" in cost.help


def test_history_table_filters_pin_note_and_fork(db):
    run_id = offline_run(db)
    rows = History(Workspace(db)).rounds(run_id)
    at = section(page("history"), "Rounds")
    assert any("**Structure-only run**" in i.value for i in at.info)
    table = at.dataframe[0].value
    assert list(table["round"]) == [0, 1, 2, 3] and "score" not in table.columns  # nothing was measured
    assert at.number_input(key="hist_min").disabled
    at.multiselect(key="hist_ops").set_value([rows[2]["operator"]])
    rerun(at)
    assert set(at.dataframe[0].value["operator"]) == {edit_name(rows[2]["operator"])}  # in words
    at.multiselect(key="hist_ops").set_value([])
    rerun(at)
    # the last round is selected: lineage, parent/child drawings, diff and sampling
    assert at.selectbox(key=f"hist_round_{run_id}").value == 3
    section(at, "Lineage")
    assert not mermaid_args(at)  # the lineage is a chart
    lineage = next(f for f in figures(at) if "layers" in f and f["layers"][0].mark["type"] == "rule")  # edges, then the nodes
    dots = lineage["layers"][1].data
    names = next(la.data for la in lineage["layers"] if la.mark["type"] == "text")
    assert sorted(names["name"]) == sorted(f"#{r['round']}" for r in rows)  # a small run: the whole tree, named
    assert list(dots[dots["series"] == "selected"]["name"]) == ["#3"]
    color = lineage["layers"][1].encoding["color"]["scale"]
    assert dict(zip(color["domain"], color["range"]))["selected"] == "#2e7d32"
    assert any("Lineage (parents → children" in c.value and "all 4 rounds" in c.value for c in at.caption)
    section(at, "Round detail")
    assert len(mermaid_args(at)) == 2  # parent, child
    diff = html.unescape(re.sub(r"<[^>]+>", "", next(e.proto.body for e in at.get("html") if "mf-diff" in e.proto.body)))
    assert diff.startswith(f"--- round {rows[3]['parents'][0]}+++ round 3") and "\n+" in diff
    assert any("Parent selection probabilities" in (f["title"] or "") for f in figures(at))
    assert at.button(key="hist_reeval").disabled
    assert any("Re-evaluate: No LLM endpoint" in c.value for c in at.caption)

    at.selectbox(key=f"hist_round_{run_id}").set_value(2)
    rerun(at)
    click(at, "hist_pin")
    assert History(Workspace(db)).get_round(run_id, 2)["pinned"]
    at.text_input(key=f"hist_note_{run_id}_2").input("worth keeping")
    click(at, "hist_note_save")
    assert History(Workspace(db)).get_round(run_id, 2)["note"] == "worth keeping"
    section(at, "Rounds")
    at.checkbox(key="hist_pinned").check()
    rerun(at)
    view = at.dataframe[0].value
    assert list(view["round"]) == [2] and list(view["note"]) == ["worth keeping"]

    section(at, "Round detail")
    click(at, "hist_fork")
    assert [t.value for t in at.title] == ["Editor"]
    assert at.session_state["mf_text"] == rows[2]["workflow_text"]
    assert at.session_state["mf_task"] == "math" and at.session_state["mf_name"] == f"gsm8k_run{run_id}_round2"


def test_a_note_saved_as_a_round_lands_keeps_its_message(db, monkeypatch):
    """A run going on: the page reruns itself when a new round is stored. When that happens while the page is
    drawn after a note was saved, the rerun must still say the note was saved (it was shown, then lost)."""
    run_id = offline_run(db)
    History(Workspace(db)).set_status(run_id, "running")  # going on (here: as another process would leave it)
    at = section(page("history"), "Round detail")
    at.selectbox(key=f"hist_round_{run_id}").set_value(2)
    rerun(at)
    real, landed = History.last_round, []

    def last_round(self, rid):
        n = real(self, rid)
        if not landed and sys._getframe(1).f_code.co_name == "live_rounds":
            landed.append(True)
            return n + 1  # a round stored between the page's look and its live view's
        return n

    monkeypatch.setattr(History, "last_round", last_round)
    at.text_input(key=f"hist_note_{run_id}_2").input("worth keeping")
    click(at, "hist_note_save")
    assert landed  # the live view reran the page
    assert "Note saved for round 2." in [i.value for i in at.info]
    rerun(at)
    assert "Note saved for round 2." not in [i.value for i in at.info]  # said once


def test_history_builds_only_the_open_section_and_keeps_it_across_page_switches(db):
    """issue #30 first paint: the closed sections' grids, charts and drawings are not built at all."""
    run_id = offline_run(db)
    at = page("history")
    assert [t.label for t in at.tabs] == ["Score curves", "Rounds", "Lineage", "Round detail"]  # no scores: no test
    assert [f["title"] for f in figures(at)] == ["Judge total per round (structure only)"]
    assert not at.dataframe and not mermaid_args(at) and not at.get("html")
    section(at, "Round detail")
    assert len(mermaid_args(at)) == 2 and len(figures(at)) == 1 and not any(
        "rounds shown" in c.value for c in at.caption)  # the buffer table's caption belongs to Rounds
    at.switch_page("pages/evolve.py").run()
    at.switch_page("pages/history.py").run()
    assert not at.exception and at.session_state["hist_tab"] == "Round detail"
    assert at.selectbox(key=f"hist_round_{run_id}").value == 3 and len(mermaid_args(at)) == 2
    at.session_state["hist_tab"] = "Validation → test"  # kept from a measured run: this one has no such section
    rerun(at)
    assert [f["title"] for f in figures(at)] == ["Judge total per round (structure only)"]  # the first section


def test_history_measured_run_filters_by_score_and_reevaluates(db, monkeypatch):
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, limit=2, mode="programmatic", operators=["insert"])
        run_id = Evolution(Workspace(db), cfg).run()["run_id"]
        at = page("history")
        assert len(figures(at)) == 2  # the first section: score curve, cost vs score
        section(at, "Lineage")
        assert len(figures(at)) == 1
        section(at, "Rounds")
        at.number_input(key="hist_min").set_value(50.0)
        rerun(at)
        assert list(at.dataframe[0].value["round"]) == [0, 1, 2]
        section(at, "Round detail")
        m = metrics(at)
        assert m["Score"] == "100.0%" and "–" in m["95% interval"]
        assert len(figures(at)) == 1  # the parent sampling
        click(at, "hist_reeval")
        job = jobs.get(at.session_state["hist_reeval_job"])
        assert job is not None and job.wait(30) and job.status == "done", job.error
        rerun(at)
        asked = len(srv.requests)
        at.toggle(key="hist_fresh").set_value(True)  # a fresh measurement: past the cache
        click(at, "hist_reeval")
        job = jobs.get(at.session_state["hist_reeval_job"])
        assert job is not None and job.wait(30) and job.status == "done", job.error
        rerun(at)
        assert len(srv.requests) > asked
    done = evs.reevaluations(Workspace(db), run_id, 2)
    assert len(done) == 2 and all(d.score == 1.0 and d.n == 2 for d in done)
    table = next(d.value for d in at.dataframe if "answers" in d.value.columns)
    assert list(table["status"]) == ["done", "done"] and list(table["score"]) == [1.0, 1.0]
    answers = list(table["answers"])  # newest first: the fresh one, then the one the cache answered
    assert answers[0].startswith("All") and "fresh" in answers[0] and "came from the cache ($0)" in answers[1]


# -- the engine side ---------------------------------------------------------------------------------------------------

def test_review_gate_checks_decisions_and_unblocks_on_withdraw(db):
    rows = History(Workspace(db)).rounds(offline_run(db, rounds=1))
    cand = Candidate(parse(rows[1]["workflow_text"]), "insert", "x", [0])
    gate = ReviewGateThread(evs.ReviewGate("math", poll=0.02), cand)
    gate.wait_pending()
    with pytest.raises(ValueError, match="round 2 is not waiting"):
        gate.gate.decide(2, Review())
    with pytest.raises(ValueError, match="no candidate 5"):
        gate.gate.decide(1, Review("choose", index=5))
    errors = gate.gate.decide(1, Review("edit", index=0, text="flowchart TD\n  A --> B\n"))
    assert errors and any("M004" in e for e in errors) and gate.gate.pending is not None
    assert gate.gate.decide(1, Review("veto", reason="no")) == [] and gate.gate.pending is None
    gate.thread.join(5)
    assert gate.result.action == "veto"

    again = ReviewGateThread(evs.ReviewGate("math", poll=0.02), cand)
    again.wait_pending()
    again.gate.withdraw()
    again.thread.join(5)
    assert isinstance(again.error, Cancelled)


class ReviewGateThread:
    """Calls the gate as the loop would (in a worker thread)."""

    def __init__(self, gate: evs.ReviewGate, cand) -> None:
        self.gate, self.result, self.error = gate, None, None
        verdict = Verdict([{"total": 40.0}], 0, "rule")

        def main() -> None:
            try:
                self.result = gate(1, [cand], verdict)
            except Cancelled as e:
                self.error = e

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()

    def wait_pending(self) -> None:
        wait_until(lambda: self.gate.pending is not None)


def _row(rnd: int, status: str, score: float | None, parents: list[int], cost: float = 0.0) -> dict:
    return {"round": rnd, "status": status, "score": score, "parents": parents, "cost": cost, "operator": "insert",
            "candidates": [{"scores": {"total": 30.0 + rnd}}], "chosen": 0 if rnd else None, "pinned": rnd == 2}


def test_curves_never_score_a_failed_round_and_lineage_parses_in_mermaid():
    rows = [_row(0, "ok", 0.5, []), _row(1, "failed", None, [0], 0.01), _row(2, "ok", 0.75, [0], 0.02),
            _row(3, "ok", 0.25, [2, 0], 0.02)]
    curve = evs.curve_frame(rows)
    assert curve["score"].tolist()[0] == 50.0 and curve["score"].isna().tolist() == [False, True, False, False]
    assert curve["best"].tolist() == [50.0, 50.0, 75.0, 75.0]
    assert curve["total_cost"].tolist() == pytest.approx([0.0, 0.01, 0.03, 0.05])
    fig = read_plot(hv.score_figure(curve, offline=False))  # the Evolve and History pages draw the same figure
    # per round (a line and its points), best so far, the failed round: marked on the axis, not scored
    assert [x for x, _ in fig.points["score per round"]] == [0, 2, 3] and len(fig.lines["score per round"]) == 3
    assert "best so far" in fig.lines and "best so far" in fig.dashed
    assert fig.points[hv.FAILED] == [(1, 0)] and fig.shapes[hv.FAILED] == {"cross"}
    assert fig.legend == ["score per round", "best so far", hv.FAILED]
    offline = read_plot(hv.score_figure(curve, offline=True))  # a structure-only run: its vetoed round drawn the same
    assert [x for x, _ in offline.points["judge total (structure only)"]] == [2, 3]  # the seed: unjudged
    assert offline.points[hv.FAILED] == [(1, 0)] and offline.shapes[hv.FAILED] == {"cross"}
    df = evs.rounds_frame(rows)
    assert evs.filter_rounds(df, min_score=0.5)["round"].tolist() == [0, 2]
    assert evs.filter_rounds(df, statuses=["failed"])["round"].tolist() == [1]
    assert evs.filter_rounds(df, pinned_only=True)["round"].tolist() == [2]
    assert evs.lineage_edges(rows) == [(0, 1), (0, 2), (2, 3), (0, 3)]
    text = evs.lineage_mermaid(rows, selected=3)
    assert "class R1 failed" in text and "class R2 pinned" in text and "75.0%" in text
    assert mermaid_js.parse_check(text) is None  # Mermaid 11 reads it
    assert evs.text_diff("a\nb\n", "a\nc\n", "p", "c") == "--- p\n+++ c\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    assert evs.text_diff("same\n", "same\n") == ""
    samp = evs.sampling_frame({"parents": [2], "sampling": {"pool": [2, 0], "scores": [0.75, None],
                                                           "probabilities": [0.6, 0.4]}})
    assert samp["round"].tolist() == ["#2", "#0"] and samp["probability"].tolist() == [0.6, 0.4]
    assert samp["score"].iloc[0] == 75.0 and pd.isna(samp["score"].iloc[1])  # unmeasured stays empty
    assert samp["parent"].tolist() == [True, False]


def test_resume_guards_and_interrupted_runs(db, monkeypatch):
    from flowcore.llm.client import LLMSettings

    ws = Workspace(db)
    cancel = threading.Event()
    evo = Evolution(ws, EvolutionConfig(benchmark="math", rounds=3), cancel=cancel,
                    progress=lambda s: s["round"] == 1 and cancel.set())
    run_id = evo.run()["run_id"]
    History(ws).set_status(run_id, "running")  # as a process killed mid-run (or still running) leaves it
    offline = LLMSettings()
    other = subprocess.Popen(["sleep", "60"])  # a live process of this machine holds the run's lease
    try:
        with ws.transaction() as c:
            c.execute("INSERT OR REPLACE INTO evo_leases(run_id, token, pid, host, started, heartbeat) "
                      "VALUES (?,?,?,?,?,?)",
                      (run_id, "other", other.pid, socket.gethostname(), time.time(), time.time()))
        with pytest.raises(ValueError, match=f"being evolved by process {other.pid} on "):
            evs.resume_run(ws, offline, run_id)
    finally:
        other.kill()
        other.wait()
    assert evs.runs_overview(ws)[0]["status"] == "interrupted"  # its holder is gone: the lease is free
    job = evs.resume_run(ws, offline, run_id)
    assert job.wait(20) and job.status == "done", job.error
    assert [r["round"] for r in History(ws).rounds(run_id)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="has finished"):
        evs.resume_run(ws, offline, run_id)
    measured = History(ws).create_run({"benchmark": "gsm8k"}, "k", "", "gsm8k", "math", offline=False)
    History(ws).set_status(measured, "cancelled")
    with pytest.raises(ValueError, match="configure one"):
        evs.resume_run(ws, offline, measured)
