"""More attacks on the probe path of the evolution loop (flowcore/evolution/loop.py ``_settle``/``_endpoint_answers``,
flowcore/evolution/probe.py). Each test asserts the SAFE behaviour, so it fails while the attack works. A real
OpenAI-compatible server on 127.0.0.1 (tests/helpers/fakellm.py) through the real ``openai`` client; the helpers of
test_probe_attacks.py set up the run (the candidate is marked by a phrase of its prompt)."""

from __future__ import annotations

import threading
import time

from flowcore.evolution.history import History
from flowcore.workspace.store import Workspace
from tests.evolution.test_probe_attacks import PROBE, _evolve, _problems, _right, _setup, _wrong
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text


def test_a_candidates_own_backlog_does_not_make_the_reference_run_fail_and_keep_its_inflated_score(tmp_path,
                                                                                                   monkeypatch):
    """A batching server: while a long generation runs, every normal-length answer slows past the client's timeout
    (they share the token rate), yet a one-word probe still comes at once. The candidate (10 problems: 7 right,
    3 wrong) makes its model 'think at length' on one wrong problem: that generation runs 2 s of server time even
    after the client gave up at 0.6 s. After the back-offs the probe answers, and the parent's reference run on the
    failed problem lands inside the candidate's own abandoned generation and times out: the loop calls it the
    endpoint's load and keeps the round scored on the 9 others, 7/9 = 0.78 > the seed's 0.7. Safe: the candidate is
    not scored above its honest 7/10 (its round failed by name, or scored <= 0.7)."""
    n = 10
    problems = _problems(n)
    heavy = {"active": 0}
    lock = threading.Lock()

    def answer(i: int, candidate: bool):
        if candidate and i == 9:
            time.sleep(0.3)  # prefill: the rest of the round is answered by then
            with lock:
                heavy["active"] += 1
            try:
                time.sleep(2.0)  # the long generation runs on after its client has gone
            finally:
                with lock:
                    heavy["active"] -= 1
            return _wrong(problems, i)
        slow = 1.0 if heavy["active"] else 0.0  # a normal answer shares the token rate with the long one
        text = _right(problems, i) if i < 7 else _wrong(problems, i)
        return Fault(body=text, delay=slow) if slow else text

    def probe(request: dict):
        return "OK" if PROBE in message_text(request) else None  # one word: quick even now

    data, respond, _ = _setup(tmp_path, monkeypatch, n, answer, extra=probe)
    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        ws = Workspace(tmp_path / "w.db")
        evo, result = _evolve(ws, data)
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert rounds[0]["status"] == "ok" and abs(rounds[0]["score"] - 0.7) < 1e-9, rounds[0]
    r1 = rounds.get(1)
    assert r1 is not None, f"round 1 was not stored: {result.get('reason')}"
    assert r1["status"] == "failed" or r1["score"] <= 0.7 + 1e-9, (
        f"the candidate's own backlog failed the reference run, so it kept a score of the rest: {r1['score']:.3f} "
        f"(reason {r1.get('reason')})")
