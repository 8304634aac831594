"""A raw ASGI client for middleware tests: the request exactly as a server hands it on (a path with ``..`` or
NUL kept, no client tidying it), every message the app sends recorded."""

from __future__ import annotations

import asyncio


class Got:
    def __init__(self) -> None:
        self.status, self.headers, self.body, self.messages = 0, [], b"", []

    def header(self, name: str) -> str | None:
        found = [v.decode() for k, v in self.headers if k.decode().lower() == name]
        assert len(found) <= 1, (name, found)
        return found[0] if found else None


def scope_for(path: str, method: str = "GET", headers: dict | None = None, raw_path: bytes | None = None,
              host: str = "127.0.0.1:8501") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode("utf-8", "surrogateescape") if raw_path is None else raw_path,
            "root_path": "", "query_string": b"",
            "headers": [(b"host", host.encode())] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8501)}


async def one(app, scope: dict) -> Got:  # noqa: ANN001
    got, asked = Got(), []

    async def receive() -> dict:
        if not asked:
            asked.append(1)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)  # the client stays until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        got.messages.append(message)
        if message["type"] == "http.response.start":
            got.status, got.headers = message["status"], list(message.get("headers") or [])
        elif message["type"] == "http.response.body":
            got.body += message.get("body", b"")

    await app(scope, receive, send)
    return got


def ask(app, *scopes: dict) -> list[Got]:  # noqa: ANN001
    async def go() -> list[Got]:
        return [await one(app, s) for s in scopes]
    return asyncio.run(go())
