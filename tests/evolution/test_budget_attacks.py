"""An outsider's attacks on an evolution run's budget (attack12), each against a real OpenAI-compatible server on
127.0.0.1 (tests/helpers/fakellm.py) through the real ``openai`` client, the money counted at the server.

1. A price of NaN (``MERMAIDFLOW_PRICES``, JSON allows it; the saved settings too): every call cost NaN. NaN compares
   False with everything, so ``spent >= budget`` never held, and SQLite keeps it as NULL: the first round stored
   failed its NOT NULL cost, so the run stopped blaming the workspace and counted $0 of what the server billed.
2. A server (or a proxy in front of it) that reports a negative or absurd token count: a negative one made every
   call's cost negative (the budget went further away with each call); one past SQLite's integers made the call
   log unwritable, so every later call failed and the run stopped on a made-up error.

Prices are set so that only completion tokens cost money ($1 a token, a token a word in the fake server), so what
the server billed is the words it answered with (``WORDS`` a call)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flowcore.evolution.history import History
from flowcore.llm.client import LLMSettings
from flowcore.workspace.store import Workspace
from tests.evolution.test_budget_recovery import PAID, REPLY, WORDS, _data, _env
from tests.helpers.fakellm import FakeLLMServer, Fault

ROOT = Path(__file__).resolve().parents[2]


class Bill:
    """The server's bill: ``WORDS`` for every call it answers (whatever usage the reply then claims)."""

    def __init__(self, reply: str | Fault = REPLY) -> None:
        self.reply, self.lock, self.calls = reply, threading.Lock(), 0

    def __call__(self, request: dict) -> str | Fault:
        with self.lock:
            self.calls += 1
        return self.reply

    @property
    def usd(self) -> float:
        with self.lock:
            return float(self.calls * WORDS)


def _evolve(db: Path, data: Path, budget: float, rounds: int = 4) -> list[str]:
    return [sys.executable, "-m", "flowcore", "evolve", "--benchmark", "gsm8k", "--rounds", str(rounds), "--data",
            str(data), "--db", str(db), "--json", "--mode", "programmatic", "--seed", "3", "--candidates", "2",
            "--concurrency", "1", "--search", "paper", "--budget", str(budget)]


def test_a_nan_price_is_refused_so_it_cannot_switch_the_budget_off(tmp_path):
    """``{"paid-model": [NaN, 1000000]}``: before, the seed's calls cost NaN, its round could not be stored (NOT NULL)
    and the run stopped on a made-up storage failure, counting $0 of the $40 billed. A price must be a finite number,
    said by name where it is given (a bad environment is then ignored by name, as any bad variable is)."""
    nan_prices = '{"' + PAID + '": [NaN, 1000000.0]}'
    with pytest.raises(ValueError, match="MERMAIDFLOW_PRICES.*paid-model.*finite"):
        LLMSettings.from_env({"MERMAIDFLOW_PRICES": nan_prices})
    for bad in (float("nan"), float("inf")):  # the Settings page and the saved settings go through here
        with pytest.raises(ValueError, match="LLM settings: prices: price of 'paid-model'.*finite"):
            LLMSettings.from_public_dict({"prices": {PAID: [bad, 1.0]}})
    budget, bill = 6 * WORDS, Bill()
    data, db = _data(tmp_path), tmp_path / "w.db"
    with FakeLLMServer(bill) as srv:
        env = {**_env(srv), "MERMAIDFLOW_PRICES": nan_prices}
        done = subprocess.run(_evolve(db, data, budget), cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
    # refused by name before anything runs: neither a NaN-priced run nor a silent structure-only one
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and "MERMAIDFLOW_PRICES" in done.stderr and "--offline" in done.stderr, done.stderr
    assert bill.usd == 0 and not History(Workspace(db)).runs()


@pytest.mark.parametrize("claimed", [-1_000_000, 2 ** 64], ids=["negative", "past-sqlite"])
def test_a_servers_false_token_count_neither_lifts_the_budget_nor_breaks_the_run(tmp_path, claimed):
    """Every reply claims ``claimed`` completion tokens while it answers 10 words. A count no call can have (below 0,
    or past 2**31) is not the server's bill: the tokens are estimated from the text as for a reply without usage.
    The $60 budget then stops the run (by the budget, said so) with the server's bill within it and counted."""
    budget = 6 * WORDS
    bill = Bill(Fault(body=REPLY, usage={"prompt_tokens": 7, "completion_tokens": claimed, "total_tokens": 7}))
    data, db = _data(tmp_path), tmp_path / "w.db"
    with FakeLLMServer(bill) as srv:
        done = subprocess.run(_evolve(db, data, budget), cwd=ROOT, env=_env(srv), capture_output=True, text=True,
                              timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    info, spent = History(Workspace(db)).run(1), History(Workspace(db)).spent(1)
    assert bill.usd <= budget, f"the server billed ${bill.usd:g} for a run with a ${budget:g} budget"
    assert info.status == "stopped" and "budget" in (info.reason or "").lower(), (info.status, info.reason)
    assert spent >= bill.usd - 1e-9, f"the run counts ${spent:g}; the server billed ${bill.usd:g}"
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT MIN(completion_tokens) FROM llm_calls WHERE run_id = 'evo-1'").fetchone()[0] >= 0


def test_the_settings_budget_per_run_holds_across_resumes_of_an_evolution_run(tmp_path):
    """No ``--budget``; the settings' "budget per run" (``MERMAIDFLOW_BUDGET_USD``, the Settings page) is $60. Before,
    each process evolving the run got a client with the whole $60 (it is the client's cap, and a client is made per
    process): the run stopped at $60, and the same command again resumed it and spent another $60, and so on. The cap
    is the run's: what is left of it after what the run has spent (the call log's count), however often it resumes."""
    budget, bill = 6 * WORDS, Bill()
    data, db = _data(tmp_path), tmp_path / "w.db"
    cmd = [c for c in _evolve(db, data, 1.0, rounds=8)]
    cmd = cmd[:cmd.index("--budget")]  # no budget of the run's own
    with FakeLLMServer(bill) as srv:
        env = {**_env(srv), "MERMAIDFLOW_BUDGET_USD": str(budget)}
        for _ in range(3):  # the run stops at its budget; the same command again resumes it
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert "Traceback" not in done.stderr, done.stderr
    info, spent = History(Workspace(db)).run(1), History(Workspace(db)).spent(1)
    assert len(History(Workspace(db)).runs()) == 1  # one run, resumed
    assert bill.usd <= budget, f"the server billed ${bill.usd:g} for a run under a ${budget:g} budget per run"
    assert info.status == "stopped" and "budget" in (info.reason or "").lower(), (info.status, info.reason)
    assert abs(spent - bill.usd) < 1e-9, f"the run counts ${spent:g}; the server billed ${bill.usd:g}"


class LockingBiller:
    """Answers the seed's calls; at the first call after them another process takes the workspace's write lock
    (its call-log rows can no longer be written); answers ``then`` more calls and holds every later one until
    ``go_on``, as test_budget_recovery.Biller does."""

    def __init__(self, db: Path, seed_calls: int, then: int) -> None:
        self.db, self.seed_calls, self.then = db, seed_calls, then
        self.lock, self.released, self.unlock = threading.Lock(), threading.Event(), threading.Event()
        self.answered, self.held, self.free = 0, 0, False
        self.locked = threading.Event()

    def _hold_the_lock(self) -> None:
        other = sqlite3.connect(self.db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's write transaction
        self.locked.set()
        self.unlock.wait(120)
        other.execute("ROLLBACK")
        other.close()

    def __call__(self, request: dict):
        with self.lock:
            if self.answered == self.seed_calls and not self.locked.is_set() and not self.free:
                threading.Thread(target=self._hold_the_lock, daemon=True).start()
                self.locked.wait(10)
            if self.free or self.answered < self.seed_calls + self.then:
                self.answered += 1
                return REPLY
            self.held += 1
        self.released.wait(120)
        return Fault(status=503, body="held until its client was gone")  # nobody is left to read it: not billed

    def go_on(self) -> None:
        with self.lock:
            self.free = True
        self.unlock.set()
        self.released.set()

    @property
    def usd(self) -> float:
        with self.lock:
            return float(self.answered * WORDS)


def test_calls_paid_while_the_workspace_is_write_locked_count_after_a_sigkill(tmp_path):
    """The seed (4 calls) is stored; then another process holds the workspace's write lock, so round 1's paid calls
    are logged only in memory, and the process is SIGKILLed 2 s later. Before, the calls went on (3 answered while
    the lock was held, the 4th then kept waiting): recorded nowhere, the resume made them again (they were not cached
    either) and the $100 budget let the server bill $130. Now no paid call is made while an earlier one is
    unrecorded (the round waits the workspace out as an outage): only the call in flight when the lock came, one
    here (at most the concurrency), is lost with the process."""
    import os
    import signal
    import time

    budget, seed_calls = 10 * WORDS, 4
    data, db = _data(tmp_path), tmp_path / "w.db"
    biller = LockingBiller(db, seed_calls, then=3)
    cmd = _evolve(db, data, budget, rounds=12)
    with FakeLLMServer(biller) as srv:
        env = {**_env(srv), "MERMAIDFLOW_DB_BUSY_TIMEOUT": "0.3"}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 60
            while biller.answered <= seed_calls and proc.poll() is None and time.monotonic() < end:
                time.sleep(0.05)
            time.sleep(2.0)  # what the process does meanwhile: before, 2 more paid calls and a 3rd held
            assert proc.poll() is None and biller.locked.is_set(), proc.stderr.read()
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        biller.go_on()
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
    info, spent = History(Workspace(db)).run(1), History(Workspace(db)).spent(1)
    lost = WORDS  # the one call in flight when the lock came
    assert biller.usd <= budget + lost, f"the server billed ${biller.usd:g} for a run with a ${budget:g} budget"
    assert info.status == "stopped" and "budget" in (info.reason or "").lower(), (info.status, info.reason)
    assert spent >= biller.usd - lost - 1e-9, f"the run counts ${spent:g}; the server billed ${biller.usd:g}"
