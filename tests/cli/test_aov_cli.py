"""`aov run` / `aov resume` / `aov render` without an LLM: offline agents, manual outputs, saved decisions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flowcore.aov import AOVGraph, compute
from flowcore.cli.aov import main

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "aov"


@pytest.fixture(autouse=True)
def no_llm(monkeypatch) -> None:
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_offline_run_takes_T_steps_and_clones(capsys) -> None:
    f = str(ASSETS / "website.json")
    assert main(["run", f, "--json", "--schedule", "steps"]) == 0
    out, err = capsys.readouterr()
    assert "no LLM configured" in err
    steps = lines(out)  # stdout: exactly one JSON line per step
    assert [s["step"] for s in steps] == [1, 2, 3, 4] and all(s["event"] == "step" for s in steps)
    assert [s["subtasks"] for s in steps] == compute(AOVGraph.load(f)).steps
    assert [c["clone"] for c in steps[1]["clones"]] == ["coder#2", "coder#3"]
    assert steps[-1]["status"] == "completed"
    assert steps[-1]["statuses"] == {s: "completed" for s in AOVGraph.load(f).subtasks}
    assert f"done: completed after 4 step(s); execution {steps[0]['execution_id']}" in err


def test_text_output(capsys) -> None:
    assert main(["run", str(ASSETS / "gobang.json"), "--schedule", "steps"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"step 2: board ok, win ok, ui ok, tests ok "
                     r"\[clone coder#2 for win\] \[clone coder#3 for ui\]", out)
    assert "done: completed after 3 step(s)" in out


def manual(tmp_path, outputs: dict) -> str:
    p = tmp_path / "outputs.json"
    p.write_text(json.dumps(outputs))
    return str(p)


REPORT_OUT = {"outline": "1. Intro 2. How 3. Use 4. Costs 5. End", "sources": "five sources",
              "numbers": ["ERROR: the table is empty", "| size | kWh |"], "background": "intro text",
              "analysis": "energy and costs", "final": "the report"}


def test_manual_failure_auto_repaired(tmp_path, capsys) -> None:
    rc = main(["run", str(ASSETS / "report.json"), "--json", "--manual", manual(tmp_path, REPORT_OUT),
               "--auto-repair", "--schedule", "steps"])
    out, err = capsys.readouterr()
    assert rc == 0, err and "no LLM configured" not in err
    steps = lines(out)
    assert steps[1]["verdicts"]["numbers"]["passed"] is False
    assert steps[1]["repairs"][0]["subtask"] == "numbers"
    assert [s["subtasks"] for s in steps] == [["outline", "sources"], ["numbers", "background"], ["numbers"],
                                              ["analysis"], ["final"]]
    assert steps[-1]["status"] == "completed" and "done: completed after 5 step(s)" in err


def test_manual_failure_paused_then_resumed_with_a_decision(tmp_path, capsys) -> None:
    db = str(tmp_path / "ws.db")
    outputs = manual(tmp_path, REPORT_OUT)
    assert main(["run", str(ASSETS / "report.json"), "--json", "--manual", outputs, "--db", db,
                 "--schedule", "steps"]) == 1
    out, err = capsys.readouterr()
    last = lines(out)[-1]
    assert last["step"] == 2 and last["status"] == "paused" and len(last["proposals"]) == 3
    assert last["verdicts"]["numbers"]["passed"] is False and last["proposals"][0]["diff_text"]
    assert "subtask 'numbers' failed" in err and "aov resume" in err and "proposal 2:" in err
    eid = last["execution_id"]
    assert main(["resume", eid, "--db", db, "--json", "--manual", outputs, "--accept", "9"]) == 1
    assert "proposal 9 does not exist" in capsys.readouterr().err
    assert main(["resume", eid, "--db", db, "--json", "--manual", outputs, "--accept", "0"]) == 0
    rows = lines(capsys.readouterr().out)
    assert [r["subtasks"] for r in rows] == [["numbers"], ["analysis"], ["final"]]
    assert [r["step"] for r in rows] == [3, 4, 5] and rows[-1]["status"] == "completed"
    assert main(["resume", eid, "--db", db, "--accept", "0"]) == 1  # nothing is pending any more
    assert "nothing to accept" in capsys.readouterr().err


def test_reject_ends_in_a_failed_job(tmp_path, capsys) -> None:
    db = str(tmp_path / "ws.db")
    outputs = manual(tmp_path, REPORT_OUT)
    main(["run", str(ASSETS / "report.json"), "--json", "--manual", outputs, "--db", db])
    eid = lines(capsys.readouterr().out)[-1]["execution_id"]
    assert main(["resume", eid, "--db", db, "--manual", outputs, "--reject"]) == 1
    out, err = capsys.readouterr()
    assert "not completed: numbers, analysis, final" in err


def test_run_errors(tmp_path, capsys) -> None:
    assert main(["run", str(tmp_path / "none.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"goal": "g", "agents": [{"id": "w", "role": "w"}],
                               "subtasks": {"a": {"subtask_requirement": "x", "agent": "ghost"}}}))
    assert main(["run", str(bad)]) == 1
    assert "subtask 'a': field 'agent': unknown agent 'ghost'" in capsys.readouterr().err
    outs = tmp_path / "o.json"
    outs.write_text("[1, 2]")
    assert main(["run", str(ASSETS / "report.json"), "--manual", str(outs)]) == 2
    assert "expected an object" in capsys.readouterr().err
    assert main(["resume", "abc", "--db", str(tmp_path / "missing.db")]) == 2
    ws = tmp_path / "ws.db"
    main(["run", str(ASSETS / "report.json"), "--db", str(ws)])
    capsys.readouterr()
    assert main(["resume", "nope", "--db", str(ws)]) == 1
    assert "no AOV execution with id 'nope'" in capsys.readouterr().err


def test_render(capsys) -> None:
    assert main(["render", str(ASSETS / "report.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowchart TD\n") and "n_sources --> n_numbers" in out
    assert "class n_outline,n_sources,n_numbers,n_background,n_analysis,n_final pending" in out


def test_top_level_cli_wires_the_aov_group(capsys) -> None:
    from flowcore.cli.main import main as top
    assert top(["aov", "metrics", str(ASSETS / "gobang.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["P_avg"] == 2.0


def test_event_driven_run_reports_each_event_as_it_happens(capsys) -> None:
    f = str(ASSETS / "website.json")
    assert main(["run", f, "--json"]) == 0  # the default schedule
    out, err = capsys.readouterr()
    events = lines(out)
    g = AOVGraph.load(f)
    starts = [e for e in events if e["event"] == "subtask_start"]
    results = [e for e in events if e["event"] == "result"]
    assert sorted(e["subtask"] for e in results) == sorted(g.subtasks) and all(e["verdict"]["passed"]
                                                                                for e in results)
    steps = {e["subtask"]: e["step"] for e in starts}  # the step view: the topological generation
    assert [sorted(s) for s in compute(g).steps] == [sorted(x for x in steps if steps[x] == n)
                                                     for n in range(1, 5)]
    # each subtask starts after its parents' results, and the clones of the busy coder are named
    order = [(e["event"], e["subtask"]) for e in events]
    for sid, st in g.subtasks.items():
        for p in st.parents:
            assert order.index(("result", p)) < order.index(("subtask_start", sid))
    assert {e["agent"] for e in starts if g.subtasks[e["subtask"]].agent == "coder"} >= {"coder", "coder#2"}
    assert "done: completed after 4 step(s)" in err


def test_event_driven_text_output_and_paused_resume(tmp_path, capsys) -> None:
    db = str(tmp_path / "ws.db")
    outputs = manual(tmp_path, REPORT_OUT)
    assert main(["run", str(ASSETS / "report.json"), "--manual", outputs, "--db", db]) == 1
    out, err = capsys.readouterr()
    assert "[step 1] start outline" in out and "[step 2] numbers FAILED (error marker" in out
    assert "paused after 2 step(s)" in out and "subtask 'numbers' failed" in err
    eid = re.search(r"execution (\w+)", out).group(1)
    assert main(["resume", eid, "--db", db, "--manual", outputs, "--accept", "0"]) == 0
    out = capsys.readouterr().out
    assert "[step 2] numbers ok" in out and "[step 4] final ok" in out and "done: completed" in out


def test_k_and_refinement_numbers_are_checked(tmp_path, capsys, monkeypatch) -> None:
    f = str(ASSETS / "gobang.json")
    for args, msg in ((["--k", "0"], "--k must be between 1 and 10"), (["--k", "11"], "between 1 and 10"),
                      (["--refine-every", "-1"], "--refine-every must be at least 0"),
                      (["--max-refinements", "-2"], "--max-refinements must be at least 0")):
        assert main(["run", f, *args]) == 2
        assert msg in capsys.readouterr().err
    monkeypatch.setenv("MERMAIDFLOW_AOV_K_MAX", "12")
    assert main(["run", f, "--k", "11"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("MERMAIDFLOW_AOV_K", "many")
    assert main(["run", f]) == 2
    assert "MERMAIDFLOW_AOV_K='many' is not a whole number" in capsys.readouterr().err


def test_generate_needs_an_llm_and_a_task(tmp_path, capsys) -> None:
    assert main(["generate", "Build a site", "--out", str(tmp_path / "p")]) == 2
    assert "no LLM configured" in capsys.readouterr().err
    assert main(["generate", "  ", "--out", str(tmp_path / "p")]) == 2
    assert "the task is empty" in capsys.readouterr().err
    assert main(["generate", "x", "--k", "0", "--out", str(tmp_path / "p")]) == 2
    assert "between 1 and 10" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["generate", "x", "--out", str(blocker / "sub")]) == 2
    assert "cannot create the directory" in capsys.readouterr().err
