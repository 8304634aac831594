"""The web server's guard (flowcore.ui.webguard, issue 25.8): a Host this server does not serve is refused, for
HTTP and for the websocket, so DNS rebinding cannot reach the login-free loopback app; every response carries
the Content Security Policy. Unit tests of the rules, then a real `streamlit run app.py` process."""

from __future__ import annotations

import asyncio
import base64
import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowcore.serve.slow import HEAD_ENV
from flowcore.ui.webguard import CSP, HOSTS_ENV, Hosts, WebGuard, split_host

REPO = Path(__file__).resolve().parents[2]
HEAD_SECONDS = 1.5  # how long the served app gives a request head (MERMAIDFLOW_HEAD_SECONDS) in these tests


@pytest.mark.parametrize("value, parsed", [
    ("127.0.0.1:8501", ("127.0.0.1", 8501)), ("LocalHost.", ("localhost", None)), ("[::1]:80", ("::1", 80)),
    ("studio.example.org", ("studio.example.org", None)),
    ("", None), (None, None), ("a b", None), ("user@host", None), ("host/path", None), ("host:0", None),
    ("host:99999", None), ("host:x", None), ("[::1", None), ("[nothex]:1", None), ("évil.example", None),
    ("host\n", None),
])
def test_split_host(value, parsed):
    assert split_host(value) == parsed


def test_served_hosts_are_loopback_the_bind_address_and_the_listed_names():
    local = Hosts.served("127.0.0.1", {})
    assert all(local.allows(h) for h in ("127.0.0.1:8501", "localhost:8501", "localhost", "[::1]:8501"))
    assert not any(local.allows(h) for h in ("evil.example:8501", "127.0.0.1.evil.example", "", None,
                                             "localhost.evil.example", "10.0.0.5:8501"))
    team = Hosts.served("0.0.0.0", {HOSTS_ENV: "studio.example.org, *.team.example.org, pinned.example:8443"})
    assert team.allows("studio.example.org") and team.allows("Studio.Example.Org.:443")
    assert team.allows("a.team.example.org") and not team.allows("team.example.org.evil")
    assert not team.allows("xteam.example.org") and not team.allows("0.0.0.0:8501")
    assert team.allows("pinned.example:8443") and not team.allows("pinned.example:8501")
    assert Hosts.served("10.0.0.5", {}).allows("10.0.0.5:8501")
    with pytest.raises(ValueError, match=HOSTS_ENV + ".*'http://x/'"):
        Hosts.served("127.0.0.1", {HOSTS_ENV: "http://x/"})
    assert local.allows_origin(None) and local.allows_origin("http://localhost:8501")
    assert not local.allows_origin("http://evil.example:8501") and not local.allows_origin("null")


def _run(guard: WebGuard, scope: dict) -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "websocket.connect"} if scope["type"] == "websocket" else {"type": "http.request"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(guard(scope, receive, send))
    return sent


def test_the_guard_refuses_before_the_app_sees_anything_and_adds_headers_to_what_it_lets_through():
    seen: list[str] = []

    async def app(scope, receive, send):  # noqa: ANN001 - a stand-in ASGI app that records what reaches it
        seen.append(scope["type"])
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
            await send({"type": "http.response.body", "body": b"ok"})

    guard = WebGuard(app, lambda: Hosts.served("127.0.0.1", {}))
    foreign = [(b"host", b"evil.example:8501")]
    assert _run(guard, {"type": "http", "headers": foreign})[0]["status"] == 403
    assert _run(guard, {"type": "websocket", "headers": foreign}) == [{"type": "websocket.close", "code": 1008}]
    assert _run(guard, {"type": "websocket", "headers": [(b"host", b"127.0.0.1:8501"),
                                                         (b"origin", b"http://evil.example:8501")]})[0]["code"] == 1008
    assert seen == []
    ok = _run(guard, {"type": "http", "headers": [(b"host", b"127.0.0.1:8501")]})
    assert ok[0]["status"] == 200 and (b"content-security-policy", CSP.encode()) in ok[0]["headers"]
    assert (b"referrer-policy", b"no-referrer") in ok[0]["headers"] and seen == ["http"]


# -- against a real `streamlit run app.py` ---------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guarded")
    port = _free_port()
    env = {**os.environ, "MERMAIDFLOW_DB": str(tmp / "ws.db"), "PYTHONUNBUFFERED": "1",
           HEAD_ENV: str(HEAD_SECONDS)}
    env.pop(HOSTS_ENV, None)
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address",
           "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    with open(tmp / "log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while _http(port, f"127.0.0.1:{port}", "/_stcore/health")[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "log").read_text()[-2000:]
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _http(port: int, host: str, path: str = "/") -> tuple[int, dict]:
    """A raw request with exactly this Host header (what a rebinding page's browser sends)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}
    except OSError:
        return 0, {}


def _handshake(port: int, host: str, origin: str | None) -> str:
    """The status line the server answers a websocket handshake on Streamlit's stream with."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET /_stcore/stream HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: streamlit"]
    lines += [f"Origin: {origin}"] if origin else []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return s.recv(4096).split(b"\r\n", 1)[0].decode()


@pytest.mark.slow
def test_a_foreign_host_is_refused_over_http_and_websocket_while_loopback_names_work(served):
    port = served
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        status, headers = _http(port, host)
        assert status == 200 and headers["content-security-policy"] == CSP, (host, status)
        assert " 101 " in _handshake(port, host, f"http://{host}"), host
    for host in (f"rebind.evil.example:{port}", f"127.0.0.1.evil.example:{port}", "", "evil.example"):
        assert _http(port, host)[0] in (400, 403), host  # (an empty Host is refused by the HTTP server itself)
        assert " 101 " not in _handshake(port, host, f"http://{host}"), host
    # a foreign page opening the stream to the right host (cross-site websocket): its Origin is refused
    assert " 403 " in _handshake(port, f"127.0.0.1:{port}", f"http://rebind.evil.example:{port}")
    assert _http(port, f"evil.example:{port}", "/_stcore/health")[0] == 403  # every route, not only the page


def _state(conn: socket.socket) -> str:
    """'closed' when the server ended the connection, else 'open' (whatever it sent meanwhile is read)."""
    conn.settimeout(0.05)
    try:
        while data := conn.recv(65536):
            pass
        return "closed" if data == b"" else "open"
    except TimeoutError:
        return "open"
    except ConnectionError:
        return "closed"


@pytest.mark.slow
def test_half_sent_request_heads_are_closed_while_the_apps_websocket_stays(served):
    """Slowloris against the app: before, uvicorn kept a connection that sent half a request head open for good
    (20 of 20 after 6 s), and a stranger needs no login to send one. Now the head must be complete in
    MERMAIDFLOW_HEAD_SECONDS; a websocket (the app's session) is a request being answered and is never cut."""
    port = served
    ws = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    ws.sendall((f"GET /_stcore/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Protocol: streamlit\r\nOrigin: http://127.0.0.1:{port}\r\n\r\n").encode())
    assert b" 101 " in ws.recv(4096).split(b"\r\n", 1)[0]
    half = []
    for _ in range(20):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
        half.append(c)
    try:
        deadline = time.monotonic() + HEAD_SECONDS + 10
        while time.monotonic() < deadline and any(_state(c) == "open" for c in half):
            time.sleep(0.1)
        assert [_state(c) for c in half] == ["closed"] * 20
        assert _state(ws) == "open"  # past the bound, the session's websocket is still there
        assert _http(port, f"127.0.0.1:{port}", "/_stcore/health")[0] == 200
    finally:
        for c in [ws, *half]:
            c.close()


@pytest.mark.slow
def test_the_apps_small_scripts_come_without_waiting_for_the_browsers_delayed_ack(served):
    """Streamlit's own socket kept Nagle's algorithm on: each small script after the first on a connection waited
    the browser's delayed ACK (44 ms a request, ~0.4 s of every first paint). flowcore.serve.nodelay turns it off."""
    port = served
    static = Path(__import__("streamlit").__file__).parent / "static" / "static" / "js"
    small = min(static.glob("*.js"), key=lambda p: p.stat().st_size).name
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    times = []
    for _ in range(12):
        t0 = time.perf_counter()
        conn.request("GET", f"/static/js/{small}", headers={"Host": f"127.0.0.1:{port}"})
        r = conn.getresponse()
        assert r.status == 200 and r.read()
        times.append(time.perf_counter() - t0)
    conn.close()
    assert min(times[1:]) < 0.020, times  # with Nagle on, none after the first is under Linux's 40 ms
