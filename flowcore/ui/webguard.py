"""What the app's web server lets in, and what its pages may load (issue 25, items 7 and 8). A plain ASGI
middleware (no Streamlit or Starlette import): ``app.py`` hands it to ``st.App``, so it sees every HTTP request
and every websocket handshake before Streamlit does.

- **Host check (DNS rebinding).** A page on ``evil.example`` whose name an attacker re-points at 127.0.0.1 is,
  to the browser, same-origin with it: without a check it could open the login-free loopback app and drive it
  (its Settings page sent the key out). The browser always sends the name it used in ``Host``, so the server
  answers only the names it serves: ``localhost``, ``127.0.0.1`` and ``[::1]`` (a rebinding page cannot send
  those), the address it is bound to when that is one address, and the names in ``MERMAIDFLOW_HOSTS``
  (``studio.example.org``, ``*.example.org``, ``name:port`` to pin a port). Anything else gets 403 for HTTP and
  a refused handshake for the websocket, whose ``Origin`` must name an allowed host too.
- **Content Security Policy.** Every response says that the page may load scripts, styles, images, fonts,
  frames and connections from its own origin only (plus ``data:``/``blob:`` images, workers and frames the
  components make), so a label, caption or component that slipped past :mod:`flowcore.mermaid.safe` still
  cannot load anything from elsewhere. ``Referrer-Policy: no-referrer`` keeps the app's address (which holds
  the open workflow) out of any request that does leave.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowcore.serve import slow

HOSTS_ENV = "MERMAIDFLOW_HOSTS"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; media-src 'self' data: blob:; "
       "frame-src 'self' data: blob:; worker-src 'self' blob:; object-src 'none'; base-uri 'self'; "
       "form-action 'self'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"referrer-policy", b"no-referrer"),
           (b"x-content-type-options", b"nosniff")]
REFUSED = (b"This server does not serve the host name this request was sent to. To reach it under another name, "
           b"add that name to " + HOSTS_ENV.encode() + b" where the app is started.\n")


def split_host(value: str | None) -> tuple[str, int | None] | None:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` -> (lower-case name without a trailing dot, port);
    None when it is not a host (empty, a path, credentials, a bad port)."""
    v = value or ""  # not stripped: a header value with a line break in it is no host
    if not v or any(c in v for c in "/@?#\\ \t") or any(ord(c) < 33 or ord(c) > 126 for c in v):
        return None
    port: str | None = None
    if v.startswith("["):
        name, sep, rest = v[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    else:
        name, sep, port = v.partition(":")
        port = port if sep else None
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        return None
    name = name.lower().rstrip(".")
    return (name, int(port) if port is not None else None) if name else None


@dataclass(frozen=True)
class Hosts:
    """The host names this server answers to (port None: any port)."""

    entries: tuple[tuple[str, int | None], ...]

    @classmethod
    def served(cls, bind_address: str | None, env: Mapping[str, str] = os.environ) -> Hosts:
        """Loopback names, the bind address when it is one address, and ``MERMAIDFLOW_HOSTS`` (ValueError
        naming an entry that is not a host)."""
        entries = [(n, None) for n in LOOPBACK_NAMES]
        bound = (bind_address or "").strip().strip("[]").lower().rstrip(".")
        if bound and bound not in ("0.0.0.0", "::"):  # bound to every interface: no one name is the server's
            entries.append((bound, None))
        for raw in (x.strip() for x in (env.get(HOSTS_ENV) or "").split(",")):
            if not raw:
                continue
            wild = raw.startswith("*.")
            got = split_host(raw[2:] if wild else raw)
            if got is None or "*" in got[0]:
                raise ValueError(f"{HOSTS_ENV}: {raw!r} is not a host name (write studio.example.org, "
                                 "*.example.org or studio.example.org:8501)")
            entries.append(("*." + got[0] if wild else got[0], got[1]))
        return cls(tuple(dict.fromkeys(entries)))

    def allows(self, host: str | None) -> bool:
        got = split_host(host)
        if got is None:
            return False
        name, port = got
        for allowed, pinned in self.entries:
            if pinned is not None and port != pinned:
                continue
            if name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:])):
                return True
        return False

    def allows_origin(self, origin: str | None) -> bool:
        """A websocket's Origin (``scheme://host[:port]``): absent (not a browser), or one of our hosts."""
        if origin is None:
            return True
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme.lower() in ("http", "https") and self.allows(rest)


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


class WebGuard:
    """ASGI middleware: refuse requests for a host this server does not serve, add the security headers."""

    def __init__(self, app: Any, hosts: Hosts | Callable[[], Hosts]) -> None:
        self.app = app
        self._hosts = hosts

    @property
    def hosts(self) -> Hosts:
        if callable(self._hosts):  # read once the server's options are known (at the first request)
            self._hosts = self._hosts()
        return self._hosts

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        ok = self.hosts.allows(_header(scope, b"host"))
        if kind == "websocket":
            if not (ok and self.hosts.allows_origin(_header(scope, b"origin"))):
                await receive()  # websocket.connect; closing before accepting refuses the handshake (403)
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        if not ok:
            await send({"type": "http.response.start", "status": 403, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(REFUSED)).encode()),
                *HEADERS]})
            await send({"type": "http.response.body", "body": REFUSED})
            return

        receive = slow.body_deadline(receive)  # a body (an upload) whose parts stop coming is abandoned

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers") or ()}
                message = {**message, "headers": [*(message.get("headers") or ()),
                                                  *(h for h in HEADERS if h[0] not in names)]}
            await send(message)

        await self.app(scope, receive, with_headers)
