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
    assert "Traceback" not in done.stderr, done.stderr
    info, spent = History(Workspace(db)).run(1), History(Workspace(db)).spent(1)
    assert bill.usd <= budget, f"the server billed ${bill.usd:g} for a run with a ${budget:g} budget (NaN prices)"
    assert spent >= bill.usd, f"the run counts ${spent:g}; the server billed ${bill.usd:g} ({info.reason})"
    assert "NOT NULL" not in (info.reason or ""), info.reason  # a NaN cost is stored as NULL: a made-up storage stop


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
