"""Evolution runs an MCP caller starts with a key are the key owner's (attack on issue 27's serve). Before, any
key holder read any run's progress by its number (another owner's, or an app user's: benchmark, scores,
operators), and a run kept spending the server's endpoint for all its rounds after its key was revoked. Now a
key reads only its owner's runs (another's reads as missing), and revoking the key cancels the runs it started.
Real server, the SDK's own client, a scripted endpoint."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flowcore.evolution.history import History
from flowcore.workspace import keys, published
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.served import Served
from tests.serve.conftest import MATH_SEED
from tests.serve.test_mcp_spending import _result

LONG = {"benchmark": "gsm8k", "rounds": 30, "candidates": 2, "limit": 5, "mode": "llm"}


@pytest.fixture
def two_owners(tmp_path):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    alice, alice_key = keys.create_key(ws, "alice-ci", "alice@example.com")
    _, mallory_key = keys.create_key(ws, "mallory-ci", "mallory@example.com")
    ws.close_all()
    llm = FakeLLMServer(lambda request: "The answer is 42", latency=0.2).start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"]) as s:
            yield s, llm, db, (alice, alice_key), mallory_key
    finally:
        llm.stop()


async def _call(url: str, key: str, name: str, args: dict) -> object:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        return _result(await c.call_tool(name, args))


def _wait(cond, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"waited {timeout:g} s for {what}"
        time.sleep(0.1)


def test_a_key_reads_only_its_owners_runs(two_owners):
    server, llm, db, (alice, alice_key), mallory_key = two_owners
    url = server.url + "/mcp"
    started = asyncio.run(_call(url, alice_key, "evolve_start", LONG))
    assert isinstance(started, dict), started
    run_id = started["run_id"]
    _wait(lambda: len(llm.requests) > 0, "the run's first paid call")
    mine = asyncio.run(_call(url, alice_key, "evolve_progress", {"run_id": run_id}))
    assert isinstance(mine, dict) and mine["status"] == "running" and mine["planned"] == 31, mine
    theirs = asyncio.run(_call(url, mallory_key, "evolve_progress", {"run_id": run_id}))
    missing = asyncio.run(_call(url, mallory_key, "evolve_progress", {"run_id": run_id + 1000}))
    assert theirs[0] == "error" and theirs[1].endswith(f"no evolution run {run_id} started by mallory@example.com")
    assert missing[0] == "error" and "started by mallory" in missing[1]  # the same answer: nothing told apart



def test_revoking_a_key_stops_the_runs_it_started(two_owners):
    server, llm, db, (alice, alice_key), mallory_key = two_owners
    url = server.url + "/mcp"
    started = asyncio.run(_call(url, alice_key, "evolve_start", LONG))
    assert isinstance(started, dict), started
    run_id = started["run_id"]
    _wait(lambda: len(llm.requests) > 0, "the run's first paid call")
    keys.revoke_key(Workspace(db), alice.id)
    ws = Workspace(db)
    _wait(lambda: History(ws).run(run_id).status != "running", "the run to stop after its key was revoked")
    info = History(ws).run(run_id)
    assert info.status == "cancelled", (info.status, info.reason)
    stored = len(History(ws).summaries(run_id))
    assert stored < 31  # it did not run its 30 rounds
    paid = len(llm.requests)
    assert asyncio.run(_call(url, mallory_key, "list_versions", {}))  # the server still answers others
    assert len(llm.requests) == paid  # and the cancelled run sends nothing more
