"""A candidate whose own calls outlast the client's timeout, on an endpoint that answers everything else: the
round is the candidate's failure, said by name, and the run goes on (it is no outage: retrying after back-offs
and then stopping with EndpointDown halted the run for good, since a resumed run draws the same cached proposal).
A timeout stays the endpoint's for the verdict (never a wrong answer); what changes is only whether the run
waits and stops, which a short probe of the endpoint decides."""

from __future__ import annotations

from flowcore.evolution.history import History
from tests.helpers.evolve import evolve, scripted
from tests.helpers.fakellm import Fault

# The optimizer's proposal asks the solver for a long answer; such a call answers after 3 s, past the client's 0.6 s.
LONG_ANSWERS = scripted("Write out every intermediate value at length.",
                        lambda: Fault(body="\\boxed{42}", delay=3.0), why="I ask the solver to show its work.")
SHORT_TIMEOUT = {"MERMAIDFLOW_TIMEOUT": "0.6"}


def test_a_candidate_whose_calls_outlast_the_timeout_fails_its_round_and_the_run_goes_on(tmp_path):
    result, ws, evo = evolve(tmp_path, LONG_ANSWERS, env=SHORT_TIMEOUT, rounds=2)
    assert result["status"] == "finished", result.get("reason")
    rounds = {r["round"]: r for r in History(ws).rounds(int(evo.run_id))}
    assert sorted(rounds) == [0, 1, 2] and rounds[0]["status"] == "ok"
    r1 = rounds[1]
    assert r1["status"] == "failed" and r1["score"] is None, r1
    assert "timed out" in r1["reason"] and "probe" in r1["reason"], r1["reason"]


def test_when_the_probe_fails_too_the_run_still_stops_as_an_outage(tmp_path):
    state = {"down": False}

    def flaky(request: dict):
        if state["down"]:
            return Fault(status=503, body="overloaded")
        reply = LONG_ANSWERS(request)
        if isinstance(reply, Fault) and reply.delay:
            state["down"] = True  # the endpoint goes down as the candidate is measured: a real outage
        return reply

    result, _, _ = evolve(tmp_path, flaky, env=SHORT_TIMEOUT, rounds=1)
    assert result["status"] != "finished", result
    assert "kept failing" in (result.get("reason") or ""), result
