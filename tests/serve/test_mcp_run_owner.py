"""Evolution runs an MCP caller starts with a key are the key owner's (attack on issue 27's serve). Before, any
key holder read any run's progress by its number (another owner's, or an app user's: benchmark, scores,
operators), and a run kept spending the server's endpoint for all its rounds after its key was revoked. Now a
key reads only its owner's runs (another's reads as missing), and revoking the key cancels the runs it started.
Real server, the SDK's own client, a scripted endpoint."""

from __future__ import annotations

import asyncio
import time

import pytest

from flowcore.evolution.history import History
from flowcore.workspace import keys
from flowcore.workspace.store import Workspace
from tests.helpers.served import mcp_client
from tests.serve.conftest import two_owners
from tests.serve.test_mcp_spending import _result

LONG = {"benchmark": "gsm8k", "rounds": 30, "candidates": 2, "limit": 5, "mode": "llm"}


@pytest.fixture
def owners(tmp_path):
    with two_owners(tmp_path, latency=0.2) as o:  # each call takes a while: the run is still going when read
        yield o


async def _call(url: str, key: str, name: str, args: dict) -> object:
    async with mcp_client(url, key) as c:
        return _result(await c.call_tool(name, args))


def _wait(cond, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"waited {timeout:g} s for {what}"
        time.sleep(0.1)


def _start_long_run(owners) -> int:
    """alice starts a 30-round run over MCP; its number, once it has made its first paid call."""
    started = asyncio.run(_call(owners.server.url + "/mcp", owners.alice, "evolve_start", LONG))
    assert isinstance(started, dict), started
    _wait(lambda: len(owners.llm.requests) > 0, "the run's first paid call")
    return started["run_id"]


def test_a_key_reads_only_its_owners_runs(owners):
    url, mallory = owners.server.url + "/mcp", owners.mallory
    run_id = _start_long_run(owners)
    mine = asyncio.run(_call(url, owners.alice, "evolve_progress", {"run_id": run_id}))
    assert isinstance(mine, dict) and mine["status"] == "running" and mine["planned"] == 31, mine
    theirs = asyncio.run(_call(url, mallory, "evolve_progress", {"run_id": run_id}))
    missing = asyncio.run(_call(url, mallory, "evolve_progress", {"run_id": run_id + 1000}))
    assert theirs[0] == "error" and theirs[1].endswith(f"no evolution run {run_id} started by mallory@example.com")
    assert missing[0] == "error" and "started by mallory" in missing[1]  # the same answer: nothing told apart


def test_revoking_a_key_stops_the_runs_it_started(owners):
    llm = owners.llm
    run_id = _start_long_run(owners)
    keys.revoke_key(Workspace(owners.db), owners.alice_id)
    ws = Workspace(owners.db)
    _wait(lambda: History(ws).run(run_id).status != "running", "the run to stop after its key was revoked")
    info = History(ws).run(run_id)
    assert info.status == "cancelled", (info.status, info.reason)
    stored = len(History(ws).summaries(run_id))
    assert stored < 31  # it did not run its 30 rounds
    paid = len(llm.requests)
    assert asyncio.run(_call(owners.server.url + "/mcp", owners.mallory, "list_versions", {}))  # others still answered
    assert len(llm.requests) == paid  # and the cancelled run sends nothing more
