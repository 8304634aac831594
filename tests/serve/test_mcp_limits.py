"""What one key holder may set going over MCP (attacks on issue 27's serve), through the SDK's own client against
a real ``flowcore serve``:

- ``evaluate_workflow`` and ``evolve_start`` are bounded per owner and on the whole server (before: evaluations
  had no bound at all, and the two evolution runs a server allowed could both be one key holder's, so nobody
  else could start one);
- ``publish`` is bounded in size and in versions an owner adds an hour (before: any number of 1 MiB versions);
- a workflow text of 50,000 nodes within the 1 MiB body cap is refused at once, naming the limit, by every tool
  that reads one, and the server's other requests are answered meanwhile (before: the reader and the checker
  spent seconds of CPU on it).

The scripted endpoint holds every call until the test opens its gate, so "going" is a state the test controls."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flowcore.workspace import keys, published
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.served import Served
from tests.serve.conftest import MATH_SEED
from tests.serve.test_mcp_spending import _result

LIMITS = {"MERMAIDFLOW_MCP_EVALS_PER_OWNER": "1", "MERMAIDFLOW_MCP_EVALS": "2", "MERMAIDFLOW_MCP_RUNS_PER_OWNER": "1",
          "MERMAIDFLOW_MCP_RUNS": "2", "MERMAIDFLOW_MCP_PUBLISH_PER_HOUR": "3"}
CHAIN_50K = "flowchart TD\n" + "-->".join(f"N{i}" for i in range(50_000))  # 50,000 nodes in 0.44 MB


class Gate:
    """A responder that holds every call until ``open`` is set; ``seen`` counts the calls that arrived."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.seen = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict) -> str:
        with self._lock:
            self.seen += 1
        self.open.wait(120)
        return "The answer is 42"

    def wait_seen(self, n: int, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while self.seen < n:
            assert time.monotonic() < end, f"waited {timeout:g} s for {n} calls at the endpoint, saw {self.seen}"
            time.sleep(0.02)


@pytest.fixture
def gated(tmp_path):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    made = {who: keys.create_key(ws, f"{who}-ci", f"{who}@example.com")[1] for who in ("alice", "mallory", "bob")}
    ws.close_all()
    gate = Gate()
    llm = FakeLLMServer(gate).start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"], env=LIMITS) as s:
            yield s, gate, made, db
    finally:
        gate.open.set()
        llm.stop()


async def _call(url: str, key: str, tool: str, args: dict) -> object:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        return _result(await c.call_tool(tool, args))


def _call_in_thread(url: str, key: str, tool: str, args: dict) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def go() -> None:
        try:
            out["r"] = asyncio.run(_call(url, key, tool, args))
        except Exception as exc:  # noqa: BLE001 - the test asserts on what came back
            out["r"] = ("raised", repr(exc))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _error(got: object) -> str:
    assert isinstance(got, tuple) and got[0] == "error", f"expected a tool error, got {got!r:.300}"
    return got[1]


def test_evaluations_are_bounded_per_owner_and_on_the_server(gated):
    server, gate, k, _ = gated
    url = server.url + "/mcp"
    ev = {"benchmark": "gsm8k", "model": "solver", "limit": 1}
    first, first_out = _call_in_thread(url, k["mallory"], "evaluate_workflow", ev)
    gate.wait_seen(1)  # mallory's evaluation is going: its one call waits at the endpoint
    again = _error(asyncio.run(_call(url, k["mallory"], "evaluate_workflow", {**ev, "split": "test"})))
    assert "mallory@example.com already has 1 evaluations going" in again, again
    assert "at most 1 at a time per owner (MERMAIDFLOW_MCP_EVALS_PER_OWNER)" in again, again
    other, other_out = _call_in_thread(url, k["alice"], "evaluate_workflow", ev)  # another owner is not blocked
    gate.wait_seen(2)
    full = _error(asyncio.run(_call(url, k["bob"], "evaluate_workflow", ev)))
    assert "at most 2 at a time (MERMAIDFLOW_MCP_EVALS)" in full, full
    assert gate.seen == 2  # the refused ones sent nothing to the endpoint
    gate.open.set()
    first.join(60)
    other.join(60)
    for out in (first_out, other_out):
        assert isinstance(out.get("r"), dict) and out["r"]["n"] == 1, out
    # the slots are free again once the evaluations have ended
    assert asyncio.run(_call(url, k["mallory"], "evaluate_workflow", ev))["n"] == 1


def test_evolution_runs_are_bounded_per_owner_and_on_the_server(gated):
    server, gate, k, _ = gated
    url = server.url + "/mcp"
    run = {"benchmark": "gsm8k", "rounds": 1, "candidates": 1, "limit": 1, "mode": "programmatic"}
    mine = asyncio.run(_call(url, k["mallory"], "evolve_start", run))
    assert isinstance(mine, dict), mine
    gate.wait_seen(1)
    again = _error(asyncio.run(_call(url, k["mallory"], "evolve_start", run)))
    assert "at most 1 at a time per owner (MERMAIDFLOW_MCP_RUNS_PER_OWNER)" in again, again
    hers = asyncio.run(_call(url, k["alice"], "evolve_start", run))  # mallory's run does not block alice
    assert isinstance(hers, dict), hers
    full = _error(asyncio.run(_call(url, k["bob"], "evolve_start", run)))
    assert "at most 2 at a time on this server (MERMAIDFLOW_MCP_RUNS)" in full, full
    gate.open.set()
    for key, started in ((k["mallory"], mine), (k["alice"], hers)):
        end = time.monotonic() + 120
        while (p := asyncio.run(_call(url, key, "evolve_progress", {"run_id": started["run_id"]})))["status"] == \
                "running":
            assert time.monotonic() < end, p
            time.sleep(0.2)
    assert isinstance(asyncio.run(_call(url, k["bob"], "evolve_start", run)), dict)  # room again


def test_publish_is_bounded_in_size_and_per_owner_an_hour(gated):
    server, _, k, db = gated
    url = server.url + "/mcp"
    for i in range(3):
        got = asyncio.run(_call(url, k["mallory"], "publish", {"workflow": MATH_SEED, "task": "math",
                                                              "name": "mallory-flow", "note": f"#{i}"}))
        assert isinstance(got, dict) and got["model"] == f"mallory-flow@v{i + 1}", got
    over = _error(asyncio.run(_call(url, k["mallory"], "publish", {"workflow": MATH_SEED, "task": "math",
                                                                   "name": "mallory-other"})))
    assert "mallory@example.com published 3 versions in the last hour; at most 3 an hour " \
           "(MERMAIDFLOW_MCP_PUBLISH_PER_HOUR)" in over, over
    assert asyncio.run(_call(url, k["alice"], "publish", {"workflow": MATH_SEED, "task": "math",
                                                         "name": "solver"}))["model"] == "solver@v2"
    big = MATH_SEED.replace("step by step", "step by step " + "x" * 300_000)  # passes the checker, 0.3 MB
    huge = _error(asyncio.run(_call(url, k["alice"], "publish", {"workflow": big, "task": "math", "name": "solver"})))
    assert "a published version holds at most 262,144 (MERMAIDFLOW_MCP_PUBLISH_MAX_CHARS)" in huge, huge
    ws = Workspace(db)
    assert [p.model_id for p in published.list_published(ws, text=False)] == \
        ["mallory-flow@v3", "mallory-flow@v2", "mallory-flow@v1", "solver@v2", "solver@v1"]


def test_a_50000_node_workflow_is_refused_at_once_and_the_server_keeps_answering(gated):
    server, gate, k, db = gated
    url, key = server.url + "/mcp", k["mallory"]
    assert len(CHAIN_50K) < 1 << 20  # within the body cap: nothing refuses it at the door
    calls = [("check_workflow", {"workflow": CHAIN_50K, "task": "math"}),
             ("format_workflow", {"workflow": CHAIN_50K}),
             ("run_workflow", {"workflow": CHAIN_50K, "task": "math", "problem": "1+1"}),
             ("evaluate_workflow", {"workflow": CHAIN_50K, "benchmark": "gsm8k", "limit": 1}),
             ("publish", {"workflow": CHAIN_50K, "task": "math", "name": "huge"}),
             ("evolve_start", {"benchmark": "gsm8k", "workflow": CHAIN_50K, "rounds": 1, "limit": 1})]
    worst, done = 0.0, threading.Event()

    def poll() -> None:
        nonlocal worst
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {k['alice']}"}) as c:
            while not done.is_set():
                t = time.monotonic()
                assert c.get(server.base_url + "/models").status_code == 200
                worst = max(worst, time.monotonic() - t)
                time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    took = {}
    try:
        for tool, args in calls:
            t = time.monotonic()
            msg = _error(asyncio.run(_call(url, key, tool, args)))
            took[tool] = time.monotonic() - t
            assert "up to 50,001 nodes" in msg and "at most 500 nodes and 2,000 edges are accepted " \
                   "(MERMAIDFLOW_SERVE_MAX_NODES, MERMAIDFLOW_SERVE_MAX_EDGES)" in msg, (tool, msg)
    finally:
        done.set()
        poller.join(60)
    assert worst < 0.5, f"/v1/models waited {worst:.2f} s while the huge texts were refused"
    assert max(took.values()) < 2.0, took  # refused at once (the checker alone spent seconds on it before)
    assert gate.seen == 0 and [p.name for p in published.list_published(Workspace(db), text=False)] == ["solver"]


def test_a_text_near_the_limit_is_counted_and_an_ampersand_bomb_is_refused(gated):
    server, gate, k, _ = gated
    url, key = server.url + "/mcp", k["mallory"]
    near = "flowchart TD\n" + "-->".join(f"N{i}" for i in range(600))
    msg = _error(asyncio.run(_call(url, key, "check_workflow", {"workflow": near, "task": "math"})))
    assert "the workflow has 600 nodes and 599 edges; at most 500 nodes" in msg, msg
    bomb = "flowchart TD\n" + " & ".join(f"A{i}" for i in range(400)) + " --> " + \
        " & ".join(f"B{i}" for i in range(400))  # 9 KB of text, 160,000 edges
    msg = _error(asyncio.run(_call(url, key, "format_workflow", {"workflow": bomb})))
    assert "at most 500 nodes and 2,000 edges" in msg, msg
    ok = asyncio.run(_call(url, key, "check_workflow", {"workflow": MATH_SEED, "task": "math"}))
    assert ok["valid"] is True  # a real workflow is read as before
