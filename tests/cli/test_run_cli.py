"""``compile``, ``run``, ``evaluate`` and ``score`` on the command line: outputs, exit codes, and evaluation on
rows the engine has never seen, against a scripted endpoint whose answers are known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore.cli.main import main
from tests.helpers.fakellm import FakeLLMServer, Fault, by_keyword, message_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "assets" / "examples"
MATH_SEED = str(EXAMPLES / "math_seed.mmd")
CODE_SEED = str(EXAMPLES / "code_seed.mmd")
NO_RETURN = "flowchart TD\n    PROBLEM([Problem])\n    C1[Custom]\n    PROBLEM --> C1\n    class PROBLEM Interface\n"


@pytest.fixture
def no_endpoint(monkeypatch):
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(var)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- run --------------------------------------------------------------------------------------------------------

def test_run_prints_answer_cost_and_calls(endpoint, capsys):
    srv = endpoint("6*7 = 42, so \\boxed{42}")
    code, out, err = cli(capsys, "run", MATH_SEED, "--task", "math", "--problem", "What is 6*7?", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["answer"] == "6*7 = 42, so \\boxed{42}" and doc["calls"] == 1 and doc["cost"] > 0
    assert "What is 6*7?" in message_text(srv.requests[0])
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "What is 6*7?")
    assert code == 0 and out.strip() == "6*7 = 42, so \\boxed{42}" and "LLM calls: 1" in err


def test_run_reads_a_code_problem_from_a_file(endpoint, capsys, tmp_path):
    endpoint("```python\ndef add(a, b):\n    return a + b\n```")
    (tmp_path / "p.txt").write_text('def add(a, b):\n    """>>> add(1, 2)\n    3\n    """\n')
    code, out, _ = cli(capsys, "run", CODE_SEED, "--task", "code", "--problem", f"@{tmp_path / 'p.txt'}",
                       "--entry-point", "add", "--json")
    assert code == 0 and json.loads(out)["answer"] == "def add(a, b):\n    return a + b"


def test_without_an_endpoint_run_and_evaluate_say_how_to_configure(no_endpoint, capsys):
    for argv in (["run", MATH_SEED, "--problem", "1+1"], ["evaluate", MATH_SEED, "--benchmark", "gsm8k",
                                                          "--limit", "1"]):
        code, out, err = cli(capsys, *argv)
        assert code == 1 and out == ""
        assert "OPENAI_BASE_URL" in err and "OPENAI_API_KEY" in err and "Traceback" not in err


def test_an_invalid_workflow_exits_1_listing_its_diagnostics(endpoint, capsys, tmp_path):
    srv = endpoint("unused")
    bad = tmp_path / "bad.mmd"
    bad.write_text(NO_RETURN)
    for argv in (["run", str(bad), "--problem", "q"], ["compile", str(bad)],
                 ["evaluate", str(bad), "--benchmark", "gsm8k", "--limit", "1"],
                 ["run", CODE_SEED, "--task", "math", "--problem", "q"]):
        code, out, err = cli(capsys, *argv)
        assert code == 1 and ("M004" in err or "M011" in err), (argv, err)
    assert srv.requests == []


def test_a_missing_file_or_bad_arguments_exit_2(endpoint, capsys, tmp_path):
    endpoint("unused")
    assert cli(capsys, "run", str(tmp_path / "nope.mmd"), "--problem", "q")[0] == 2
    assert cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--data", str(tmp_path / "x.jsonl"))[0] == 2
    (tmp_path / "rows.jsonl").write_text('{"question": "no answer field"}\n')
    code, _, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--data", str(tmp_path / "rows.jsonl"))
    assert code == 2 and "line 1" in err and "answer" in err
    assert cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "-1")[0] == 2
    code, _, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "nope")  # neither built in nor saved
    assert code == 2 and "--benchmark nope: no such task" in err
    with pytest.raises(SystemExit) as exc:  # --benchmark or --task-file, never both
        main(["evaluate", MATH_SEED, "--benchmark", "gsm8k", "--task-file", "t.toml"])
    assert exc.value.code == 2


# -- compile ----------------------------------------------------------------------------------------------------

def test_compile_writes_a_module_or_prints_it(no_endpoint, capsys, tmp_path):
    out_py = tmp_path / "flow.py"
    code, _, err = cli(capsys, "compile", CODE_SEED, "--task", "code", "-o", str(out_py))
    assert code == 0 and "wrote" in err
    subprocess.run([sys.executable, "-m", "py_compile", str(out_py)], check=True)
    code, out, _ = cli(capsys, "compile", CODE_SEED, "--task", "code")
    assert code == 0 and out == out_py.read_text() and "TASK = 'code'" in out
    assert cli(capsys, "compile", CODE_SEED, "-o", str(tmp_path / "no" / "dir" / "x.py"))[0] == 2


def test_compile_dash_is_standard_output_and_never_overwrites_the_workflow(no_endpoint, capsys, tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli(capsys, "compile", CODE_SEED, "--task", "code", "-o", "-")
    assert code == 0 and "TASK = 'code'" in out and not (tmp_path / "-").exists()  # not a file named "-"
    mine = tmp_path / "mine.mmd"
    mine.write_text(Path(CODE_SEED).read_text())
    code, _, err = cli(capsys, "compile", str(mine), "--task", "code", "-o", "./mine.mmd")
    assert code == 2 and "mine.mmd" in err and "workflow file itself" in err and "Traceback" not in err
    assert mine.read_text() == Path(CODE_SEED).read_text()  # the workflow is still there


# -- evaluate --data on unseen rows: exactly the deserved score -------------------------------------------------

def _rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _gsm8k(tmp: Path):
    rows = [{"question": f"Zorblat case {k}: how many widgets?", "answer": f"Some work.\n#### {n:,}"}
            for k, n in (("alpha", 12), ("beta", 1500), ("gamma", 7), ("delta", 30))]
    replies = {"case alpha": "So 12 widgets.", "case beta": "The total is 1,500.", "case gamma": "That makes 7.",
               "case delta": "I get 31."}
    return MATH_SEED, _rows(tmp / "gsm8k.jsonl", rows), replies, ["gsm8k/0", "gsm8k/1", "gsm8k/2", "gsm8k/3"]


def _math(tmp: Path):
    rows = [{"problem": f"Quoggle {k}?", "solution": f"Work. \\boxed{{{a}}}", "unique_id": f"q/{k}"}
            for k, a in (("one", "\\frac{1}{2}"), ("two", "\\sqrt{2}"), ("three", "x^2+1"), ("four", "5"))]
    replies = {"Quoggle one": "so \\boxed{0.5}", "Quoggle two": "hence \\boxed{\\sqrt{2}}",
               "Quoggle three": "\\boxed{1 + x^2}", "Quoggle four": "\\boxed{6}"}
    return MATH_SEED, _rows(tmp / "math.jsonl", rows), replies, ["q/one", "q/two", "q/three", "q/four"]


_FUNCS = {"triple": ("x", "3 * x", [(2, 6), (-1, -3)]), "negate": ("x", "-x", [(4, -4), (0, 0)]),
          "square": ("x", "x * x", [(3, 9), (-2, 4)]), "halve": ("x", "x // 2", [(8, 4), (5, 2)])}
_WRONG_FUNC = "halve"


def _impl(name: str) -> str:
    arg, body, _ = _FUNCS[name]
    body = "x + 1" if name == _WRONG_FUNC else body
    return f"```python\ndef {name}({arg}):\n    return {body}\n```"


def _humaneval(tmp: Path):
    rows = []
    for name, (arg, _, cases) in _FUNCS.items():
        a, b = cases[0]
        prompt = f'def {name}({arg}):\n    """Compute it.\n    >>> {name}({a})\n    {b}\n    """\n'
        test = "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {y}\n" for x, y in cases)
        rows.append({"task_id": f"Unseen/{name}", "prompt": prompt, "entry_point": name, "test": test,
                     "canonical_solution": "    return 0\n"})
    replies = {f"def {n}(": _impl(n) for n in _FUNCS}
    return CODE_SEED, _rows(tmp / "he.jsonl", rows), replies, [f"Unseen/{n}" for n in _FUNCS]


def _mbpp(tmp: Path):
    rows = []
    for i, (name, (_, body, cases)) in enumerate(_FUNCS.items()):
        rows.append({"task_id": 9000 + i, "prompt": f"Write a function {name} that works.",
                     "code": f"def {name}(x):\n    return {body}\n",
                     "test_list": [f"assert {name}({x}) == {y}" for x, y in cases]})
    replies = {f"function {n} that": _impl(n) for n in _FUNCS}
    return CODE_SEED, _rows(tmp / "mbpp.jsonl", rows), replies, [f"mbpp/{9000 + i}" for i in range(4)]


@pytest.mark.parametrize("benchmark,make", [("gsm8k", _gsm8k), ("math", _math), ("humaneval", _humaneval),
                                            ("mbpp", _mbpp)])
def test_evaluate_data_reports_exactly_the_deserved_score(benchmark, make, endpoint, capsys, tmp_path):
    workflow, data, replies, ids = make(tmp_path)
    srv = endpoint(by_keyword(replies, "no idea"))
    code, out, err = cli(capsys, "evaluate", workflow, "--benchmark", benchmark, "--data", data, "--json",
                         "--concurrency", "4")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["score"] == 0.75 and doc["n"] == 4 and len(doc["ci"]) == 2 and doc["cost"] > 0
    assert [r["id"] for r in doc["results"]] == ids
    assert [r["correct"] for r in doc["results"]] == [True, True, True, False]
    assert all(r["error"] is None for r in doc["results"])
    assert len(srv.requests) == 4
    if benchmark == "humaneval":  # the hidden tests never reach the LLM
        sent = "\n".join(message_text(r) for r in srv.requests)
        assert "candidate(" not in sent and "triple(-1)" not in sent


def test_a_persistent_endpoint_fault_is_recorded_for_its_problem_only(endpoint, capsys, tmp_path):
    workflow, data, replies, _ = _gsm8k(tmp_path)
    replies = dict(replies, **{"case beta": Fault(status=500, body="model overloaded")})
    endpoint(lambda req: next((v for k, v in replies.items() if k in message_text(req)), "no idea"))
    code, out, err = cli(capsys, "evaluate", workflow, "--benchmark", "gsm8k", "--data", data, "--json")
    assert code == 1 and "1 of 4 problems could not be run because the LLM endpoint failed" in err
    doc = json.loads(out)
    by_id = {r["id"]: r for r in doc["results"]}
    # the server error is not a wrong answer: 2 of the 3 answered problems are right
    assert doc["n"] == 3 and doc["errors"] == 1 and doc["score"] == pytest.approx(2 / 3)
    assert by_id["gsm8k/1"]["errored"] and not by_id["gsm8k/0"]["errored"]
    assert doc["tokens"]["prompt"] > 0 and doc["tokens"]["errors"] >= 1
    code, out, err = cli(capsys, "evaluate", workflow, "--benchmark", "gsm8k", "--data", data,
                         "--max-error-rate", "0.3")
    assert code == 0 and "score 0.667 (2/3), 1 not run (errored, not in the score)" in out
    assert not by_id["gsm8k/1"]["correct"] and "C1" in by_id["gsm8k/1"]["error"]
    assert "500" in by_id["gsm8k/1"]["error"] and "overloaded" in by_id["gsm8k/1"]["error"]
    assert by_id["gsm8k/0"]["correct"] and by_id["gsm8k/2"]["correct"] and by_id["gsm8k/0"]["error"] is None


def test_evaluate_text_output_and_a_run_where_everything_fails(endpoint, capsys, tmp_path):
    workflow, data, replies, _ = _gsm8k(tmp_path)
    endpoint(by_keyword(replies, "no idea"))
    code, out, _ = cli(capsys, "evaluate", workflow, "--benchmark", "gsm8k", "--data", data, "--limit", "2")
    assert code == 0 and "score 1.000 (2/2)" in out and out.count("ok ") == 2
    endpoint(Fault(status=503))
    code, out, err = cli(capsys, "evaluate", workflow, "--benchmark", "gsm8k", "--data", data, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["n"] == 0 and doc["errors"] == 4 and "4 of 4 problems could not be run" in err


def test_evaluate_stops_on_sigterm_with_a_partial_report(tmp_path):
    """SIGTERM mid-run: the problems in flight finish, the rest never start, the partial report is printed."""
    import signal
    import subprocess
    import sys
    import time


    workflow, data, replies, _ = _gsm8k(tmp_path)
    with FakeLLMServer(by_keyword(replies, "no idea"), latency=0.4) as srv:
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "k", "MERMAIDFLOW_CACHE": "0"}
        proc = subprocess.Popen([sys.executable, "-m", "flowcore", "evaluate", workflow, "--benchmark", "gsm8k",
                                 "--data", data, "--concurrency", "1"], cwd=Path(__file__).resolve().parents[2],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not srv.requests and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "SIGTERM" in err and "Traceback" not in err
    assert "interrupted: stopped after 1 of 4 problems (a partial report)" in out
    assert out.count("ok ") == 1 and "score 1.000 (1/1)" in out


# -- score ------------------------------------------------------------------------------------------------------

def test_score_answers_in_json(no_endpoint, capsys, tmp_path):
    code, out, _ = cli(capsys, "score", "--benchmark", "gsm8k", "--prediction", "so 1,234 apples",
                       "--reference", "1234")
    assert code == 0 and json.loads(out) == {"correct": True, "extracted": "1234"}
    code, out, _ = cli(capsys, "score", "--benchmark", "math", "--prediction", "\\boxed{\\frac12}",
                       "--reference", "\\boxed{0.5}")
    assert code == 0 and json.loads(out)["correct"] is True
    tests = tmp_path / "t.py"
    tests.write_text("def check(candidate):\n    assert candidate(2) == 6\n")
    code, out, _ = cli(capsys, "score", "--benchmark", "humaneval", "--prediction",
                       "def triple(x):\n    return 2 * x", "--reference", f"@{tests}", "--entry-point", "triple")
    assert code == 0 and json.loads(out)["correct"] is False
    code, out, _ = cli(capsys, "score", "--benchmark", "mbpp", "--prediction", "def f(x):\n    return x",
                       "--reference", "assert f(3) == 3")
    assert code == 0 and json.loads(out)["correct"] is True


def test_exit_codes_from_a_real_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flowcore", *argv], capture_output=True, text=True, cwd=ROOT,
                              env=env, timeout=60)

    p = run("run", MATH_SEED, "--problem", "1+1")
    assert p.returncode == 1 and "OPENAI_BASE_URL" in p.stderr and "Traceback" not in p.stderr
    p = run("run", str(tmp_path / "missing.mmd"), "--problem", "1+1")
    assert p.returncode == 2 and "no such file" in p.stderr
    p = run("score", "--benchmark", "gsm8k", "--prediction", "7", "--reference", "7")
    assert p.returncode == 0 and json.loads(p.stdout)["correct"] is True


def test_the_benchmark_choices_match_the_loaders():
    from flowcore.cli import run as run_cli
    from flowcore.tasks import BENCHMARKS

    assert run_cli.BENCHMARKS == BENCHMARKS


# -- what the CLI records (issue #9 item 7) --------------------------------------------------------------------

def test_run_and_evaluate_log_and_cache_in_a_workspace_and_report_tokens_and_trace(endpoint, capsys, tmp_path):
    from flowcore.workspace.store import Workspace

    srv = endpoint("6*7 = 42, so \\boxed{42}")
    db = tmp_path / "ws.db"
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "What is 6*7?", "--json", "--db", str(db))
    doc = json.loads(out)
    assert code == 0 and doc["tokens"]["prompt"] > 0 and doc["tokens"]["completion"] == 5
    assert doc["trace"] and doc["trace"][0]["node"] and doc["price_known"]
    code, out, _ = cli(capsys, "run", MATH_SEED, "--problem", "What is 6*7?", "--json", "--db", str(db))
    assert json.loads(out)["tokens"]["cached"] == 1 and len(srv.requests) == 1  # the second run was a replay
    rows = Workspace(db).query("SELECT run_id, cached, error FROM llm_calls ORDER BY id")
    assert [(r["run_id"], r["cached"]) for r in rows] == [("run-cli:math_seed.mmd", 0), ("run-cli:math_seed.mmd", 1)]
    workflow, data, replies, _ = _gsm8k(tmp_path)
    endpoint(by_keyword(replies, "no idea"))
    code, out, _ = cli(capsys, "evaluate", workflow, "--benchmark", "gsm8k", "--data", data, "--json",
                       "--db", str(db))
    assert code == 0 and json.loads(out)["tokens"]["calls"] == 4
    assert Workspace(db).query("SELECT COUNT(*) AS n FROM llm_cache")[0]["n"] == 5
    assert cli(capsys, "run", MATH_SEED, "--problem", "q", "--db", str(tmp_path))[0] == 2  # a directory


def test_an_unknown_models_cost_says_price_unknown(endpoint, capsys, monkeypatch):
    endpoint("\\boxed{1}")
    monkeypatch.setenv("OPENAI_MODEL", "smollm2-135m")
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "1?")
    assert code == 0 and "price unknown for 'smollm2-135m'" in err and "$0.000000" not in err
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "1?", "--json")
    assert json.loads(out)["price_known"] is False


def test_a_cost_the_endpoint_did_not_report_is_said_to_be_an_estimate(endpoint, capsys, monkeypatch):
    endpoint([Fault(body="6*7 = 42, so \\boxed{42}", no_usage=True), "6*7 = 42, so \\boxed{42}"])
    monkeypatch.setenv("MERMAIDFLOW_STREAM", "1")  # a streamed reply whose server leaves its usage out
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "What is 6*7?")
    assert code == 0 and "cost ~$" in err and "estimated: the endpoint reported no token counts for 1 call" in err
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "What is 6*8?")  # this reply says its usage
    assert code == 0 and "cost $" in err and "estimated" not in err
    code, out, err = cli(capsys, "run", MATH_SEED, "--problem", "What is 6*9?", "--json")
    assert code == 0 and json.loads(out)["tokens"]["estimated"] == 0 and json.loads(out)["cost"] > 0


def test_score_humaneval_with_the_problem_prompt(no_endpoint, capsys, tmp_path):
    prompt = tmp_path / "prompt.py"
    prompt.write_text('from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n')
    tests = "def check(candidate):\n    assert candidate([1, 2]) == 3\n"
    full = "def total(xs: List[int]) -> int:\n    return sum(xs)\n"  # no import: fails on its own
    code, out, _ = cli(capsys, "score", "--benchmark", "humaneval", "--prediction", full, "--reference", tests,
                       "--entry-point", "total")
    assert code == 0 and json.loads(out)["correct"] is False
    code, out, _ = cli(capsys, "score", "--benchmark", "humaneval", "--prediction", full, "--reference", tests,
                       "--entry-point", "total", "--prompt", f"@{prompt}")
    assert code == 0 and json.loads(out)["correct"] is True
    code, _, err = cli(capsys, "score", "--benchmark", "gsm8k", "--prediction", "1", "--reference", "1",
                       "--prompt", "x")
    assert code == 2 and "--prompt applies to code benchmarks" in err
