"""Fault tests against the scripted server (issue #14, items 1-4): garbled, truncated and empty replies are
retried and never cached; a caller's check decides what is cached; timeouts cancel the request at the server;
an evolution run under 30 % garbled / truncated / mixed faults or a 6 s outage ends with the same rounds and
scores as a fault-free run and no garbage in the cache."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from pathlib import Path

import pytest

from flowcore.evolution.loop import Evolution, EvolutionConfig
from flowcore.llm.client import LLM, LLMError, LLMSettings
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault, garble, message_text

QUESTIONS = [("What is 40 + 2?", "42"), ("What is 6 * 7?", "42"), ("What is 10 - 3?", "7"),
             ("What is 2 + 2?", "4"), ("What is 9 - 1?", "8"), ("What is 3 * 3?", "9")]


def _llm(srv: FakeLLMServer, ws: Workspace | None, **kw) -> LLM:
    settings = {"base_url": srv.base_url, "api_key": "sk-fault", "max_retries": 6, **kw}
    return LLM(LLMSettings(**settings), ws)


def _cache_texts(ws: Workspace) -> list[str]:
    return [json.loads(r["response_json"])["text"] for r in ws.query("SELECT response_json FROM llm_cache")]


# -- the client -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["garbled", "truncated", "empty", "mixed"])
def test_faulty_replies_are_retried_and_never_cached(ws, kind):
    prompts = [f"Say the number {i}." for i in range(24)]
    with FakeLLMServer(faults={kind: 0.3}, seed=3) as srv:
        llm = _llm(srv, ws)

        async def go():
            return await asyncio.gather(*(llm.chat(p) for p in prompts))

        replies = asyncio.run(go())
        injected = dict(srv.injected)
    assert sum(injected.values()) >= 3, injected  # the faults did happen ...
    assert [r.text for r in replies] == prompts  # ... and every caller got the real reply (echo)
    assert sorted(_cache_texts(ws)) == sorted(prompts)  # the cache holds exactly those, nothing garbled
    assert llm.usage.calls == len(prompts)


def test_a_garbled_transfer_is_told_from_the_bytes_on_the_wire_and_never_cached(ws):
    import random

    broken = garble("The answer is 42.", random.Random(1))
    with pytest.raises(UnicodeDecodeError):
        broken.decode("utf-8")
    script = [Fault(body="The answer is 42.", garbled=True), "The answer is 42."]
    with FakeLLMServer(script) as srv:
        llm = _llm(srv, ws, max_retries=2)
        reply = asyncio.run(llm.chat("hello there"))
    assert reply.text == "The answer is 42." and len(srv.requests) == 2  # asked again, the good one kept
    assert _cache_texts(ws) == ["The answer is 42."]


def test_a_caller_check_decides_what_is_cached(ws):
    script = ["not json at all", '{"ok": true}']
    with FakeLLMServer(script) as srv:
        llm = _llm(srv, ws, max_retries=2)

        def wants_json(text: str) -> str | None:
            try:
                json.loads(text)
            except ValueError:
                return "not JSON"
            return None

        reply = asyncio.run(llm.chat("give json", accept=wants_json))
        assert reply.text == '{"ok": true}' and reply.accepted and len(srv.requests) == 2
        assert _cache_texts(ws) == ['{"ok": true}']
        # never acceptable: the last reply comes back marked, after 1 + max_retries tries, and is not cached
        bad = asyncio.run(llm.chat("another", accept=lambda t: "never"))
        assert not bad.accepted and bad.text == '{"ok": true}' and len(srv.requests) == 5
        assert _cache_texts(ws) == ['{"ok": true}']
        # a cached reply the caller now rejects is asked again
        n = len(srv.requests)
        asyncio.run(llm.chat("give json", accept=lambda t: "changed my mind"))
        assert len(srv.requests) == n + 3


def test_a_reply_that_stays_garbled_is_an_endpoint_error_not_an_answer(ws):
    with FakeLLMServer(faults={"garbled": 1.0}) as srv:
        llm = _llm(srv, ws, max_retries=2)
        with pytest.raises(LLMError, match="malformed reply after 3 attempt") as info:
            asyncio.run(llm.chat("hi"))
    assert info.value.transient and len(srv.requests) == 3 and _cache_texts(ws) == []
    assert llm.usage.errors == 3


def test_a_timed_out_request_is_cancelled_at_the_server():
    """A slow server (2 s per reply), a 0.3 s timeout, concurrency 4, 12 calls: the server never holds more
    requests than the client's concurrency, and it sees every timed-out client leave."""
    with FakeLLMServer(latency=2.0) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", timeout=0.3, max_retries=1, concurrency=4))

        async def go():
            return await asyncio.gather(*(llm.chat(f"q{i}") for i in range(12)), return_exceptions=True)

        start = time.perf_counter()
        results = asyncio.run(go())
        took = time.perf_counter() - start
        time.sleep(0.3)
        left = srv.in_flight
    assert all(isinstance(r, LLMError) and "timed out" in str(r) and r.transient for r in results)
    assert srv.max_in_flight <= 4, srv.max_in_flight  # the bug this guards against held 3 x the limit
    assert left == 0 and srv.dropped >= 12  # each abandoned attempt was dropped, none kept running
    assert took < 12  # bounded: 3 waves of 2 attempts of 0.3 s (+ backoff), not 12 x 2 s


def test_an_abandoned_problem_cancels_its_request(ws):
    """The harness's per-problem timeout cancels the LLM call under it (the server sees the client go)."""
    from flowcore.tasks import Problem, evaluate

    # 10 s: past the deadline an attempt in flight is waited for (it may yet be the endpoint's failure) up to
    # 2 x 3 x the timeout (4.8 s), then cancelled and counted as the workflow's own time
    with FakeLLMServer(latency=10.0) as srv:
        llm = _llm(srv, None, timeout=30)

        async def runner(p):
            return (await llm.chat(p.question)).text, 0.0

        probs = [Problem(f"p{i}", "gsm8k", f"q{i}", "1") for i in range(3)]

        async def go():
            srv.latency = 0.0
            await llm.chat("warm up")  # the client and the endpoint's metadata are ready before the clock runs
            srv.latency = 10.0
            return await evaluate(runner, probs, timeout=0.8)

        report = asyncio.run(go())
        time.sleep(0.3)
        assert srv.in_flight == 0 and srv.dropped == 3
    # Each call was its own problem's work (the endpoint answered nothing wrong, only slowly): wrong answers
    assert all("own work took more than 0.8s" in r.error and not r.errored for r in report.results)


# -- evolution under faults --------------------------------------------------------------------------------------

def _variants() -> list[str]:
    from tests.evolution.test_evolve_loop import _variants as v

    return v()


def responder(produced: set[str]):
    """A pure function of the request (so a retried call gets the same reply): the optimizer proposes a
    variant chosen by the prompt's hash, the judge scores what it is shown, the executor answers right or
    wrong depending on the workflow's prompt text (so scores differ between workflows)."""
    variants = _variants()

    def h(text: str) -> int:
        return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)

    def respond(req: dict) -> str:
        text = message_text(req)
        if "workflow optimizer of MermaidFlow" in text:
            out = f"Add a check.\n```mermaid\n{variants[h(text) % len(variants)]}```"
        elif "judge of MermaidFlow" in text:
            n = len(re.findall(r"^Candidate \d+ \(", text, re.MULTILINE))
            out = json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": (h(text) >> i) % 10,
                                          "complexity_balance": 7, "prompt_quality": 6, "rationale": 5}
                                         for i in range(n)]})
        else:
            q = next((a for qq, a in QUESTIONS if qq in text), "0")
            out = f"The answer is {q if h(text) % 3 else '0'}."
        produced.add(out)
        return out

    return respond


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "gsm8k_small.jsonl"
    p.write_text("".join(json.dumps({"question": q, "answer": f"#### {a}"}) + "\n" for q, a in QUESTIONS))
    return p


def _evolve(tmp_path: Path, name: str, data: Path, monkeypatch, *, faults=None, outage_after_seed=0.0,
            retries: int = 6):
    produced: set[str] = set()
    with FakeLLMServer(responder(produced), faults=faults, seed=7) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fault")
        monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", str(retries))
        ws = Workspace(tmp_path / f"{name}.db")
        hook = (lambda s: s["round"] == 0 and srv.outage(outage_after_seed)) if outage_after_seed else None
        evo = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=3, candidates=2, data_path=str(data)),
                        progress=hook)
        result = evo.run()
        stats = {"injected": dict(srv.injected), "refused": srv.refused}
    rows = [(r["round"], r["status"], r["score"], r["workflow_text"], r["operator"])
            for r in evo.history.rounds(result["run_id"])]
    cached = _cache_texts(ws)
    garbage = [t for t in cached if t not in produced]
    errors = sum(1 for r in ws.query("SELECT error FROM llm_calls") if r["error"])
    return result, rows, garbage, len(cached), errors, stats


def test_evolution_under_faults_matches_the_fault_free_run(tmp_path, monkeypatch, data):
    monkeypatch.delenv("MERMAIDFLOW_BUDGET_USD", raising=False)
    clean, rows, garbage, n_cached, errors, _ = _evolve(tmp_path, "clean", data, monkeypatch)
    assert clean["status"] == "finished" and errors == 0 and not garbage
    assert all(r[1] == "ok" for r in rows) and len({r[2] for r in rows}) > 1  # scores differ by workflow
    figures = []
    for kind in ("garbled", "truncated", "mixed"):
        res, got, garbage, cached, errors, stats = _evolve(tmp_path, kind, data, monkeypatch, faults={kind: 0.3})
        figures.append(f"{kind}: {sum(stats['injected'].values())} faults, {errors} failed calls, "
                       f"{cached} cache rows, {len(garbage)} garbage")
        assert res["status"] == "finished", res
        assert got == rows, f"{kind}: rounds differ from the fault-free run"
        assert garbage == [] and errors > 0
    # the client's own retries (1, ~1 s of back-off) cannot ride out 6 s: the round's back-off must
    res, got, garbage, cached, errors, stats = _evolve(tmp_path, "outage", data, monkeypatch, outage_after_seed=6.0,
                                                       retries=1)
    figures.append(f"outage 6 s: {stats['refused']} hung up, {errors} failed calls, {len(garbage)} garbage")
    assert res["status"] == "finished" and got == rows and garbage == [] and errors > 0
    print("\n".join(figures))


def test_a_replacement_character_in_well_formed_json_is_the_models_text(ws):
    """A transfer glitch breaks the bytes (above: retried, never cached); U+FFFD or a lone surrogate escape in
    a body that parsed is what the model (or the server's detokenizer) wrote: returned at once, cached, replayed
    (a lone surrogate, which cannot be stored, as "?")."""
    with FakeLLMServer(["Not sure \ufffd", "half \ud800"]) as srv:
        llm = _llm(srv, ws, max_retries=0)
        first = asyncio.run(llm.chat("odd one"))
        assert first.text == "Not sure \ufffd" and first.accepted and len(srv.requests) == 1
        again = asyncio.run(llm.chat("odd one"))
        lone = asyncio.run(llm.chat("lone"))
    assert again.cached and again.text == first.text and len(srv.requests) == 2
    assert lone.text == "half ?"
    assert sorted(_cache_texts(ws)) == ["Not sure \ufffd", "half ?"]
