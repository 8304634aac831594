"""An evolution run on four small gsm8k problems against a scripted endpoint on 127.0.0.1, for tests of what one
candidate's own calls do to a run (tests/evolution/test_slow_candidate.py, tests/tasks/test_own_time_attacks3.py).

``scripted`` is the endpoint: the optimizer always proposes the math seed with one instruction added, the judge
scores every candidate alike, and a solver call whose prompt carries that instruction gets the test's reply
(every other solver call is answered right). ``evolve`` serves it and runs the evolution loop to its end."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text

SEED = (Path(__file__).resolve().parents[2] / "assets" / "examples" / "math_seed.mmd").read_text()
SOLVE = "Solve the math problem step by step."
PROBLEMS = [("What is 40 + 2?", "42"), ("What is 6 * 7?", "42"), ("What is 10 - 3?", "7"), ("What is 2 + 2?", "4")]

Respond = Callable[[dict], Any]


class Evolved(NamedTuple):
    result: dict
    ws: Workspace
    evo: Evolution


def scripted(instruction: str, candidate: Callable[[], Any], why: str) -> Respond:
    """The endpoint: the optimizer proposes the seed with ``instruction`` before its solve prompt (``why`` is its
    rationale); a solver call carrying ``instruction`` is answered ``candidate()``, any other one right (42)."""
    proposal = SEED.replace(SOLVE, f"{instruction} {SOLVE}")
    assert proposal != SEED, "the seed's solve prompt changed: the proposal would be the seed itself"

    def respond(request: dict) -> Any:
        text = message_text(request)
        if "workflow optimizer of MermaidFlow" in text:
            return f"{why}\n```mermaid\n{proposal}```"
        if "judge of MermaidFlow" in text:
            n = len(re.findall(r"^Candidate \d+ \(", text, re.MULTILINE))
            return json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": 5, "complexity_balance": 7,
                                           "prompt_quality": 6, "rationale": 5} for i in range(n)]})
        if instruction in text and "MermaidFlow" not in text:
            return candidate()
        return "The answer is \\boxed{42}."

    return respond


def evolve(tmp_path: Path, respond: Respond, *, env: dict[str, str] | None = None, **config: Any) -> Evolved:
    """Serve ``respond`` and run an evolution (gsm8k, one round unless ``config`` says otherwise) to its end, with
    no client retries, short outage back-offs and ``env`` on top; the environment is restored afterwards."""
    data = tmp_path / "gsm8k_small.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": f"... #### {a}"}) + "\n" for q, a in PROBLEMS))
    with pytest.MonkeyPatch.context() as mp, FakeLLMServer(respond) as srv:
        for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MERMAIDFLOW_BUDGET_USD"):
            mp.delenv(k, raising=False)
        for k, v in {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-test", "MERMAIDFLOW_MAX_RETRIES": "0",
                     **(env or {})}.items():
            mp.setenv(k, v)
        ws = Workspace(tmp_path / "w.db")
        evo = Evolution(ws, EvolutionConfig(**{"benchmark": "gsm8k", "rounds": 1, "data_path": str(data), **config}))
        evo.outage_waits = (0.01, 0.02)
        return Evolved(evo.run(), ws, evo)
