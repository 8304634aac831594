"""An evolution run's budget on Ray (attack12), on a real local Ray instance (``ray.init(num_cpus=2)``) against a
real OpenAI-compatible server on 127.0.0.1, the money counted at the server.

1. Evaluation fanned out to Ray tasks (MERMAIDFLOW_RAY): each task built its client from the settings the run
   started with, so every task had the whole budget left at the run's start and the driver never looked at what was
   spent meanwhile: a round's problems were all paid for after the budget ran out.
2. A run evolved by a detached Ray actor (``submit --ray``): the actor's client had no run budget at all (only the
   check between rounds), so the round in which the budget ran out was paid for in full.

Only the executor's completion tokens cost money ($1 a token, a token a word): every answered call bills $10."""

from __future__ import annotations

import os
import threading

import pytest

from flowcore.evolution import remote
from flowcore.evolution.history import History
from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.execution import cluster
from flowcore.llm.client import LLMSettings
from flowcore.workspace.store import Workspace
from tests.evolution.test_budget_recovery import PAID, REPLY, WORDS, _data
from tests.helpers.fakellm import FakeLLMServer

ray = pytest.importorskip("ray", reason="ray is installed by `make test` (requirements-dev.txt)")
BUDGET = 6 * WORDS  # the seed's 4 calls and 2 more


@pytest.fixture(scope="module")
def local_ray():
    mp = pytest.MonkeyPatch()
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        mp.delenv(var)
    mp.setenv(cluster.ENV, "local")
    r = cluster.connect("local", num_cpus=2)
    yield r
    r.shutdown()
    mp.undo()


class Bill:
    def __init__(self) -> None:
        self.lock, self.calls = threading.Lock(), 0

    def __call__(self, request: dict) -> str:
        with self.lock:
            self.calls += 1
        return REPLY

    @property
    def usd(self) -> float:
        with self.lock:
            return float(self.calls * WORDS)


def _config(tmp_path) -> EvolutionConfig:
    return EvolutionConfig(benchmark="gsm8k", rounds=4, data_path=str(_data(tmp_path)), mode="programmatic", seed=3,
                           candidates=2, concurrency=1, search="paper", budget=BUDGET)


def _settings(srv: FakeLLMServer) -> LLMSettings:
    return LLMSettings(base_url=srv.base_url, api_key="sk-ray", models={"executor": PAID},
                       prices={PAID: (0.0, 1_000_000.0)}, max_retries=0, concurrency=1)


def _check(ws: Workspace, run_id: int, bill: Bill) -> None:
    info, spent = History(ws).run(run_id), History(ws).spent(run_id)
    assert bill.usd > 4 * WORDS, "the run never got past its seed"
    assert bill.usd <= BUDGET, f"the server billed ${bill.usd:g} for a run with a ${BUDGET:g} budget"
    assert info.status == "stopped" and "budget" in (info.reason or "").lower(), (info.status, info.reason)
    assert abs(spent - bill.usd) < 1e-9, f"the run counts ${spent:g}; the server billed ${bill.usd:g}"


def test_ray_tasks_are_given_what_is_left_of_the_budget_when_each_is_sent(local_ray, tmp_path, monkeypatch):
    """A foreground run (its client from the environment) whose problems are Ray tasks: the seed's 4 calls ($40), then
    round 1's first 2 calls reach the $60 budget and its next problems are refused by it, not paid for."""
    bill = Bill()
    with FakeLLMServer(bill) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-ray")
        monkeypatch.setenv("MERMAIDFLOW_MODEL_EXECUTOR", PAID)
        monkeypatch.setenv("MERMAIDFLOW_PRICES", '{"' + PAID + '": [0, 1000000]}')
        monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
        ws = Workspace(tmp_path / "w.db")
        evo = Evolution(ws, _config(tmp_path))
        out = evo.run()
    assert out["status"] == "stopped", out
    _check(ws, int(evo.run_id), bill)
    ws.close_all()


def test_a_ray_actors_run_keeps_its_budget_call_by_call(local_ray, tmp_path):
    """``submit --ray``: the detached actor evolves the run with the driver's settings; its calls are capped by what
    is left of the run's budget as a foreground run's are, so round 1 stops at the budget, not after all 4 calls."""
    bill = Bill()
    with FakeLLMServer(bill) as srv:
        ws = Workspace(tmp_path / "ray.db")
        run_id, ref = remote.submit_evolution(ws, _config(tmp_path), _settings(srv))
        out = ray.get(ref, timeout=300)
    assert out["status"] == "stopped", out
    _check(ws, run_id, bill)
    ws.close_all()
