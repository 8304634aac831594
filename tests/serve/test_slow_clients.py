"""Slow clients (slowloris) against a real ``flowcore serve`` beyond loopback (keys required). Before, a
connection that sent half a request head stayed open for good (50 of 50 still open after 12 s, and uvicorn has
no bound to reach), so a stranger, who needs no key to do it, could hold every socket the server may open; a
body sent a byte at a time, or after the refusal, held its connection as long. Now a head must be complete
within MERMAIDFLOW_HEAD_SECONDS and each part of a body come within MERMAIDFLOW_BODY_SECONDS (1.5 s here),
while a request that is being answered is never cut."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from flowcore.workspace import keys
from flowcore.workspace.store import Workspace
from tests.helpers.served import Served

LIMIT = 1.5


@pytest.fixture(scope="module", params=["httptools", "h11"])
def slow_server(request, tmp_path_factory, fake_llm, served_db):
    ws = Workspace(served_db)
    _, key = keys.create_key(ws, "slow-test", "alice@example.com")
    ws.close_all()
    with Served(served_db, llm_url=fake_llm.base_url, extra=["--require-key", "--http", request.param],
                env={"MERMAIDFLOW_HEAD_SECONDS": str(LIMIT), "MERMAIDFLOW_BODY_SECONDS": str(LIMIT)}) as s:
        s.key = key  # type: ignore[attr-defined]
        yield s


def _closed_within(conns: list[socket.socket], seconds: float) -> tuple[int, bytes]:
    """How many of ``conns`` the server closed (end of stream) within ``seconds``, and the first bytes any of
    them was sent before its end (a 408 or 401 may come first)."""
    deadline, closed, said = time.monotonic() + seconds, set(), b""
    for c in conns:
        c.settimeout(0.05)
    while time.monotonic() < deadline and len(closed) < len(conns):
        for i, c in enumerate(conns):
            if i in closed:
                continue
            try:
                data = c.recv(4096)
            except TimeoutError:
                continue
            except ConnectionError:
                data = b""
            if data:
                said = said or data
            else:
                closed.add(i)
    return len(closed), said


def _open(port: int, first: bytes, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(first)
        out.append(c)
    return out


def test_a_request_head_that_never_ends_is_closed_and_others_are_served(slow_server):
    conns = _open(slow_server.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", 30)
    try:
        r = httpx.get(slow_server.base_url + "/models", headers={"Authorization": f"Bearer {slow_server.key}"},
                      timeout=10)
        assert r.status_code == 200
        closed, _ = _closed_within(conns, LIMIT + 8)
        assert closed == len(conns), f"{len(conns) - closed} half-sent heads still hold a connection"
    finally:
        for c in conns:
            c.close()


def test_a_body_that_stops_coming_is_abandoned_and_so_is_one_sent_after_a_refusal(slow_server):
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {slow_server.key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{").encode()
    keyed = _open(slow_server.port, head, 5)
    stranger = _open(slow_server.port, head.replace(slow_server.key.encode(), b"mf_00000000_" + b"a" * 43), 5)
    try:
        closed, said = _closed_within(keyed, LIMIT + 8)
        assert closed == len(keyed) and b" 408 " in said.split(b"\r\n")[0], said[:200]
        for c in stranger:  # refused at once; then it keeps the connection by sending its body slowly
            c.sendall(b" ")
        closed, _ = _closed_within(stranger, 2 * LIMIT + 8)
        assert closed == len(stranger)
    finally:
        for c in keyed + stranger:
            c.close()


def test_an_answer_that_takes_longer_than_the_bounds_is_not_cut(slow_server):
    r = httpx.post(slow_server.base_url + "/chat/completions", headers={"Authorization": f"Bearer {slow_server.key}"},
                   json={"model": "solver", "messages": [{"role": "user", "content": "SLOW: what is 2 + 2?"}]},
                   timeout=60)
    assert r.status_code == 200 and "slow answer" in r.json()["choices"][0]["message"]["content"]


def test_a_request_head_past_its_size_bound_is_refused_and_one_under_it_is_served(slow_server):
    """A head is bounded by size too (MERMAIDFLOW_HEAD_BYTES, 32 KiB; before, httptools kept every header line it
    was sent): 40 KiB of headers are refused (httptools: 431; h11: its own 400) and the connection closed,
    without a key; 20 KiB of them, and a body of 512 KiB after a small head, are served."""
    pad = {f"x-pad-{i}": "p" * 1000 for i in range(20)}
    auth = {"Authorization": f"Bearer {slow_server.key}"}
    ok = httpx.get(slow_server.base_url + "/models", headers={**auth, **pad}, timeout=10)
    assert ok.status_code == 200
    body = httpx.post(slow_server.base_url + "/chat/completions", headers=auth, timeout=10,
                      json={"model": "nope", "messages": [{"role": "user", "content": "x" * 512 * 1024}]})
    assert body.status_code == 404  # read whole and answered: no such model
    c = socket.create_connection(("127.0.0.1", slow_server.port))
    try:
        c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"q" * 40 * 1024 + b"\r\n")
        closed, said = _closed_within([c], 5)
    finally:
        c.close()
    assert closed == 1, "the connection with a 40 KiB head stayed open"
    status = said.split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 431") or status.startswith(b"HTTP/1.1 400"), said[:200]
    if slow_server.proc.args[-1] == "httptools":
        assert status.startswith(b"HTTP/1.1 431") and b"request_header_too_large" in said, said[:300]
