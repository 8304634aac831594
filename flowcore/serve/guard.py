"""Who may call the server: an ASGI middleware in front of every route (the OpenAI surface and /mcp alike).

- By default (``flowcore serve``, on loopback too), every request needs ``Authorization: Bearer KEY`` with an
  active key of the workspace (flowcore.workspace.keys); ``/health`` alone answers without one. Keyless is the
  explicit ``serve --no-keys``, loopback only: a proxy or tunnel that adds no forwarding header (nginx's default
  ``proxy_pass``, socat, ``ssh -L``) sends requests no server can tell from a local program's, so a keyless
  server must never be put behind one (docs/serve.md).
- With ``--no-keys``, a request that came through a reverse proxy that says so (it carries a header one adds:
  ``X-Forwarded-For``, ``Forwarded``, ...) needs a key all the same: a proxy serves whoever reaches it.
- On loopback without keys, a request that presents one of our keys (``mf_...``) must present a valid one (a
  mistyped or revoked key is never silently ignored; an OpenAI client's placeholder key is), and the Host and Origin headers must be loopback ones: a web page elsewhere cannot reach
  the server through DNS rebinding or a cross-site form post.
- A body whose Content-Length passes the cap is refused with 413 before it is read, and one whose parts stop
  coming is abandoned (flowcore.serve.slow; a late request head is the HTTP protocol's to close).

The key's owner goes into ``scope["state"]["owner"]`` ("local" without a key) and its id into
``scope["state"]["key_id"]``: traces, publishes and the MCP tools read who is calling from there only, never from
the headers again. A request with more than one Authorization header is refused (400).
"""

from __future__ import annotations

import functools
import ipaddress
import json
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from flowcore.serve.slow import body_deadline
from flowcore.workspace.keys import KeyCheck
from flowcore.workspace.store import Workspace

OPEN_PATHS = ("/health",)
# Headers a reverse proxy adds: a request that carries one came from wherever the proxy serves, not from this
# machine, whatever address the server is bound to. (A local caller who sends one only asks for a key himself.)
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip")


def proxied(headers: Any) -> bool:
    """Whether a request (its header names: a mapping or (name, value) pairs) came through a reverse proxy."""
    names = headers.keys() if hasattr(headers, "keys") else (k for k, _ in headers or ())
    return any((k.decode("latin-1") if isinstance(k, bytes) else str(k)).lower() in PROXY_HEADERS for k in names)


@functools.lru_cache(maxsize=256)
def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, ::1 or 'localhost'; anything else (0.0.0.0, a name, an address) is reachable from elsewhere."""
    h = (host or "").strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)
def _hostname(value: str) -> str:
    try:
        return urlsplit(f"//{value}").hostname or ""
    except ValueError:
        return ""


async def _refuse(send: Send, status: int, message: str, code: str, type_: str) -> None:
    body = json.dumps({"error": {"message": message, "type": type_, "code": code}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app: ASGIApp, ws: Workspace, *, require_keys: bool, max_body: int) -> None:
        self.app, self.ws, self.require_keys, self.max_body = app, ws, require_keys, max_body
        self.verify = KeyCheck(ws)  # every request's key checked; a revocation holds from the next request on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers", [])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        refusal = self._check(scope, headers)
        if refusal is None and sum(k.lower() == b"authorization" for k, _ in raw) > 1:
            # one identity per request: the dict above keeps the last, a Starlette Headers.get the first (before,
            # an MCP tool re-read the first, "Bearer nobody", and took a keyed caller for 'local')
            refusal = (400, "the request carries more than one Authorization header; send exactly one",
                       "duplicate_authorization", "invalid_request_error")
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        await self.app(scope, body_deadline(receive), send)  # a body sent a byte a minute is abandoned

    def _check(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str, str, str] | None:
        if not self.require_keys:
            if not is_loopback(_hostname(headers.get("host", ""))):
                return 403, "this server answers only requests addressed to 127.0.0.1 or localhost", \
                    "forbidden_host", "permission_error"
            origin = headers.get("origin")
            if origin and origin != "null" and not is_loopback(urlsplit(origin).hostname):
                return 403, f"requests from web pages at {origin} are refused", "forbidden_origin", \
                    "permission_error"
            if origin == "null":
                return 403, "requests from sandboxed or file:// pages are refused", "forbidden_origin", \
                    "permission_error"
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            return 413, f"the request body is {int(length)} bytes; at most {self.max_body} are accepted", \
                "body_too_large", "invalid_request_error"
        scope.setdefault("state", {})["owner"] = "local"
        need_key = self.require_keys or proxied(headers)
        auth = headers.get("authorization")
        if scope.get("path") in OPEN_PATHS and auth is None:
            return None
        if auth is None:
            if need_key:
                why = "" if self.require_keys else \
                    " (this request came through a reverse proxy: without a key only this machine is served)"
                return 401, f"this server needs an API key{why}: send 'Authorization: Bearer KEY' (make one "\
                    "with 'python -m flowcore keys create NAME')", "missing_api_key", "authentication_error"
            return None
        scheme, _, key = auth.partition(" ")
        if not need_key and not key.strip().startswith("mf_"):
            return None  # loopback: an OpenAI client's placeholder key ("unused", "sk-...") is not ours to judge
        rec = self.verify(key.strip()) if scheme.lower() == "bearer" else None
        if rec is None:
            return 401, "the API key is not valid (unknown, revoked or mistyped)", "invalid_api_key", \
                "authentication_error"
        scope["state"]["owner"] = rec.owner
        scope["state"]["key_id"] = rec.id
        return None


def owner_of(state: Any) -> str:
    return (state or {}).get("owner", "local") if isinstance(state, dict) else getattr(state, "owner", "local")
