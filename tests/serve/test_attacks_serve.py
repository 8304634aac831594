"""Outside attacks on the serving layer (issue 27, DESIGN §12): each test fails on main today, through a real
``flowcore serve`` process and real clients. Each says what the attack does, what happens, what should happen,
and the direction of a fix."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flowcore.workspace import keys, published
from flowcore.workspace import settings as saved_settings
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.revproxy import ReverseProxy
from tests.helpers.served import Served, stored_trace
from tests.serve.conftest import MATH_SEED, ROOT, alice_and_mallory_keys
from tests.serve.test_mcp_spending import _result

HIJACK = MATH_SEED.replace("step by step", "and always answer 13")


@pytest.fixture
def alice_and_mallory(tmp_path, fake_llm):
    """A keyed server (as beyond loopback) whose workspace has alice's ``solver``; mallory holds a valid key."""
    db = tmp_path / "ws.db"
    _, alice, mallory = alice_and_mallory_keys(db)
    with Served(db, llm_url=fake_llm.base_url, extra=["--require-key"]) as s:
        yield s, alice, mallory, db


async def _mcp_call(url: str, headers: list[tuple[str, str]], tool: str, args: dict) -> object:
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        return _result(await c.call_tool(tool, args))


# Attack: two Authorization headers. The guard (flowcore/serve/guard.py) folds the headers into a dict, so the
# LAST one is the key it verifies; the MCP tools (mcp_tools._caller) read ctx.headers, a Starlette Headers, whose
# .get returns the FIRST. Mallory sends "Bearer nobody" first and her valid key last: the guard lets her in, the
# tool sees no key and takes her for "local", the server's own operator, who may add versions to any name.
# Happens: mallory's workflow becomes solver@v2, recorded as published by "local"; every caller of `solver` now
# runs it. Should: the publish is refused (the name is alice's) and nothing is recorded as "local"; a request
# with more than one Authorization header is refused 400/401. Fix: the guard refuses duplicate Authorization
# headers, and the tools read the owner the guard put in scope["state"] instead of re-parsing headers.
def test_duplicate_authorization_headers_publish_over_anothers_name_as_local(alice_and_mallory):
    server, _alice, mallory, db = alice_and_mallory
    headers = [("Authorization", "Bearer nobody"), ("Authorization", f"Bearer {mallory}")]
    try:
        got = asyncio.run(_mcp_call(server.url + "/mcp", headers, "publish",
                                    {"workflow": HIJACK, "task": "math", "name": "solver"}))
    except Exception as exc:  # noqa: BLE001 - a refused request (401/400) is the wanted outcome
        got = ("refused", repr(exc))
    latest = published.resolve(Workspace(db), "solver")
    assert (latest.model_id, latest.created_by) == ("solver@v1", "alice@example.com"), got


def _chain(n: int) -> str:
    """A workflow of n Custom nodes in a row with no Return node: ~55 bytes a node, rejected by the checker only
    after it was read whole."""
    lines = ["flowchart TD", "    %% @prompt r: Solve it.", '    PROBLEM(["Problem"])']
    prev = "PROBLEM"
    for i in range(n):
        lines += [f'    N{i}["Custom<br/>(role: r)"]', f"    {prev} --> N{i}"]
        prev = f"N{i}"
    return "\n".join(lines)


# Attack: MCP run_workflow with a workflow text just under the 1 MiB body cap (13,000 nodes, ~0.7 MB; 16,000 fit under it). The tool
# is async and calls engine.run_text, which parses and prepares the text synchronously ON THE EVENT LOOP
# (~4 s for this text, ~8 s at 16,000 nodes, on an idle core). Happens: for those seconds the whole server is
# frozen: /health, every other client's chat and stream wait (measured: /health answered after 7.8 s at 16,000 nodes). Should:
# one caller's input never stalls the others: /health answers within 1.5 s while the call runs (and the text is
# refused early when it is over a node cap). Fix: parse/prepare in a worker thread (asyncio.to_thread), and a cap
# on a submitted workflow's size/nodes for MCP run/evaluate/check/format/publish/evolve.
def test_a_huge_workflow_in_mcp_run_freezes_the_whole_server(server):
    text = _chain(13_000)
    assert len(text) < 1 << 20  # under the server's body cap: nothing refuses it at the door
    done, out = threading.Event(), {}

    def call() -> None:
        try:
            out["r"] = asyncio.run(_mcp_call(server.url + "/mcp", [], "run_workflow",
                                             {"problem": "1+1", "workflow": text, "task": "math"}))
        except Exception as exc:  # noqa: BLE001 - whatever it answers, only the others' wait is measured
            out["r"] = repr(exc)
        finally:
            done.set()

    threading.Thread(target=call, daemon=True).start()
    worst, start = 0.0, time.monotonic()
    with httpx.Client(timeout=60) as http:
        while not done.is_set() and time.monotonic() - start < 40:
            t = time.monotonic()
            assert http.get(server.url + "/health").status_code == 200
            worst = max(worst, time.monotonic() - t)
            time.sleep(0.05)
    done.wait(30)
    assert worst < 1.5, f"/health waited {worst:.1f} s behind one MCP run_workflow call ({out.get('r')!r:.200})"


@pytest.fixture
def alice_runs(tmp_path):
    """A keyed server whose scripted endpoint is slow enough that alice's evolution run is still going."""
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    _, alice = keys.create_key(ws, "alice-ci", "alice@example.com")
    _, mallory = keys.create_key(ws, "mallory-ci", "mallory@example.com")
    ws.close_all()
    llm = FakeLLMServer(lambda request: "The answer is 42", latency=0.2).start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"]) as s:
            yield s, alice, mallory
    finally:
        llm.stop()


# Attack: the same two Authorization headers against evolve_progress, which hides another owner's run from a key
# ("a key reads only its owner's runs"). With "Bearer nobody" first and her own valid key last, mallory passes the
# guard while the tool sees no key at all, the loopback operator's view: every run is readable. Happens: mallory
# reads alice's run (benchmark, status, every round's score and operator). Should: the same "no evolution run N
# started by mallory@example.com" as with her key alone, or a 400/401 for the ambiguous header. Fix: as above; one
# identity per request, set by the guard (scope state), which the tools read.
def test_duplicate_authorization_headers_read_another_owners_evolution_run(alice_runs):
    server, alice, mallory = alice_runs
    url = server.url + "/mcp"
    run = asyncio.run(_mcp_call(url, [("Authorization", f"Bearer {alice}")], "evolve_start",
                                {"benchmark": "gsm8k", "rounds": 30, "candidates": 2, "limit": 5, "mode": "llm"}))
    assert isinstance(run, dict), run
    alone = asyncio.run(_mcp_call(url, [("Authorization", f"Bearer {mallory}")], "evolve_progress",
                                  {"run_id": run["run_id"]}))
    assert alone[0] == "error", alone  # the rule holds with one header
    try:
        got = asyncio.run(_mcp_call(url, [("Authorization", "Bearer nobody"), ("Authorization", f"Bearer {mallory}")],
                                    "evolve_progress", {"run_id": run["run_id"]}))
    except Exception as exc:  # noqa: BLE001 - a refused request is the wanted outcome
        got = ("refused", repr(exc))
    assert not isinstance(got, dict), f"mallory read alice's run {run['run_id']}: {got}"


# Attack: a cross-owner cache oracle. The server's LLM cache is one for all callers, keyed by the prompt alone, and
# every answer reports its cost (mermaidflow.cost, 0 for a cached call) and comes back at once when cached.
# Mallory, holding her own key, asks a guessed question word for word ("will Bob be let go in March?"): a cost
# of 0 and no call to the endpoint tells her that alice (or anyone) asked exactly that. Happens: mallory's call
# is answered from alice's cached reply, cost 0.0, the endpoint never asked. Should: a key owner's request never
# answers from, or reveals, another owner's cached calls (the endpoint is asked again for mallory). Fix: make the
# served cache key include the caller's owner (or turn the cache off for served calls).
def test_the_llm_cache_tells_a_key_holder_what_another_owner_asked(alice_and_mallory, fake_llm):
    server, alice, mallory, _db = alice_and_mallory
    secret = "Will Bob Example be let go in March? (question 7f3a)"
    body = {"model": "solver", "messages": [{"role": "user", "content": secret}]}
    before = len(fake_llm.requests)
    a = httpx.post(server.base_url + "/chat/completions", json=body, timeout=60,
                   headers={"Authorization": f"Bearer {alice}"})
    assert a.status_code == 200 and a.json()["mermaidflow"]["cost"] > 0, a.text
    m = httpx.post(server.base_url + "/chat/completions", json=body, timeout=60,
                   headers={"Authorization": f"Bearer {mallory}"})
    assert m.status_code == 200, m.text
    asked = len(fake_llm.requests) - before
    assert (asked, m.json()["mermaidflow"]["cost"] > 0) == (2, True), \
        f"mallory's call was answered from alice's: the endpoint was asked {asked} time(s), " \
        f"mallory was told cost {m.json()['mermaidflow']['cost']}"


# Attack: a key made the way DESIGN §12 and the README say, `keys create NAME`, belongs to "local" (the --owner
# default), and "local" is also who the server's own command line is: the one owner that may add versions to any
# name. Whoever is handed such a key (a CI job, a contractor) reaches the server from elsewhere and publishes over
# alice's `solver`. Happens: mallory-with-a-default-key's workflow becomes solver@v2, recorded as published by
# "local", indistinguishable from the operator on the server. Should: a remote key holder never has the local
# operator's rights and is recorded as who they are (the key's name/id at least): the publish is refused. Fix:
# `keys create` requires --owner (or defaults it to the key's name), "local" is reserved for key-less loopback
# callers, and the publish/trace records carry the key id.
def test_a_key_made_with_keys_create_name_gets_the_local_operators_rights(tmp_path, fake_llm):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    ws.close_all()
    made = subprocess.run([sys.executable, "-m", "flowcore", "keys", "create", "contractor-ci", "--db", str(db)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    key = made.stdout.split()[0]
    with Served(db, llm_url=fake_llm.base_url, extra=["--require-key"]) as server:
        got = asyncio.run(_mcp_call(server.url + "/mcp", [("Authorization", f"Bearer {key}")], "publish",
                                    {"workflow": HIJACK, "task": "math", "name": "solver"}))
    latest = published.resolve(Workspace(db), "solver")
    assert (latest.model_id, latest.created_by) == ("solver@v1", "alice@example.com"), got


def _mcp_call_then_hang_up(server: Served, key: str, tool: str, args: dict, until: Callable[[], bool]) -> None:
    """An MCP session over plain HTTP (initialize, initialized), then tools/call on a raw socket that is closed
    without a word once ``until()`` holds (at most 20 s): a client that crashed, lost its network or was killed."""
    h = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
         "Content-Type": "application/json"}
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "gone", "version": "1"}}}
    r = httpx.post(server.url + "/mcp", headers=h, json=hello, timeout=30)
    assert r.status_code == 200, r.text
    h |= {"Mcp-Session-Id": r.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
    assert httpx.post(server.url + "/mcp", headers=h, timeout=30,
                      json={"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": tool, "arguments": args}}).encode()
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head.encode() + body)
        end = time.monotonic() + 20
        while not until() and time.monotonic() < end:
            time.sleep(0.05)


@pytest.fixture
def slow_endpoint(tmp_path):
    """A keyed server over a scripted endpoint that answers every call after 0.3 s, or 15 s for a HANG."""
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="mallory@example.com")
    _, key = keys.create_key(ws, "mallory-ci", "mallory@example.com")
    ws.close_all()
    llm = FakeLLMServer(lambda r: "The answer is 42", latency=0.3, delays={"HANG": 15.0}).start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"]) as s:
            yield s, llm, key
    finally:
        llm.stop()


# Attack: MCP evaluate_workflow on 500 problems, then the client drops its connection (no DELETE, no
# notifications/cancelled: it crashed, or it does this on purpose, again and again). Happens: the evaluation
# goes on in the session, on the server's endpoint and budget, for every one of the 500 problems (measured: 20
# calls when the client left, 84 five seconds later); evaluate has no deadline, no per-key bound, and nothing
# ties it to its caller (unlike evolve_start's 2 runs at a time). Should: a client that disconnects cancels its
# workflow's calls (issue 27): no new endpoint calls a few seconds after it left. Fix: cancel a tool call when the
# POST stream that carries its answer closes (or serve MCP stateless, the call bound to its request), and give
# evaluate the served deadline and a per-owner bound like evolve_start's.
def test_an_mcp_evaluate_goes_on_spending_after_its_client_hung_up(slow_endpoint):
    server, llm, key = slow_endpoint
    _mcp_call_then_hang_up(server, key, "evaluate_workflow",
                           {"benchmark": "gsm8k", "model": "solver", "split": "test", "limit": 500},
                           until=lambda: len(llm.requests) >= 8)
    time.sleep(2.0)  # room for the cancellation to reach every call
    settled = len(llm.requests)
    time.sleep(3.0)
    assert len(llm.requests) == settled, \
        f"{len(llm.requests) - settled} new endpoint calls 2-5 s after the MCP client hung up"


# Attack: the same hang-up during MCP run_workflow, whose one call takes 15 s. Happens: the server's call to the
# endpoint is still open 3 s after the client left (the scripted endpoint, like llama.cpp, drops a request whose
# client left, so in_flight counts the calls the server still waits for). Should: cancelled, as the OpenAI path
# does (test_a_client_that_disconnects_cancels_its_workflows_calls). Fix: as above.
def test_an_mcp_run_is_not_cancelled_when_its_client_hangs_up(slow_endpoint):
    server, llm, key = slow_endpoint
    _mcp_call_then_hang_up(server, key, "run_workflow", {"problem": "HANG 1+1", "model": "solver"},
                           until=lambda: llm.in_flight == 1)
    assert llm.in_flight == 1, "the run's call never reached the endpoint"
    time.sleep(3.0)
    assert llm.in_flight == 0, "the MCP run's endpoint call is still open 3 s after its client hung up"


# Attack: the loopback server without keys put behind nginx with its default proxy settings. A bare
# `location / { proxy_pass http://127.0.0.1:8700; }` sets Host to the upstream's 127.0.0.1:8700 and adds NO
# X-Forwarded-For / Forwarded / X-Real-IP (those take explicit proxy_set_header lines; HAProxy without `option
# forwardfor`, socat and ssh tunnels add none either). The guard's docstring names this very nginx default, but
# spots a proxy only by those headers. Happens: the world reaches the proxy and runs the workflows on the
# server's LLM key with no key: 200. Should: refused (401) as the guard promises for proxied requests. Fix: the
# server cannot see a header-less proxy, so the promise needs a policy: keys required by default (loopback
# without keys an explicit opt-in such as --no-keys), or at least whenever the workspace has keys; the README/
# guard docstring should stop claiming nginx's default is caught.
# Decision (fix): keys are required by default, on loopback too; keyless is the explicit `serve --no-keys`
# (loopback only), documented as never to be put behind a proxy or tunnel. So the server below is started the
# default way (no --no-keys: Served(no_keys=False)); a --no-keys server behind a header-less proxy is the
# operator's documented choice, which no server can tell from a local caller.
def test_a_proxy_that_adds_no_forwarding_header_lets_the_world_in_without_a_key(served_db, fake_llm):
    ask = {"model": "solver", "messages": [{"role": "user", "content": "who am I?"}]}
    with Served(served_db, llm_url=fake_llm.base_url, no_keys=False) as server, \
            ReverseProxy(server.port, forward=False, rewrite_host=True) as proxy:
        r = httpx.post(proxy.url + "/v1/chat/completions", json=ask, timeout=30)
        assert not any(b"forward" in h.lower() or b"x-real-ip" in h.lower() for h in proxy.heads)
    assert r.status_code == 401, f"through a default nginx-like proxy, no key: {r.status_code} {r.text[:120]}"


# Attack: a NUL character in the problem on a PostgreSQL workspace. JSON allows "\u0000" and the SQLite path
# stores it, but PostgreSQL TEXT refuses it. Happens: 200 with the answer, and the trace writer logs
# "PostgreSQL text fields cannot contain NUL (0x00) bytes": the request has no trace (a caller chooses to leave
# no record of what they ran, on the server's key). Should: every served request
# stores a trace (issue 27), or the request is refused with 400 naming the character. Fix: strip or escape NUL in
# what is stored (problem, answer, spans' output and error), or refuse it in parse_chat.
def test_a_nul_in_the_problem_leaves_no_trace_on_postgresql(pg_server, fake_llm):
    url = pg_server.new_schema()
    ws = Workspace(url)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    ws.close_all()
    with Served(url, llm_url=fake_llm.base_url) as server:
        plain = httpx.post(server.base_url + "/chat/completions", timeout=60, json={
            "model": "solver", "messages": [{"role": "user", "content": "what is 1+1?"}]})
        assert stored_trace(url, plain.json()["mermaidflow"]["trace_id"]) is not None  # the control: stored
        r = httpx.post(server.base_url + "/chat/completions", timeout=60, json={
            "model": "solver", "messages": [{"role": "user", "content": "what is 1+1?\u0000 nobody sees this"}]})
        time.sleep(1.0)
        log = "".join(server.log)
    if r.status_code == 400:
        return  # refused, naming the character: what a fix may do
    assert r.status_code == 200, r.text
    trace = stored_trace(url, r.json()["mermaidflow"]["trace_id"], seconds=3)
    assert trace is not None, f"answered 200 but no trace stored; server log: {log[-300:]}"


# Attack: a NUL in the model name on a PostgreSQL workspace ("solver\u0000"), on /v1/chat/completions and
# /v1/models/{id}. MODEL_RE lets any character but '@' into NAME, and the lookup sends it to PostgreSQL, which
# refuses NUL in a text parameter. Happens: 500 internal_error on both routes. Should: 404 model_not_found
# (or 400 naming the bad model id), as on SQLite: an unknown model is a 404 (issue 27). Fix: parse_model accepts
# only names validate_name allows (letters, digits, space, _ - .) and answers 404 for anything else.
def test_a_nul_in_the_model_name_is_a_500_on_postgresql(pg_server, fake_llm):
    url = pg_server.new_schema()
    ws = Workspace(url)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    ws.close_all()
    with Served(url, llm_url=fake_llm.base_url) as server:
        chat = httpx.post(server.base_url + "/chat/completions", timeout=60, json={
            "model": "solver\u0000", "messages": [{"role": "user", "content": "1+1"}]})
        one = httpx.get(server.base_url + "/models/solver%00", timeout=60)
    got = [(chat.status_code, chat.json()["error"]["code"]), (one.status_code, one.json()["error"]["code"])]
    assert all(status in (400, 404) for status, _ in got), got


# Attack: evolve_start "at most 2 runs at a time" raced. The tool is a plain function, so the SDK runs each call
# in a worker thread; each call reads the list of live runs, then starts its run, then stores the new list, with
# no lock between the read and the write. Mallory sends 10 evolve_start calls at once (one session each).
# Happens: all start (measured: 8 of 8, 11 and 12 of 12), each up to 30 rounds of 8 candidates on 500 problems on
# the server's endpoint. Should: at most MAX_LIVE_RUNS (2) start, the others refused with the "at most 2 at a time" error.
# Fix: hold a lock from the count of live runs to the append (or count runs in the database in one transaction).
def test_concurrent_evolve_starts_pass_the_two_runs_bound(alice_runs):
    server, _alice, mallory = alice_runs
    url, h = server.url + "/mcp", [("Authorization", f"Bearer {mallory}")]
    cfg = {"benchmark": "gsm8k", "rounds": 30, "candidates": 2, "limit": 5, "mode": "llm"}

    async def many() -> list:
        return await asyncio.gather(*(_mcp_call(url, h, "evolve_start", cfg) for _ in range(10)),
                                    return_exceptions=True)

    got = asyncio.run(many())
    started = [g for g in got if isinstance(g, dict)]
    assert len(started) <= 2, f"{len(started)} evolution runs started at once: {[g['run_id'] for g in started]}"


# Attack: slow POST ("R-U-Dead-Yet") under the per-part bound. flowcore.serve.slow abandons a body whose next part
# is MERMAIDFLOW_BODY_SECONDS late, but sets no bound on the body as a whole: a body sent one byte every 0.5 s
# (here under a 1 s per-part bound) is never late, so a 1 MiB body may take six days. Ten such connections (any
# key holder; on loopback without keys, any local process) each hold a socket, a request task and a growing buffer
# for as long as they like. Happens: all 10 are still open after 7 s, 7x the bound. Should: a body has a total
# deadline (or a minimum rate) too; they are closed or refused (408) within a few times the bound. Fix: in
# body_deadline, also bound the time since the first body part (e.g. 4x body_seconds, or head + size / min-rate).
def test_a_body_trickled_under_the_per_part_bound_is_held_without_end(fake_llm, tmp_path):
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
    _, key = keys.create_key(ws, "slow", "mallory@example.com")
    ws.close_all()
    env = {"MERMAIDFLOW_HEAD_SECONDS": "1", "MERMAIDFLOW_BODY_SECONDS": "1"}
    with Served(db, llm_url=fake_llm.base_url, extra=["--require-key"], env=env) as server:
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(10)]
        for c in conns:
            c.sendall(head.encode() + b"{")
        open_, end = set(range(len(conns))), time.monotonic() + 7.0
        while time.monotonic() < end and open_:
            time.sleep(0.5)
            for i in list(open_):
                try:
                    conns[i].sendall(b" ")
                except OSError:
                    open_.discard(i)
        for c in conns:
            c.close()
    assert not open_, f"{len(open_)} of {len(conns)} bodies trickled a byte every 0.5 s still held after 7 s"


# Attack: the served engine reads the workspace's saved LLM settings with no regard to who saved them. In a team
# deployment the pages use saved settings only when an admin (MERMAIDFLOW_ADMINS) saved them: a member's
# ("settings a member saved before this rule are ignored", flowcore/ui/endpoints.py), since the server's key must
# never go to a URL a member typed. Engine.llm calls effective_llm_settings(ws) without that check. Mallory, a
# member, saved a base_url of her own (her listener; here on 127.0.0.1 and listed in MERMAIDFLOW_ENDPOINTS as a
# stand-in for a public host, which the team's egress policy lets through). Happens: every served request goes to
# mallory's listener with the server's OPENAI_API_KEY in its Authorization header. Should: the server ignores
# settings a non-admin saved (as the pages do) and sends its key only to the operator's endpoint. Fix: Engine.llm
# passes the same saved_ok (admin) check as flowcore.ui.endpoints.shared when MERMAIDFLOW_ADMINS / team mode.
def test_the_served_engine_sends_the_servers_key_to_a_members_saved_endpoint(tmp_path, fake_llm):
    theirs = FakeLLMServer(lambda request: "The answer is 42").start()
    try:
        db = tmp_path / "ws.db"
        ws = Workspace(db)
        published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com")
        _, alice = keys.create_key(ws, "alice-ci", "alice@example.com")
        saved_settings.save_llm_settings(ws, {"base_url": theirs.base_url}, saved_by="mallory@example.com")
        ws.close_all()
        env = {"OPENAI_API_KEY": "sk-the-servers-own-key", "MERMAIDFLOW_ADMINS": "alice@example.com",
               "MERMAIDFLOW_LOGIN": "1", "MERMAIDFLOW_ENDPOINTS": theirs.base_url}
        with Served(db, llm_url=fake_llm.base_url, extra=["--require-key"], env=env) as server:
            r = httpx.post(server.base_url + "/chat/completions", timeout=60,
                           headers={"Authorization": f"Bearer {alice}"},
                           json={"model": "solver", "messages": [{"role": "user", "content": "2+2?"}]})
        leaked = [h.get("authorization") for h in theirs.headers]
    finally:
        theirs.stop()
    assert not leaked, f"mallory's endpoint got {len(leaked)} call(s) carrying {leaked[:1]} (answer {r.status_code})"


# Attack: revoking another member's API key on the Settings page of a team deployment. The keys section lists every
# active key of the workspace in its Revoke box, whoever owns it, and revokes the one picked (pages/serve_parts.py
# keys_section): no check that the signed-in member owns it or is an admin. Happens: mallory, a plain member,
# revokes alice's CI key; alice's integration gets 401 from then on. Should: a member sees and revokes only her
# own keys (an admin any). Fix: filter the Revoke choices by owner == the signed-in member unless admin, and check
# it again in the revoke handler (keys.revoke_key(ws, id, by=user) refusing another owner's key).
def test_a_team_member_revokes_another_members_key_on_settings(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    for var in ("OPENAI_MODEL", "MERMAIDFLOW_BUDGET_USD", "MERMAIDFLOW_ENDPOINTS", "MERMAIDFLOW_HOSTS",
                "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    db = tmp_path / "ws.db"
    monkeypatch.setenv("MERMAIDFLOW_DB", str(db))
    monkeypatch.setenv("MERMAIDFLOW_LOGIN", "1")
    monkeypatch.setenv("MERMAIDFLOW_MEMBERS", "@team.example.org")
    monkeypatch.setenv("MERMAIDFLOW_ADMINS", "boss@team.example.org")
    ws = Workspace(db)
    rec, alice_key = keys.create_key(ws, "alice-ci", "alice@team.example.org", created_by="alice@team.example.org")
    ws.close_all()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.secrets["auth"] = {"redirect_uri": "http://127.0.0.1/oauth2callback", "cookie_secret": "x" * 32,
                          "client_id": "mermaidflow", "client_secret": "s",
                          "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"}
    at.user = {"is_logged_in": True, "email": "mallory@team.example.org", "email_verified": True}
    at.run()
    at.switch_page("pages/settings.py").run()
    assert not at.exception, at.exception
    pick = at.selectbox(key="keys_revoke_pick")
    if rec.id in pick.options or any(rec.id in str(o) for o in pick.options):
        pick.set_value(rec.id).run()
        at.button(key="keys_revoke").click().run()
    assert keys.verify_key(Workspace(db), alice_key, touch=False) is not None, \
        "mallory, a member, revoked alice's key from the Settings page"


# Attack: fill the published table, then make everyone's /v1/models slow. A key holder may publish under a name of
# her own without limit, each version up to the 1 MiB body cap (a 0.9 MB `%% @prompt` passes the checker in
# 10 ms). GET /v1/models (and MCP list_versions) runs published.list_published, `SELECT *`: every version's full
# text is read, on the event loop, to print 40 bytes of id per version. Happens: with 300 such versions (270 MB)
# each /v1/models reads them all: ~1.5 s on an idle core during which /health and every other client wait.
# Should: listing models costs what it lists: /health answers within 0.5 s, /v1/models within 1 s. Fix: list
# without the text column (SELECT name, version, created, created_by), off the event loop; cap a published text's
# size and the versions a key may add.
def test_big_published_versions_make_every_models_listing_freeze_the_server(alice_and_mallory):
    server, _alice, mallory, db = alice_and_mallory
    big = MATH_SEED.replace("%% @prompt solver: ", "%% @prompt solver: " + "x" * 900_000 + " ")
    got = asyncio.run(_mcp_call(server.url + "/mcp", [("Authorization", f"Bearer {mallory}")], "publish",
                                {"workflow": big, "task": "math", "name": "mallory-spam"}))
    # Since: a key holder's version holds at most MERMAIDFLOW_MCP_PUBLISH_MAX_CHARS (256 KiB), and at most
    # MERMAIDFLOW_MCP_PUBLISH_PER_HOUR (20) an hour (tests/serve/test_mcp_limits.py). The command line on the
    # server is not bounded so: the listing must still cost what it lists when it holds them.
    assert got[0] == "error" and "MERMAIDFLOW_MCP_PUBLISH_MAX_CHARS" in got[1], got
    ws = Workspace(db)
    for _ in range(300):  # what the operator's command line may publish
        published.publish(ws, "mallory-spam", big, "math", created_by="mallory@example.com")
    ws.close_all()
    h = {"Authorization": f"Bearer {mallory}"}
    worst, slowest, done = 0.0, 0.0, threading.Event()

    def poll() -> None:
        nonlocal worst
        with httpx.Client(timeout=60) as c:
            while not done.is_set():
                t = time.monotonic()
                c.get(server.url + "/health")
                worst = max(worst, time.monotonic() - t)
                time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        for _ in range(2):
            t = time.monotonic()
            assert httpx.get(server.base_url + "/models", headers=h, timeout=60).status_code == 200
            slowest = max(slowest, time.monotonic() - t)
    finally:
        done.set()
        poller.join(60)
    assert (worst < 0.5, slowest < 1.0) == (True, True), \
        f"/v1/models took {slowest:.1f} s and /health waited {worst:.1f} s behind it (300 versions of 0.9 MB)"
