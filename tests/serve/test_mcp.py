"""The MCP tools through the SDK's own client: over stdio (``python -m flowcore mcp``) and over streamable HTTP
(/mcp of a real server, with and without keys)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from flowcore.workspace import published, traces
from flowcore.workspace.store import Workspace
from tests.helpers.served import stored_trace
from tests.serve.conftest import MATH_SEED, ROOT
from tests.serve.test_openai_api import server_db

TOOLS = {"check_workflow", "format_workflow", "run_workflow", "evaluate_workflow", "list_versions", "publish",
         "evolve_start", "evolve_progress"}


def data(result) -> object:
    """A tool result's structured content (or its text when it has none)."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        sc = result.structured_content
        return sc.get("result", sc) if isinstance(sc, dict) and set(sc) == {"result"} else sc
    return json.loads(result.content[0].text)


async def _stdio_session(db: str, llm_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    env.update(OPENAI_BASE_URL=llm_url, OPENAI_API_KEY="test-key", MERMAIDFLOW_MAX_RETRIES="0")
    params = StdioServerParameters(command=sys.executable, args=["-m", "flowcore", "mcp", "--db", db], env=env,
                                   cwd=str(ROOT))
    async with Client(params) as c:
        assert TOOLS <= {t.name for t in (await c.list_tools()).tools}
        checked = data(await c.call_tool("check_workflow", {"workflow": MATH_SEED, "task": "math"}))
        assert checked["valid"] is True
        bad = data(await c.call_tool("check_workflow", {"workflow": "flowchart TD\n  A --> B\n", "task": "math"}))
        assert bad["valid"] is False and bad["diagnostics"][0]["code"]
        canon = (await c.call_tool("format_workflow", {"workflow": MATH_SEED})).content[0].text
        assert canon.startswith("flowchart TD")
        pub = data(await c.call_tool("publish", {"workflow": MATH_SEED, "task": "math", "name": "agent-made",
                                                 "note": "from MCP"}))
        assert pub["model"] == "agent-made@v1" and pub["created_by"] == "local"
        versions = data(await c.call_tool("list_versions", {"name": "agent-made"}))
        assert [v["model"] for v in versions] == ["agent-made@v1"]
        ran = data(await c.call_tool("run_workflow", {"model": "agent-made", "problem": "What is 3 + 4?"}))
        assert ran["answer"].startswith("ECHO ") and "3 + 4" in ran["answer"] and ran["version"] == "agent-made@v1"
        by_text = data(await c.call_tool("run_workflow", {"workflow": MATH_SEED, "task": "math",
                                                          "problem": "What is 3 + 4?"}))
        assert by_text["answer"] == ran["answer"]
        err = await c.call_tool("run_workflow", {"model": "no-such", "problem": "x"})
        assert err.is_error and "no-such" in err.content[0].text
        err = await c.call_tool("publish", {"workflow": "flowchart TD\n  A --> B\n", "task": "math", "name": "x"})
        assert err.is_error and "error" in err.content[0].text
        err = await c.call_tool("publish", {"workflow": MATH_SEED, "task": "gsm8kk", "name": "x"})
        assert err.is_error and "task must be one of" in err.content[0].text and "'gsm8kk'" in err.content[0].text
        pub = data(await c.call_tool("publish", {"workflow": MATH_SEED, "task": "gsm8k", "name": "by-benchmark"}))
        assert pub["task"] == "gsm8k"  # a built-in benchmark names a task
        err = await c.call_tool("evolve_progress", {"run_id": 2 ** 64})
        assert err.is_error and "run_id must be a whole number from 1 to" in err.content[0].text
        err = await c.call_tool("run_workflow", {"workflow": MATH_SEED.replace("step by step", "FAIL"),
                                                 "task": "math", "problem": "x"})
        assert err.is_error and "LLM endpoint failed: HTTP 500" in err.content[0].text
        assert llm_url not in err.content[0].text and "scripted" not in err.content[0].text
        err = await c.call_tool("evaluate_workflow", {"benchmark": "gsm8k", "limit": 2,
                                                      "workflow": MATH_SEED.replace("step by step", "FAIL")})
        assert err.is_error and "no score: 2 of 2 problems could not be run (the workflow's LLM " \
            "endpoint failed: HTTP 500)" in err.content[0].text
        started = data(await c.call_tool("evolve_start", {"benchmark": "gsm8k", "rounds": 1, "candidates": 1,
                                                          "limit": 2, "mode": "programmatic"}))
        run_id = started["run_id"]
        for _ in range(600):  # the run is a background job in the MCP server's process
            progress = data(await c.call_tool("evolve_progress", {"run_id": run_id}))
            if progress["status"] != "running":
                break
            await asyncio.sleep(0.1)
        assert progress["status"] == "finished" and len(progress["rounds"]) == progress["planned"] == 2
        evaluated = data(await c.call_tool("evaluate_workflow", {"benchmark": "gsm8k", "model": "agent-made",
                                                                 "limit": 2}))
        assert evaluated["n"] == 2 and evaluated["score"] == 0.0  # an echo is never the right number


def test_mcp_over_stdio_drives_check_format_publish_run_evaluate_and_evolve(fake_llm, tmp_path):
    db = str(tmp_path / "ws.db")
    asyncio.run(_stdio_session(db, fake_llm.base_url))
    ws = Workspace(db)
    assert published.resolve(ws, "agent-made").note == "from MCP"
    assert {t.source for t in traces.list_traces(ws)} == {"mcp"}


async def _http_session(url: str, key: str | None) -> tuple[set, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        ran = data(await c.call_tool("run_workflow", {"model": "solver@v1", "problem": "over HTTP?"}))
        return names, ran


def test_mcp_over_streamable_http_on_the_served_app(server):
    names, ran = asyncio.run(_http_session(server.url + "/mcp", None))
    assert TOOLS <= names and ran["version"] == "solver@v1" and "over HTTP?" in ran["answer"]
    t = stored_trace(server_db(server), ran["trace_id"])
    assert t.source == "mcp" and t.created_by == "local"


def test_mcp_over_http_needs_the_key_where_keys_are_required(keyed):
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK wraps the refusal in its own error types
        asyncio.run(_http_session(keyed.url + "/mcp", None))
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for headers in ({}, {"Authorization": "Bearer mf_00000000_" + "a" * 43}):  # what the SDK got: a 401
        req = urllib.request.Request(keyed.url + "/mcp", data=hello, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 401
    names, ran = asyncio.run(_http_session(keyed.url + "/mcp", keyed.key))
    assert TOOLS <= names
    t = stored_trace(server_db(keyed), ran["trace_id"])
    assert t.created_by == "alice@example.com"  # the key's owner
