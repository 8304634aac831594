"""An evolution run an MCP caller starts with a key caches its LLM answers under its owner, as a served chat call
does (attack on issue 27's serve). Before, the run's client had no owner salt: a run started by mallory was
answered from the calls alice's run had made (the endpoint never asked, the cost 0, so mallory learnt what alice
had measured), and what mallory's run put in the cache answered alice's next run (poisoned). Real server, the
SDK's own client, a scripted endpoint that counts the calls it gets."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.served import mcp_client
from tests.serve.conftest import two_owners
from tests.serve.test_mcp_spending import _result

SEED_ONLY = {"benchmark": "gsm8k", "rounds": 0, "candidates": 1, "limit": 3, "mode": "programmatic"}


@pytest.fixture
def owners(tmp_path):
    with two_owners(tmp_path) as o:
        yield o


async def _evolve(url: str, key: str, args: dict) -> dict:
    """Start a run and wait for its end; the run's progress as evolve_progress tells it."""
    async with mcp_client(url, key) as c:
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
    llm, alice, mallory = owners.llm, owners.alice, owners.mallory
    url = owners.server.url + "/mcp"
    first = _asked(llm, url, alice, SEED_ONLY)
    assert first >= 3, f"alice's run asked the endpoint {first} time(s): the test shows nothing"
    assert _asked(llm, url, alice, SEED_ONLY) == 0  # the control: an owner's own repeat is answered from the cache
    # mallory's identical run asks the endpoint itself: alice's answers are not hers to read (before: 0 calls)
    assert _asked(llm, url, mallory, SEED_ONLY) == first

