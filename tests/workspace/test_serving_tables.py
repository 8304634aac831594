"""Published versions, API keys and traces in the workspace, on SQLite and on PostgreSQL (any_ws)."""

from __future__ import annotations

import hashlib

import pytest

from flowcore.workspace import keys, published, traces

TEXT = "flowchart TD\n    PROBLEM([Problem])\n    C1[Custom]\n    RETURN([Return])\n"


def test_each_publish_adds_an_immutable_version_and_name_means_the_latest(any_ws):
    v1 = published.publish(any_ws, "solver", TEXT, "math", created_by="alice@example.com", note="first")
    v2 = published.publish(any_ws, "solver", TEXT + "%% two\n", "math", created_by="alice@example.com", run_id=3, round=7,
                           validation_score=0.5, test_score=0.4)
    assert (v1.model_id, v2.model_id) == ("solver@v1", "solver@v2")
    assert published.resolve(any_ws, "solver") == v2
    again = published.resolve(any_ws, "solver@v1")
    assert again == v1 and again.text == TEXT and again.created_by == "alice@example.com" and again.note == "first"
    assert (v2.run_id, v2.round, v2.validation_score, v2.test_score) == (3, 7, 0.5, 0.4)
    published.publish(any_ws, "other", TEXT, "a-saved-task", created_by="")  # a task name stays a string
    assert published.resolve(any_ws, "other").task == "a-saved-task"
    assert published.resolve(any_ws, "other").created_by == "local"
    assert published.model_ids(any_ws) == ["other", "other@v1", "solver", "solver@v2", "solver@v1"]
    assert published.resolve(any_ws, "solver@v1") == v1  # v1 unchanged after later publishes


@pytest.mark.parametrize("model", ["nope", "solver@v9", "solver@v0", "@v1", "", "solver@vx"])
def test_a_model_id_that_names_nothing_is_refused(any_ws, model):
    published.publish(any_ws, "solver", TEXT, "math", created_by="a")
    with pytest.raises(published.PublishError):
        published.resolve(any_ws, model)


def test_publish_refuses_a_bad_name_or_an_empty_text(any_ws):
    with pytest.raises(published.PublishError, match="not allowed"):
        published.publish(any_ws, "bad@name", TEXT, "math", created_by="a")
    with pytest.raises(published.PublishError, match="empty"):
        published.publish(any_ws, "ok", "  ", "math", created_by="a")


def test_a_key_is_shown_once_stored_as_its_hash_and_verifies_until_revoked(any_ws):
    rec, key = keys.create_key(any_ws, "ci", "alice@example.com")
    assert key.startswith(f"mf_{rec.id}_") and len(key) == 3 + 8 + 1 + 43
    stored = [dict(r) for r in any_ws.query("SELECT * FROM api_keys")]
    assert stored[0]["hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert key not in repr(stored)  # only the hash is kept
    assert keys.verify_key(any_ws, key).owner == "alice@example.com"
    assert keys.verify_key(any_ws, key[:-1] + ("A" if key[-1] != "A" else "B")) is None  # wrong secret
    assert keys.verify_key(any_ws, None) is None and keys.verify_key(any_ws, "Bearer x") is None
    assert keys.verify_key(any_ws, "mf_00000000_" + "a" * 43) is None  # unknown id
    keys.revoke_key(any_ws, "ci")
    assert keys.verify_key(any_ws, key) is None
    [listed] = keys.list_keys(any_ws)
    assert listed.revoked is not None and not listed.active and listed.last_used is not None


def test_revoking_by_a_name_two_active_keys_share_asks_for_the_id(any_ws):
    a, _ = keys.create_key(any_ws, "shared", "a")
    keys.create_key(any_ws, "shared", "b")
    with pytest.raises(keys.KeyProblem, match="2 active keys"):
        keys.revoke_key(any_ws, "shared")
    assert keys.revoke_key(any_ws, a.id).revoked is not None
    with pytest.raises(keys.KeyProblem, match="no key"):
        keys.revoke_key(any_ws, "never-made")
    with pytest.raises(keys.KeyProblem, match="not allowed"):
        keys.create_key(any_ws, "", "a")


def test_a_trace_is_stored_with_its_spans_and_listed_by_workflow_and_version(any_ws):
    spans = [traces.Span("C1", "CustomOp", "m", 10, 2, 0.001, 1, 0.0, 0.5, None, False, "out"),
             traces.Span("C2", "ScEnsembleOp", None, 0, 0, 0.0, 0, 0.5, 0.1, "node C2 failed: boom")]
    t = traces.Trace("a" * 32, 100.0, "api", "solver", 2, "alice", "error", "node C2 failed: boom", 0.6, 0.001, 1,
                     10, 2, "problem", None, spans)
    traces.save_trace(any_ws, t)
    traces.save_trace(any_ws, traces.Trace("b" * 32, 200.0, "run-page", None, None, "local", "ok"))
    got = traces.load_trace(any_ws, "a" * 32)
    assert got == t
    assert [x.id for x in traces.list_traces(any_ws)] == ["b" * 32, "a" * 32]
    assert [x.id for x in traces.list_traces(any_ws, workflow="solver", version=2)] == ["a" * 32]
    assert traces.list_traces(any_ws, workflow="solver", version=1) == []
    assert traces.traced_workflows(any_ws) == [("solver", 2)]
    assert traces.load_trace(any_ws, "c" * 32) is None
    with pytest.raises(ValueError, match="status"):
        traces.save_trace(any_ws, traces.Trace("d" * 32, 1.0, "api", None, None, "x", "weird"))


def test_who_made_each_run_round_comparison_and_saved_version_is_kept(any_ws):
    from flowcore.evaluation.compare import Comparison, list_comparisons, load_comparison, save_comparison
    from flowcore.evolution.history import History
    from flowcore.evolution.session import run_label, runs_overview
    from flowcore.workspace import library

    h = History(any_ws)
    run = h.create_run({"rounds": 1}, "k", TEXT, "gsm8k", "math", True, created_by="carol@example.com")
    old = h.create_run({"rounds": 1}, "k2", TEXT, "gsm8k", "math", True)  # a caller that says nothing: local
    h.add_round(run, {"round": 0, "status": "structure-only", "workflow_text": TEXT})
    h.add_round(run, {"round": 1, "status": "structure-only", "workflow_text": TEXT, "created_by": "dave"})
    assert (h.run(run).created_by, h.run(old).created_by) == ("carol@example.com", "local")
    assert [r["created_by"] for r in h.rounds(run)] == ["carol@example.com", "dave"]
    overview = {o["id"]: o for o in runs_overview(any_ws)}
    assert run_label(overview[run]).endswith("by carol@example.com")
    cid = save_comparison(any_ws, Comparison("gsm8k", {}, 1, []), created_by="erin")
    assert load_comparison(any_ws, cid).created_by == "erin"
    assert [c.created_by for c in list_comparisons(any_ws)] == ["erin"]
    library.save_workflow(any_ws, "mine", TEXT, "math", created_by="frank")
    library.save_workflow(any_ws, "mine", TEXT + "%% v2\n", "math")
    assert library.authors(any_ws, "mine") == {1: "frank", 2: "local"}
