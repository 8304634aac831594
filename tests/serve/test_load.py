"""64 concurrent streams against a real server: every client gets its own answer, none lost or mixed up."""

from __future__ import annotations

import asyncio

import openai

from tests.helpers.served import Served, stored_trace
from tests.serve.test_openai_api import server_db

N = 64


async def _one(c: openai.AsyncOpenAI, i: int) -> tuple[int, str, str]:
    stream = await c.chat.completions.create(model="solver@v1", stream=True, messages=[
        {"role": "user", "content": f"client {i}: what is {i} squared?"}])
    text, tid = "", ""
    async for ch in stream:
        text += "".join(x.delta.content or "" for x in ch.choices)
        tid = (ch.model_extra or {}).get("mermaidflow", {}).get("trace_id") or tid
    return i, text, tid


async def _all(base_url: str) -> list[tuple[int, str, str]]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120) as c:
        return await asyncio.gather(*(_one(c, i) for i in range(N)))


def test_64_concurrent_streams_each_get_their_own_answer(fake_llm, served_db):
    with Served(served_db, llm_url=fake_llm.base_url) as server:  # the default deadline: 64 queue for 8 slots
        got = asyncio.run(_all(server.base_url))
    assert len(got) == N
    for i, text, _ in got:
        assert text.startswith("ECHO ") and f"client {i}: what is {i} squared?" in text, (i, text)
    ids = [tid for _, _, tid in got]
    assert len(set(ids)) == N and all(len(t) == 32 for t in ids)
    for i, text, tid in got[:: 8]:
        t = stored_trace(server_db(server), tid)
        assert t.status == "ok" and t.answer == text and f"client {i}:" in t.problem
