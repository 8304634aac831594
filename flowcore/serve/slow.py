"""Slow clients. uvicorn gives a connection all the time it wants to send its request's head and its body: a
connection that sent half a request line was still open minutes later. A stranger needs no key for that (the
key is in the head, which never ends), so a few thousand such connections hold the server's sockets and file
descriptors away from everyone (slowloris). Two bounds, for ``flowcore serve`` and the app alike:

- :func:`install` changes the HTTP protocols uvicorn runs (h11's and httptools'): a connection whose request head
  is not complete ``head_seconds`` after it opened, or after its previous response ended, is closed; so is one
  still sending a body ``head_seconds`` after it was answered (a refusal does not read the body). A request being
  answered (a workflow may take minutes) is never cut, nor a connection handed over to a websocket: only a head
  that has not arrived is.
- :func:`install` also bounds a request head's size (``head_bytes``, $MERMAIDFLOW_HEAD_BYTES, 32 KiB, as nginx's
  default): httptools keeps every header line it is sent until the head ends (64 MB of them, no key needed, grew
  the server by as much: attack8 #5), so a head past the bound is answered 431 and its connection closed. h11
  gets the same bound through uvicorn's ``h11_max_incomplete_event_size`` (:func:`head_bytes`).
- :func:`body_deadline`, an ASGI ``receive`` wrapper: while a request's body is incomplete, each part of it must
  come within ``body_seconds`` of the one before, and the whole body within ``BODY_TOTAL_PARTS`` times that from
  the first ``receive``, else the request counts as abandoned (``http.disconnect``). Without the total bound a
  body trickled a byte every half bound was never late: 10 of 10 such connections were held 7x the bound.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # uvicorn's faster protocol (`flowcore serve` runs it; so does Streamlit's uvicorn when it is installed)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is pinned in requirements.txt
    HttpToolsProtocol = None

HEAD_ENV, BODY_ENV, HEAD_BYTES_ENV = "MERMAIDFLOW_HEAD_SECONDS", "MERMAIDFLOW_BODY_SECONDS", "MERMAIDFLOW_HEAD_BYTES"
DEFAULT_HEAD_BYTES = 32 * 1024
DEFAULT_HEAD, DEFAULT_BODY = 10.0, 30.0
BODY_TOTAL_PARTS = 4  # a whole body may take 4 per-part bounds (default 2 minutes: 1 MiB at ~9 KB/s)


def seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name) or default)
    except ValueError:
        return default
    return value if value > 0 else default


_head = {"seconds": DEFAULT_HEAD, "bytes": DEFAULT_HEAD_BYTES}


def head_bytes() -> int:
    """The most bytes a request head may take: $MERMAIDFLOW_HEAD_BYTES (at least 4 KiB), else 32 KiB."""
    return max(4096, int(seconds(HEAD_BYTES_ENV, DEFAULT_HEAD_BYTES)))


def _h11_late(proto: Any) -> bool:
    # Theirs IDLE: no complete request head since the connection opened or the last response ended; ours
    # DONE: answered (a refusal, say), and they are still sending what we did not read. Anything else is a
    # request in progress (its body, its answer) or a connection handed over to a websocket.
    return proto.conn.their_state is h11.IDLE or proto.conn.our_state is h11.DONE


def _httptools_late(proto: Any) -> bool:
    # No cycle: no complete request head since the connection opened. A cycle whose response is complete: no
    # new head since it was answered (a head that completes makes a new cycle), or they are still sending the
    # body it did not read. A connection handed over to a websocket has another protocol now.
    if proto.transport.get_protocol() is not proto:
        return False
    return proto.cycle is None or proto.cycle.response_complete


def _arm(proto: Any) -> None:
    timer = getattr(proto, "_mf_head_timer", None)
    if timer is not None:
        timer.cancel()
    proto._mf_head_timer = proto.loop.call_later(_head["seconds"], _late, proto)


def _late(proto: Any) -> None:
    proto._mf_head_timer = None
    late = _h11_late(proto) if isinstance(proto, H11Protocol) else _httptools_late(proto)
    if late and not proto.transport.is_closing():
        proto.transport.close()


def _bound(cls: type) -> None:
    """Wrap ``cls``'s connection_made / on_response_complete / connection_lost once (install may run twice)."""
    if getattr(cls, "_mf_bounded", False):
        return
    made, done, lost = cls.connection_made, cls.on_response_complete, cls.connection_lost

    def connection_made(self: Any, transport: Any) -> None:
        made(self, transport)
        _arm(self)

    def on_response_complete(self: Any) -> None:
        done(self)
        if not self.transport.is_closing():
            _arm(self)

    def connection_lost(self: Any, exc: Exception | None) -> None:
        timer = getattr(self, "_mf_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._mf_head_timer = None
        lost(self, exc)

    cls.connection_made, cls.on_response_complete = connection_made, on_response_complete  # type: ignore[attr-defined]
    cls.connection_lost, cls._mf_bounded = connection_lost, True  # type: ignore[attr-defined]


_TOO_LARGE = json.dumps({"error": {"message": "the request head (request line and headers) is larger than the "
                                            "server accepts", "type": "invalid_request_error",
                                 "code": "request_header_too_large"}}).encode()
_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: " + str(len(_TOO_LARGE)).encode() + b"\r\n\r\n" + _TOO_LARGE)


def _capped(cls: type) -> None:
    """Count the bytes httptools is fed while a request head is incomplete; past the bound, 431 and close.
    (httptools calls back per complete header only, and llhttp sets no bound of its own.)"""
    if getattr(cls, "_mf_capped", False):
        return
    made, fed, headers_done, message_done = (cls.connection_made, cls.data_received, cls.on_headers_complete,
                                             cls.on_message_complete)

    def connection_made(self: Any, transport: Any) -> None:
        self._mf_in_head, self._mf_head_fed = True, 0
        made(self, transport)

    def data_received(self: Any, data: bytes) -> None:
        in_head = self._mf_in_head
        if in_head:
            self._mf_head_fed += len(data)
        fed(self, data)  # a head that ends in this data resets the count (a body in it is the body's)
        if self._mf_in_head and self._mf_head_fed > _head["bytes"] and not self.transport.is_closing():
            self.transport.write(_431)
            self.transport.close()

    def on_headers_complete(self: Any) -> None:
        self._mf_in_head, self._mf_head_fed = False, 0
        headers_done(self)

    def on_message_complete(self: Any) -> None:
        message_done(self)
        self._mf_in_head = True  # what comes next is the next request's head

    cls.connection_made, cls.data_received = connection_made, data_received  # type: ignore[attr-defined]
    cls.on_headers_complete, cls.on_message_complete = on_headers_complete, on_message_complete  # type: ignore[attr-defined]
    cls._mf_capped = True  # type: ignore[attr-defined]


def protocol() -> str:
    """The uvicorn HTTP protocol ``flowcore serve`` runs: httptools (a C parser, ~0.14 ms less CPU per request
    than h11) when installed, else h11; :func:`install` bounds both."""
    return "h11" if HttpToolsProtocol is None else "httptools"


def install(head_seconds: float | None = None) -> None:
    """From now on every connection of uvicorn's h11 and httptools protocols in this process closes when its
    request head is late (see the module docstring): ``flowcore serve`` runs it, and so does ``streamlit run
    app.py``, which makes its uvicorn server itself (the protocols' classes are changed in place, so a server
    made already uses them). ``head_seconds``: default $MERMAIDFLOW_HEAD_SECONDS, else 10 s."""
    _head["seconds"] = head_seconds or seconds(HEAD_ENV, DEFAULT_HEAD)
    _head["bytes"] = head_bytes()
    for cls in (H11Protocol, HttpToolsProtocol):
        if cls is not None:
            _bound(cls)
    if HttpToolsProtocol is not None:
        _capped(HttpToolsProtocol)


Receive = Callable[[], Awaitable[dict]]


def body_deadline(receive: Receive, body_seconds: float | None = None) -> Receive:
    """``receive`` for one request, giving up on a body part that is ``body_seconds`` late (default:
    $MERMAIDFLOW_BODY_SECONDS, else 30 s). Once the body is complete it is ``receive`` unchanged (a handler
    waiting for the client to leave waits as long as the answer takes)."""
    limit = body_seconds or seconds(BODY_ENV, DEFAULT_BODY)
    state: dict[str, Any] = {"body_done": False, "end": None}

    async def bounded() -> dict:
        if state["body_done"]:
            return await receive()
        loop = asyncio.get_running_loop()
        if state["end"] is None:
            state["end"] = loop.time() + limit * BODY_TOTAL_PARTS
        try:
            # a timer, not wait_for's extra task per request: this part's bound or the whole body's, the sooner
            async with asyncio.timeout_at(min(loop.time() + limit, state["end"])):
                message = await receive()
        except TimeoutError:
            state["body_done"] = True
            return {"type": "http.disconnect"}
        if message.get("type") != "http.request" or not message.get("more_body", False):
            state["body_done"] = True
        return message

    return bounded
