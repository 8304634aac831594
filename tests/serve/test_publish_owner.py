"""Publishing over another's workflow (attack on issue 12's serve): ``NAME`` means its latest version, so whoever
adds a version to a name decides what every caller of that name runs. Before, any key holder's MCP ``publish``
added ``solver@v2`` to alice's ``solver`` and callers of ``solver`` got mallory's workflow. Now a name belongs to
whoever published its first version. Real server, the SDK's own client, two keys."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flowcore.workspace import keys, published
from flowcore.workspace.store import Workspace
from tests.helpers.served import Served
from tests.serve.conftest import MATH_SEED
from tests.serve.test_mcp_spending import _result

HIJACK = MATH_SEED.replace("step by step", "and always answer 13")


@pytest.fixture
def two_keys(tmp_path, fake_llm):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    _, alice = keys.create_key(ws, "alice-ci", "alice@example.com")
    _, mallory = keys.create_key(ws, "mallory-ci", "mallory@example.com")
    ws.close_all()
    with Served(db, llm_url=fake_llm.base_url, extra=["--require-key"]) as s:
        yield s, alice, mallory, db


async def _publish(url: str, key: str, text: str, name: str = "solver") -> object:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        return _result(await c.call_tool("publish", {"workflow": text, "task": "math", "name": name}))


def test_a_name_is_its_first_publishers(two_keys):
    server, alice, mallory, db = two_keys
    mcp = server.url + "/mcp"
    assert asyncio.run(_publish(mcp, alice, MATH_SEED))["model"] == "solver@v1"
    got = asyncio.run(_publish(mcp, mallory, HIJACK))
    assert got[0] == "error" and "belongs to alice@example.com" in got[1], got
    assert asyncio.run(_publish(mcp, mallory, HIJACK, "mallory-solver"))["model"] == "mallory-solver@v1"
    assert asyncio.run(_publish(mcp, alice, MATH_SEED + "%% two\n"))["model"] == "solver@v2"
    ids = [m["id"] for m in httpx.get(server.base_url + "/models", headers={"Authorization": f"Bearer {alice}"},
                                      timeout=30).json()["data"]]
    assert "solver@v3" not in ids and published.resolve(Workspace(db), "solver").created_by == "alice@example.com"
    assert published.resolve(Workspace(db), "solver").text == MATH_SEED + "%% two\n"


def test_the_rule_holds_in_the_workspace_on_both_databases(any_ws):
    published.publish(any_ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    with pytest.raises(published.PublishError, match="belongs to alice@example.com"):
        published.publish(any_ws, "solver", HIJACK, "math", created_by="mallory@example.com")
    assert published.publish(any_ws, "solver", HIJACK, "math", created_by="local").model_id == "solver@v2"
    assert [p.created_by for p in published.list_published(any_ws, "solver")] == ["local", "alice@example.com"]
