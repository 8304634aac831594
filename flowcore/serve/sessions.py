"""Open MCP sessions per key owner. The SDK's session manager bounds the sessions of the whole server
(``max_sessions``) but not one caller's: one key's plain ``initialize`` POSTs filled its table and every other
owner's ``initialize`` was a 503 for the 30 minutes idle sessions lived (attack8 #4). Here a POST that would open
a session (no ``mcp-session-id`` header) is refused with 429 to an owner who holds ``per_owner`` open ones already;
the sessions an owner holds are the ids the SDK answered his opening POSTs with that it still keeps (a deleted or
idle-closed session frees its place), plus the opening POSTs still being answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flowcore.serve.limits import ENV

SESSION_HEADER = b"mcp-session-id"


class SessionCap:
    def __init__(self, per_owner: int, live: Callable[[], Container[str]]) -> None:
        self.per_owner = per_owner
        self._live = live  # the session ids the SDK keeps now
        self._open: dict[str, set[str]] = {}  # owner -> session ids his opening POSTs got
        self._opening: dict[str, int] = {}  # owner -> opening POSTs being answered

    def held(self, owner: str) -> int:
        ids = self._open.get(owner)
        if ids:
            live = self._live()
            ids = {s for s in ids if s in live}
            if ids:
                self._open[owner] = ids
            else:
                del self._open[owner]
        return len(self._open.get(owner, ())) + self._opening.get(owner, 0)

    async def __call__(self, app: ASGIApp, owner: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a POST /mcp that opens a session, or refuse it when ``owner`` holds his share of them."""
        if any(k == SESSION_HEADER for k, _ in scope.get("headers", ())):
            await app(scope, receive, send)
            return
        if self.held(owner) >= self.per_owner:
            await _refuse(send, f"you have {self.per_owner} MCP sessions open, the most one key owner may "
                          f"({ENV['sessions_per_owner']}): end one (DELETE /mcp with its mcp-session-id) or let "
                          "it close unused")
            return
        self._opening[owner] = self._opening.get(owner, 0) + 1
        got: list[str] = []

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                got.extend(v.decode("latin-1") for k, v in message.get("headers", ()) if k.lower() == SESSION_HEADER)
            await send(message)

        try:
            await app(scope, receive, watched)
        finally:
            n = self._opening[owner] - 1
            if n:
                self._opening[owner] = n
            else:
                del self._opening[owner]
            if got:
                self._open.setdefault(owner, set()).update(got)


async def _refuse(send: Send, message: str) -> None:
    # A JSON-RPC error without a request id, as the SDK's own refusals (its "Too many open sessions")
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
