"""History buffer: the sampling formula against a hand computation, the top-k pool, storage and experience."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from flowcore.evolution.history import History, RunBuffer, sample_parents, selection_probabilities, top_k
from flowcore.workspace.store import Workspace


def test_selection_probabilities_match_a_hand_computation():
    # scores 80 %, 70 %, 50 %; alpha 0.2, lambda 0.3:
    # softmax weights e^0, e^-2, e^-6 = 1, 0.135335, 0.002479 (sum 1.137814)
    # p_i = 0.3/3 + 0.7 * w_i / sum = 0.715215, 0.183260, 0.101525
    p = selection_probabilities([80.0, 70.0, 50.0], alpha=0.2, lam=0.3)
    assert p == pytest.approx([0.715215, 0.183260, 0.101525], abs=1e-6)
    assert sum(p) == pytest.approx(1.0)
    assert selection_probabilities([60.0, 60.0]) == pytest.approx([0.5, 0.5])
    # lambda = 1 is uniform whatever the scores; alpha = 0 too
    assert selection_probabilities([90.0, 10.0, 50.0], lam=1.0) == pytest.approx([1 / 3] * 3)
    assert selection_probabilities([90.0, 10.0], alpha=0.0) == pytest.approx([0.5, 0.5])
    assert selection_probabilities([]) == []


def _row(rnd: int, score: float | None, status: str = "ok") -> dict:
    return {"round": rnd, "score": score, "status": status}


def test_top_k_keeps_the_seed_and_skips_failed_rounds():
    rows = [_row(0, 0.10), _row(1, 0.90), _row(2, 0.80), _row(3, None, "failed"), _row(4, 0.70), _row(5, 0.85)]
    pool = top_k(rows, 4)
    assert [r["round"] for r in pool] == [1, 5, 2, 0]  # the seed replaces the 4th best (round 4)
    assert [r["round"] for r in top_k(rows, 2)] == [1, 0]
    # offline: no scores, the newest rounds (and the seed)
    offline = [_row(i, None, "structure-only") for i in range(6)]
    assert [r["round"] for r in top_k(offline, 3)] == [5, 4, 0]


def test_sample_parents_distinct_and_follow_the_probabilities():
    rows = [_row(0, 0.40), _row(1, 0.90), _row(2, 0.90)]
    parents, pool, probs = sample_parents(rows, random.Random(0), n=2)
    assert len({p["round"] for p in parents}) == 2
    # hand: weights 1, 1, e^(0.2*(40-90)) = e^-10; p = 0.1 + 0.7 * w / sum
    assert probs == pytest.approx([0.449992, 0.449992, 0.100016], abs=1e-6)
    rng = random.Random(1)
    firsts = Counter(sample_parents(rows, rng, n=1)[0][0]["round"] for _ in range(4000))
    by_round = {r["round"]: p for r, p in zip(pool, probs, strict=True)}
    for rnd, count in firsts.items():
        assert count / 4000 == pytest.approx(by_round[rnd], abs=0.03)
    only_seed = sample_parents([_row(0, None, "structure-only")], random.Random(0), n=2)
    assert [p["round"] for p in only_seed[0]] == [0] and only_seed[2] == [1.0]


@pytest.fixture
def hist(tmp_path) -> History:
    return History(Workspace(tmp_path / "h.db"))


def _add(h: History, run: int, rnd: int, score: float | None, parents: list[int], op: str,
         status: str = "ok", **kw) -> None:
    h.add_round(run, {"round": rnd, "workflow_text": f"flowchart TD\n%% {rnd}\n", "parents": parents,
                      "operator": op, "detail": f"{op} #{rnd}", "score": score, "status": status, "cost": 0.01,
                      **kw})


def test_runs_rounds_experience_and_operator_record(hist):
    run = hist.create_run({"benchmark": "gsm8k"}, "key1", "flowchart TD\n", "gsm8k", "math", offline=False)
    assert hist.last_round(run) == -1
    _add(hist, run, 0, 0.50, [], "seed")
    _add(hist, run, 1, 0.60, [0], "insert", candidates=[{"text": "x", "scores": {"total": 30}}])
    _add(hist, run, 2, 0.40, [0], "delete")
    _add(hist, run, 3, None, [1, 0], "crossover", status="failed", reason="LLMError: boom")
    _add(hist, run, 4, 0.70, [1], "insert")
    assert hist.last_round(run) == 4
    rows = hist.rounds(run)
    assert rows[1]["candidates"] == [{"text": "x", "scores": {"total": 30}}] and rows[1]["parents"] == [0]
    exp0 = hist.experience(run, 0)
    assert [(e["round"], e["operator"], e["helped"]) for e in exp0] == [(1, "insert", True), (2, "delete", False),
                                                                         (3, "crossover", None)]
    assert exp0[0]["delta"] == pytest.approx(0.10) and exp0[2]["reason"] == "LLMError: boom"
    assert [e["round"] for e in hist.experience(run, 1)] == [3, 4]
    record = hist.operator_record(run)
    assert record["insert"] == pytest.approx([0.10, 0.10]) and record["delete"] == pytest.approx([-0.10])
    assert record["crossover"] == [-1.0]
    hist.pin(run, 4)
    hist.set_note(run, 4, "best so far")
    r4 = hist.get_round(run, 4)
    assert r4["pinned"] is True and r4["note"] == "best so far"
    assert hist.find_unfinished("key1") == run
    hist.set_status(run, "finished")
    assert hist.find_unfinished("key1") is None and hist.run(run).status == "finished"


def test_a_bad_round_is_not_half_written(hist):
    run = hist.create_run({}, "k", "flowchart TD\n", "gsm8k", "math", offline=True)
    with pytest.raises(ValueError, match="status"):
        _add(hist, run, 0, None, [], "seed", status="weird")
    _add(hist, run, 0, None, [], "seed", status="structure-only")
    with pytest.raises(Exception, match="UNIQUE|PRIMARY"):
        _add(hist, run, 0, None, [], "seed", status="structure-only")  # a round is written once
    assert len(hist.rounds(run)) == 1 and hist.run(run).offline is True
    with pytest.raises(KeyError, match="no evolution run 99"):
        hist.run(99)


def test_the_cost_of_an_unstored_round_is_spent_until_the_next_stored_round_carries_it_once(hist):
    run = hist.create_run({}, "k", "flowchart TD\n", "gsm8k", "math", offline=False)
    _add(hist, run, 0, 0.5, [], "seed")
    hist.keep_unstored(run, 0.25)  # round 1 paid for, then the run stopped before storing it
    hist.keep_unstored(run, 0.125)  # and once more on a resume that stopped again
    buf = RunBuffer(hist, run)
    assert hist.spent(run) == pytest.approx(0.385) and buf.spent == pytest.approx(0.385)
    rec = {"round": 1, "workflow_text": "flowchart TD\n%% 1\n", "parents": [0], "operator": "insert",
           "score": 0.6, "status": "ok", "cost": 0.01}
    hist.add_round(run, rec)
    assert rec["cost"] == pytest.approx(0.385) and hist.get_round(run, 1)["cost"] == pytest.approx(0.385)
    buf.add(rec)
    assert hist.unstored(run) == 0 and hist.spent(run) == pytest.approx(0.395) and buf.spent == pytest.approx(0.395)
    _add(hist, run, 2, 0.7, [1], "insert")  # charged once: the next round carries nothing
    assert hist.get_round(run, 2)["cost"] == pytest.approx(0.01) and hist.spent(run) == pytest.approx(0.405)


def test_a_stored_number_that_is_not_finite_is_read_as_none_by_every_reader(tmp_path):
    """A shared workspace's row can hold NaN or ±inf (a team member writes what they like): it is not a best
    score, a top-k parent, a curve point, an outcome or a cost of 'nan' (found by the chart attack, attack16)."""
    from flowcore.evolution.outcome import outcome_of

    ws = Workspace(tmp_path / "w.db")
    h = History(ws)
    run = h.create_run({"rounds": 3}, "k", "flowchart TD\n", "gsm8k", "math", offline=False)
    for rnd, score in enumerate([0.5, 0.6, 0.7, 0.4]):
        h.add_round(run, {"round": rnd, "status": "ok", "score": score, "cost": 0.01, "parents": [0] if rnd else [],
                          "operator": "x" if rnd else "seed", "workflow_text": f"flowchart TD\n  %% {rnd}\n"})
    with ws.transaction() as c:  # what another member's client could write straight into the table
        c.execute("UPDATE evo_rounds SET score = ?, ci_low = ? WHERE round = 1", (float("inf"), float("-inf")))
        c.execute("UPDATE evo_rounds SET score = ? WHERE round = 2", (float("-inf"),))
    rows = h.rounds(run)
    assert [r["score"] for r in rows] == [0.5, None, None, 0.4] and rows[1]["ci_low"] is None
    assert h.get_round(run, 1)["score"] is None and h.summary_columns(run)["score"] == [0.5, None, None, 0.4]
    buf = RunBuffer(h, run)
    assert buf.best_score() == 0.5 and [r["round"] for r in buf.top_k(2)] == [0, 3]
    found = outcome_of(rows, "paper")
    assert found is not None and found.round == 0 and found.validation == 0.5


def test_a_rounds_cost_says_estimate_when_its_calls_had_no_usage(endpoint, tmp_path):
    """History's per-round cost: '~' (and why, on hover) for a round some of whose paid calls came back without
    token counts, '$' alone for the rest; the rounds' counts add up to the run's."""
    import pandas as pd

    from flowcore.evolution.loop import Evolution, EvolutionConfig
    from flowcore.ui import history as hv
    from tests.helpers.fakellm import Fault

    armed: list[bool] = []

    def respond(request: dict):
        return Fault(body="It is \\boxed{3}.", no_usage=True) if armed else "It is \\boxed{3}."

    endpoint(respond)
    ws = Workspace(tmp_path / "w.db")
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=3, seed=4, limit=2, candidates=2, mode="programmatic")
    out = Evolution(ws, cfg, progress=lambda rec: rec["round"] == 1 and armed.append(True)).run()
    assert out["status"] == "finished", out
    h = History(ws)
    by_round = h.estimated_by_round(out["run_id"])
    assert set(by_round) == {2, 3} and all(n > 0 for n in by_round.values())  # from round 2 on, none reported
    assert sum(by_round.values()) == h.estimated_calls(out["run_id"])
    rows = h.rounds(out["run_id"])
    table = hv.for_people(pd.DataFrame({"round": [r["round"] for r in rows], "cost": [r["cost"] for r in rows]}),
                          by_round)
    assert [c[0] for c in table["cost"]] == ["$", "$", "~", "~"]
    _, cost, why = hv.round_metrics(rows[2], None, by_round[2])[2]
    assert cost.startswith("~$") and f"for {by_round[2]} paid call" in why
    assert hv.round_metrics(rows[1], None, by_round.get(1, 0))[2][1].startswith("$")
