"""A task of your own (DESIGN §11): read from TOML, every bad input named by file, row and field (and nothing
saved), saved in the workspace and found by name on both backends, evaluated with its own metric."""
from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest

from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks import BUILTIN, DataError, find, kind_of, load, read_task, split_info
from flowcore.tasks.harness import report_of
from flowcore.tasks.saved import save, saved
from flowcore.tasks.task import self_score, upload_task
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
CAPITALS = ROOT / "assets" / "tasks" / "capitals" / "capitals.toml"
TEXT_SEED = (ROOT / "assets" / "examples" / "text_seed.mmd").read_text()

TOML = """name = "{name}"
kind = "text"
data = "{data}"
problem = "{problem}"
reference = "{reference}"
metric = "{metric}"
{extra}
"""


def write_task(tmp_path: Path, rows: str | bytes, *, data: str = "rows.csv", name: str = "mine",
               problem: str = "Capital of {{country}}?", reference: str = "capital", metric: str = "exact",
               extra: str = "") -> Path:
    p = tmp_path / data
    p.write_bytes(rows if isinstance(rows, bytes) else rows.encode())
    t = tmp_path / "task.toml"
    t.write_text(TOML.format(name=name, data=data, problem=problem.replace("{{", "{").replace("}}", "}"),
                             reference=reference, metric=metric, extra=extra))
    return t


GOOD = "country,capital\nFrance,Paris\nSpain,Madrid\nItaly,Rome\n"


def test_the_worked_example_reads_splits_and_scores_itself_1():
    task = read_task(CAPITALS)
    assert (task.name, task.kind, len(task.rows), task.metric.name) == ("capitals", "text", 40, "exact")
    assert task.sizes() == {"rows": 40, "validation": 10, "test": 30}
    p = task.problems()[0]
    assert p.question == "What is the capital of France? Reply with the city's name only." and p.reference == "Paris"
    assert self_score(task).score == 1.0 and not self_score(task).failures


def test_builtins_are_tasks_defined_the_same_way():
    assert set(BUILTIN) == {"gsm8k", "math", "humaneval", "mbpp"}
    g = BUILTIN["gsm8k"].spec()
    assert set(g) >= {"name", "kind", "data", "problem", "reference", "metric", "split"}
    assert (g["kind"], g["metric"], g["split"]) == ("math", "gsm8k", {"validation": 0.2, "seed": 42})
    assert kind_of("humaneval") == "code" and BUILTIN["mbpp"].metric.name == "tests"


def test_template_fields_jsonl_json_and_gz(tmp_path):
    rows = [{"q": "2+2", "a": 4, "ctx": "math"}, {"q": "3+3", "a": 6, "ctx": "math"}]
    t = write_task(tmp_path, "\n".join(json.dumps(r) for r in rows), data="r.jsonl", problem="[{ctx}] {q}",
                   reference="a", metric="number")
    task = read_task(t)
    assert [p.question for p in task.problems()] == ["[math] 2+2", "[math] 3+3"]
    assert task.problems()[1].reference == "6" and task.problems()[1].meta["line"] == 2
    (tmp_path / "r.json.gz").write_bytes(gzip.compress(json.dumps(rows).encode()))
    t2 = write_task(tmp_path, gzip.compress(json.dumps(rows).encode()), data="r.json.gz", problem="q",
                    reference="a", metric="number")
    assert [p.question for p in read_task(t2).problems()] == ["2+2", "3+3"]


# -- bad input: file, row (line) and field, and nothing made -----------------------------------------------------------

@pytest.mark.parametrize("rows,kw,expected", [
    (GOOD, {"reference": "answer"}, r"field 'reference' names 'answer', which rows.csv lacks \(its columns: "
                                    r"country, capital\)"),
    ("country,capital\nFrance,Paris\nSpain,\nItaly,Rome\n", {}, r"rows.csv: line 3: field 'capital' is empty"),
    (b"country,capital\nFrance,Paris\nEspa\xf1a,Madrid\n", {}, r"rows.csv: line 3, column 5: not UTF-8"),
    ('country,capital\nFrance,Paris\n"Spain,Madrid\nItaly,Rome\n', {}, r"rows.csv: line 3: a quoted field opened "
                                                                       r"here is never closed"),
    ('country,capital\nFrance,"Pa"ris\n', {}, r"rows.csv: line 2: broken CSV quoting"),
    (GOOD, {"metric": "exactly"}, r"task.toml: field 'metric': unknown metric 'exactly'"),
    (GOOD, {"extra": "[metric_options]\ncase = true"}, r"field 'metric_options.case': unknown option"),
    (GOOD, {"problem": "Capital of {{nation}}?"}, r"field 'problem' names 'nation', which rows.csv lacks"),
    ("country,capital\n", {}, r"rows.csv: no rows"),
    ("", {}, r"rows.csv: no rows"),
    ("country,capital\nFrance,Paris\n", {}, r"rows.csv: 1 row: a task needs at least 2"),
    (GOOD, {"metric": "number"}, r"rows.csv: line 2: field 'capital': 'Paris' is not a number"),
    (GOOD, {"extra": "colour = 1"}, r"task.toml: unknown field 'colour'"),
    (GOOD, {"name": "gsm8k"}, r"'gsm8k' is a built-in task"),
    (GOOD, {"name": "my task"}, r"field 'name': 'my task' may use only letters"),
    ('{"country": "France", "capital": "Paris"}\n{"capital": "Rome"}\n', {"data": "r.jsonl"},
     r"r.jsonl: line 2: field 'country' is missing \(the problem template uses it\)"),
])
def test_bad_input_names_file_row_and_field(tmp_path, rows, kw, expected):
    t = write_task(tmp_path, rows, **kw)
    with pytest.raises(DataError, match=expected):
        read_task(t)


def test_a_broken_toml_and_a_missing_data_file(tmp_path):
    t = tmp_path / "task.toml"
    t.write_text('name = "x"\nkind = \n')
    with pytest.raises(DataError, match=r"task.toml: not TOML: .*line 2"):
        read_task(t)
    t.write_text(TOML.format(name="x", data="gone.csv", problem="q", reference="a", metric="exact", extra=""))
    with pytest.raises(DataError, match="gone.csv: file not found"):
        read_task(t)


def test_an_upload_is_capped_after_decompression():
    bomb = gzip.compress(b"q,a\n" + b"x,y\n" * 400_000)  # 1.6 MB inflated from a few kB
    spec = {"name": "u", "kind": "text", "problem": "q", "reference": "a", "metric": "exact"}
    with pytest.raises(DataError, match=r"big.csv.gz: larger than 1 MB after decompression"):
        from flowcore.tasks.rows import read_table

        read_table(bomb, "big.csv.gz", cap=1024 * 1024)
    assert len(upload_task(spec, "ok.csv.gz", gzip.compress(GOOD.replace("country,capital", "q,a").encode())).rows) == 3


def test_a_python_metric_file_is_read_beside_the_task_and_a_syntax_error_is_named(tmp_path):
    (tmp_path / "metric.py").write_text("def metric(prediction, row):\n    return prediction == row['capital']\n")
    t = write_task(tmp_path, GOOD, metric="python", extra='[metric_options]\nfile = "metric.py"')
    task = read_task(t)
    assert "def metric" in task.metric.source and self_score(task).score == 1.0  # run in the sandbox
    (tmp_path / "metric.py").write_text("def metric(prediction, row)\n    return 1\n")
    with pytest.raises(DataError, match=r"field 'metric_options.file' \(metric.py\): line 1"):
        read_task(t)


# -- saved in the workspace: both backends, seen by another process's handle -------------------------------------------

def test_a_saved_task_is_found_by_name_from_another_handle(any_ws, tmp_path):
    task = read_task(write_task(tmp_path, GOOD, name="shared-capitals"))
    save(any_ws, task, author="ada")
    other = Workspace(any_ws.url if any_ws.is_postgres else any_ws.path)  # as a second app process opens it
    try:
        assert [t["name"] for t in saved(other)] == ["shared-capitals"]
        found = find("shared-capitals", other)
        assert found is not None and found.digest == task.digest and len(found.rows) == 3
        assert kind_of("shared-capitals") == "text"
        assert [p.question for p in load("shared-capitals", "all")] == ["Capital of France?", "Capital of Spain?",
                                                                         "Capital of Italy?"]
        info = split_info("shared-capitals", "test")
        assert (info["validation_n"], info["test_n"]) == (1, 2) and info["metric"] == "exact"
    finally:
        other.close_all()
    with pytest.raises(DataError, match="built-in task"):
        save(any_ws, BUILTIN["gsm8k"])


def test_a_failed_save_leaves_nothing(any_ws, tmp_path, monkeypatch):
    task = read_task(write_task(tmp_path, GOOD, name="half"))
    monkeypatch.setattr(type(task), "lines", property(lambda self: (_ for _ in ()).throw(OSError("disk full"))),
                        raising=False)
    with pytest.raises(OSError):
        save(any_ws, task)
    monkeypatch.undo()
    assert saved(any_ws) == []


# -- evaluated with its own metric ----------------------------------------------------------------------------------

def _answers(request: dict) -> str:
    q = request["messages"][-1]["content"]
    return {"France": "Answer: Paris", "Spain": "Answer: Barcelona"}.get(
        next((c for c in ("France", "Spain", "Italy") if c in q), ""), "no idea")


def test_evaluate_a_task_with_exact_and_with_a_python_metric_that_raises_on_one_row(tmp_path, ws):
    t = write_task(tmp_path, GOOD, name="eval-exact")
    task = read_task(t)
    from flowcore.tasks.saved import register

    register(task)
    with FakeLLMServer(_answers) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0), ws)
        rep = asyncio.run(evaluate_workflow(parse(TEXT_SEED), "eval-exact", load("eval-exact", "all"), llm=llm))
        assert [r.correct for r in rep.results] == [True, False, False] and rep.n == 3 and rep.score == 1 / 3
        (tmp_path / "metric.py").write_text(
            "def metric(prediction, row):\n    if row['country'] == 'Italy':\n        raise KeyError('no')\n"
            "    return 0.5 if 'Barcelona' in prediction else float(row['capital'] in prediction)\n")
        t2 = write_task(tmp_path, GOOD, name="eval-py", metric="python", extra='[metric_options]\nfile = "metric.py"')
        register(read_task(t2))
        rep = asyncio.run(evaluate_workflow(parse(TEXT_SEED), "eval-py", load("eval-py", "all"), llm=llm))
    by = {r.id: r for r in rep.results}
    assert by["eval-py/1"].score == 1.0 and by["eval-py/2"].score == 0.5 and not by["eval-py/2"].correct
    assert by["eval-py/3"].errored and "raised KeyError" in by["eval-py/3"].error  # errored, not wrong
    assert rep.n == 2 and rep.errors == 1 and rep.score == 0.75
    assert rep.ci_low <= 0.75 <= rep.ci_high  # a fractional interval, not the binomial one


def test_fractional_reports_use_a_bootstrap_and_binary_ones_stay_exact():
    from flowcore.tasks.harness import ProblemResult

    def pr(i, s):
        return ProblemResult(str(i), s == 1, "", None, 0.0, 0.0, None, score=s)

    rep = report_of("t", [pr(i, s) for i, s in enumerate([0.2, 0.4, 0.6, 0.8, 1.0])])
    assert rep.score == pytest.approx(0.6) and 0.2 <= rep.ci_low < 0.6 < rep.ci_high <= 1.0
    allwrong = report_of("t", [pr(i, 0.0) for i in range(10)])
    assert (allwrong.ci_low, round(allwrong.ci_high, 2)) == (0.0, 0.31)  # Clopper-Pearson, as for 0/1
