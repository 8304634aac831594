"""Component files are sent as they are on disk, not gzipped again on every request.

Streamlit sends its own ``/static/`` bundles uncompressed: gzipping at the Python origin costs CPU on every
request, in the one event loop, while the page's own messages wait (its reasons are in
``streamlit/web/server/starlette/starlette_gzip_middleware.py``). Component files under ``/component/`` it still
gzips, and this app's two components are big: the Editor's Ace chunk (1 MB) took 25–30 ms of that loop per page
view, Mermaid's browser build (3.5 MB) about 100 ms. ASGI middleware (no Streamlit import): it drops the
request's ``Accept-Encoding`` on ``/component/`` paths, so Streamlit's gzip step passes those files through.
Everything else (pages, websocket, API) is untouched.
"""

from __future__ import annotations

from collections.abc import Callable

PREFIX = b"/component/"


def plain(path: str, base: str = "") -> bool:
    """Whether a request path is a component file: under ``/component/``, after the app's base path
    (``server.baseUrlPath``) when it has one."""
    raw = path.encode("utf-8", "surrogateescape")
    prefix = b"/" + base.strip("/").encode("utf-8", "surrogateescape") if base.strip("/") else b""
    return raw.startswith(prefix + PREFIX)


class PlainComponentFiles:
    """ASGI middleware: GET and HEAD requests for component files reach Streamlit without Accept-Encoding."""

    def __init__(self, app: Callable, base_url: str = "") -> None:
        self.app = app
        self.base = base_url

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if (scope.get("type") == "http" and scope.get("method") in ("GET", "HEAD")
                and plain(scope.get("path", ""), self.base)):
            headers = [(k, v) for k, v in scope.get("headers") or () if k.lower() != b"accept-encoding"]
            scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)
