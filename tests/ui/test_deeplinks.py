"""The middleware that tells Streamlit's index page where the app's root is (flowcore/ui/deeplinks.py): it
changes Streamlit's index.html only, gzip or not, in one piece or several, and passes everything else as it
came. tests/browser/test_deep_links.py opens every page by its address in Chromium."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from flowcore.ui.deeplinks import MARKER, PageBase, base_script

INDEX = b"<!DOCTYPE html><html><head><title>Streamlit</title><script>\n" + MARKER + b"\n</script></head></html>"


def _serve(body: bytes, *, ctype: bytes = b"text/html; charset=utf-8", zipped: bool = False, status: int = 200,
           chunks: int = 1, method: str = "GET") -> tuple[dict, bytes]:
    payload = gzip.compress(body) if zipped else body

    async def app(scope, receive, send):  # noqa: ANN001 - a stand-in for Streamlit's static handler
        headers = [(b"content-type", ctype), (b"content-length", str(len(payload)).encode()), (b"etag", b'"e1"')]
        headers += [(b"content-encoding", b"gzip")] if zipped else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        step = -(-len(payload) // chunks)
        for i in range(chunks):
            await send({"type": "http.response.body", "body": payload[i * step:(i + 1) * step],
                        "more_body": i < chunks - 1})

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request"}

    asyncio.run(PageBase(app, ["editor", "history"])({"type": "http", "method": method, "path": "/editor"},
                                                     receive, send))
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    headers = dict(start["headers"])
    assert int(headers[b"content-length"]) == len(body)
    if headers.get(b"content-encoding") == b"gzip":
        body = gzip.decompress(body)
    return headers, body


@pytest.mark.parametrize("zipped, chunks", [(False, 1), (True, 1), (True, 3), (False, 4)])
def test_the_index_page_gets_the_script_first_in_its_head(zipped, chunks):
    headers, body = _serve(INDEX, zipped=zipped, chunks=chunks)
    assert body == INDEX.replace(b"<head>", b"<head>" + base_script(["editor", "history"]), 1)
    assert (headers.get(b"content-encoding") == b"gzip") == zipped and b"etag" not in headers


@pytest.mark.parametrize("kind", ["component page", "script", "not found", "head request"])
def test_everything_else_passes_as_it_came(kind):
    body = {"component page": b"<html><head></head><body>ace</body></html>"}.get(kind, INDEX)
    headers, got = _serve(body, zipped=True, chunks=2, ctype=b"text/javascript" if kind == "script" else b"text/html",
                          status=404 if kind == "not found" else 200, method="HEAD" if kind == "head request" else "GET")
    assert got == body and headers[b"etag"] == b'"e1"'


def test_the_script_names_the_pages_and_steps_aside_for_a_host_page():
    js = base_script(["history", "editor", "editor"]).decode()
    assert 'const pages = ["editor", "history"]' in js and "if (s.BACKEND_BASE_URL) return;" in js
    assert "</script" not in base_script(["</script><script>x"]).decode()[:-9]  # a name cannot close the tag
