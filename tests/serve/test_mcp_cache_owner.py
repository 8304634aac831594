"""An evolution run an MCP caller starts with a key caches its LLM answers under its owner, as a served chat call
does (attack on issue 27's serve). Before, the run's client had no owner salt: a run started by mallory was
answered from the calls alice's run had made (the endpoint never asked, the cost 0, so mallory learnt what alice
had measured), and what mallory's run put in the cache answered alice's next run (poisoned). Real server, the
SDK's own client, a scripted endpoint that counts the calls it gets."""

from __future__ import annotations

import asyncio
import time

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

SEED_ONLY = {"benchmark": "gsm8k", "rounds": 0, "candidates": 1, "limit": 3, "mode": "programmatic"}


@pytest.fixture
def owners(tmp_path):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    _, alice = keys.create_key(ws, "alice-ci", "alice@example.com")
    _, mallory = keys.create_key(ws, "mallory-ci", "mallory@example.com")
    ws.close_all()
    llm = FakeLLMServer(lambda request: "The answer is 42").start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"]) as s:
            yield s, llm, alice, mallory
    finally:
        llm.stop()


async def _evolve(url: str, key: str, args: dict) -> dict:
    """Start a run and wait for its end; the run's progress as evolve_progress tells it."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        started = _result(await c.call_tool("evolve_start", args))
        assert isinstance(started, dict), started
        end = time.monotonic() + 120
        while True:
            progress = _result(await c.call_tool("evolve_progress", {"run_id": started["run_id"]}))
            assert isinstance(progress, dict), progress
            if progress["status"] != "running":
                return progress
            assert time.monotonic() < end, "the run never ended"
            await asyncio.sleep(0.1)


def _asked(llm: FakeLLMServer, url: str, key: str, args: dict) -> int:
    before = len(llm.requests)
    progress = asyncio.run(_evolve(url, key, args))
    assert progress["status"] == "finished", progress
    return len(llm.requests) - before


def test_an_mcp_evolution_run_never_answers_from_another_owners_cache(owners):
    server, llm, alice, mallory = owners
    url = server.url + "/mcp"
    first = _asked(llm, url, alice, SEED_ONLY)
    assert first >= 3, f"alice's run asked the endpoint {first} time(s): the test shows nothing"
    assert _asked(llm, url, alice, SEED_ONLY) == 0  # the control: an owner's own repeat is answered from the cache
    # mallory's identical run asks the endpoint itself: alice's answers are not hers to read (before: 0 calls)
    assert _asked(llm, url, mallory, SEED_ONLY) == first

