"""The winner's curse, reported: what the History and Compare pages show for a run's result (its validation
score beside its test score and interval, and whether its validation gain over the seed was within noise),
from a real run on the simulated executor."""

from __future__ import annotations

import asyncio

from flowcore.evaluation.compare import BASELINES_DIR, compare
from flowcore.evolution import testsplit
from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid import safe
from flowcore.tasks import load, split_info
from flowcore.ui import compare as cv
from flowcore.workspace.store import Workspace
from tests.helpers.simexecutor import simulated_server


def test_history_and_compare_show_the_results_validation_beside_its_test_score(tmp_path):
    io = (BASELINES_DIR / "math_io.mmd").read_text(encoding="utf-8")
    val, test = load("gsm8k", "validation", limit=12), load("gsm8k", "test", limit=30)
    ws = Workspace(tmp_path / "w.db")
    with simulated_server(val + test, 0.6, seed=2) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0), ws)
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, limit=12, mode="programmatic", workflow=io, test_top=1,
                              test_limit=30, seed=2)
        run = Evolution(ws, cfg, llm=llm).run()
        run_id = run["run_id"]
        chosen = testsplit.chosen_round(History(ws).summaries(run_id), "guided")
        text = History(ws).get_round(run_id, chosen["round"])["workflow_text"]
        name = f"run #{run_id} · round {chosen['round']}"
        c = asyncio.run(compare([(name, text), ("IO", io)], "gsm8k", test, llm=llm.salted("compare"),
                                split=split_info("gsm8k", "test", limit=30)))
    # History: the run's result in one sentence, and its row marked beside the test score
    sentence = cv.result_sentence(ws, run_id)
    assert sentence.startswith(f"Result: round {chosen['round']} ") and "Test: " in sentence
    frame = cv.validation_test_frame(ws, run_id)
    row = frame[frame["result"] == "★"].iloc[0]
    assert row["round"] == chosen["round"] and row["validation %"] == 100 * chosen["score"]
    assert row["test 95% CI"] and row["test n"] == 30
    # Compare: the evolved round shows the validation score it was chosen by, and a note says how they differ
    table = cv.table_frame(c, ws).set_index("workflow")
    assert table.loc[name, "validation %"] == 100 * chosen["score"] and table.loc["IO", "validation 95% CI"] == "—"
    # the name is markdown-escaped (a workflow name is text its author typed): "run \\#1" shows as "run #1"
    (note,) = cv.evolved_notes(c, ws)
    assert note.startswith(f"{safe.plain(name)} is run #{run_id}'s result: validation {100 * chosen['score']:.1f}%")
    assert "here " in note and "points" in note and ("noise" in note or "not compared" in note)
    sources = cv.workflow_sources(ws, "math")
    assert any(k.startswith(name) and k.endswith("the run's result") for k in sources)
