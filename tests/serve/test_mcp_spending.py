"""What an MCP caller with a key can make the server spend (attack on issue 12's serve): ``evolve_start`` runs
keep going after the call, on the server's endpoint. Before: any size was accepted (100,000 rounds of 50
candidates on every problem), any number at once, and each run got a fresh budget of its own, so the server's
budget (MERMAIDFLOW_BUDGET_USD, "everything the process paid since it started") never saw what they spent: a
chat request after a run had spent past the budget still ran. Now a run is bounded, at most two go at a time,
and what they spend counts in the server's budget. Real server, the SDK's own client, a scripted endpoint."""

from __future__ import annotations

import asyncio
import json
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

# One call costs ~$20 (20-odd tokens at $1 each) against a $30 budget: the first paid call leaves room for one
# more, then the budget is spent.
PRICES = json.dumps({"gpt-4o-mini": [1_000_000.0, 1_000_000.0]})


def _result(r) -> object:
    if r.is_error:
        return ("error", r.content[0].text)
    sc = r.structured_content
    if sc is None:
        return json.loads(r.content[0].text)
    return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc


@pytest.fixture
def spending(tmp_path):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    _, key = keys.create_key(ws, "mallory-ci", "mallory@example.com")
    ws.close_all()
    llm = FakeLLMServer(lambda request: "The answer is 42", latency=0.05).start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"],
                    env={"MERMAIDFLOW_BUDGET_USD": "30", "MERMAIDFLOW_PRICES": PRICES,
                         "MERMAIDFLOW_CONCURRENCY": "1"}) as s:
            s.key = key  # type: ignore[attr-defined]
            yield s, llm
    finally:
        llm.stop()


async def _session(url: str, key: str, calls: list[tuple[str, dict]], wait_runs: bool) -> list:
    out = []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        for name, args in calls:
            out.append(_result(await c.call_tool(name, args)))
        runs = [r["run_id"] for r in out if isinstance(r, dict) and "run_id" in r]
        deadline = time.monotonic() + 120
        while wait_runs and runs and time.monotonic() < deadline:
            states = [_result(await c.call_tool("evolve_progress", {"run_id": r}))["status"] for r in runs]
            if all(s != "running" for s in states):
                break
            await asyncio.sleep(0.2)
    return out


def test_an_mcp_caller_cannot_start_unbounded_runs(spending):
    server, _ = spending
    huge = [("evolve_start", {"benchmark": "gsm8k", "rounds": 100_000, "candidates": 2, "limit": 5}),
            ("evolve_start", {"benchmark": "gsm8k", "rounds": 2, "candidates": 50, "limit": 5}),
            ("evolve_start", {"benchmark": "gsm8k", "rounds": 2, "candidates": 2, "limit": None}),
            ("evolve_start", {"benchmark": "gsm8k", "rounds": 2, "candidates": 2, "limit": 100_000})]
    got = asyncio.run(_session(server.url + "/mcp", server.key, huge, wait_runs=False))
    assert [g[0] for g in got] == ["error"] * 4, got
    assert "rounds must be a whole number from 0 to 30" in got[0][1]
    assert "candidates must be a whole number from 1 to 8" in got[1][1]
    assert "limit" in got[2][1] and "limit must be a whole number from 1 to 500" in got[3][1]


def test_at_most_two_runs_go_at_once(spending):
    server, _ = spending
    slow = {"benchmark": "gsm8k", "rounds": 30, "candidates": 8, "limit": 500, "mode": "programmatic"}
    got = asyncio.run(_session(server.url + "/mcp", server.key, [("evolve_start", slow)] * 3, wait_runs=False))
    assert all(isinstance(g, dict) for g in got[:2]), got
    assert got[2][0] == "error" and "at most 2 at a time" in got[2][1], got


def test_what_an_evolution_run_spends_counts_in_the_servers_budget(spending):
    server, llm = spending
    run = {"benchmark": "gsm8k", "rounds": 3, "candidates": 2, "limit": 3, "mode": "llm"}
    got = asyncio.run(_session(server.url + "/mcp", server.key, [("evolve_start", run)], wait_runs=True))
    assert isinstance(got[0], dict), got
    paid = len(llm.requests)
    assert paid >= 2, "the run made no paid call: the test shows nothing"
    # The server has spent its $30: a chat request is refused, not run on money it does not have.
    r = httpx.post(server.base_url + "/chat/completions", headers={"Authorization": f"Bearer {server.key}"},
                   json={"model": "solver", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}, timeout=60)
    assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exceeded", r.text
    assert len(llm.requests) == paid  # nothing more was sent to the endpoint
