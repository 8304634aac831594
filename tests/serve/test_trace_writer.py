"""Traces are stored off the request path (flowcore.serve.trace_writer) and none is lost: a batch waits at most
its linger, a stop writes what is queued, and one trace that cannot be stored costs no other its place."""

from __future__ import annotations

import asyncio
import logging
import time

import openai

from flowcore.serve.trace_writer import TraceWriter
from flowcore.workspace import traces
from flowcore.workspace.store import Workspace
from flowcore.workspace.traces import Span, Trace
from tests.helpers.served import Served


def _trace(i: int, status: str = "ok") -> Trace:
    return Trace(f"{i:032x}", time.time(), "api", "solver", 1, "local", status, None, 0.2, 0.0, 1, 5, 6,
                 f"problem {i}", f"answer {i}", [Span("C1", "CustomOp", "m", 5, 6, 0.0, 1, 0.0, 0.2)])


def test_queued_traces_are_written_on_close_and_later_ones_at_once(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    w = TraceWriter(ws, linger=60)  # a batch would wait a minute for company
    for i in range(1, 41):
        w.put(_trace(i))
    time.sleep(0.2)
    assert traces.list_traces(ws) == []  # queued, not written: off the request path
    w.close()
    stored = traces.list_traces(ws, limit=100)
    assert len(stored) == 40 and {t.answer for t in stored} == {f"answer {i}" for i in range(1, 41)}
    assert traces.load_trace(ws, f"{7:032x}").spans[0].completion_tokens == 6
    w.put(_trace(41))  # after close (a request that outlived the lifespan): written before put returns
    assert traces.load_trace(ws, f"{41:032x}") is not None


def test_a_batch_is_written_within_its_linger(tmp_path):
    ws = Workspace(tmp_path / "ws.db")
    w = TraceWriter(ws, linger=0.05)
    t0 = time.monotonic()
    w.put(_trace(1))
    while traces.load_trace(ws, f"{1:032x}") is None and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    assert time.monotonic() - t0 < 2
    w.close()


def test_a_trace_that_cannot_be_stored_costs_the_others_nothing(tmp_path, caplog):
    ws = Workspace(tmp_path / "ws.db")
    w = TraceWriter(ws, linger=60)
    w.put(_trace(1))
    w.put(_trace(2, status="weird"))  # refused by save_traces: the batch is retried one by one
    w.put(_trace(3))
    with caplog.at_level(logging.ERROR, logger="flowcore.serve"):
        w.close()
    assert sorted(t.id for t in traces.list_traces(ws)) == [f"{1:032x}", f"{3:032x}"]
    assert f"could not store trace {2:032x}" in caplog.text


async def _ask(base_url: str, n: int) -> list[str]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60) as c:
        rs = await asyncio.gather(*(c.chat.completions.create(model="solver@v1", messages=[
            {"role": "user", "content": f"kept {i}?"}]) for i in range(n)))
    return [r.model_extra["mermaidflow"]["trace_id"] for r in rs]


def test_a_server_stopping_writes_every_trace_still_queued(fake_llm, served_db):
    with Served(served_db, llm_url=fake_llm.base_url, env={"MERMAIDFLOW_TRACE_LINGER": "60"}) as s:
        ids = asyncio.run(_ask(s.base_url, 6))
        ws = Workspace(served_db)
        assert all(traces.load_trace(ws, tid) is None for tid in ids)  # answered; the traces wait in the queue
    # SIGTERM: the lifespan's end wrote them before the process left
    got = [traces.load_trace(Workspace(served_db), tid) for tid in ids]
    assert all(t is not None and t.status == "ok" and t.answer.startswith("ECHO ") for t in got)
    assert sorted(t.problem for t in got) == sorted(f"kept {i}?" for i in range(6))


def test_traces_handed_over_together_are_one_batch_and_none_is_lost_from_many_threads(tmp_path, monkeypatch):
    import threading

    ws = Workspace(tmp_path / "ws.db")
    batches: list[int] = []
    save = traces.save_traces
    monkeypatch.setattr(traces, "save_traces", lambda w, b: (batches.append(len(b)), save(w, b))[1])
    w = TraceWriter(ws, linger=0.5)
    for i in range(1, 31):  # one request after another: the writer wakes for the first and takes all 30
        w.put(_trace(i))
    w.flush()
    assert batches == [30]

    def many(k: int) -> None:
        for i in range(50):
            w.put(_trace(1000 * k + i))
            if i % 10 == 0:
                w.flush()  # a flush returns once what this thread put before it is written

    threads = [threading.Thread(target=many, args=(k,)) for k in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    ids = [t.id for t in traces.list_traces(ws, limit=1000)]
    assert len(ids) == len(set(ids)) == 30 + 8 * 50
