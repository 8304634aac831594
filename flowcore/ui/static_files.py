"""Streamlit's own bundles (``/static/js``, ``/static/css``, ``/static/media``) answered from memory.

A first page view fetches ~100 of them (2 MB), and the browser runs none of its module scripts until the last has
come. Streamlit answers each through its middleware stack and Starlette's ``StaticFiles``: a stat and every 64 KB
read of the file is a hop to a worker thread and back, all in the one event loop, 3.7–4.4 ms a file on this
project's 2-core machines, ~0.4 s of every first paint spent before Streamlit's page could start.

These files are package content named by their hash (Streamlit marks them ``immutable``), so their bytes never
change while the server runs. This ASGI middleware (no Streamlit import; ``app.py`` hands it the static
directory) answers a GET or HEAD for one of them from memory, with the headers Streamlit gives it. The names are
the ones found on disk at start: a request path is looked up as a key, never joined to a directory, so no
request can name a file outside them. Anything else (pages, index.html, ranges, other methods) goes on to
Streamlit unchanged.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import NamedTuple

BUNDLES = ("static/js", "static/css", "static/media")  # the hashed files; index.html and manifest.json are not
IMMUTABLE = b"public, immutable, max-age=31536000"  # Streamlit's own value for them


def bundle_names(static_dir: Path) -> dict[str, Path]:
    """The url path (``/static/js/x.js``) of every regular file under the bundle folders, to its file."""
    names: dict[str, Path] = {}
    for sub in BUNDLES:
        top = static_dir / sub
        for folder, _, files in os.walk(top):
            for name in files:
                path = Path(folder) / name
                if path.is_file():
                    names["/" + path.relative_to(static_dir).as_posix()] = path
    return names


class Answer(NamedTuple):
    headers: list[tuple[bytes, bytes]]
    body: bytes
    etag: bytes


def answer(path: Path) -> Answer:
    """The response headers and body (and its ETag) for one bundle file."""
    body = path.read_bytes()
    kind = mimetypes.guess_type(path.name)[0] or "text/plain"  # as Starlette's FileResponse says it
    if kind.startswith("text/"):
        kind += "; charset=utf-8"
    etag = b'"' + hashlib.md5(body, usedforsecurity=False).hexdigest().encode() + b'"'
    headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode()), (b"etag", etag),
               (b"last-modified", formatdate(path.stat().st_mtime, usegmt=True).encode()),
               (b"cache-control", IMMUTABLE), (b"accept-ranges", b"bytes")]
    return Answer(headers, body, etag)


class StaticBundles:
    """ASGI middleware: Streamlit's hashed bundle files from memory (see the module's doc)."""

    def __init__(self, app: Callable, static_dir: str | Path, base_url: str = "") -> None:
        self.app = app
        base = base_url.strip("/")
        self.prefix = "/" + base if base else ""
        self.names = bundle_names(Path(static_dir))
        self.cache: dict[str, Answer] = {}

    def _find(self, scope: dict) -> str | None:
        if scope.get("type") != "http" or scope.get("method") not in ("GET", "HEAD"):
            return None
        path = scope.get("path", "")
        if self.prefix:
            if not path.startswith(self.prefix + "/"):
                return None
            path = path[len(self.prefix):]
        if path not in self.names:
            return None
        if any(k.lower() == b"range" for k, _ in scope.get("headers") or ()):
            return None  # a part of a file: Streamlit's own answer
        return path

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        path = self._find(scope)
        if path is None:
            await self.app(scope, receive, send)
            return
        if path not in self.cache:
            try:
                self.cache[path] = answer(self.names[path])
            except OSError:  # gone from disk since start: Streamlit says what it says
                await self.app(scope, receive, send)
                return
        headers, body, etag = self.cache[path]
        sent = {t.strip() for k, v in scope.get("headers") or () if k.lower() == b"if-none-match"
                for t in v.split(b",")}
        if etag in sent or b"*" in sent:  # the browser has these bytes already
            await send({"type": "http.response.start", "status": 304,
                        "headers": [h for h in headers if h[0] in (b"etag", b"cache-control")]})
            await send({"type": "http.response.body", "body": b""})
            return
        # a fresh list for each answer: a layer outside that appends to the message's headers in place (a
        # visitor's cookie) must not write into the cache, and so into every later visitor's answer
        await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
