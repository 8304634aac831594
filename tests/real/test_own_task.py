"""`make test-real`: a task of your own (the worked example, capitals) through llama.cpp's server with
SmolLM2-135M: `task check`, then evaluate with the exact metric and with the judge metric (the judge is the same
small model). Plumbing, never scores: every row gets a verdict or a named error, and a judge's grade keeps its
reason and the model's name."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import MODEL
from .test_smoke import REPORT, flowcore

ROOT = Path(__file__).resolve().parents[2]
CAPITALS = ROOT / "assets" / "tasks" / "capitals"
TEXT_SEED = ROOT / "assets" / "examples" / "text_seed.mmd"


def test_own_task_check_evaluate_and_judge(env, ws, tmp_path):
    res = flowcore(env, "task", "check", str(CAPITALS / "capitals.toml"), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["self_score"] == 1.0
    res = flowcore(env, "evaluate", str(TEXT_SEED), "--task-file", str(CAPITALS / "capitals.toml"), "--limit", "4",
                   "--concurrency", "1", "--json", "--db", str(ws))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["benchmark"] == "capitals" and doc["n"] == 4 and doc["errors"] == 0
    REPORT.append(f"evaluate capitals (exact): score {doc['score']:.2f} over {doc['n']}")
    judged = tmp_path / "capitals_judge.toml"
    judged.write_text((CAPITALS / "capitals.toml").read_text().replace('name = "capitals"', 'name = "capitals-judge"')
                      .replace('metric = "exact"', 'metric = "judge"').replace("case_sensitive = false",
                      'rubric = "Full marks when the answer names the reference city."')
                      .replace('data = "capitals.csv"', f'data = "{CAPITALS / "capitals.csv"}"'))
    res = flowcore(env, "evaluate", str(TEXT_SEED), "--task-file", str(judged), "--limit", "2", "--concurrency", "1",
                   "--json", "--db", str(ws))
    doc = json.loads(res.stdout)
    graded = [r for r in doc["results"] if not r["errored"]]
    for r in graded:  # a 135M model may not give a usable grade: then the row is errored, never wrong
        assert r["grade"]["model"] and r["grade"]["reason"] and 0 <= r["score"] <= 1
    if graded:
        assert doc["graded_by"] == [MODEL]  # the model's name, as the server reports it
    REPORT.append(f"evaluate capitals (judge): {len(graded)} of {len(doc['results'])} rows graded by {doc['graded_by']}")
