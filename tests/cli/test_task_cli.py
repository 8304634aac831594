"""A task of your own on the command line: ``task check``, and ``--task-file`` / ``--benchmark NAME`` on every
command that takes a benchmark (evaluate, score, evolve, compare, split, submit), against the scripted server."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from flowcore.cli.main import main
from tests.helpers.fakellm import message_text

ROOT = Path(__file__).resolve().parents[2]
CAPITALS = ROOT / "assets" / "tasks" / "capitals" / "capitals.toml"
TEXT_SEED = str(ROOT / "assets" / "examples" / "text_seed.mmd")
CITIES = {r["country"]: r["capital"] for r in csv.DictReader(open(CAPITALS.parent / "capitals.csv", encoding="utf-8"))}


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def knows_most_capitals(request: dict) -> str:
    """A scripted model: right about the capitals of countries whose name is shorter than 8 letters."""
    text = message_text(request)
    country = next((c for c in sorted(CITIES, key=len, reverse=True) if f"capital of {c}?" in text), None)
    if country is None:
        return "Answer: I do not know"
    return f"Let me think.\nAnswer: {CITIES[country] if len(country) < 8 else 'Springfield'}"


def test_task_check_prints_the_contract_fields(capsys):
    code, out, err = cli(capsys, "task", "check", str(CAPITALS), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {k: doc[k] for k in ("name", "kind", "rows", "validation", "test", "metric", "self_score")} == {
        "name": "capitals", "kind": "text", "rows": 40, "validation": 10, "test": 30, "metric": "exact",
        "self_score": 1.0}
    code, out, _ = cli(capsys, "task", "check", str(CAPITALS))
    assert code == 0 and "capitals: text task, 40 rows (10 validation, 30 test), metric exact, self-score 1.000" in out


def test_task_check_bad_input_is_exit_1_naming_file_row_and_field(capsys, tmp_path):
    (tmp_path / "rows.csv").write_text("country,capital\nFrance,Paris\nSpain,\n")
    (tmp_path / "t.toml").write_text('name = "x"\nkind = "text"\ndata = "rows.csv"\nproblem = "{country}"\n'
                                     'reference = "capital"\nmetric = "exact"\n')
    code, out, err = cli(capsys, "task", "check", str(tmp_path / "t.toml"))
    assert code == 1 and "rows.csv: line 3: field 'capital' is empty" in err and out == ""
    # A reference that does not score 1 against itself: here the metric compares what follows "Answer:", so a
    # reference holding "Answer: Rome" could never be matched.
    (tmp_path / "rows.csv").write_text("q,a\nx,Paris\ny,Answer: Rome\n")
    (tmp_path / "t.toml").write_text('name = "x"\nkind = "text"\ndata = "rows.csv"\nproblem = "q"\nreference = "a"\n'
                                     'metric = "exact"\n')
    code, out, err = cli(capsys, "task", "check", str(tmp_path / "t.toml"), "--json")
    assert code == 1 and json.loads(out)["self_score"] == 0.5 and "line 3" in err and "against itself" in err


def test_evaluate_score_and_split_take_a_task_file(endpoint, capsys, tmp_path):
    srv = endpoint(knows_most_capitals)
    code, out, err = cli(capsys, "evaluate", TEXT_SEED, "--task-file", str(CAPITALS), "--split", "test", "--json")
    assert code == 0, err
    doc = json.loads(out)
    expected = [CITIES[r.split("/")[0]] for r in []]  # (ids are capitals/N)
    assert doc["benchmark"] == "capitals" and doc["n"] == 30 and len(srv.requests) == 30
    right = {r["id"] for r in doc["results"] if r["correct"]}
    assert 0 < len(right) < 30 and doc["score"] == pytest.approx(len(right) / 30) and expected == []
    assert doc["split"]["test_n"] == 30 and doc["split"]["metric"] == "exact"
    code, out, _ = cli(capsys, "score", "--task-file", str(CAPITALS), "--prediction", "Reasoning.\nAnswer: rome",
                       "--reference", "Rome")
    assert code == 0 and json.loads(out) == {"score": 1.0, "correct": True, "extracted": "rome"}
    code, _, err = cli(capsys, "split", "--task-file", str(CAPITALS), "-o", str(tmp_path / "s.json"))
    split = json.loads((tmp_path / "s.json").read_text())
    assert code == 0 and (len(split["validation"]), len(split["test"])) == (10, 30)


def test_evolve_saves_the_task_and_benchmark_finds_it_by_name(endpoint, capsys, tmp_path):
    endpoint(knows_most_capitals)
    db = str(tmp_path / "ws.db")
    code, out, err = cli(capsys, "evolve", "--task-file", str(CAPITALS), "--rounds", "2", "--candidates", "2",
                         "--mode", "programmatic", "--limit", "6", "--db", db, "--json")
    assert code == 0, err
    rounds = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["round"] for r in rounds] == [0, 1, 2] and all(r["score"] is not None for r in rounds if
                                                              r["status"] == "ok")
    # The task is in the workspace now: --benchmark NAME finds it, with no task file.
    code, out, err = cli(capsys, "task", "list", "--db", db, "--json")
    assert code == 0 and "capitals" in [t["name"] for t in json.loads(out)["tasks"]]
    code, out, err = cli(capsys, "compare", "baseline:io", TEXT_SEED, "--benchmark", "capitals", "--db", db,
                         "--limit", "6", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["benchmark"] == "capitals" and [r["workflow"] for r in doc["table"]] == ["baseline:io", "text_seed"]
    assert all(r["n"] == 6 for r in doc["table"])
    # Another process, without --db and with no workspace where it runs: the name is said unknown, not guessed.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MERMAIDFLOW_DB"} | {"PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "flowcore", "evaluate", TEXT_SEED, "--benchmark", "capitals"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert p.returncode == 2 and "--benchmark capitals: no such task" in p.stderr
    assert not (tmp_path / "workspace.db").exists()  # a lookup never creates a workspace


def test_every_command_that_takes_a_benchmark_takes_a_task_file():
    from flowcore.cli.main import build_parser

    for command in ("evaluate", "score", "evolve", "compare", "split", "submit"):
        parser = build_parser(command)
        sub = next(a for a in parser._actions if a.dest == "command").choices[command]
        flags = {s for a in sub._actions for s in a.option_strings}
        assert {"--benchmark", "--task-file"} <= flags, command


@pytest.mark.parametrize("odd", ["\ufffd", "\x1b[0m", "\ud800"])
def test_an_answer_holding_a_replacement_or_control_character_is_wrong_not_errored(endpoint, capsys, odd):
    """Issue 25 (outside attack): the client took U+FFFD or a control character for a broken transfer, so a wrong
    answer ending in one left its row "not run" and the score rose (20 rows, 2 such: 1.0 where 0.9 was true). The
    same odd text twice is the model's answer and is graded like any other; since round two of the attacks, any
    text in a body that parsed is (a broken transfer is told from bytes that are not UTF-8)."""
    def unsure_when_long(request: dict) -> str:
        text = knows_most_capitals(request)
        return text if "Springfield" not in text else f"Answer: I am not sure {odd}"

    srv = endpoint(unsure_when_long)
    code, out, err = cli(capsys, "evaluate", TEXT_SEED, "--task-file", str(CAPITALS), "--split", "test", "--json")
    doc = json.loads(out)
    wrong = [r for r in doc["results"] if not r["correct"]]
    assert code == 0 and doc["n"] == 30 and not [r for r in doc["results"] if r.get("errored")], err
    assert wrong and all("not sure" in (r.get("extracted") or "") for r in wrong), wrong[:2]
    assert doc["score"] == pytest.approx((30 - len(wrong)) / 30)
    assert len(srv.requests) == 30  # graded at once: nothing asked again
