"""What a served request no longer pays, without giving up what it paid for: a key that verified is not looked up
again while the workspace is unchanged, yet a revocation holds from the next request on; ``NAME`` is the latest
version even one published a moment ago, and a version's text is read once; the workflow runs in the request's
own task, and its deadline and its client's leaving still cancel it with the trace kept."""

from __future__ import annotations

import asyncio

import pytest

from flowcore.llm.client import LLMSettings
from flowcore.serve.engine import Engine, ServeError
from flowcore.workspace import keys, published, traces
from flowcore.workspace.store import Workspace
from tests.serve.conftest import MATH_SEED


def _sql_on(ws: Workspace, table: str) -> list[str]:
    """The statements this thread's connection of ``ws`` runs from now on that name ``table``."""
    seen: list[str] = []
    ws.conn.set_trace_callback(lambda sql: seen.append(sql) if table in sql else None)
    return seen


def test_a_verified_key_is_remembered_until_anything_changes_and_a_revocation_holds_at_once(tmp_path):
    db = tmp_path / "ws.db"
    ws, elsewhere = Workspace(db), Workspace(db)  # elsewhere: another connection, as `keys revoke` in its process
    rec, key = keys.create_key(ws, "ci", "alice@example.com")
    check = keys.KeyCheck(ws)
    asked = _sql_on(ws, "api_keys")
    assert check(key).owner == "alice@example.com"
    first = len(asked)
    assert first >= 1
    for _ in range(5):
        assert check(key).owner == "alice@example.com"
    assert len(asked) == first  # remembered: no query while nothing changed
    wrong = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert check(wrong) is None and check(wrong) is None and len(asked) == first + 2  # never remembered
    assert check(None) is None and check("Bearer x") is None

    keys.revoke_key(elsewhere, rec.id)  # another connection commits: the next check looks again
    assert check(key) is None and check(key) is None

    rec2, key2 = keys.create_key(ws, "ci2", "bob@example.com")
    assert check(key2).owner == "bob@example.com"
    keys.revoke_key(ws, rec2.id)  # this very connection (its own writes leave the change token as it was)
    assert check(key2) is None


def test_a_remembered_key_still_records_when_it_was_used(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "ws.db")
    rec, key = keys.create_key(ws, "ci", "alice@example.com")
    check = keys.KeyCheck(ws)
    assert check(key) is not None
    used = keys.get_key(ws, rec.id).last_used
    assert used is not None
    monkeypatch.setattr(keys.time, "time", lambda: used + keys.TOUCH_EVERY + 5)  # a minute and more later
    assert check(key) is not None
    assert keys.get_key(ws, rec.id).last_used == used + keys.TOUCH_EVERY + 5


def test_name_is_the_latest_version_even_one_published_a_moment_ago(tmp_path):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="local")
    e = Engine(ws)
    assert e.resolve("solver").version == 1
    texts = _sql_on(ws, "published")
    for _ in range(3):
        assert e.resolve("solver").version == 1 and e.resolve("solver@v1").text == MATH_SEED
    assert texts == []  # nothing read again while nothing changed

    published.publish(Workspace(db), "solver", MATH_SEED + "%% two\n", "math", created_by="local")  # elsewhere
    assert e.resolve("solver").version == 2 and e.resolve("solver").text.endswith("%% two\n")
    published.publish(ws, "solver", MATH_SEED + "%% three\n", "math", created_by="local")  # this connection
    assert e.resolve("solver").version == 3
    assert e.resolve("solver@v1").text == MATH_SEED and e.resolve("solver@v2").version == 2
    with pytest.raises(ServeError) as err:
        e.resolve("nobody")
    assert err.value.status == 404
    with pytest.raises(ServeError) as err:
        e.resolve("solver@v9")
    assert err.value.status == 404


def _engine(fake_llm, tmp_path, deadline: float | None = None) -> Engine:
    ws = Workspace(tmp_path / "ws.db")
    published.publish(ws, "solver", MATH_SEED, "math", created_by="local")
    return Engine(ws, deadline=deadline, settings=LLMSettings(base_url=fake_llm.base_url, api_key="test-key",
                                                              max_retries=0, cache=False, timeout=30))


def test_a_run_past_its_deadline_is_504_with_its_trace_kept(fake_llm, tmp_path):
    e = _engine(fake_llm, tmp_path, deadline=0.5)

    async def go() -> ServeError:
        with pytest.raises(ServeError) as err:
            await e.run("solver", "SLOW: what is 2 + 2?")
        assert asyncio.current_task().cancelling() == 0  # the deadline's cancellation was taken back
        return err.value

    err = asyncio.run(go())
    e.close()
    assert err.status == 504
    [t] = traces.list_traces(e.ws)
    assert t.status == "timeout" and "deadline" in (t.error or "")


def test_a_cancelled_request_raises_its_cancellation_with_the_trace_kept(fake_llm, tmp_path):
    e = _engine(fake_llm, tmp_path)

    async def go() -> None:
        work = asyncio.ensure_future(e.run("solver", "SLOW: what is 3 + 3?"))
        await asyncio.sleep(0.5)
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work
        assert work.cancelled()

    asyncio.run(go())
    e.close()
    [t] = traces.list_traces(e.ws)
    assert t.status == "cancelled" and t.problem == "SLOW: what is 3 + 3?"


def test_the_event_loop_writes_nothing_a_calls_reply_and_log_row_are_stored_by_the_writer(fake_llm, tmp_path,
                                                                                           monkeypatch):
    monkeypatch.setenv("MERMAIDFLOW_TRACE_LINGER", "60")  # nothing is stored until close, unless the loop did it
    ws = Workspace(tmp_path / "ws.db")
    published.publish(ws, "solver", MATH_SEED, "math", created_by="local")
    e = Engine(ws, settings=LLMSettings(base_url=fake_llm.base_url, api_key="test-key", max_retries=0, timeout=30))
    e.llm()  # made once, with its tables
    writes = _sql_on(ws, "INSERT")  # this thread runs the event loop below
    before = len(fake_llm.requests)

    async def twice() -> list:
        return [await e.run("solver", "What is 6 * 7?") for _ in range(2)]

    first, again = asyncio.run(twice())
    assert first.text == again.text and first.calls == again.calls == 1
    assert again.trace_id != first.trace_id and again.cost == 0.0
    assert e.llm().usage.cached == 1 and len(fake_llm.requests) == before + 1  # the second answered from memory,
    # before anything was written
    assert writes == []  # the event loop's thread wrote nothing
    assert ws.query("SELECT COUNT(*) FROM llm_calls")[0][0] == 0  # not yet: the writer lingers
    e.close()  # the server's lifespan end: everything in memory is written
    assert ws.query("SELECT COUNT(*) FROM llm_calls")[0][0] == 2
    assert ws.query("SELECT COUNT(*) FROM llm_cache")[0][0] == 1
    assert len(traces.list_traces(ws)) == 2
