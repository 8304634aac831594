"""Component files go as they are on disk (flowcore/ui/plain_files.py), through Streamlit's own gzip step."""

from __future__ import annotations

import asyncio

import httpx
from streamlit.web.server.starlette.starlette_gzip_middleware import SelectiveGZipMiddleware

from flowcore.ui.plain_files import PlainComponentFiles, plain

BODY = b"ace.define('x', [], function () {});\n" * 400  # 15 KB of script: gzip worth it to Streamlit


async def _files(scope, receive, send):  # noqa: ANN001 - a plain ASGI app serving one script for any path
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/javascript"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else BODY})


def _get(path: str, base: str = "", method: str = "GET") -> httpx.Response:
    app = PlainComponentFiles(SelectiveGZipMiddleware(_files, minimum_size=1000, compresslevel=5), base_url=base)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            return await c.request(method, path, headers={"accept-encoding": "gzip, deflate, br"})
    return asyncio.run(go())


def test_a_component_file_is_sent_as_it_is_on_disk():
    r = _get("/component/pages.ace.ace_editor/static/js/2.chunk.js")
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert r.content == BODY and int(r.headers["content-length"]) == len(BODY)


def test_everything_else_is_still_gzipped_by_streamlit():
    for path in ("/_stcore/host-config", "/editor", "/components/x.js", "/x/component/y.js"):
        r = _get(path)
        assert r.headers.get("content-encoding") == "gzip", path
        assert r.content == BODY  # httpx undoes the gzip: the same bytes


def test_under_a_base_path_only_its_component_files_are_plain():
    assert "content-encoding" not in _get("/studio/component/a/b.js", base="/studio/").headers
    assert _get("/component/a/b.js", base="studio").headers.get("content-encoding") == "gzip"
    assert plain("/studio/component/a", "studio") and plain("/component/a") and not plain("/studio/component/a")
    assert not plain("/componentx/a") and not plain("/studio/components/a", "studio")


def test_a_head_request_is_plain_too_and_a_post_is_left_alone():
    assert "content-encoding" not in _get("/component/a/b.js", method="HEAD").headers
    r = _get("/component/a/b.js", method="POST")
    assert r.headers.get("content-encoding") == "gzip"  # untouched: Streamlit's own say
