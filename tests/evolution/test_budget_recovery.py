"""The budget is a user's money cap: a run never spends more than it, because no paid call goes uncounted.

Three holes, each shut here against a real OpenAI-compatible server on 127.0.0.1 (tests/helpers/fakellm.py)
through the real ``openai`` client, the money counted at the server:

1. ``evolve`` SIGKILLed mid-round: the round's paid calls are in the call log but in no stored round; resumed, the
   run must count them (or it overspends its budget by what the killed round paid).
2. A round dropped by an error other than an outage or a cancel (here: the workspace database locked while the
   round is stored, past every back-off): its paid calls must still count on resume.
3. The budget running out just before the probe of a failing round: reported as the budget spent, never as the
   endpoint being down.

Prices are set so that only the executor's completion tokens cost money ($1 a token, a token a word in the fake
server), so what the server billed is the words it answered with."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.workspace.store import Workspace
from tests.evolution.test_probe_attacks import MARK, _problems, _right, _setup
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

ROOT = Path(__file__).resolve().parents[2]
PAID = "paid-model"  # the executor's model: $1 per completion token, prompts free
PRICES = json.dumps({PAID: [0.0, 1_000_000.0]})
REPLY = "The answer is \\boxed{42} so I am done here now."  # 10 words: every answered call bills $10
WORDS = len(REPLY.split())


def _wait(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


class Biller:
    """The server's side of the bill: answers the first ``hold_after`` calls (each billed ``WORDS``), then holds
    every later one unanswered until ``go_on`` (a held call is never answered to the client that asked it)."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.lock, self.released = threading.Lock(), threading.Event()
        self.answered, self.held, self.hold_after = 0, 0, hold_after

    def __call__(self, request: dict):
        with self.lock:
            if self.hold_after is None or self.answered < self.hold_after:
                self.answered += 1
                return REPLY
            self.held += 1
        self.released.wait(120)
        return Fault(status=503, body="held until its client was gone")  # nobody is left to read it: not billed

    def go_on(self) -> None:
        with self.lock:
            self.hold_after = None
        self.released.set()

    @property
    def billed(self) -> float:
        with self.lock:
            return float(self.answered * WORDS)


def _data(tmp_path: Path, n: int = 4) -> Path:
    p = tmp_path / "gsm8k_small.jsonl"
    p.write_text("".join(json.dumps({"question": f"What is {i} plus {40 - i}?", "answer": "#### 40"}) + "\n"
                         for i in range(n)))
    return p


def _env(srv: FakeLLMServer) -> dict:
    return {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-budget", "OPENAI_MODEL": PAID,
            "MERMAIDFLOW_PRICES": PRICES, "MERMAIDFLOW_MAX_RETRIES": "0", "MERMAIDFLOW_CONCURRENCY": "1",
            "MERMAIDFLOW_CACHE": "1"}


def test_a_run_sigkilled_mid_round_counts_that_rounds_paid_calls_on_resume_and_stays_within_its_budget(tmp_path):
    """The seed (one LLM node, 4 problems: 4 calls) is stored; round 1 gets 3 calls answered and the process is
    SIGKILLed while the 4th waits. Those 3 calls ($30) were paid and logged, but no round holds them; the resume
    gets their answers from the cache for free. The budget ($200: 20 calls) must count them: the server never
    bills more than $200, and the spend the run reports covers every dollar billed."""
    budget, seed_calls = 20 * WORDS, 4
    data, db = _data(tmp_path), tmp_path / "w.db"
    biller = Biller(hold_after=seed_calls + 3)
    cmd = [sys.executable, "-m", "flowcore", "evolve", "--benchmark", "gsm8k", "--rounds", "12", "--data", str(data),
           "--db", str(db), "--json", "--mode", "programmatic", "--seed", "3", "--candidates", "2",
           "--concurrency", "1", "--search", "paper", "--budget", str(budget)]
    with FakeLLMServer(biller) as srv:
        env = _env(srv)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: biller.held >= 1 or proc.poll() is not None, 60, "round 1's 4th call")
            assert proc.poll() is None, proc.stderr.read()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        with sqlite3.connect(db) as c:
            assert c.execute("SELECT MAX(round) FROM evo_rounds").fetchone()[0] == 0  # killed mid round 1
            logged = c.execute("SELECT COUNT(*) FROM llm_calls WHERE run_id = 'evo-1' AND cost > 0").fetchone()[0]
        assert logged == seed_calls + 3 and biller.billed == (seed_calls + 3) * WORDS
        biller.go_on()
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
    ws = Workspace(db)
    info, spent = History(ws).run(1), History(ws).spent(1)
    assert info.status == "stopped" and "budget" in (info.reason or "").lower(), (info.status, info.reason)
    assert biller.billed <= budget, (
        f"the server billed ${biller.billed:g} for a run with a ${budget:g} budget: the killed round's paid calls "
        f"were not counted on resume")
    assert abs(spent - biller.billed) < 1e-9, f"the run reports ${spent:g} spent; the server billed ${biller.billed:g}"


def test_a_round_dropped_by_a_database_lock_while_it_is_stored_still_counts_on_resume(tmp_path, monkeypatch):
    """Round 1 is made and paid for, then the workspace's SQLite file is write-locked by another process while
    the round is stored, past every back-off: the run stops ("the workspace database stayed unreachable"), round 1
    unstored. Resumed once the lock is gone, round 1's answers come from the cache for free: the spend the run
    counts must still cover what the server billed for them."""
    data, db = _data(tmp_path), tmp_path / "w.db"
    biller = Biller()
    monkeypatch.setenv("MERMAIDFLOW_DB_BUSY_TIMEOUT", "0.3")  # each blocked write gives up after 0.3 s
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's write transaction
        locked.set()
        release.wait(60)
        other.execute("ROLLBACK")
        other.close()

    with FakeLLMServer(biller) as srv:
        for k, v in _env(srv).items():
            if k.startswith(("OPENAI_", "MERMAIDFLOW_")):
                monkeypatch.setenv(k, v)
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, data_path=str(data), mode="programmatic", seed=3,
                              candidates=2, concurrency=1, budget=1000.0, search="paper")
        ws = Workspace(db)
        evo = Evolution(ws, cfg)
        evo.outage_waits = (0.01, 0.02)

        def add_round(run_id: int, rec: dict) -> None:
            if rec["round"] == 1 and not locked.is_set():  # round 1 is paid for: now the database is taken
                threading.Thread(target=hold, daemon=True).start()
                locked.wait(10)
            real_add(run_id, rec)

        def set_status(run_id: int, status: str, reason: str | None = None) -> None:
            if status == "stopped":  # the run gave round 1 up: the other process lets go, the stop is recorded
                release.set()
            real_status(run_id, status, reason)

        real_add, real_status = evo.history.add_round, evo.history.set_status
        evo.history.add_round = add_round  # type: ignore[method-assign]
        evo.history.set_status = set_status  # type: ignore[method-assign]
        first = evo.run()
        assert locked.is_set() and first["status"] == "stopped", first
        assert "database stayed unreachable" in (first["reason"] or ""), first["reason"]
        assert History(ws).last_round(int(evo.run_id)) == 0
        billed_before = biller.billed
        assert billed_before > 4 * WORDS  # round 1's calls were paid for
        assert History(ws).spent(int(evo.run_id)) >= billed_before - 1e-9, (
            f"after the stop the run counts ${History(ws).spent(int(evo.run_id)):g}; the server billed "
            f"${billed_before:g}")
        again = Evolution.resume(ws, int(evo.run_id))
        out = again.run()
        assert out["status"] == "finished", out
    spent = History(ws).spent(int(evo.run_id))  # every billed dollar, once (never counted twice either)
    assert abs(spent - biller.billed) < 1e-9, f"the run reports ${spent:g} spent; the server billed ${biller.billed:g}"


def test_a_budget_spent_before_the_probe_is_reported_as_the_budget_not_as_an_outage(tmp_path, monkeypatch):
    """Caching off. The seed answers 4 problems ($40); round 1's candidate gets 3 answered ($30 a try) while the
    4th meets an HTTP 503 on every try (3 tries: the round is retried after each back-off). The third try takes the
    spend to $130, past the $125 budget, so the probe after the tries is refused by the budget. That is the budget
    spent (the same BudgetExceeded a refused round call gives, the round stored failed, its cost charged), not an
    endpoint that went away."""
    n = 4
    problems = _problems(n)

    def answer(i: int, candidate: bool):
        if candidate and i == 3:
            return Fault(status=503, body="overloaded")
        return Fault(body=_right(problems, i, words=WORDS - 4), delay=0.3)  # 10 words; all 4 asked at once

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer, timeout=5.0)
    billed = {"usd": 0.0}
    lock = threading.Lock()

    def billing(request: dict):
        got = respond(request)
        if request.get("model") == PAID and not (isinstance(got, Fault) and got.status):
            text = got.body if isinstance(got, Fault) else got
            with lock:
                billed["usd"] += len(text.split())
        return got

    monkeypatch.setenv("MERMAIDFLOW_CACHE", "0")
    monkeypatch.setenv("OPENAI_MODEL", "free-model")  # optimizer and judge: unpriced
    monkeypatch.setenv("MERMAIDFLOW_MODEL_EXECUTOR", PAID)
    monkeypatch.setenv("MERMAIDFLOW_PRICES", PRICES)
    budget = 12.5 * WORDS
    with FakeLLMServer(billing) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, data_path=str(data), search="paper", budget=budget)
        evo = Evolution(ws, cfg)
        evo.outage_waits = (0.01, 0.02)
        result = evo.run()
        tries = [r for r in srv.requests if MARK in message_text(r) and "plus 103" in message_text(r)]
    assert len(tries) == 3, f"round 1's failing problem was asked {len(tries)} times, not 3"
    assert billed["usd"] == 13 * WORDS
    reason = result["reason"] or ""
    assert result["status"] == "stopped" and "BudgetExceeded: LLM budget of $125.0000 for this run is used up" in \
        reason and "kept failing" not in reason and "did not answer" not in reason, reason
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert 1 in rounds and rounds[1]["status"] == "failed" and rounds[1]["reason"] == reason, rounds.get(1)
    assert abs(History(ws).spent(int(evo.run_id)) - billed["usd"]) < 1e-9  # the round's cost charged, once
