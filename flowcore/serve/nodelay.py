"""Small answers sent at once. Streamlit binds its own listening socket (``socket.socket(family)``, protocol 0),
and asyncio turns Nagle's algorithm off only for sockets made with protocol IPPROTO_TCP, so every connection of
``streamlit run app.py`` kept it on. uvicorn writes a response's head and its body separately; on a kept-alive
connection the body then waited for the browser's delayed ACK of the head: 40 ms for each small script, style
and websocket message after the first (44 ms a request, against 1.5 ms with it off). A page's ~100 scripts come
over six connections, so that was ~0.4 s of every first paint before any of our code ran.

:func:`install` sets TCP_NODELAY on every connection uvicorn's HTTP protocols (h11, httptools) are handed, for
``streamlit run app.py`` and ``flowcore serve`` alike (a websocket keeps the socket of the request it upgraded).
"""

from __future__ import annotations

import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is pinned in requirements.txt
    HttpToolsProtocol = None

TCP = (socket.AF_INET, socket.AF_INET6)


def no_delay(transport: Any) -> None:
    """Nagle's algorithm off for ``transport``'s socket, when it is TCP (a unix socket has none)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in TCP and sock.type == socket.SOCK_STREAM:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # closed already: nothing to send faster
            pass


def _wrap(cls: type) -> None:
    if getattr(cls, "_mf_nodelay", False):  # install may run twice
        return
    made = cls.connection_made

    def connection_made(self: Any, transport: Any) -> None:
        no_delay(transport)
        made(self, transport)

    cls.connection_made, cls._mf_nodelay = connection_made, True  # type: ignore[attr-defined]


def install() -> None:
    """From now on every connection of uvicorn's h11 and httptools protocols in this process sends at once
    (the protocols' classes are changed in place, so a server made already uses them)."""
    for cls in (H11Protocol, HttpToolsProtocol):
        if cls is not None:
            _wrap(cls)
