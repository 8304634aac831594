"""Outside attacks on a team deployment of ``flowcore serve`` (second round, DESIGN §12, docs/serve.md), each through
a real server process, real clients (httpx, the MCP SDK's own client) and the scripted endpoint on 127.0.0.1.

The threat: mallory holds one valid key; alice (another owner) uses the same server. A test named ``..._held``
checks an attack the server already withstands (it passes today and guards the defence); every other test FAILS on
today's main and says, in its docstring, what the fixed server does instead.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from flowcore.mermaid.reader import WorkflowSyntaxError, parse
from flowcore.serve.limits import quick_bound
from flowcore.workspace import keys, published
from flowcore.workspace.store import Workspace
from tests.helpers.served import Served
from tests.serve.conftest import MATH_SEED, alice_and_mallory_keys
from tests.serve.test_mcp_spending import _result

# alice's workflow: two LLM calls one after the other (a solver and a checker), as real published workflows have
TWO_STEP = """flowchart TD
    %% @prompt solver: Solve the math problem step by step. Put the final answer in \\boxed{} at the end.
    %% @prompt checker: Check the answer and restate it in \\boxed{}.
    PROBLEM(["Problem"])
    C1["Custom<br/>(role: solver)"]
    C2["Custom<br/>(role: checker)"]
    RETURN(["Return"])
    class PROBLEM,RETURN Interface
    class C1,C2 CustomOp
    PROBLEM -->|input| C1
    C1 --> C2
    C2 --> RETURN
"""
# mallory's own workflow text whose prompt makes the endpoint take long (a real one: "write 4,000 words")
HANGING = MATH_SEED.replace("step by step", "step by step. HANG")
T = TypeVar("T")


@pytest.fixture
def team(tmp_path, fake_llm):
    """A keyed server (as beyond loopback, --timeout 6) whose workspace has alice's two-step ``solver``, a key for
    alice and one for mallory."""
    db = tmp_path / "ws.db"
    _, alice, mallory = alice_and_mallory_keys(db, TWO_STEP, mallory="mallory")
    with Served(db, llm_url=fake_llm.base_url, extra=["--require-key", "--timeout", "6"]) as s:
        yield s, alice, mallory, db


def _ask(question: str) -> dict:
    return {"model": "solver", "messages": [{"role": "user", "content": question}]}


def _auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


async def _mcp(url: str, key: str, tool: str, args: dict) -> object:
    async with httpx2.AsyncClient(headers=[("Authorization", f"Bearer {key}")], timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        return _result(await c.call_tool(tool, args))


async def _while_flooded(flood: Callable[[int, asyncio.Event, Counter], Awaitable[None]], workers: int,
                         settle: float, victim: Callable[[], Awaitable[T]]) -> tuple[T, Counter]:
    """Mallory's flood: ``workers`` copies of ``flood(i, stop, tally)``, one every 0.1 s, each sending again as
    soon as its call ends and counting what it got in ``tally`` until ``stop``. ``settle`` s after the last one
    started, alice's ``victim()``; then up to 15 s for the flood's first answers (its calls were in flight all
    along, their answers come at their deadline), and the flood stops. What alice got, and the tally."""
    stop, tally = asyncio.Event(), Counter()

    async def staggered(i: int) -> None:
        await asyncio.sleep(i * 0.1)  # mallory's requests arrive all the time
        await flood(i, stop, tally)

    tasks = [asyncio.create_task(staggered(i)) for i in range(workers)]
    await asyncio.sleep(workers * 0.1 + settle)
    got = await victim()
    end = time.monotonic() + 15
    while not tally and time.monotonic() < end:
        await asyncio.sleep(0.1)
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return got, tally


# Attack: one key holder floods /v1/chat/completions. The served LLM calls of every owner share one concurrency
# limit (the workspace's `concurrency`, 8), and neither chat nor MCP run_workflow bounds what one owner has in
# flight. Mallory keeps 32 requests going (each asks something the endpoint takes long over: in the scripted
# endpoint a problem with HANG); alice's two-call workflow queues behind them for the LLM slots.
def test_one_key_holders_flood_of_chat_requests_makes_anothers_time_out(team):
    """Happens (today): alice's requests end 504 deadline_exceeded (2 of 3 in the run that found it, each after
    6.0 s) while /v1/models keeps answering in 0.05 s: the event loop is fine, the LLM slots are all mallory's.
    Fixed: a key owner's in-flight served calls are bounded (per-owner concurrency, e.g. a 429 beyond it, or a fair
    share of the LLM slots), so all of alice's requests are answered 200 while mallory floods."""
    server, alice, mallory, _db = team
    url = server.base_url + "/chat/completions"

    async def attack() -> tuple[list[tuple[int, float]], Counter]:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=200)) as c:
            async def flood(i: int, stop: asyncio.Event, codes: Counter) -> None:
                while not stop.is_set():
                    try:
                        codes[(await c.post(url, json=_ask(f"HANG {i}"), headers=_auth(mallory))).status_code] += 1
                    except httpx.HTTPError as exc:
                        codes[type(exc).__name__] += 1

            async def alices() -> list[tuple[int, float]]:
                got = []
                for k in range(3):
                    t = time.monotonic()
                    r = await c.post(url, json=_ask(f"What is {k} + 2?"), headers=_auth(alice))
                    got.append((r.status_code, round(time.monotonic() - t, 2)))
                return got

            return await _while_flooded(flood, 32, 2, alices)

    got, codes = asyncio.run(attack())
    assert sum(codes.values()) > 0, "the flood never reached the server"
    assert [s for s, _ in got] == [200, 200, 200], \
        f"alice's requests (status, seconds) under mallory's flood: {got}; mallory's answers: {dict(codes)}"


# Attack: within every per-owner bound. MCP allows mallory two evaluations at once (MCP_EVALS_PER_OWNER=2); each
# runs 4 problems at once through the served client, i.e. 8 LLM calls: every one of the server's LLM slots. Her
# workflow text asks what the endpoint takes long over, so each evaluation holds its slots up to the deadline.
def test_two_evaluations_within_the_per_owner_bound_hold_every_llm_slot(team):
    """Happens (today): alice's chat request, sent 2 s after mallory's two evaluate_workflow calls, waits for
    the slots until the evaluations hit the 6 s deadline (6.1 s in the run that found it, on a workflow that
    otherwise answers in 0.1 s). Fixed: an owner's evaluations never take all of the served LLM slots (their
    concurrency is part of the owner's share), so alice is answered at once: within 2 s."""
    server, alice, mallory, _db = team

    async def attack() -> tuple[int, float, list]:
        evals = [asyncio.create_task(_mcp(server.url + "/mcp", mallory, "evaluate_workflow",
                                          {"benchmark": "gsm8k", "workflow": HANGING, "limit": 40}))
                 for _ in range(2)]
        await asyncio.sleep(2)
        async with httpx.AsyncClient(timeout=60) as c:
            t = time.monotonic()
            r = await c.post(server.base_url + "/chat/completions", json=_ask("What is 2 + 2?"), headers=_auth(alice))
            took = time.monotonic() - t
        return r.status_code, took, await asyncio.gather(*evals, return_exceptions=True)

    status, took, evals = asyncio.run(attack())
    assert any("deadline" in str(e) for e in evals), f"mallory's evaluations did not hold their slots: {evals}"
    assert status == 200 and took < 2.0, f"alice's request waited {took:.2f} s for mallory's evaluations ({status})"


_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}
_MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# Attack: MCP sessions. /mcp is the SDK's stateful streamable HTTP manager, which by default keeps at most 10,000
# open sessions on the whole server, each until the client deletes it or 30 minutes pass idle, with no bound per
# caller. Mallory opens sessions with plain `initialize` POSTs and never deletes them.
def test_one_key_holder_opens_every_mcp_session_and_locks_everyone_out(tmp_path):
    """Happened (before the fix): all 10,000 of mallory's initialize calls were answered 200 (~40 MB of server
    memory per 1,000), then alice's own `initialize` was a 503 "Too many open sessions" for the 30 minutes the
    sessions live idle. Fixed: an owner holds at most MERMAIDFLOW_MCP_SESSIONS_PER_OWNER (here 5) open sessions;
    past that his `initialize` is a 429 naming the setting, alice's is answered 200, and a session mallory
    deletes frees its place."""
    db = tmp_path / "ws.db"
    ws = Workspace(db)
    _, alice = keys.create_key(ws, "alice-ci", "alice@example.com")
    _, mallory = keys.create_key(ws, "mallory-ci", "mallory")
    ws.close_all()
    with Served(db, llm_url=None, extra=["--require-key"], env={"MERMAIDFLOW_MCP_SESSIONS_PER_OWNER": "5"}) as server:
        async def attack() -> tuple[Counter, list[str], str, httpx.Response, int]:
            codes: Counter = Counter()
            ids: list[str] = []
            refusal = ""
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=8)) as c:
                gate = asyncio.Semaphore(8)

                async def one() -> None:
                    nonlocal refusal
                    async with gate:
                        r = await c.post(server.url + "/mcp", json=_INIT, headers={**_MCP_HEADERS, **_auth(mallory)})
                        codes[r.status_code] += 1
                        if r.status_code == 200:
                            ids.append(r.headers["mcp-session-id"])
                        else:
                            refusal = r.text

                await asyncio.gather(*(one() for _ in range(40)))
                r = await c.post(server.url + "/mcp", json=_INIT, headers={**_MCP_HEADERS, **_auth(alice)})
                gone = await c.delete(server.url + "/mcp", headers={**_MCP_HEADERS, **_auth(mallory),
                                                                   "mcp-session-id": ids[0],
                                                                   "mcp-protocol-version": "2025-06-18"})
                again = await c.post(server.url + "/mcp", json=_INIT, headers={**_MCP_HEADERS, **_auth(mallory)})
            return codes, ids, refusal, r, again.status_code if gone.status_code < 300 else -gone.status_code

        codes, ids, refusal, alices, again = asyncio.run(attack())
    assert codes == Counter({200: 5, 429: 35}), f"mallory's 40 initialize calls: {dict(codes)}"
    assert "MERMAIDFLOW_MCP_SESSIONS_PER_OWNER" in refusal, refusal
    assert alices.status_code == 200, f"alice's MCP initialize after mallory's: {alices.status_code} {alices.text[:200]}"
    assert again == 200, f"mallory's initialize after deleting one of her sessions: {again}"


# Lexer edge cases against the quick count that decides whether a text is parsed at all (flowcore/serve/limits.py):
# a text whose quick bound is under the limits is never read before it is checked and run, so a bound under what
# the reader builds would let any size through. Link tokens of every kind (edge ids, dotted with text, `<-->`,
# `--o`, `x--x`, long `---->`), `&` chains, `end` ending a statement, subgraphs linked as nodes, markdown strings
# across lines, U+2028/U+2029, `@{ }` node data holding `&` and `-->`, YAML front matter, comments ended by a lone
# CR, class/style/click lines naming many ids.
EDGE_CASES = [
    "flowchart TD\nA e1@--> B\nB e2@==> C\nC -.- D ~~~ E <--> F --o G x--x H",
    "flowchart TD\nA-- some text -->B -. dotted .-> C == thick ==> D",
    "flowchart TD\nA[\"`**md** with\nnewline`\"] --> B",
    "flowchart TD\nA --> B\u2028C --> D",
    "---\ntitle: x\n---\nflowchart TD\nA --> B",
    "flowchart TD\nA@{ shape: rect, label: \"x & y --> z\" } --> B",
    "flowchart TD\n%% A --> B\rC --> D\nE",
    "flowchart TD\nA:::c --> B:::d & C:::e",
    "flowchart TD\nstyle A fill:#f00\nclass " + ",".join(f"N{i}" for i in range(30)) + " foo\nclick A cb",
    "flowchart TD\nA-->B & C & D & E-->F & G & H & I",
    "flowchart TD\nA---->B===>C-...->D",
    "flowchart TD\nA --> B; B --> C; C --> D",
    "graph LR\nA-->B\nsubgraph one [T]\ndirection TB\nC-->D\nend\none-->two",
    "flowchart TD\nsubgraph S\nA & B --> C & D\nend\nS --> E & F",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_the_quick_count_never_undercounts_what_the_reader_builds_held(text):
    """Held: for every lexer edge case tried, the quick bound is at least the reader's own counts (nodes, edges),
    so no text passes the node/edge limits unread. (Found no undercount; the 10x margin only decides whether an
    over-bound text is parsed.)"""
    nodes, edges = quick_bound(text)
    try:
        w = parse(text)
    except WorkflowSyntaxError:
        return  # a text the reader refuses runs nowhere
    assert nodes >= len(w.nodes) and edges >= len(w.edges), (nodes, edges, len(w.nodes), len(w.edges))


def test_authorization_header_tricks_held(team):
    """Held: a lowercase scheme works, and every other spelling of a key is refused 401/400 (never a 5xx, never
    served): no scheme, Basic, a tab for the space, the key's case changed, the key with a suffix, a revoked key,
    two Authorization headers (raw, so the client cannot merge them)."""
    server, alice, mallory, db = team
    url = server.base_url + "/models"
    ok = httpx.get(url, headers={"Authorization": f"bearer {mallory}"}, timeout=30)
    assert ok.status_code == 200, ok.text
    bad = {"no scheme": mallory, "basic": f"Basic {mallory}", "tab": f"Bearer\t{mallory}",
           "upper": f"Bearer {mallory.upper()}", "suffix": f"Bearer {mallory}x", "comma": f"Bearer {mallory}, x",
           "no key": "Bearer", "other's id": f"Bearer {alice[:12]}{mallory[12:]}"}
    got = {k: httpx.get(url, headers={"Authorization": v}, timeout=30).status_code for k, v in bad.items()}
    assert set(got.values()) == {401}, got
    with httpx.Client(timeout=30) as c:
        two = c.send(c.build_request("GET", url, headers=[("Authorization", f"Bearer {mallory}"),
                                                          ("Authorization", f"Bearer {alice}")]))
    assert two.status_code == 400, two.text
    ws = Workspace(db)
    rec = next(k for k in keys.list_keys(ws) if k.owner == "mallory")
    keys.revoke_key(ws, rec.id)
    ws.close_all()
    assert httpx.get(url, headers=_auth(mallory), timeout=30).status_code == 401


MALFORMED = {
    "model a number": {"model": 5, "messages": [{"role": "user", "content": "x"}]},
    "version zero": {"model": "solver@v0", "messages": [{"role": "user", "content": "x"}]},
    "version huge": {"model": "solver@v" + "9" * 30, "messages": [{"role": "user", "content": "x"}]},
    "version in other digits": {"model": "solver@v\u0661", "messages": [{"role": "user", "content": "x"}]},
    "lone surrogate in model": {"model": "solver\ud800", "messages": [{"role": "user", "content": "x"}]},
    "lone surrogate in problem": {"model": "solver", "messages": [{"role": "user", "content": "\ud800 x"}]},
    "image part": {"model": "solver", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
    "stream a word": {"model": "solver", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
    "stream_options a list": {"model": "solver", "messages": [{"role": "user", "content": "x"}], "stream": True,
                              "stream_options": [1]},
    "entry_point a number": {"model": "solver", "messages": [{"role": "user", "content": "x"}],
                             "metadata": {"entry_point": 5}},
    "a list": [1],
}


def test_malformed_chat_bodies_are_4xx_in_openais_shape_held(team):
    """Held: every malformed body tried is a 400/404 in OpenAI's error shape naming the field, never a 5xx or a
    traceback; so is a 5,000-digit integer (Python's int conversion limit) and a NaN."""
    server, _alice, mallory, _db = team
    url = server.base_url + "/chat/completions"
    bodies = {k: json.dumps(v).encode() for k, v in MALFORMED.items()}
    bodies["5000 digits"] = b'{"model":"solver","messages":[{"role":"user","content":"x"}],"max_tokens":' + \
        b"9" * 5000 + b"}"
    got = {}
    for k, raw in bodies.items():
        r = httpx.post(url, content=raw, headers={**_auth(mallory), "Content-Type": "application/json"}, timeout=30)
        got[k] = (r.status_code, "Traceback" in r.text, set(r.json().get("error", {})) >= {"message", "code"})
    assert {k: v for k, v in got.items() if not (400 <= v[0] < 500 and not v[1] and v[2])} == {}, got


# Attack (a wrong verdict): mallory has the server evaluate a workflow while its endpoint fails every call (in the
# scripted endpoint a prompt with FAIL gets HTTP 500; in life an outage, an exhausted quota, a prompt the provider
# refuses). `python -m flowcore evaluate` on the same workflow prints "no score: no problem was scored" and
# exits 1 (3 of 3 problems not run, above --max-error-rate 0.1).
def test_an_evaluation_where_every_call_failed_is_served_as_a_score_of_zero(team):
    """Happens (today): evaluate_workflow answers success, {"score": 0.0, "n": 0, "errors": 3, "ci": [0.0, 0.0]}:
    an outage reads as a measured zero with a zero-width interval. Fixed: as the command line, the tool answers an
    error naming the endpoint's failure when no problem was scored (or the error rate is over the bound), or at
    the very least no number: score null."""
    server, _alice, mallory, _db = team
    failing = MATH_SEED.replace("step by step", "step by step. FAIL")

    async def call() -> tuple[bool, str]:
        async with httpx2.AsyncClient(headers=[("Authorization", f"Bearer {mallory}")], timeout=120) as http, \
                Client(streamable_http_client(server.url + "/mcp", http_client=http)) as c:
            r = await c.call_tool("evaluate_workflow", {"benchmark": "gsm8k", "workflow": failing, "limit": 3})
            return r.is_error, r.content[0].text

    is_error, text = asyncio.run(call())
    if not is_error:
        report = json.loads(text)
        assert report.get("errors") == 3, report  # the attack reached the endpoint's failure
        assert report.get("score") is None, f"every call failed, yet the evaluation was served as {report}"
    else:
        assert "endpoint" in text, text


# Attack (what an error tells a key holder): mallory sends what makes the executor endpoint fail (a scripted 500;
# in life, a provider's refusal or a 401 whose message quotes the server's key, "Incorrect API key provided:
# sk-...abcd") and reads the error the server passes on.
def test_an_endpoint_failure_tells_a_key_holder_the_servers_endpoint_and_its_reply(team, fake_llm):
    """Happens (today): the 502 (chat) and the MCP tool error both quote the operator's endpoint address
    ("model 'gpt-4o-mini' at http://127.0.0.1:PORT/v1") and the endpoint's own reply body ("scripted executor
    failure"): an internal address (an unauthenticated vLLM on the LAN) and whatever the provider wrote (a key's
    tail) go to anyone holding a key. Fixed: the key holder gets the status and code (502
    executor_endpoint_failed, "HTTP 500"), the address and the endpoint's reply stay in the server's log and trace."""
    server, _alice, mallory, _db = team
    r = httpx.post(server.base_url + "/chat/completions", json=_ask("FAIL this one"), headers=_auth(mallory),
                   timeout=60)
    assert r.status_code == 502, r.text
    port = fake_llm.base_url.rsplit(":", 1)[1].split("/")[0]
    leaked = [s for s in (fake_llm.base_url, f":{port}", "scripted executor failure") if s in r.text]
    assert leaked == [], f"the 502 tells mallory {leaked}: {r.text}"


def _rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


# Attack (no key needed): a request head of unbounded size. With the default `--http auto` (httptools, pinned)
# uvicorn keeps every header line it is sent until the head ends; the head's only bound is its time
# (MERMAIDFLOW_HEAD_SECONDS, 10 s), and loopback carries ~400 MB/s. The guard, which asks for a key, only runs once
# the head is complete. (With --http h11 the same connection is cut after 2 MB: h11 bounds an incomplete head.)
def test_a_stranger_without_a_key_fills_the_servers_memory_with_one_request_head(tmp_path):
    """Happens (today): 64 MB of `X-A: aaa...` header lines to /health, no key, are all taken in; the server's
    memory grows by about as much and stays grown after the connection ends (200 MB in 0.45 s grew it from 98
    to 302 MB in the run that found it; ten seconds of one connection is gigabytes). Fixed: a head past a bound
    (tens of KiB, as h11's 16 KiB or nginx's 32 KiB) is refused (431) or the connection closed, so the server
    grows by less than 16 MB."""
    db = tmp_path / "ws.db"
    Workspace(db).close_all()
    with Served(db, llm_url=None, extra=["--require-key"]) as server:
        before = _rss_mb(server.proc.pid)
        line = b"X-A: " + b"a" * 8000 + b"\r\n"
        sent = 0
        with socket.create_connection(("127.0.0.1", server.port)) as sk:
            sk.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            try:
                while sent < 64 * 2**20:
                    sk.sendall(line * 64)
                    sent += len(line) * 64
            except OSError:
                pass  # the server cut the connection: the wanted outcome
            time.sleep(0.5)
            grown = _rss_mb(server.proc.pid) - before
        assert server.proc.poll() is None
    assert grown < 16, f"{sent / 2**20:.0f} MB of header lines without a key grew the server by {grown} MB"


# Attack: the same flood through MCP's run_workflow (mallory's own workflow text, so nothing of alice's is needed):
# 16 MCP sessions (the most one owner may keep open: MERMAIDFLOW_MCP_SESSIONS_PER_OWNER), each calling run_workflow
# again as soon as its call ends, share the served LLM slots (8) with alice.
def test_one_key_holders_flood_of_mcp_run_workflow_makes_anothers_chat_time_out(team):
    """Happens (today): alice's chat requests end 504 deadline_exceeded after 6 s while mallory's run_workflow
    calls hold the LLM slots (run_workflow has no per-owner bound, unlike evaluate_workflow). Fixed: an owner's
    calls in flight are bounded or fairly shared, and all of alice's requests are answered 200."""
    server, alice, mallory, _db = team

    async def attack() -> tuple[list[int], Counter]:
        async def flood(i: int, stop: asyncio.Event, seen: Counter) -> None:
            async with httpx2.AsyncClient(headers=[("Authorization", f"Bearer {mallory}")], timeout=60) as http, \
                    Client(streamable_http_client(server.url + "/mcp", http_client=http)) as c:
                while not stop.is_set():
                    r = await c.call_tool("run_workflow", {"problem": f"HANG {i}", "workflow": MATH_SEED,
                                                           "task": "math"})
                    seen["error" if r.is_error else "ok"] += 1

        async def alices() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as c:
                return [(await c.post(server.base_url + "/chat/completions", json=_ask(f"What is {k} + 3?"),
                                      headers=_auth(alice))).status_code for k in range(3)]

        return await _while_flooded(flood, 16, 3, alices)

    got, seen = asyncio.run(attack())
    assert seen["error"] > 0, f"mallory's flood never held a slot to its deadline: {seen}"
    assert got == [200, 200, 200], f"alice's requests under mallory's run_workflow flood: {got}; mallory's: {seen}"


# Attack: a small text the quick count passes (a front matter is a handful of lines) whose YAML the reader spends
# seconds on. Mermaid's front matter (and `@{ }` node data) is read with PyYAML's pure-Python loader before the
# alias-bomb count; a flow sequence `config: [1,1,1,...]` of 200,000 items is 400 KB (under the 1 MiB body cap and
# with a quick bound of 8 nodes and 3 edges), and check_workflow has no per-owner bound.
def test_a_400_kb_front_matter_costs_the_server_seconds_of_cpu_per_call(team):
    """Happens (today): check_workflow on it takes 13.5 s of the reader's CPU alone (measured at load 7-8: a 1 MB
    one took 38 s, `@{ x: [1,1,...] }` node data of 1 MB 26 s, 10 KB of nested `[[[...]]]` 3 s), in a worker
    thread holding the GIL, so a few such calls at once keep the server's CPU for minutes. Fixed: front matter
    and node data over a size bound (a real one is under a few KiB) are refused before they are loaded, naming the
    bound, so the call is answered within 2 s."""
    server, _alice, mallory, _db = team
    text = "---\nconfig: [" + "1," * 200_000 + "1]\n---\nflowchart TD\nA-->B"
    assert quick_bound(text) == (8, 3)  # the quick count lets it through to the reader

    async def attack() -> tuple[float, float, str]:
        async def polls() -> float:
            worst = 0.0
            async with httpx.AsyncClient(timeout=60) as c:
                while True:
                    t = time.monotonic()
                    await c.get(server.base_url + "/models", headers=_auth(mallory))
                    worst = max(worst, time.monotonic() - t)
                    await asyncio.sleep(0.2)
                    if done.is_set():
                        return worst

        done = asyncio.Event()
        poller = asyncio.create_task(polls())
        t = time.monotonic()
        got = await _mcp(server.url + "/mcp", mallory, "check_workflow", {"workflow": text})
        took = time.monotonic() - t
        done.set()
        return took, await poller, str(got)[:200]

    took, worst_poll, got = asyncio.run(attack())
    assert took < 2.0, f"one check_workflow of a 400 KB front matter took {took:.1f} s (/v1/models at worst " \
        f"{worst_poll:.2f} s meanwhile): {got}"


async def _tool(url: str, key: str, tool: str, args: dict) -> tuple[bool, str]:
    async with httpx2.AsyncClient(headers=[("Authorization", f"Bearer {key}")], timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        r = await c.call_tool(tool, args)
        return r.is_error, r.content[0].text if r.content else json.dumps(r.structured_content)


# Attack (a client error answered as an internal one): evolve_progress with a run number past SQLite's 64 bits.
def test_evolve_progress_with_a_run_number_past_64_bits_is_an_unexplained_internal_error(team):
    """Happens (today): the tool answers only "Error executing tool evolve_progress" and the server logs a
    traceback (OverflowError: Python int too large to convert to SQLite INTEGER): the MCP form of a 500 for a
    client's mistake. Fixed: the same answer as for any run that is not the caller's: "no evolution run N
    started by mallory" (or "run_id must be ..."), and no traceback in the log."""
    server, _alice, mallory, _db = team
    is_error, text = asyncio.run(_tool(server.url + "/mcp", mallory, "evolve_progress", {"run_id": 2 ** 70}))
    assert is_error
    assert "no evolution run" in text or "run_id" in text, f"answered {text!r}; log: {''.join(server.log)[-300:]}"
    assert "Traceback" not in "".join(server.log), "".join(server.log)[-1500:]


# Attack (bad input stored for good): publish over MCP with a task that names nothing. A version is immutable and
# `NAME` serves its latest, so the bad version stays; the checker ran with no task at all (the served engine maps
# an unknown task to none), so a workflow the math checker refuses can be published under a made-up task.
def test_publish_over_mcp_accepts_a_task_that_names_nothing(team):
    """Happens (today): publish {task: "bogus"} stores m1@v1 with task "bogus". Fixed: a task that is neither math,
    code, text, a built-in benchmark nor a task saved in the workspace is refused, naming it (as check_workflow
    and run_workflow refuse it: "task must be one of math, code, text, got 'bogus'")."""
    server, _alice, mallory, db = team
    is_error, text = asyncio.run(_tool(server.url + "/mcp", mallory, "publish",
                                       {"workflow": MATH_SEED, "task": "bogus", "name": "m1"}))
    stored = [p.model_id for p in published.list_published(Workspace(db), "m1", text=False)]
    assert is_error and "bogus" in text and stored == [], f"published {stored}: {text[:200]}"


def test_evaluate_workflow_never_answers_one_owner_from_anothers_cache_held(team, fake_llm):
    """Held: alice evaluates a workflow text over MCP, then mallory evaluates the very same text on the same
    problems: the endpoint is asked again for every one of mallory's problems and her cost is not 0 (the cache
    salt per owner covers evaluate_workflow, not only chat and evolve_start)."""
    server, alice, mallory, _db = team
    text = MATH_SEED.replace("step by step", "step by step (evaluation cache probe 91c2)")
    args = {"benchmark": "gsm8k", "workflow": text, "limit": 2}
    before = len(fake_llm.requests)
    a_err, a = asyncio.run(_tool(server.url + "/mcp", alice, "evaluate_workflow", args))
    middle = len(fake_llm.requests)
    m_err, m = asyncio.run(_tool(server.url + "/mcp", mallory, "evaluate_workflow", args))
    after = len(fake_llm.requests)
    assert not a_err and not m_err, (a, m)
    assert middle - before == 2 and after - middle == 2, (middle - before, after - middle)
    assert json.loads(m)["cost"] > 0, m


def test_a_revoked_key_is_refused_inside_an_open_mcp_session_held(team):
    """Held: mallory opens an MCP session and calls a tool; her key is revoked; her next call in the same session
    (same mcp-session-id) is refused 401 by the guard: a session is no credential."""
    server, _alice, mallory, db = team

    async def scenario() -> tuple[object, str]:
        async with httpx2.AsyncClient(headers=[("Authorization", f"Bearer {mallory}")], timeout=60) as http, \
                Client(streamable_http_client(server.url + "/mcp", http_client=http)) as c:
            first = await c.call_tool("list_versions", {})
            ws = Workspace(db)
            keys.revoke_key(ws, next(k.id for k in keys.list_keys(ws) if k.owner == "mallory"))
            ws.close_all()
            try:
                second = await c.call_tool("list_versions", {})
                return first, f"served: {second}"
            except Exception as exc:  # noqa: BLE001 - the refusal is the wanted outcome
                return first, repr(exc)

    first, second = asyncio.run(scenario())
    assert not first.is_error
    assert not second.startswith("served"), second
    assert "MCPError" in second, second  # the SDK client's form of the guard's refusal
    raw = httpx.post(server.url + "/mcp", json=_INIT, headers={**_MCP_HEADERS, **_auth(mallory)}, timeout=30)
    assert raw.status_code == 401 and raw.json()["error"]["code"] == "invalid_api_key", raw.text
