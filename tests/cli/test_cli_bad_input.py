"""What a new user trips over on the command line: input that selects nothing, numbers that are no numbers, a
workspace that cannot be written, an endpoint that fails every call. Each is refused (or reported) with a message
naming what and where, never a score of nothing, never a traceback, and nothing already measured is lost."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from flowcore.cli.main import main
from flowcore.tasks import bootstrap_ci
from tests.helpers.fakellm import FakeLLMServer, Fault

ROOT = Path(__file__).resolve().parents[2]
MATH_SEED = str(ROOT / "assets" / "examples" / "math_seed.mmd")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_evaluate_refuses_a_selection_of_no_problems(endpoint, capsys, tmp_path):
    """--limit 0 or a split file whose chosen part is empty printed 'score 0.000 (0/0)' and exited 0."""
    srv = endpoint("\\boxed{42}")
    code, out, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "0")
    assert code == 2 and "--limit must be at least 1, got 0" in err and out == ""
    split = tmp_path / "mine.json"
    split.write_text(json.dumps({"benchmark": "gsm8k", "validation": [], "test": ["gsm8k/2"]}))
    code, out, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--split-file", str(split))
    assert code == 2 and "mine.json: field 'validation' is empty" in err and out == ""
    # an empty validation part stops evolution before it claims a score of nothing
    code, out, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--split-file", str(split),
                         "--db", str(tmp_path / "e.db"))
    assert code != 0 and "field 'validation' is empty" in err and "score" not in out
    assert srv.requests == []
    # the test part is there: evaluating it works
    code, out, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--split", "test",
                         "--split-file", str(split), "--json")
    assert code == 0 and json.loads(out)["n"] == 1, err


def test_bad_json_is_named_with_line_and_column(endpoint, capsys, tmp_path):
    endpoint("unused")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?", "answer": }\n')
    code, _, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--data", str(rows))
    assert code == 2 and "rows.jsonl: line 2, column 32: invalid JSON" in err, err
    split = tmp_path / "s.json"
    split.write_text('{"validation": ["gsm8k/2"],\n "test": [}')
    code, _, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--split-file", str(split))
    assert code == 2 and "s.json: line 2, column 11: invalid JSON" in err, err


def test_run_refuses_an_empty_problem(endpoint, capsys, tmp_path):
    srv = endpoint("\\boxed{2}")
    code, _, err = cli(capsys, "run", MATH_SEED, "--problem", "  ")
    assert code == 2 and "--problem is empty" in err
    (tmp_path / "p.txt").write_text("\n")
    code, _, err = cli(capsys, "run", MATH_SEED, "--problem", f"@{tmp_path / 'p.txt'}")
    assert code == 2 and "p.txt holds no text" in err
    assert srv.requests == []


def test_an_evaluation_the_endpoint_failed_has_no_score(endpoint, capsys):
    """A 401 on every call printed 'score 0.000 (0/0) ... 95% CI [0.000, 0.000]': a server error as a score."""
    endpoint(Fault(status=401, body="Incorrect API key provided"))
    code, out, err = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2")
    assert code == 1 and "no score: no problem was scored, 2 not run (errored, not in the score" in out
    assert "score 0.000" not in out and "HTTP 401" in err
    code, out, _ = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["score"] is None and doc["ci"] is None and doc["n"] == 0 and doc["errors"] == 2


def test_an_all_wrong_evaluation_has_an_exact_interval_not_zero_to_zero(endpoint, capsys):
    endpoint("\\boxed{-1}")
    code, out, _ = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "4", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["score"] == 0 and doc["ci"][0] == 0 and doc["ci"][1] == pytest.approx(0.6024, abs=1e-4)
    assert bootstrap_ci([True] * 4) == pytest.approx((1 - 0.6024, 1.0), abs=1e-4)


@pytest.mark.parametrize(("option", "value", "named"), [("--alpha", "nan", "alpha"), ("--lambda", "nan", "lambda"),
                                                         ("--alpha", "inf", "alpha"), ("--budget", "nan", "budget"),
                                                         ("--budget", "0", "budget")])
def test_evolve_refuses_numbers_that_are_not_finite(endpoint, capsys, tmp_path, option, value, named):
    """--alpha nan started a run whose first round failed with 'Total of weights must be finite'."""
    srv = endpoint("\\boxed{1}")
    db = tmp_path / "e.db"
    code, out, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "1", option, value,
                         "--db", str(db))
    assert code == 2 and (f"{named} must be a finite number" in err or f"--{named} must be above 0" in err)
    assert out == "", out
    assert srv.requests == []
    if db.exists():  # no run was stored
        assert sqlite3.connect(db).execute("SELECT count(*) FROM evo_runs").fetchone()[0] == 0


def test_a_read_only_workspace_is_named_and_exits_2(endpoint, capsys, tmp_path, monkeypatch):
    """A write failing in an opened workspace printed 'error: OperationalError: attempt to write a readonly
    database' (exit 1, no file named)."""
    endpoint("\\boxed{1}")
    db = tmp_path / "ro.db"
    sqlite3.connect(db).execute("PRAGMA journal_mode=WAL").connection.close()
    real_connect = sqlite3.connect

    def read_only(path, *a, **kw):  # as root chmod does not stop writes: the file opens, every write fails
        conn = real_connect(path, *a, **kw)
        if str(path) == str(db):
            conn.execute("PRAGMA query_only=ON")
        return conn

    monkeypatch.setattr(sqlite3, "connect", read_only)
    code, out, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "1", "--offline",
                         "--db", str(db))
    assert code == 2 and f"{db}: the workspace database cannot be used" in err and "readonly" in err, err


def test_compare_checks_its_workspace_before_measuring_and_keeps_the_results(endpoint, capsys, tmp_path,
                                                                             monkeypatch):
    """compare --db with a broken workspace measured every workflow, then failed and printed nothing."""
    srv = endpoint("\\boxed{42}")
    garbage = tmp_path / "garbage.db"
    garbage.write_text("this is not a database\n" * 100)
    code, out, err = cli(capsys, "compare", "baseline:io", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2",
                         "--db", str(garbage))
    assert code == 2 and "garbage.db" in err and out == "" and srv.requests == []
    # the store fails only at the end (disk full, file locked away): the table is still printed
    from flowcore.evaluation import compare

    def fail(*_a, **_k):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(compare, "save_comparison", fail)
    code, out, err = cli(capsys, "compare", "baseline:io", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2",
                         "--db", str(tmp_path / "ok.db"))
    assert code == 2 and "baseline:io" in out and "math_seed" in out
    assert "could not be stored (database or disk is full); its results are printed above" in err


@pytest.mark.parametrize("argv", [
    ["evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--timeout", "-1"],
    ["evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--timeout", "nan"],
    ["evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--timeout", "0"],
    ["compare", "baseline:io", MATH_SEED, "--benchmark", "gsm8k", "--limit", "1", "--timeout", "-1"],
    ["evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--max-error-rate", "2"],
    ["evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--max-error-rate", "nan"],
])
def test_timeouts_and_error_rates_out_of_range_are_refused(endpoint, capsys, argv):
    """--timeout -1 (or nan) timed every problem out at once and scored them as wrong answers ('FAIL ... score
    0.000 (0/2)'); --timeout 0 meant no timeout; evaluate took --max-error-rate 2 or nan and never failed."""
    srv = endpoint("\\boxed{42}")
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and ("--timeout" in err or "--max-error-rate" in err) and "must be" in err
    assert srv.requests == []


def test_test_rescoring_options_without_test_top_are_refused(endpoint, capsys, tmp_path):
    srv = endpoint("\\boxed{42}")
    code, out, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "1",
                         "--test-limit", "3", "--db", str(tmp_path / "e.db"))
    assert code == 2 and "--test-limit applies to the test re-scoring: add --test-top N" in err and out == ""
    assert srv.requests == []


def test_score_refuses_an_empty_reference(capsys, tmp_path):
    code, _, err = cli(capsys, "score", "--benchmark", "math", "--prediction", "\\boxed{1}", "--reference", "")
    assert code == 2 and "--reference is empty" in err
    (tmp_path / "tests.py").write_text("")
    code, _, err = cli(capsys, "score", "--benchmark", "mbpp", "--prediction", "def f(): return 1",
                       "--reference", f"@{tmp_path / 'tests.py'}")
    assert code == 2 and "tests.py holds no text" in err


def test_split_never_replaces_an_existing_file_unasked(capsys, tmp_path):
    """`split -o mine.json` silently overwrote a split file the user had edited."""
    mine = tmp_path / "mine.json"
    mine.write_text('{"validation": ["gsm8k/2"], "test": ["gsm8k/11"]}')
    code, _, err = cli(capsys, "split", "--benchmark", "gsm8k", "-o", str(mine))
    assert code == 2 and "mine.json already exists" in err and "--force" in err
    assert mine.read_text() == '{"validation": ["gsm8k/2"], "test": ["gsm8k/11"]}'
    code, _, err = cli(capsys, "split", "--benchmark", "gsm8k", "-o", str(mine), "--force")
    assert code == 0 and len(json.loads(mine.read_text())["validation"]) == 264


def test_repeats_with_every_run_errored_have_no_score(endpoint, capsys):
    endpoint(Fault(status=401, body="Incorrect API key provided"))
    code, out, _ = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--repeats", "2")
    assert code == 1 and "no score: no problem was scored, 4 runs not made" in out and "mean 0.000" not in out
    code, out, _ = cli(capsys, "evaluate", MATH_SEED, "--benchmark", "gsm8k", "--limit", "2", "--repeats", "2",
                       "--json")
    doc = json.loads(out)
    assert doc["score"] is None and doc["mean"] is None and doc["ci"] is None and doc["errors"] == 4


def test_ctrl_c_during_repeats_prints_the_partial_report(tmp_path):
    """evaluate --repeats R ignored the Ctrl-C handling evaluate has: a bare 'interrupted', no report."""
    import signal
    import subprocess
    import sys
    import time

    with FakeLLMServer("\\boxed{42}", latency=0.4) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k")
        proc = subprocess.Popen([sys.executable, "-m", "flowcore", "evaluate", MATH_SEED, "--benchmark", "gsm8k",
                                 "--limit", "6", "--repeats", "2", "--concurrency", "1"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not srv.requests and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "SIGINT" in err and "Traceback" not in err, err
    assert "interrupted after 1 of 12 runs (a partial report)" in err and "1 problems × 1 repeats" in out, out


def test_ctrl_c_during_compare_reports_the_workflows_measured_in_full(tmp_path):
    """Ctrl-C during compare lost every measurement made ('interrupted', nothing printed or stored); and a
    cancelled comparison ranked a workflow measured on only part of the problems against complete ones."""
    import signal
    import subprocess
    import sys
    import time

    db = tmp_path / "ws.db"
    with FakeLLMServer("\\boxed{42}", latency=0.3) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k")
        proc = subprocess.Popen([sys.executable, "-m", "flowcore", "compare", "baseline:io", MATH_SEED,
                                 "--benchmark", "gsm8k", "--limit", "3", "--concurrency", "1", "--db", str(db)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while len(srv.requests) < 4 and proc.poll() is None:  # baseline:io done (3 calls), math_seed under way
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "interrupted: stopped: 1 of 2 workflows measured in full" in err
    assert "baseline:io" in out and "math_seed" not in out
    from flowcore.evaluation.compare import list_comparisons
    from flowcore.workspace.store import Workspace

    (stored,) = list_comparisons(Workspace(db))
    assert stored.status == "cancelled" and stored.names == ["baseline:io"]


def test_a_test_split_that_cannot_be_had_is_said_before_a_run_is_stored(endpoint, capsys, tmp_path):
    """--test-top with a split file whose test part is empty failed after storing a run left 'running'."""
    srv = endpoint("\\boxed{42}")
    split = tmp_path / "s.json"
    split.write_text(json.dumps({"validation": ["gsm8k/2", "gsm8k/11"], "test": []}))
    db = tmp_path / "e.db"
    code, _, err = cli(capsys, "evolve", "--benchmark", "gsm8k", "--rounds", "1", "--split-file", str(split),
                       "--test-top", "1", "--db", str(db))
    assert code == 1 and "field 'test' is empty" in err and srv.requests == []
    if db.exists():
        assert sqlite3.connect(db).execute("SELECT count(*) FROM evo_runs").fetchone()[0] == 0


def test_resuming_a_run_whose_seed_round_failed_says_so(endpoint, capsys, tmp_path):
    """The second try of a run whose seed round failed (a wrong API key) said 'resuming run 1 after round -1'."""
    endpoint(Fault(status=401, body="Incorrect API key provided"))
    argv = ["evolve", "--benchmark", "gsm8k", "--rounds", "1", "--limit", "1", "--db", str(tmp_path / "e.db")]
    code, _, err = cli(capsys, *argv)
    assert code == 1 and "the seed round failed" in err and "HTTP 401" in err
    code, _, err = cli(capsys, *argv)
    assert code == 1 and "resuming run 1 from its seed round (no round was stored)" in err and "-1" not in err
