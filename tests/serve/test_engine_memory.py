"""A server lives long: before, every LLM call's record was appended to the server's root client for the life of
the process (one dict per call of every request, never read), so any key holder grew the server's memory by
sending requests. Now the root keeps the latest ROOT_CALLS_KEPT; each request's trace keeps its own calls."""

from __future__ import annotations

import asyncio

from flowcore.llm.client import LLMSettings
from flowcore.serve import engine as eng
from flowcore.workspace.store import Workspace
from tests.serve.conftest import MATH_SEED


def test_the_servers_root_client_keeps_only_the_latest_call_records(fake_llm, tmp_path, monkeypatch):
    from flowcore.workspace import published

    monkeypatch.setattr(eng, "ROOT_CALLS_KEPT", 5, raising=False)  # (absent before the fix)
    ws = Workspace(tmp_path / "ws.db")
    published.publish(ws, "solver", MATH_SEED, "math", created_by="local")
    e = eng.Engine(ws, settings=LLMSettings(base_url=fake_llm.base_url, api_key="test-key", max_retries=0,
                                            cache=False))

    async def many() -> list:
        return [await e.run("solver", f"What is {i} + 1?") for i in range(12)]

    answers = asyncio.run(many())
    assert len({a.trace_id for a in answers}) == 12 and all(a.calls == 1 for a in answers)
    assert e.llm().usage.calls == 12 and len(e.llm().calls) == 5
