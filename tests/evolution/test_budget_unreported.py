"""An evolution run's budget counts what a server did not say it billed (the LLM client charges an estimate:
tests/llm/test_unreported_usage.py). Against a real OpenAI-compatible server on 127.0.0.1 (tests/helpers/fakellm.py)
through the real ``openai`` client, replies streamed: each call's first answer breaks off after a few words with a
chunk that is not JSON (the client asks again), the second comes whole but with no usage at all. Only completion
tokens cost money ($1 a token, the fake server makes a token a word), so what the server generated is the words it
sent. Before, the broken answers were free and the whole ones cost a token a chunk: the run counted $10 of every $15
generated and the server billed $90 under a $60 budget."""

from __future__ import annotations

import subprocess
import threading

from flowcore.evolution.history import History
from flowcore.workspace.store import Workspace
from tests.evolution.test_budget_attacks import ROOT, _evolve
from tests.evolution.test_budget_recovery import REPLY, WORDS, _data, _env
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

CUT = 5  # words of a broken answer before its garbled chunk


class Generated:
    """The server's side: the first request of each prompt breaks off after ``CUT`` words, a repeat is answered
    whole without usage; ``usd`` is the words sent at $1 each."""

    def __init__(self) -> None:
        self.lock, self.seen, self.words = threading.Lock(), set(), 0

    def __call__(self, request: dict) -> Fault:
        key = message_text(request)
        with self.lock:
            first = key not in self.seen
            self.seen.add(key)
            self.words += CUT if first else WORDS
        return Fault(body=REPLY, fail_after=CUT, garbled=True) if first else Fault(body=REPLY, no_usage=True)

    @property
    def usd(self) -> float:
        with self.lock:
            return float(self.words)


def test_an_evolution_runs_budget_stops_on_costs_the_server_did_not_report(tmp_path):
    budget, server = 6 * WORDS, Generated()
    data, db = _data(tmp_path), tmp_path / "w.db"
    with FakeLLMServer(server) as srv:
        env = {**_env(srv), "MERMAIDFLOW_STREAM": "1", "MERMAIDFLOW_MAX_RETRIES": "1"}
        done = subprocess.run(_evolve(db, data, budget), cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        asked = len(srv.requests)
    assert "Traceback" not in done.stderr, done.stderr
    info, spent = History(Workspace(db)).run(1), History(Workspace(db)).spent(1)
    assert info.status == "stopped" and "budget" in (info.reason or "").lower(), (info.status, info.reason)
    assert server.usd <= budget, f"the server generated ${server.usd:g} for a run with a ${budget:g} budget"
    assert spent >= server.usd, f"the run counts ${spent:g}; the server generated ${server.usd:g}"
    rows = Workspace(db).query("SELECT estimated, cost, error FROM llm_calls WHERE run_id = 'evo-1' AND cached = 0")
    assert len(rows) == asked and all(r["estimated"] == 1 and r["cost"] > 0 for r in rows)  # every answer charged
    assert sum(1 for r in rows if r["error"]) == len(server.seen)  # the broken ones too
    # and the run's summary says its cost is an estimate, as its rows are
    from flowcore.evolution.session import curve_frame
    from flowcore.ui.story import run_summary

    hist = History(Workspace(db))
    assert hist.estimated_calls(1) == len(rows)
    cost = next((value, why) for label, value, why in run_summary(info, hist.rounds(1), curve_frame(hist.rounds(1)),
                                                                   hist.estimated_calls(1)) if label == "Cost so far")
    assert cost[0].startswith("~$") and f"for {len(rows)} paid calls;" in cost[1]
