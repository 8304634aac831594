"""A new user's bad input and second looks on Flow and the shared-workspace commands: duplicate ids in an AOV
file, a copy of an execution that another tab or process moved on, a decision taken twice, workspaces that
cannot be reached or do not exist. The command line runs as a user runs it (a subprocess): never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.aov import AOVGraph, Execution, ManualAgent, run_sync
from flowcore.aov import session as S
from flowcore.aov.store import ExecutionConflict, ExecutionStore, load_execution, save_execution
from flowcore.evolution.ops import OPERATORS
from flowcore.workspace.store import Workspace

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "assets" / "aov" / "report.json"
BOTH_FAIL = {"outline": "ERROR: no outline", "sources": "ERROR: no sources"}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    p = subprocess.run([sys.executable, "-m", "flowcore", *args], cwd=ROOT, env={**base, **(env or {})},
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p


# ---- AOV files ----------------------------------------------------------------------------------

def test_a_subtask_id_written_twice_is_an_error_with_both_places_not_a_vanished_subtask(tmp_path):
    f = tmp_path / "dup.json"
    f.write_text('{"goal": "x", "subtasks": {\n'
                 '  "a": {"subtask_requirement": "first a", "agent": "w"},\n'
                 '  "b": {"subtask_requirement": "b", "agent": "w", "parents": ["a"]},\n'
                 '  "a": {"subtask_requirement": "second a", "agent": "w"}}}')
    for command in ("run", "metrics", "render"):
        p = cli("aov", command, str(f))
        assert p.returncode == 1 and p.stdout == ""
        assert f"{f}: key 'a' appears twice in one object (line 2, column 3 and line 4, column 3)" in p.stderr
    f.write_text('{"goal": "x", "subtasks": {"a": {"subtask_requirement": "a", "agent": "w",\n'
                 '  "parents": [], "agent": "v"}}}')  # a field twice in one record
    assert "key 'agent' appears twice in one object (line 1, column 62 and line 2, column 18)" in \
        cli("aov", "metrics", str(f)).stderr


def test_the_page_drops_a_pasted_graph_with_a_duplicate_id_and_says_where():
    c = S.candidates_from_texts([("pasted JSON", '{"subtasks": {"a": {"subtask_requirement": "a", "agent": "w"},'
                                                 ' "a": {"subtask_requirement": "b", "agent": "w"}}}')])[0]
    assert c.candidate.graph is None
    assert "key 'a' appears twice in one object (line 1, column 15 and line 1, column 64)" in c.candidate.error


# ---- one execution, two copies ------------------------------------------------------------------

def paused(ws: Workspace) -> Execution:
    """report.json stepped by hand with outline and sources failing: two decisions queued, saved."""
    ex = Execution(AOVGraph.load(REPORT), ManualAgent(BOTH_FAIL), mode="interactive", schedule="steps")
    save_execution(ws, ex)
    run_sync(ex.step())
    assert [rs.failed for rs in ex.queue] == ["outline", "sources"]
    return ex


def test_a_stale_copy_is_refused_and_never_mixed_into_the_saved_execution(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    eid = paused(ws).id
    a, b = load_execution(ws, eid), load_execution(ws, eid)  # two tabs, or the page and `aov resume`
    a.accept(0)  # add outline_prep before outline
    with pytest.raises(ExecutionConflict, match=f"execution {eid} was changed elsewhere"):
        b.accept(2)  # B still shows outline's proposals: its graph must not replace A's
    saved = load_execution(ws, eid)
    assert "outline_prep" in saved.graph.subtasks  # A's repair is in the graph ...
    repairs = [e["payload"]["summary"] for e in saved.events if e["kind"] == "repair"]
    assert len(repairs) == 1 and repairs[0].startswith("add outline_prep")  # ... and the log says just that
    assert [rs.failed for rs in saved.queue] == ["sources"]


def test_resume_from_a_second_process_cannot_overwrite_and_says_so(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    ex = paused(ws)
    stale = load_execution(ws, ex.id)
    p = cli("aov", "resume", ex.id, "--db", str(tmp_path / "ws.db"), "--accept", "0", "--schedule", "steps")
    assert p.returncode == 1 and "await a decision" in p.stderr  # sources' proposals now
    with pytest.raises(ExecutionConflict):
        stale.reject()
    assert ExecutionStore(ws).last_seq(ex.id) == load_execution(ws, ex.id).saved_seq


def actions(ws: Workspace, ex: Execution) -> S.Actions:
    state = {"aov_ex": ex, "aov_agents": "manual", "aov_inspector": "rules", "aov_repairs": "rules"}
    return S.Actions(state, ws, lambda: None)


def test_accepting_the_same_decision_twice_applies_it_once(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    act = actions(ws, paused(ws))
    token = S.decision_token(act.s["aov_ex"])
    act.accept(1, None, token)  # the first click: edit outline
    assert act.s.pop("aov_flash")[0] == "success"
    act.accept(1, None, token)  # the second click of a double click, drawn for outline's proposals
    kind, msg = act.s.pop("aov_flash")
    assert kind == "warning" and "already taken" in msg and "'sources'" in msg
    ex = act.s["aov_ex"]
    assert [e["payload"]["subtask"] for e in ex.events if e["kind"] == "repair"] == ["outline"]
    assert ex.pending_failure.failed == "sources" and ex.graph.subtasks["sources"].agent == "researcher"
    act.reject(token)  # a stale Reject all is refused the same way
    assert "already taken" in act.s.pop("aov_flash")[1] and ex.pending_failure.failed == "sources"


@pytest.mark.usefixtures("app_env")
def test_a_second_tab_sees_the_current_state_and_its_stale_accept_applies_nothing(tmp_path):
    ws = Workspace(os.environ["MERMAIDFLOW_DB"])
    eid = paused(ws).id
    tabs = []
    for _ in range(2):
        at = AppTest.from_file("../../pages/aov.py", default_timeout=60).run()
        at.button(key="aov_reopen").click().run()
        assert "Subtask `outline` failed" in at.error[0].value
        tabs.append(at)
    a, b = tabs
    a.button(key="aov_accept_0").click().run()  # tab A: add outline_prep
    assert "Subtask `sources` failed" in a.error[0].value
    b.button(key="aov_accept_2").click().run()  # tab B clicks on outline's (stale) third proposal
    assert not b.exception
    assert any("already taken" in w.value for w in b.warning)
    assert "Subtask `sources` failed" in b.error[0].value  # B now shows the current decision
    saved = load_execution(ws, eid)
    assert [e["payload"]["subtask"] for e in saved.events if e["kind"] == "repair"] == ["outline"]
    assert "outline_prep" in saved.graph.subtasks and saved.pending_failure.failed == "sources"
    assert "outline_prep" in list(b.dataframe[0].value["id"])  # what A did is on B's screen


# ---- workspaces -----------------------------------------------------------------------------------

def test_aov_on_an_unreachable_postgresql_workspace_is_a_usage_error_without_the_password(tmp_path):
    url = "postgresql://me:hunter2@127.0.0.1:9/none"
    for args in (["run", str(REPORT), "--db", url], ["resume", "abc", "--db", url]):
        p = cli("aov", *args)
        assert p.returncode == 2, p.stderr
        assert "cannot connect to the PostgreSQL workspace postgresql://me:***@127.0.0.1:9/none" in p.stderr
        assert "hunter2" not in p.stderr + p.stdout and "no LLM configured" not in p.stderr
    (tmp_path / "notes.txt").write_text("not a database")
    p = cli("aov", "run", str(REPORT), "--db", str(tmp_path / "notes.txt"))
    assert p.returncode == 2 and "notes.txt: not usable as the workspace database (file is not a" in p.stderr


def test_worker_and_queue_on_a_missing_workspace_say_so_instead_of_waiting_on_a_new_one(tmp_path):
    typo = tmp_path / "typo" / "ws.db"
    for args in (["worker", "--db", str(typo)], ["queue", "--db", str(typo)], ["worker", "--once"]):
        p = cli(*args, env={"MERMAIDFLOW_DB": str(typo)} if "--db" not in args else None)
        assert p.returncode == 2 and f"{typo}: no such workspace database" in p.stderr, p.stderr
    assert not typo.parent.exists()  # nothing created on the way
    db = str(tmp_path / "ws.db")
    assert cli("submit", "--benchmark", "gsm8k", "--rounds", "1", "--offline", "--db", db).returncode == 0
    p = cli("worker", "--db", db, "--poll", "0")  # would spin on the CPU
    assert p.returncode == 2 and "--poll: must be a number of seconds > 0, got 0" in p.stderr
    p = cli("submit", "--benchmark", "gsm8k", "--rounds", "1", "--operators", "insrt", "--db", db)
    assert p.returncode == 2 and p.stderr.strip() == (
        f"error: --operators: unknown operator(s) insrt; known: {', '.join(OPERATORS)}")
    assert json.loads(cli("queue", "--db", db, "--json").stdout)["items"][0]["status"] == "queued"


# ---- a reload ---------------------------------------------------------------------------------------

def test_a_new_session_of_the_same_browser_reopens_its_execution_with_the_settings_it_ran_with(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    first = {"aov_agents": "echo", "aov_inspector": "rules", "aov_repairs": "rules", "aov_refine": "off",
             "aov_mode": "auto", "aov_k": 2, "aov_max_repairs": 1}
    act = S.Actions(dict(first), ws, lambda: None)
    act.start(AOVGraph.load(REPORT))
    act.remember("b" * 32)
    eid = act.s["aov_ex"].id
    again = S.Actions({}, ws, lambda: None)  # the reload: a new session, the radios at their defaults
    assert again.s["aov_k"] == 3 and "aov_agents" not in again.s
    again.open_remembered("b" * 32)
    assert again.s["aov_ex"].id == eid and "Reopened the execution “Write a four-page report" in again.s["aov_flash"][1]
    assert eid not in again.s["aov_flash"][1]  # named by its goal and start, not its id
    assert {k: again.s[k] for k in first} == first  # what it ran with, not the page's defaults
    assert type(again.s["aov_ex"].agent).__name__ == "EchoAgent"
    other = S.Actions({}, ws, lambda: None)
    other.open_remembered("c" * 32)  # another browser had nothing open
    assert "aov_ex" not in other.s


def test_the_same_accept_typed_twice_names_the_decision_awaited_now_and_applies_nothing(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    eid, db = paused(ws).id, str(tmp_path / "ws.db")
    args = ("aov", "resume", eid, "--db", db, "--schedule", "steps", "--for", "outline", "--accept", "1")
    first = cli(*args)
    assert "accepted proposal 1 for outline" in first.stderr
    assert f"`aov resume {eid} --db ... --for sources --accept N` or --reject" in first.stderr
    second = cli(*args)  # up-arrow, enter
    assert second.returncode == 1 and second.stderr.strip().splitlines()[-1] == (
        f"error: the decision awaited now is about 'sources', not 'outline' (that one was already taken): nothing "
        f"was applied; read the proposals with `aov resume {eid} --db ...` first")
    saved = load_execution(ws, eid)
    assert [e["payload"]["subtask"] for e in saved.events if e["kind"] == "repair"] == ["outline"]


def test_a_missing_or_empty_folder_of_task_files_is_an_error_not_an_empty_list(tmp_path):
    for args in (["tasks", "--dir", str(tmp_path / "nope")], ["accept", "gobang", str(tmp_path),
                                                               "--tasks-dir", str(tmp_path / "nope")]):
        p = cli("aov", *args)
        assert p.returncode == 1 and f"{tmp_path / 'nope'}: no such folder of task files" in p.stderr
    p = cli("aov", "tasks", "--dir", str(tmp_path))
    assert p.returncode == 1 and f"{tmp_path}: no task files (*.json) in this folder" in p.stderr


def test_a_mistyped_subtask_id_in_the_manual_outputs_is_named_before_the_run(tmp_path):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"outlne": "1. Intro 2. End", "sources": "five sources"}))
    p = cli("aov", "run", str(REPORT), "--manual", str(outputs), "--schedule", "steps")
    assert p.stderr.splitlines()[0] == f"note: {outputs}: no subtask 'outlne' in the graph (did you mean 'outline'?)"


def test_candidates_survive_the_page_state_round_trip():
    """The AOV page's candidates as JSON (kept per browser for a reload) and back: the same graphs and metrics,
    a dropped one with its error; an entry that no longer reads is left out."""
    import json

    named = S.named_texts(S.examples()) + [("broken", "{not json")]
    cands = S.candidates_from_texts(named)
    state = json.loads(json.dumps(S.candidates_state(cands)))
    back = S.candidates_from_state(state + [{"label": "gone", "graph": "{}"}, "junk"])
    assert [c.label for c in back] == [c.label for c in cands]
    assert [c.candidate.metrics for c in back] == [c.candidate.metrics for c in cands]
    assert back[-1].candidate.graph is None and "not valid JSON" in back[-1].candidate.error
    assert S.candidates_from_state("nonsense") == []
