"""Deep links to pages (issue 30): ``/editor?code=…`` or ``/history`` opened directly, with no 404 on the way.

Streamlit's page cannot tell the app's root from a page's path: opened at ``/editor`` it first tries
``/editor/_stcore/health`` and ``/editor/_stcore/host-config`` (two 404s and two console errors a load), then
``/``. This ASGI middleware (no Streamlit import; ``app.py`` hands it to ``st.App``) writes the answer into
Streamlit's own ``index.html`` before its script runs: ``window.__streamlit.BACKEND_BASE_URL``, the address with
the page's url path taken off, worked out in the browser so it holds under ``server.baseUrlPath`` or a proxy's
prefix too. A path whose last part is not a page's url path is left to Streamlit's own search.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable

# Streamlit's index.html: the page the browser opens for "/" and for every page's url path
MARKER = b"window.prerenderReady = false"
HEAD = b"<head>"
DROPPED = (b"content-length", b"content-encoding", b"etag", b"last-modified")  # no longer true of the new body


def base_script(pages: Iterable[str]) -> bytes:
    """The inline script that sets BACKEND_BASE_URL when the path ends in one of ``pages`` (unless a host page
    set it already)."""
    names = json.dumps(sorted(set(pages))).replace("</", "<\\/")
    return ("<script>(() => { const pages = " + names + ", s = window.__streamlit || {};"
            " if (s.BACKEND_BASE_URL) return;"
            " const path = location.pathname.replace(/\\/+$/, ''), last = path.slice(path.lastIndexOf('/') + 1);"
            " if (!pages.includes(last)) return;"
            " window.__streamlit = Object.assign({}, s,"
            " {BACKEND_BASE_URL: location.origin + path.slice(0, path.length - last.length)}); })();</script>"
            ).encode()


def inject(body: bytes, script: bytes) -> bytes | None:
    """``body`` with ``script`` first in its head, or None when it is not Streamlit's index page."""
    if MARKER not in body or HEAD not in body:
        return None
    return body.replace(HEAD, HEAD + script, 1)


class PageBase:
    """ASGI middleware: Streamlit's index page says where the app's root is (see the module's doc)."""

    def __init__(self, app: Callable, pages: Iterable[str]) -> None:
        self.app = app
        self.script = base_script(pages)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        start: dict | None = None
        parts: list[bytes] = []

        async def patched(message: dict) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict((k.lower(), v) for k, v in message.get("headers") or ())
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if message.get("status") == 200 and html and headers.get(b"content-encoding") in (None, b"gzip"):
                    start = message  # held until the body is read
                    return
            elif message["type"] == "http.response.body" and start is not None:
                parts.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                await self._send_page(send, start, b"".join(parts))
                return
            await send(message)

        await self.app(scope, receive, patched)

    async def _send_page(self, send: Callable, start: dict, raw: bytes) -> None:
        headers = list(start.get("headers") or ())
        zipped = any(k.lower() == b"content-encoding" for k, _ in headers)
        try:
            page = inject(gzip.decompress(raw) if zipped else raw, self.script)
        except (OSError, EOFError):  # not gzip after all: passed on as it came
            page = None
        if page is None:
            await send(start)
            await send({"type": "http.response.body", "body": raw})
            return
        body = gzip.compress(page, 6) if zipped else page
        headers = [(k, v) for k, v in headers if k.lower() not in DROPPED]
        headers.append((b"content-length", str(len(body)).encode()))
        if zipped:
            headers.append((b"content-encoding", b"gzip"))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})
