"""Resume never collides (issue #14 item 3): ``evolve`` SIGKILLed at 20 random moments (some right after a
failed round) and re-run each time ends with exactly the rows of an uninterrupted run; ``--json`` lines come
as each round commits; a second ``evolve`` on a run another process is evolving gets a clear message."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcore.cli.main import main
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [("What is 40 + 2?", "42"), ("What is 6 * 7?", "42"), ("What is 10 - 3?", "7")]
ROUNDS = 16


def respond(req: dict) -> str | Fault:
    """A pure function of the prompt: right or wrong by the workflow's wording, and an HTTP 400 (a request
    the server refuses: not transient, so the round is stored as failed) for some workflows."""
    text = message_text(req)
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    if h % 23 == 0:
        return Fault(status=400, body="this prompt is refused")
    answer = next((a for q, a in QUESTIONS if q in text), "0")
    return f"The answer is {answer if h % 3 else '1'}."


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "gsm8k_small.jsonl"
    p.write_text("".join(json.dumps({"question": q, "answer": f"#### {a}"}) + "\n" for q, a in QUESTIONS))
    return p


def _args(data: Path, db: Path) -> list[str]:
    return ["evolve", "--benchmark", "gsm8k", "--rounds", str(ROUNDS), "--data", str(data), "--db", str(db),
            "--json", "--mode", "programmatic", "--seed", "5", "--candidates", "2"]


def _rows(db: Path) -> list[dict]:
    with sqlite3.connect(db) as c:
        c.row_factory = sqlite3.Row
        rows = [dict(r) for r in c.execute("SELECT * FROM evo_rounds ORDER BY run_id, round")]
    for r in rows:  # what differs between two honest runs: wall-clock times, float sums in finishing order,
        r.pop("created")  # and in a failed round the cost of the calls that happened to finish before the failure
        failed = r["status"] == "failed"
        r["cost"] = None if failed else round(r["cost"], 12)
        drop = {"latency", "cost"} if failed else {"latency"}
        r["per_problem_json"] = [{k: v for k, v in p.items() if k not in drop}
                                 for p in json.loads(r["per_problem_json"])]
    return rows


def _last(db: Path) -> int:
    if not db.exists():
        return -1
    with sqlite3.connect(db) as c:
        if not c.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'evo_rounds'").fetchone()[0]:
            return -1
        last = c.execute("SELECT MAX(round) FROM evo_rounds").fetchone()[0]
    return -1 if last is None else last


def _env(srv: FakeLLMServer) -> dict:
    return {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-kill", "MERMAIDFLOW_CACHE": "0",
            "MERMAIDFLOW_MAX_RETRIES": "0"}


def test_sigkill_at_20_random_moments_then_resume_equals_an_uninterrupted_run(tmp_path, data, monkeypatch):
    rng = random.Random(2024)
    with FakeLLMServer(respond, latency=0.1) as srv:
        env = _env(srv)
        for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MERMAIDFLOW_CACHE", "MERMAIDFLOW_MAX_RETRIES"):
            monkeypatch.setenv(k, env[k])
        straight_db = tmp_path / "straight.db"
        assert main(_args(data, straight_db)) == 0
        straight = _rows(straight_db)
        assert [r["round"] for r in straight] == list(range(ROUNDS + 1))
        failed = [r["round"] for r in straight if r["status"] == "failed"]
        assert failed and failed[0] < ROUNDS // 2, f"the script must fail some round early enough: {failed}"

        db = tmp_path / "killed.db"
        cmd = [sys.executable, "-m", "flowcore", *_args(data, db)]
        kills, after_failed, lags = 0, 0, []
        while kills < 20:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            stored = _last(db)
            if kills % 4 == 3 and any(f > stored for f in failed):  # right after a failed round is stored
                for line in proc.stdout:
                    if json.loads(line)["status"] == "failed":
                        after_failed += 1
                        break
            else:  # a random moment: early on while few rounds are left, so 20 kills fit in one run
                time.sleep(rng.uniform(0.2, 1.6) if ROUNDS - stored > 3 else rng.uniform(0.05, 0.6))
            if proc.poll() is not None:
                break  # it finished before this kill: no more kills possible
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills += 1
            with sqlite3.connect(db) as c:
                if c.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'evo_runs'").fetchone()[0]:
                    assert [tuple(r) for r in c.execute("SELECT id FROM evo_runs")] in ([], [(1,)])
        final = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in final.stdout:  # each line comes when its round is committed, not rounds later
            rec = json.loads(line)
            with sqlite3.connect(db) as c:
                last = c.execute("SELECT MAX(round) FROM evo_rounds").fetchone()[0]
            lags.append(last - rec["round"])
        assert final.wait(120) == 0, final.stderr.read()
    assert kills == 20 and after_failed >= 1, (kills, after_failed)
    assert lags and max(lags) <= 1, lags
    with sqlite3.connect(db) as c:
        assert [tuple(r) for r in c.execute("SELECT id, status FROM evo_runs")] == [(1, "finished")]
    assert _rows(db) == straight


def test_a_second_evolve_on_a_busy_run_is_refused_with_the_holder_named(tmp_path, data):
    with FakeLLMServer(respond, latency=0.3) as srv:
        env = _env(srv)
        db = tmp_path / "busy.db"
        cmd = [sys.executable, "-m", "flowcore", *_args(data, db)]
        first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert json.loads(first.stdout.readline())["round"] == 0  # it is evolving run 1
            second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
            assert second.returncode == 2 and second.stdout == ""
            assert f"run 1 is being evolved by process {first.pid} on " in second.stderr
            assert "--seed" in second.stderr and "Traceback" not in second.stderr
            other = subprocess.run([*cmd[:-4], "--seed", "6", "--rounds", "1"], cwd=ROOT, env=env,
                                   capture_output=True, text=True, timeout=60)
            assert other.returncode == 0, other.stderr  # another seed: its own run, side by side
        finally:
            first.kill()
            first.wait(10)
    with sqlite3.connect(db) as c:
        assert [r[0] for r in c.execute("SELECT id FROM evo_runs ORDER BY id")] == [1, 2]
