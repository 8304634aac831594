"""Small answers on a kept-alive connection come at once. Streamlit binds its own socket with protocol 0, so
asyncio left Nagle's algorithm on, and each small response's body waited 40 ms for the client's delayed ACK of
its head. Here uvicorn serves a socket bound the way Streamlit binds it, for both HTTP protocols."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest
import uvicorn

from flowcore.serve import nodelay

DELAYED_ACK_S = 0.040  # Linux's least delayed-ACK time: with Nagle on, no small answer after the first beats it


async def tiny(scope, receive, send):  # noqa: ANN001 - a bare ASGI app: a head, then a small body
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"x" * 300})


@pytest.fixture(params=["httptools", "h11"])
def server(request):
    sock = socket.socket(family=socket.AF_INET)  # as Streamlit's _bind_socket: protocol 0
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    srv = uvicorn.Server(uvicorn.Config(tiny, http=request.param, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield srv, sock.getsockname()[1]
    srv.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _round_trips(port: int, n: int = 12) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", "/")
        r = conn.getresponse()
        assert r.status == 200 and r.read() == b"x" * 300
        times.append(time.perf_counter() - t0)
    conn.close()
    return times[1:]  # the first is quick either way (a new connection ACKs at once)


def _server_sockets_nodelay(srv: uvicorn.Server) -> list[int]:
    return [p.transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            for p in srv.server_state.connections]


def test_a_kept_alive_connection_gets_small_answers_without_the_delayed_ack_wait(server):
    srv, port = server
    nodelay.install()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/")
    conn.getresponse().read()
    assert _server_sockets_nodelay(srv) == [1]  # the server's side of this connection: Nagle off
    conn.close()
    # the measured effect: a small answer after the first no longer waits the least delayed-ACK time
    assert min(_round_trips(port)) < DELAYED_ACK_S / 2


def test_nodelay_touches_no_unix_socket_and_install_is_idempotent():
    class Transport:
        def __init__(self, sock):  # noqa: ANN001
            self.sock = sock

        def get_extra_info(self, name):  # noqa: ANN001
            return self.sock if name == "socket" else None

    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        nodelay.no_delay(Transport(a))  # no TCP option on a unix socket, and no error
        nodelay.no_delay(Transport(None))
    nodelay.install()
    made = uvicorn.protocols.http.h11_impl.H11Protocol.connection_made
    nodelay.install()
    assert uvicorn.protocols.http.h11_impl.H11Protocol.connection_made is made
