"""Validation → test in evolution, validation rounds (repeats) and continuing a finished run, against the scripted
OpenAI-compatible server: ``evolve --test-top 3`` stores test scores for exactly 3 workflows and no test problem
is ever sent during the validation phase (checked from the server's request log)."""

from __future__ import annotations

import json
import os

import pytest

from flowcore.cli.main import main
from flowcore.evolution import History
from flowcore.evolution import session as evs
from flowcore.evolution.testsplit import (
    held_out_problems,
    start_test_rescore,
    stored_test_scores,
    validation_vs_test,
)
from flowcore.llm.client import LLMSettings
from flowcore.tasks import load
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text

VAL = load("gsm8k", "validation", limit=4)
TEST = load("gsm8k", "test", limit=5)


def answer(request: dict) -> str:
    """Right on the first half of each split, wrong on the rest; anything else (prompt rewrites) plain text."""
    text = message_text(request)
    for probs in (VAL, TEST):
        for i, p in enumerate(probs):
            if p.question in text:
                return f"The answer is {p.reference if i < len(probs) / 2 else -1}."
    return "Solve the math problem carefully, step by step, and end with the final number."


@pytest.fixture
def endpoint(monkeypatch):
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(var)
    srv = FakeLLMServer(answer).start()
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
    yield srv
    srv.stop()


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_evolve_test_top_3_scores_exactly_three_and_keeps_test_out_of_validation(endpoint, capsys, tmp_path):
    db = tmp_path / "w.db"
    code, out, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "4", "--limit", "4", "--mode",
                         "programmatic", "--test-top", "3", "--test-limit", "5", "--db", str(db), "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    tests = [x for x in lines if "test" in x]
    assert len(tests) == 3 and all(x["split"]["split"] == "test" and "seed 42" in x["split"]["source"] for x in tests)
    ws = Workspace(db)
    run_id = History(ws).runs()[-1].id
    stored = stored_test_scores(ws, run_id)
    assert len(stored) == 3 and all(s["n"] == 5 and s["split"] == "test" for s in stored)
    rows = {r["round"]: r for r in History(ws).rounds(run_id)}
    ranked = sorted((r for r in rows.values() if r["status"] == "ok"), key=lambda r: (-r["score"], r["round"]))
    assert [s["round"] for s in stored] == sorted(r["round"] for r in ranked[:3])  # the top 3 by validation
    test_ids, val_ids = {p.id for p in TEST}, {p.id for p in VAL}
    for s in stored:
        assert {x["id"] for x in s["per_problem"]} == test_ids
        assert s["score"] == pytest.approx(0.6)  # 3 of 5 (the first half, rounded up) answered right
    for r in rows.values():
        assert {x["id"] for x in r["per_problem"]} <= val_ids
    # the server's request log: the validation phase never saw a test problem, the test phase no validation one
    texts = [message_text(q) for q in endpoint.requests]
    has_test = [any(p.question in t for p in TEST) for t in texts]
    has_val = [any(p.question in t for p in VAL) for t in texts]
    first_test = has_test.index(True)
    assert not any(has_test[:first_test]) and not any(has_val[first_test:])
    assert sum(has_val) >= 5 * 4 and sum(has_test) >= 3 * 5  # at least one call per problem and workflow
    frame = validation_vs_test(ws, run_id)
    assert list(frame["round"]) == [s["round"] for s in stored] and frame["test_n"].tolist() == [5, 5, 5]
    assert (frame["validation"] >= 0).all() and (frame["test_low"] <= frame["test"]).all()

    # evolve again with more rounds: the finished run continues; the test-scored rounds are kept
    code, out, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "5", "--limit", "4", "--mode",
                         "programmatic", "--test-top", "3", "--test-limit", "5", "--db", str(db))
    assert code == 0, err
    assert f"continuing finished run {run_id} after round 4 up to round 5" in err
    assert [r["round"] for r in History(ws).rounds(run_id)] == [0, 1, 2, 3, 4, 5] and len(History(ws).runs()) == 1
    assert "validation" in out and "test 60.0%" in out


def test_validation_rounds_repeat_each_evaluation_past_the_cache(endpoint, capsys, tmp_path):
    db = tmp_path / "w.db"
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "4", "--mode",
                       "programmatic", "--operators", "prompt", "--validation-rounds", "3", "--remeasure", "0", "--db", str(db))
    assert code == 0, err
    ws = Workspace(db)
    (run,) = History(ws).runs()
    seed = History(ws).rounds(run.id)[0]
    assert len(seed["per_problem"]) == 12 and sorted({x["repeat"] for x in seed["per_problem"]}) == [0, 1, 2]
    assert seed["score"] == pytest.approx(0.5) and seed["n"] == 4
    seed_calls = [q for q in endpoint.requests if "Solve the math problem step by step" in message_text(q)
                  and any(p.question in message_text(q) for p in VAL)]
    assert len(seed_calls) == 3 * 4  # the identical calls of the three repeats all reached the server
    with pytest.raises(SystemExit) as exc:  # argparse's usage error
        main(["evolve", "--benchmark", "gsm8k", "--rounds", "1", "--validation-rounds", "0"])
    assert exc.value.code == 2 and "--validation-rounds: must be at least 1" in capsys.readouterr().err


def test_continue_a_finished_offline_run_and_bad_requests(tmp_path, monkeypatch, capsys):
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(var)
    db = str(tmp_path / "w.db")
    assert cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "2", "--offline", "--db", db)[0] == 0
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "3", "--offline", "--db", db)
    assert code == 0 and "continuing finished run 1 after round 2 up to round 3" in err
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "3", "--offline", "--db", db)
    assert code == 0 and "run 1 with these settings is already finished" in err  # never repeated silently
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "3", "--offline", "--db", db,
                       "--new-run")
    assert code == 0 and "run 2:" in err
    ws = Workspace(db)
    settings = LLMSettings()
    job = evs.continue_run(ws, settings, 1, 2)
    assert job.wait(60) and job.snapshot().status == "done", job.snapshot().error
    info = History(ws).run(1)
    assert info.status == "finished" and History(ws).last_round(1) == 5 and info.config["rounds"] == 5
    for run_id, more, msg in ((1, 0, "at least 1 round"), (99, 1, "no evolution run 99")):
        with pytest.raises((ValueError, KeyError), match=msg):
            evs.continue_run(ws, settings, run_id, more)
    History(ws).set_status(2, "stopped", "test")
    with pytest.raises(ValueError, match="has not finished"):
        evs.continue_run(ws, settings, 2, 1)
    with pytest.raises(ValueError, match="structure-only"):
        start_test_rescore(ws, LLMSettings(base_url="http://127.0.0.1:9/v1"), 1, 2)


def test_on_demand_test_rescore_and_its_refusals(endpoint, tmp_path, capsys):
    db = tmp_path / "w.db"
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "4", "--mode",
                       "programmatic", "--db", str(db))
    assert code == 0, err
    ws = Workspace(db)
    settings = LLMSettings(base_url=endpoint.base_url, api_key="k", max_retries=0)
    job = start_test_rescore(ws, settings, 1, 2, limit=4)
    assert job.wait(60) and job.snapshot().status == "done", job.snapshot().error
    assert len(stored_test_scores(ws, 1)) == 2 and validation_vs_test(ws, 1)["test"].tolist() == [0.75, 0.75]
    with pytest.raises(ValueError, match="no LLM endpoint"):
        start_test_rescore(ws, LLMSettings(), 1, 2)
    with pytest.raises(ValueError, match="top must be >= 1"):
        start_test_rescore(ws, settings, 1, 0)
    # a run evolved on its own rows needs test rows; test rows that repeat a validation problem are refused
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": p.question, "answer": f"#### {p.reference}"}) + "\n"
                            for p in VAL))
    cfg = {"benchmark": "gsm8k", "data_path": str(rows)}
    with pytest.raises(ValueError, match="--test-data"):
        held_out_problems(cfg)
    with pytest.raises(ValueError, match="also a validation problem"):
        held_out_problems({**cfg, "test_data": str(rows)})
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--data", str(rows),
                       "--test-top", "2", "--db", str(tmp_path / "x.db"))
    assert code == 2 and "--test-data" in err
