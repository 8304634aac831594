"""A queued run does the work a foreground run does (issue 19.1): a worker builds its LLM client from the same
settings as the `evolve` command, reaches the scripted endpoint, and stores the same rounds for the same seed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from flowcore.tasks import load
from tests.helpers.fakellm import FakeLLMServer, message_text

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--benchmark", "gsm8k", "--rounds", "2", "--limit", "3", "--candidates", "2", "--seed", "5"]


FIRST = load("gsm8k", "validation", limit=3)[0]  # the problem the scripted model gets right


def reply(request: dict) -> str:
    text = message_text(request)
    # right for one problem of the three, wrong for the others: scores that tell runs apart
    return f"So the answer is \\boxed{{{FIRST.reference}}}." if FIRST.question[:60] in text else "It is \\boxed{-7}."


def flowcore(env: dict, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "flowcore", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def rounds(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT round, status, score, operator FROM evo_rounds ORDER BY round").fetchall()


def test_a_queued_run_calls_the_endpoint_and_equals_the_foreground_run(tmp_path):
    with FakeLLMServer(reply) as srv:
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-test", "MERMAIDFLOW_RAY": ""}
        flowcore(env, "evolve", "--db", str(tmp_path / "fg.db"), *ARGS)
        foreground_calls = len(srv.requests)
        flowcore(env, "submit", "--db", str(tmp_path / "q.db"), *ARGS)
        flowcore(env, "worker", "--db", str(tmp_path / "q.db"), "--once")
        queued_calls = len(srv.requests) - foreground_calls
    assert foreground_calls > 0 and queued_calls == foreground_calls  # the worker's calls reached the server
    fg, q = rounds(tmp_path / "fg.db"), rounds(tmp_path / "q.db")
    assert fg == q and len(q) == 3 and any(score for _, _, score, _ in q), q
    with sqlite3.connect(tmp_path / "q.db") as c:
        assert c.execute("SELECT status FROM evo_runs").fetchone()[0] == "finished"


def test_a_queued_run_that_needs_an_llm_and_has_none_is_refused_naming_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    p = subprocess.run([sys.executable, "-m", "flowcore", "submit", "--db", str(tmp_path / "q.db"), *ARGS],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.returncode != 0 and "OPENAI_BASE_URL" in p.stderr and "--offline" in p.stderr, p.stderr
