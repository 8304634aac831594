"""The storage suite: every workspace table through its own module's API, run on SQLite AND on a real
PostgreSQL server (``any_ws`` is parametrised over both backends)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from flowcore.aov.model import AOVGraph
from flowcore.evaluation import store as eval_store
from flowcore.evolution.history import History
from flowcore.llm.client import LLM, LLMSettings
from flowcore.workspace import library
from flowcore.workspace import settings as settings_store
from flowcore.workspace.pg import translate, translate_ddl
from flowcore.workspace.store import IntegrityError, OperationalError, Workspace
from tests.helpers.fakellm import FakeLLMServer

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "aov"
SEED = "flowchart TD\n    Start([Start]) --> G1[Generate]\n    G1 --> End([End])\n"


def test_lastrowid_rows_and_placeholders(any_ws):
    any_ws.ensure_schema("t", "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY AUTOINCREMENT, "
                              "name TEXT, score REAL, flag INTEGER NOT NULL DEFAULT 0, blob BLOB)")
    with any_ws.transaction() as c:
        a = c.execute("INSERT INTO t(name, score, flag) VALUES (?,?,?)", ("50% done?", 0.1234567890123, True))
        b = c.execute("INSERT INTO t(name, score) VALUES (:n, :s)", {"n": "it's", "s": None})
    assert (a.lastrowid, b.lastrowid) == (1, 2)
    rows = any_ws.query("SELECT * FROM t WHERE name LIKE '%done?' OR name = ?", ("it's",))
    assert [r["id"] for r in rows] == [1, 2]
    assert rows[0]["score"] == 0.1234567890123  # full double precision on both backends
    assert rows[0]["flag"] == 1 and rows[1]["flag"] == 0  # booleans stored as numbers
    assert dict(rows[0])["name"] == "50% done?" and rows[0][1] == "50% done?" and list(rows[0].keys())[0] == "id"
    assert any_ws.query("SELECT AVG(flag) AS a, SUM(flag) AS s FROM t")[0]["a"] == 0.5
    # SQLite's NULL placement, and case-insensitive LIKE, on both backends
    assert [r["id"] for r in any_ws.query("SELECT id FROM t ORDER BY score")] == [2, 1]
    assert [r["id"] for r in any_ws.query("SELECT id FROM t ORDER BY score DESC")] == [1, 2]
    assert [r["id"] for r in any_ws.query("SELECT id FROM t WHERE name LIKE 'IT%'")] == [2]


def test_insert_or_replace_and_ignore(any_ws):
    any_ws.ensure_schema("kv", "CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v TEXT, n INTEGER)")
    for v in ("a", "b"):
        with any_ws.transaction() as c:
            c.execute("INSERT OR REPLACE INTO kv(k, v, n) VALUES (?,?,?)", ("x", v, 1))
    with any_ws.transaction() as c:
        c.execute("INSERT OR IGNORE INTO kv(k, v, n) VALUES (?,?,?)", ("x", "ignored", 2))
    assert [tuple(r) for r in any_ws.query("SELECT k, v, n FROM kv")] == [("x", "b", 1)]


def test_errors_are_sqlite_types_and_roll_back(any_ws):
    any_ws.ensure_schema("u", "CREATE TABLE IF NOT EXISTS u(k TEXT PRIMARY KEY)")
    with pytest.raises(IntegrityError):
        with any_ws.transaction() as c:
            c.execute("INSERT INTO u(k) VALUES (?)", ("a",))
            c.execute("INSERT INTO u(k) VALUES (?)", ("a",))
    assert any_ws.query("SELECT COUNT(*) AS n FROM u")[0]["n"] == 0  # the first insert was rolled back
    with pytest.raises(OperationalError):
        any_ws.query("SELECT * FROM no_such_table")
    with any_ws.transaction() as c:  # the connection is usable after both errors
        c.execute("INSERT INTO u(k) VALUES (?)", ("b",))
    assert any_ws.tables() == ["u"] and any_ws.columns("u") == ["k"]


def test_schema_recorded_once_and_columns_added(any_ws, tmp_path):
    any_ws.ensure_schema("m", "CREATE TABLE IF NOT EXISTS m(id INTEGER PRIMARY KEY, a TEXT)")
    digest = any_ws.query("SELECT ddl_hash FROM mf_schema WHERE name = 'm'")[0]["ddl_hash"]
    any_ws.add_columns("m", {"b": "REAL", "c": "TEXT NOT NULL DEFAULT 'x'"})
    any_ws.add_columns("m", {"b": "REAL"})  # idempotent
    with any_ws.transaction() as c:
        c.execute("INSERT INTO m(a, b) VALUES (?, ?)", ("one", 1.5))
    assert [tuple(r) for r in any_ws.query("SELECT a, b, c FROM m")] == [("one", 1.5, "x")]
    again = Workspace(any_ws.url or any_ws.path)  # another process/restart: same DDL is skipped
    again.ensure_schema("m", "CREATE TABLE IF NOT EXISTS m(id INTEGER PRIMARY KEY, a TEXT)")
    assert again.query("SELECT ddl_hash FROM mf_schema WHERE name = 'm'")[0]["ddl_hash"] == digest
    again.close_all()


def test_a_column_another_connection_added_meanwhile_is_not_added_twice(any_ws, monkeypatch):
    """Two connections saw the column missing (an evolution's thread and the page that reads its cost); the second
    to add it failed with "duplicate column name: estimated" on the Evolve page."""
    any_ws.ensure_schema("m2", "CREATE TABLE IF NOT EXISTS m2(id INTEGER PRIMARY KEY)")
    before = any_ws.columns("m2")
    other = Workspace(any_ws.url or any_ws.path)
    other.add_columns("m2", {"late": "INTEGER NOT NULL DEFAULT 0"})  # meanwhile, on another connection
    monkeypatch.setattr(any_ws, "columns", lambda table: before)  # this one's look came before that
    any_ws.add_columns("m2", {"late": "INTEGER NOT NULL DEFAULT 0"})
    monkeypatch.undo()
    assert any_ws.columns("m2").count("late") == 1
    other.close_all()


def test_library_versions(any_ws):
    assert library.save_workflow(any_ws, "w1", SEED, "math") == 1
    assert library.save_workflow(any_ws, "w1", SEED.replace("Generate", "Gen"), "math") == 2
    library.save_workflow(any_ws, "w2", SEED, "code")
    entries = {e.name: e for e in library.list_workflows(any_ws)}
    assert entries["w1"].version == 2 and entries["w1"].versions == 2 and entries["w2"].task == "code"
    assert [v for v, _, _ in library.versions(any_ws, "w1")] == [2, 1]
    assert library.load_workflow(any_ws, "w1", 1)[0] == SEED or "Generate" in library.load_workflow(any_ws, "w1", 1)[0]
    counts = library.table_counts(any_ws)
    assert counts["workflows"] == 3


def test_history_rounds_runs_and_pins(any_ws):
    h = History(any_ws)
    run = h.create_run({"rounds": 2}, "key", SEED, "gsm8k", "math", offline=True)
    for rnd, score in ((0, 0.5), (1, None), (2, 0.75)):
        h.add_round(run, {"round": rnd, "workflow_text": SEED, "parents": [] if rnd == 0 else [0],
                          "operator": "seed" if rnd == 0 else "insert", "status": "ok", "score": score,
                          "cost": 0.001 * rnd, "candidates": [{"text": "x"}]})
    with pytest.raises(IntegrityError):  # the same round twice is refused, nothing half-written
        h.add_round(run, {"round": 2, "status": "ok"})
    h.pin(run, 1)
    h.set_note(run, 2, "best")
    rows = h.rounds(run)
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[1]["pinned"] and rows[2]["note"] == "best"
    assert rows[2]["candidates"] == [{"text": "x"}] and rows[1]["parents"] == [0]
    assert h.last_round(run) == 2 and h.find_unfinished("key") == run
    h.set_status(run, "finished")
    assert h.find_unfinished("key") is None and h.run(run).status == "finished"
    # the History view's reads: columns without row objects, a part of the rounds, a part of the columns
    assert h.summaries(run) == [{k: v for k, v in r.items() if k in h.summaries(run)[0]} for r in rows]
    cols = h.summary_columns(run, [2, 0], columns=("round", "score", "parents_json", "pinned"))
    assert cols == {"round": [0, 2], "score": [0.5, 0.75], "parents": [[], [0]], "pinned": [False, False]}
    assert h.summary_columns(run, []) == {**{c: [] for c in ("round", "status", "score", "ci_low", "ci_high", "n",
                                                               "cost", "operator", "judge", "judge_total", "pinned",
                                                               "note", "detail", "reason")}, "parents": []}
    assert any_ws.query_columns("SELECT round, note FROM evo_rounds WHERE run_id = ? ORDER BY round", (run,),
                                2) == [[0, 1, 2], [None, None, "best"]]
    with pytest.raises(ValueError, match="not a summary column: workflow_text"):
        h.summary_columns(run, columns=("round", "workflow_text"))


def test_evaluations(any_ws):
    eid = eval_store.create_evaluation(any_ws, workflow_text=SEED, benchmark="gsm8k", split="validation", total=3)
    other = eval_store.create_evaluation(any_ws, workflow_text=SEED, benchmark="mbpp", split=None, total=1)
    assert other == eid + 1
    eval_store.finish_evaluation(any_ws, eid, None, status="failed", error="boom")
    rec = eval_store.load_evaluation(any_ws, eid)
    assert rec.status == "failed" and rec.error == "boom" and rec.score is None
    assert [r.id for r in eval_store.list_evaluations(any_ws)] == [other, eid]
    assert eval_store.reconcile(any_ws) == 1  # the other one was left 'running' by no job
    with pytest.raises(KeyError, match="#999"):
        eval_store.load_evaluation(any_ws, 999)


def test_settings_store(any_ws):
    settings_store.save_llm_settings(any_ws, {"base_url": "http://127.0.0.1:9/v1", "models": {"judge": "m"}})
    assert settings_store.load_llm_settings(any_ws)["models"]["judge"] == "m"
    settings_store.clear_llm_settings(any_ws)
    assert settings_store.load_llm_settings(any_ws) is None


def test_llm_cache_and_call_log(any_ws):
    with FakeLLMServer(["four"]) as srv:
        s = LLMSettings(base_url=srv.base_url, api_key="sk-test", models={r: "m" for r in
                                                                         ("optimizer", "judge", "executor")})
        first = LLM(s, any_ws, run_id="r1").chat_sync("two plus two")
        again = LLM(s, any_ws, run_id="r2").chat_sync("two plus two")
        assert len(srv.requests) == 1
    assert first.text == again.text == "four" and again.cached
    assert [r["run_id"] for r in any_ws.query("SELECT run_id FROM llm_calls ORDER BY id")] == ["r1", "r2"]
    assert any_ws.query("SELECT COUNT(*) AS n FROM llm_cache")[0]["n"] == 1


def test_aov_executions(any_ws):
    from flowcore.aov.execute import EchoAgent, Execution
    from flowcore.aov.store import ExecutionStore, load_execution, save_execution

    ex = Execution(AOVGraph.load(ASSETS / "website.json"), EchoAgent())
    eid = save_execution(any_ws, ex)
    asyncio.run(ex.run())
    again = load_execution(any_ws, eid)
    assert again.status == ex.status and again.id == eid
    store = ExecutionStore(any_ws)
    assert [r["id"] for r in store.list()] == [eid] and store.events(eid)
    store.delete(eid)
    assert store.list() == []


def test_writers_in_threads_are_serialised(any_ws):
    """Read-then-write under ``transaction()`` never loses an update (one writer at a time, both backends)."""
    any_ws.ensure_schema("ctr", "CREATE TABLE IF NOT EXISTS ctr(k TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    with any_ws.transaction() as c:
        c.execute("INSERT INTO ctr(k, n) VALUES ('a', 0)")

    def bump() -> None:
        for _ in range(20):
            with any_ws.transaction() as c:
                n = c.execute("SELECT n FROM ctr WHERE k = 'a'").fetchone()[0]
                c.execute("UPDATE ctr SET n = ? WHERE k = 'a'", (n + 1,))

    threads = [threading.Thread(target=bump) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert any_ws.query("SELECT n FROM ctr")[0]["n"] == 60


# -- the translation itself (no server needed) ----------------------------------------------------------------

def test_translation_leaves_strings_and_comments_alone():
    sql, ret = translate("SELECT '?', \"a?\" FROM t -- what?\nWHERE x = ? AND y LIKE '5%'", False, True)
    assert sql == "SELECT '?', \"a?\" FROM t -- what?\nWHERE x = %s AND y ILIKE '5%%'" and ret is None
    assert translate("SELECT 1 FROM t ORDER BY a DESC, lower(b) LIMIT 3", False, False)[0] == \
        "SELECT 1 FROM t ORDER BY a DESC NULLS LAST, lower(b) NULLS FIRST LIMIT 3"
    ddl = translate_ddl("PRAGMA x=1; CREATE TABLE t(id INTEGER PRIMARY KEY AUTOINCREMENT, r REAL, "
                        "s TEXT DEFAULT 'INTEGER; REAL') -- it's fine")
    assert ddl == ["CREATE TABLE t(id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, r DOUBLE PRECISION, "
                   "s TEXT DEFAULT 'INTEGER; REAL') -- it's fine"]


def test_bad_postgres_url_is_a_clear_error():
    ws = Workspace("postgresql://nobody:secret@127.0.0.1:9/none")
    assert "secret" not in str(ws.path)
    with pytest.raises(OperationalError, match="cannot connect to the PostgreSQL workspace") as e:
        ws.query("SELECT 1")
    assert "secret" not in str(e.value)


def test_the_sqlite_wal_is_folded_in_after_each_round_and_stays_bounded(tmp_path):
    """A long run on SQLite: every stored round checkpoints the write-ahead log (and journal_size_limit caps
    what is kept), so the -wal file does not grow with the run."""
    from flowcore.evolution.history import History
    from flowcore.workspace.store import WAL_LIMIT

    ws = Workspace(tmp_path / "ws.db")
    h = History(ws)
    run = h.create_run({"benchmark": "gsm8k"}, "k", "flowchart TD", "gsm8k", "math", False)
    reader = Workspace(tmp_path / "ws.db")  # another connection reading meanwhile, as the pages do
    wal = tmp_path / "ws.db-wal"
    sizes = []
    for i in range(40):
        h.add_round(run, {"round": i, "status": "ok", "score": 0.5, "workflow_text": "x" * 20_000, "detail": "y" * 5_000})
        reader.query("SELECT COUNT(*) FROM evo_rounds")
        sizes.append(wal.stat().st_size if wal.exists() else 0)
    # checkpointed with RESTART: the log keeps the room of about one round (reused: its last small writes fit on a
    # full disk) and never grows with the run
    assert max(sizes) <= WAL_LIMIT and sizes[-1] <= 1.5 * max(sizes[:5]), sizes[-5:]
    assert ws.query("PRAGMA journal_size_limit")[0][0] == WAL_LIMIT
    ws.close_all()
    reader.close_all()


def test_a_workspace_from_a_newer_schema_is_refused_and_its_marker_kept(any_ws, tmp_path):
    """Issue 19.6: a workspace written by a newer app is refused, naming both versions; nothing rewrites it."""
    from flowcore.workspace.store import SCHEMA_VERSION, VERSION_ROW, WorkspaceError

    any_ws.ensure_schema("m", "CREATE TABLE IF NOT EXISTS t(id INTEGER)")
    assert any_ws.query("SELECT ddl_hash FROM mf_schema WHERE name = ?", (VERSION_ROW,))[0]["ddl_hash"] == \
        str(SCHEMA_VERSION)  # an older workspace (no marker) gets this app's version
    with any_ws.transaction() as c:
        c.execute("UPDATE mf_schema SET ddl_hash = ? WHERE name = ?", (str(SCHEMA_VERSION + 7), VERSION_ROW))
    again = Workspace(any_ws.url if any_ws.is_postgres else any_ws.path)
    with pytest.raises(WorkspaceError, match=rf"schema version {SCHEMA_VERSION + 7}; this one knows version "
                                             rf"{SCHEMA_VERSION}"):
        again.ensure_schema("n", "CREATE TABLE IF NOT EXISTS u(id INTEGER)")
    rows = {r["name"]: r["ddl_hash"] for r in any_ws.query("SELECT name, ddl_hash FROM mf_schema")}
    assert rows[VERSION_ROW] == str(SCHEMA_VERSION + 7) and "n" not in rows
    again.close_all()


def test_the_command_line_refuses_a_newer_workspace_with_a_message(tmp_path):
    import subprocess
    import sys

    from flowcore.workspace.store import SCHEMA_VERSION, VERSION_ROW

    ws = Workspace(tmp_path / "new.db")
    ws.ensure_schema("m", "")
    with ws.transaction() as c:
        c.execute("UPDATE mf_schema SET ddl_hash = '99' WHERE name = ?", (VERSION_ROW,))
    ws.close_all()
    p = subprocess.run([sys.executable, "-m", "flowcore", "evolve", "--db", str(tmp_path / "new.db"), "--benchmark",
                        "gsm8k", "--rounds", "1", "--offline"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and f"schema version 99; this one knows version {SCHEMA_VERSION}" in p.stderr
    assert "Traceback" not in p.stderr, p.stderr


def test_a_connection_that_defers_checkpoints_leaves_them_to_another(tmp_path):
    """A server's event loop defers (flowcore.serve.engine.Engine.on_loop_thread): a checkpoint syncs the disk,
    and the commit that passes SQLite's mark does it. Another connection's commit checkpoints instead."""
    import os
    import threading

    from flowcore.workspace.store import DEFERRED_CHECKPOINT, Workspace

    db = tmp_path / "ws.db"
    ws = Workspace(db)
    ws.defer_checkpoints()
    assert ws.query("PRAGMA wal_autocheckpoint")[0][0] == DEFERRED_CHECKPOINT
    with ws.transaction() as conn:
        conn.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, data BLOB)")
    for _ in range(1500):  # one page and more each, one commit each: past SQLite's 1000-page mark
        with ws.transaction() as conn:
            conn.execute("INSERT INTO blobs(data) VALUES (?)", (os.urandom(4000),))
    wal = db.with_name("ws.db-wal")
    assert wal.stat().st_size > 1500 * 4096  # never checkpointed (it would have started the log over at ~1000)

    def elsewhere() -> None:  # e.g. the trace writer's thread: its commit checkpoints (SQLite's default)
        assert ws.query("PRAGMA wal_autocheckpoint")[0][0] == 1000
        with ws.transaction() as conn:
            conn.execute("INSERT INTO blobs(data) VALUES (x'00')")

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    with ws.transaction() as conn:  # checkpointed: the log starts over, cut back to journal_size_limit
        conn.execute("INSERT INTO blobs(data) VALUES (x'01')")
    assert wal.stat().st_size <= (4 << 20) + 2 * 4096 + 64
