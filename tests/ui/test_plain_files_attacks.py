"""Attacks on PlainComponentFiles (flowcore/ui/plain_files.py): it only ever takes Accept-Encoding off a GET or
HEAD for a component file, never anything else, never for another route, and never changes the request's path
or the scope the servers outside it hold. (The real server under a base path, and its path security on the
same requests: tests/browser/test_ace_frame_attacks.py.)"""

from __future__ import annotations

import asyncio

import pytest

from flowcore.ui.plain_files import PlainComponentFiles, plain

OTHER = [(b"host", b"127.0.0.1:8501"), (b"cookie", b"mf_browser=abc"), (b"range", b"bytes=0-9"),
         (b"if-none-match", b'"etag"'), (b"x-accept-encoding", b"gzip")]


def _seen(scope: dict, base: str = "") -> dict:
    """The scope the app inside the middleware is called with."""
    got: list[dict] = []

    async def inner(s, receive, send):  # noqa: ANN001 - ASGI
        got.append(s)

    asyncio.run(PlainComponentFiles(inner, base_url=base)(scope, None, None))
    assert len(got) == 1  # always passed on, exactly once
    return got[0]


def _http(path: str, method: str = "GET", headers: list | None = None, **extra) -> dict:
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode("utf-8", "surrogateescape"), "root_path": "",
            "query_string": b"", "headers": list(headers if headers is not None else
                                               [*OTHER, (b"accept-encoding", b"gzip, br")]), **extra}


def test_only_accept_encoding_goes_and_every_other_header_stays_in_order():
    headers = [(b"accept-encoding", b"gzip"), *OTHER[:2], (b"Accept-Encoding", b"br"), *OTHER[2:],
               (b"ACCEPT-ENCODING", b"deflate")]
    scope = _http("/component/pages.ace.ace_editor/static/js/2.x.chunk.js", headers=headers)
    seen = _seen(scope)
    assert seen["headers"] == OTHER  # every spelling and every copy of it, and nothing else
    assert scope["headers"] == headers  # the caller's scope (the guard's, the warm-up's) is not changed
    assert {k: v for k, v in seen.items() if k != "headers"} == {k: v for k, v in scope.items() if k != "headers"}


@pytest.mark.parametrize("path", [
    "/", "/editor", "/_stcore/host-config", "/_stcore/stream", "/static/js/index.js", "/components/x.js",
    "/COMPONENT/a.js", "/Component/a.js", "//component/a.js", "/x/component/a.js", "/componentx/a.js",
    "/component", "component/a.js", "", "/%2Fcomponent/a.js", "/_stcore/a",
])
def test_no_other_route_loses_its_accept_encoding(path):
    scope = _http(path)
    assert _seen(scope) is scope, path  # the very same scope, untouched


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get", None])
def test_only_get_and_head(method):
    scope = _http("/component/a/b.js", method=method)
    assert _seen(scope) is scope


def test_websocket_and_lifespan_scopes_pass_untouched():
    ws = {"type": "websocket", "path": "/component/a", "headers": [(b"accept-encoding", b"gzip")]}
    assert _seen(ws) is ws
    life = {"type": "lifespan"}
    assert _seen(life) is life


def test_a_scope_without_headers_or_path_does_not_fail():
    assert _seen({"type": "http", "method": "GET", "path": "/component/a"})["headers"] == []
    odd = {"type": "http", "method": "GET"}
    assert _seen(odd) is odd


def test_the_base_path_is_matched_as_a_whole_segment():
    base = "studio"
    assert plain("/studio/component/a.js", base) and plain("/studio/component/a.js", "/studio/")
    for path in ("/component/a.js", "/studiox/component/a.js", "/x/studio/component/a.js", "/Studio/component/a",
                 "/studio//component/a.js", "/studio/COMPONENT/a.js"):
        assert not plain(path, base), path
        scope = _http(path)
        assert _seen(scope, base) is scope
    assert plain("/a/b/component/x", "/a/b/") and not plain("/a/component/x", "a/b")


def test_odd_bytes_in_a_path_are_no_error():
    for path in ("/component/\udcff.js", "/component/é.js", "/\udcffcomponent/x"):
        _seen(_http(path))  # a surrogate from an undecodable byte: still answered by Streamlit, no exception here
    assert plain("/component/\udcff.js") and not plain("/\udcffcomponent/x")
    assert plain("/stüdio/component/x", "stüdio")
