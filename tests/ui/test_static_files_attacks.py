"""Attacks on Streamlit's bundles from memory (flowcore/ui/static_files.py), as an outsider would try them.

ASGI-level: each request is the scope a server hands on (``path`` decoded, ``raw_path`` as sent), so paths a
client would tidy (``..``, ``//``, NUL) arrive as they were written. A tiny static directory with files outside
the bundle folders (``secret.txt``, ``index.html``, a file beyond a symlinked folder) stands in for the rest of
the disk: no request may ever be answered with their bytes from memory.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from flowcore.ui import static_files
from flowcore.ui.static_files import StaticBundles, bundle_names
from flowcore.ui.warm import Activity
from flowcore.ui.webguard import CSP, Hosts, WebGuard
from tests.helpers.asgi import Got, ask, one, scope_for

REPO = Path(__file__).resolve().parents[2]
SECRET = b"TOP-SECRET not a bundle"
JS_BODY = b"export const a = 1;\n"


class Inner:
    """Stands for Streamlit: records what reaches it and answers 299 with a marker body."""

    def __init__(self) -> None:
        self.scopes: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        self.scopes.append(scope)
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 299, "headers": [(b"content-length", b"9")]})
        await send({"type": "http.response.body", "body": b"streamlit"})


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    static = tmp_path / "static"
    (static / "static" / "js").mkdir(parents=True)
    (static / "static" / "js" / "a.js").write_bytes(JS_BODY)
    (static / "static" / "css").mkdir()
    (static / "static" / "css" / "s.css").write_text("body{}\n")
    (static / "static" / "media").mkdir()
    (static / "static" / "media" / "logo.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (static / "index.html").write_bytes(b"<html>" + SECRET + b"</html>")
    (static / "secret.txt").write_bytes(SECRET)
    (static / "static" / "secret.txt").write_bytes(SECRET)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.js").write_bytes(SECRET)
    (static / "static" / "js" / "linked").symlink_to(outside, target_is_directory=True)
    return static


def test_the_keys_are_the_bundle_files_alone_and_a_symlinked_folder_is_not_walked(tiny: Path):
    assert set(bundle_names(tiny)) == {"/static/js/a.js", "/static/css/s.css", "/static/media/logo.svg"}


@pytest.mark.parametrize("path", [
    "/static/js/../../secret.txt", "/static/js/../secret.txt", "/static/js/%2e%2e/%2e%2e/secret.txt",
    "/static/js/..%2f..%2fsecret.txt", "/static/js/a.js/../../../secret.txt", "/static/js/a.js\x00",
    "/static/js/a.js\x00/../../secret.txt", "/static/js/a.js%00", "/static\\js\\a.js", "/static/js\\..\\..\\secret.txt",
    "//static/js/a.js", "/static//js/a.js", "/static/js//a.js", "/./static/js/a.js", "/static/./js/a.js",
    "/static/js/a.js.", "/static/js/a.js/", "/static/js/a.js ", "/static/js/A.js", "/STATIC/js/a.js",
    "/static/js/ａ.js", "/static/js/a\u0307.js", "/static/js/linked/x.js", "/static/secret.txt", "/secret.txt",
    "/index.html", "/static/js", "/static/js/", "static/js/a.js", "", "/static/js/a.js?x=1",
    "/static/js/a.js#frag", "/static/js/a.js;x", "/%73tatic/js/a.js",
])
def test_no_path_but_an_exact_key_is_answered_from_memory(tiny: Path, path: str):
    inner = Inner()
    (got,) = ask(StaticBundles(inner, static_dir=tiny), scope_for(path))
    assert SECRET not in got.body
    assert (got.status, got.body) == (299, b"streamlit") and len(inner.scopes) == 1, path


def test_the_decoded_path_decides_never_the_raw_path(tiny: Path):
    """A server decodes ``%2F`` into ``path``; Streamlit routes by ``path`` too, so both name the same file."""
    inner = Inner()
    app = StaticBundles(inner, static_dir=tiny)
    lying_raw, lying_path = ask(
        app, scope_for("/static/js/a.js", raw_path=b"/static/js/..%2f..%2fsecret.txt"),
        scope_for("/static/js/../../secret.txt", raw_path=b"/static/js/a.js"))
    assert (lying_raw.status, lying_raw.body) == (200, JS_BODY)
    assert (lying_path.status, lying_path.body) == (299, b"streamlit")
    assert [s["path"] for s in inner.scopes] == ["/static/js/../../secret.txt"]


@pytest.mark.parametrize("base", ["studio", "/studio", "/studio/", "//studio//"])
def test_under_a_base_path_only_base_plus_key_is_answered(tiny: Path, base: str):
    inner = Inner()
    app = StaticBundles(inner, static_dir=tiny, base_url=base)
    ok, *others = ask(app, *(scope_for(p) for p in [
        "/studio/static/js/a.js", "/static/js/a.js", "/studiox/static/js/a.js", "/studio", "/studio/",
        "//studio/static/js/a.js", "/studio//static/js/a.js", "/STUDIO/static/js/a.js", "/studio/studio/static/js/a.js",
        "/x/studio/static/js/a.js", "/studio/../static/js/a.js", "/studiostatic/js/a.js"]))
    assert (ok.status, ok.body) == (200, JS_BODY)
    assert all((o.status, o.body) == (299, b"streamlit") for o in others)
    assert len(inner.scopes) == len(others)


def test_a_nested_base_path_is_matched_whole(tiny: Path):
    inner = Inner()
    ok, half = ask(StaticBundles(inner, static_dir=tiny, base_url="/a/b/"),
                   scope_for("/a/b/static/js/a.js"), scope_for("/a/static/js/a.js"))
    assert (ok.status, ok.body, half.status) == (200, JS_BODY, 299)


def guarded(inner, static_dir: Path):  # noqa: ANN001, ANN201
    """app.py's order: Activity, WebGuard, StaticBundles, then the rest (here the stand-in for Streamlit)."""
    return Activity(WebGuard(StaticBundles(inner, static_dir=static_dir), hosts=Hosts.served("127.0.0.1", env={})))


def test_the_web_guard_refuses_foreign_hosts_and_stamps_every_answer_from_memory(tiny: Path):
    inner = Inner()
    app = guarded(inner, tiny)
    tag = '"' + hashlib.md5(JS_BODY, usedforsecurity=False).hexdigest() + '"'
    foreign = [scope_for("/static/js/a.js", host=h) for h in
               ("evil.example", "evil.example:8501", "127.0.0.1.evil.example", "localhost@evil.example", "", "[::2]")]
    no_host = scope_for("/static/js/a.js")
    no_host["headers"] = []
    refused = ask(app, *foreign, no_host)
    for r in refused:
        assert r.status == 403 and JS_BODY not in r.body and r.header("etag") is None
    assert inner.scopes == []
    full, head, cached = ask(app, scope_for("/static/js/a.js"), scope_for("/static/js/a.js", "HEAD"),
                             scope_for("/static/js/a.js", headers={"if-none-match": tag}))
    assert (full.status, full.body, head.status, head.body, cached.status, cached.body) == (
        200, JS_BODY, 200, b"", 304, b"")
    for r in (full, head, cached):
        assert r.header("content-security-policy") == CSP
        assert r.header("x-content-type-options") == "nosniff" and r.header("referrer-policy") == "no-referrer"
    assert inner.scopes == []  # all three from memory


def test_app_py_puts_the_guard_before_the_bundles():
    """The guard must wrap StaticBundles (outer = earlier in the list), or answers from memory skip it."""
    tree = ast.parse((REPO / "app.py").read_text(encoding="utf-8"))
    lists = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords
             if kw.arg == "middleware" and isinstance(kw.value, ast.List)]
    assert len(lists) == 1
    order = [ast.unparse(m.args[0]) for m in lists[0].elts]
    assert "StaticBundles" in order and "webguard.WebGuard" in order
    assert order.index("warm.Activity") < order.index("webguard.WebGuard") < order.index("StaticBundles")


def test_the_cache_never_grows_beyond_the_files_found_at_start(tiny: Path):
    inner = Inner()
    app = StaticBundles(inner, static_dir=tiny)
    junk = [scope_for(f"/static/js/{i}.js") for i in range(300)] + [
        scope_for("/static/js/a.js" + s) for s in ("?v=1", "/", ".", "%00", "/x")] + [
        scope_for("/static/js/a.js", m) for m in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get")]
    ask(app, *junk, scope_for("/static/js/a.js"), scope_for("/static/css/s.css", "HEAD"))
    assert set(app.cache) == {"/static/js/a.js", "/static/css/s.css"} <= set(app.names)
    assert len(app.names) == 3 and len(inner.scopes) == len(junk)


def test_every_real_bundle_cached_stays_within_the_package_size():
    from streamlit import file_util
    static = Path(file_util.get_static_dir())
    app = StaticBundles(Inner(), static_dir=static)
    names = sorted(app.names)
    ask(app, *(scope_for(n, "HEAD") for n in names), *(scope_for(n + "?x") for n in names[:20]))
    assert set(app.cache) == set(names)
    held = sum(len(a.body) for a in app.cache.values())
    assert held == sum(p.stat().st_size for p in app.names.values()) < 64 * 2**20  # a fixed ceiling


class Stamper:
    """An outer layer that edits the answer's header list in place, as a hand-written middleware may (ASGI does
    not forbid it): each visitor's own cookie goes onto the message it is handed."""

    def __init__(self, app) -> None:  # noqa: ANN001
        self.app, self.n = app, 0

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        self.n += 1
        me = f"visitor={self.n}".encode()

        async def stamped(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"].append((b"set-cookie", me))
            await send(message)
        await self.app(scope, receive, stamped)


def test_an_outer_layer_editing_one_answer_does_not_poison_the_next_visitors(tiny: Path):
    app = StaticBundles(Inner(), static_dir=tiny)
    stamped = Stamper(app)
    first, second, third = ask(stamped, *(scope_for("/static/js/a.js") for _ in range(3)))
    assert first.header("set-cookie") == "visitor=1"
    assert second.header("set-cookie") == "visitor=2"  # not visitor 1's cookie as well
    assert third.header("set-cookie") == "visitor=3"
    assert len(third.headers) == len(first.headers)
    assert app.cache["/static/js/a.js"].headers == static_files.answer(tiny / "static" / "js" / "a.js").headers


def test_many_parallel_first_requests_read_the_file_once_and_all_get_it(tiny: Path, monkeypatch):
    reads: list[Path] = []
    real = static_files.answer

    def counted(path: Path):  # noqa: ANN202
        reads.append(path)
        return real(path)
    monkeypatch.setattr(static_files, "answer", counted)
    app = StaticBundles(Inner(), static_dir=tiny)

    async def go() -> list[Got]:
        return await asyncio.gather(*(one(app, scope_for("/static/js/a.js", m))
                                      for m in ("GET", "HEAD") * 50))
    got = asyncio.run(go())
    assert len(reads) == 1
    assert [(g.status, g.body) for g in got] == [(200, JS_BODY), (200, b"")] * 50


@pytest.mark.parametrize("sent", [
    "", '""', "W/{tag}", "{bare}", '"{short}"', '"{bare}x"', '"x{bare}"', '"{upper}"', "{tag}x", "x{tag}",
    '"*"', '"{other}"', "{tag};q=1",
])
def test_304_only_for_the_exact_tag_or_star(tiny: Path, sent: str):
    app = StaticBundles(Inner(), static_dir=tiny)
    bare = hashlib.md5(JS_BODY, usedforsecurity=False).hexdigest()
    other = hashlib.md5(b"body{}\n", usedforsecurity=False).hexdigest()
    value = sent.format(tag=f'"{bare}"', bare=bare, short=bare[:8], upper=bare.upper(), other=other)
    (got,) = ask(app, scope_for("/static/js/a.js", headers={"if-none-match": value}))
    assert (got.status, got.body) == (200, JS_BODY), value


def test_304_and_head_carry_no_body_and_a_matching_tag_among_others_counts(tiny: Path):
    app = StaticBundles(Inner(), static_dir=tiny)
    tag = '"' + hashlib.md5(JS_BODY, usedforsecurity=False).hexdigest() + '"'
    got = ask(app, scope_for("/static/js/a.js", "HEAD", {"if-none-match": tag}),
              scope_for("/static/js/a.js", headers={"If-None-Match": f'"zz" ,  {tag} , "yy"'}),
              scope_for("/static/js/a.js", headers={"if-none-match": "*"}),
              scope_for("/static/js/a.js", "HEAD"))
    assert [(g.status, g.body) for g in got] == [(304, b""), (304, b""), (304, b""), (200, b"")]
    assert got[-1].header("content-length") == str(len(JS_BODY))
    for g in got:
        bodies = [m for m in g.messages if m["type"] == "http.response.body"]
        assert len(bodies) == 1 and not bodies[0].get("more_body")
    assert got[0].header("content-length") is None and got[0].header("content-type") is None


@pytest.mark.parametrize("name", ["range", "Range", "RANGE"])
def test_any_range_goes_to_streamlit_even_with_a_matching_tag(tiny: Path, name: str):
    inner = Inner()
    tag = '"' + hashlib.md5(JS_BODY, usedforsecurity=False).hexdigest() + '"'
    (got,) = ask(StaticBundles(inner, static_dir=tiny),
                 scope_for("/static/js/a.js", headers={name: "bytes=0-0", "if-none-match": tag}))
    assert (got.status, len(inner.scopes)) == (299, 1)


def test_no_answer_from_memory_is_a_type_a_browser_would_render_as_a_page():
    from streamlit import file_util
    static = Path(file_util.get_static_dir())
    app = StaticBundles(Inner(), static_dir=static)
    names = sorted(app.names)
    for n, g in zip(names, ask(app, *(scope_for(n, "HEAD") for n in names)), strict=True):
        kind = g.header("content-type")
        assert g.status == 200 and kind and "html" not in kind and "xml" not in kind.replace("svg+xml", ""), n
        if n.endswith(".js"):
            assert kind.split(";")[0] in ("text/javascript", "application/javascript"), n
        if n.endswith(".css"):
            assert kind == "text/css; charset=utf-8", n


@pytest.mark.parametrize("scope", [
    {"type": "lifespan", "asgi": {"version": "3.0"}},
    {"type": "websocket", "path": "/static/js/a.js", "headers": [(b"host", b"127.0.0.1")]},
    {"type": "http"},
    {"type": "http", "method": "GET"},
    {"type": "http", "method": "GET", "path": "/static/js/nothing.js", "headers": None},
    {"type": "http", "method": "get", "path": "/static/js/a.js", "headers": []},
    {"type": "http", "method": None, "path": "/static/js/a.js"},
    {"type": "http", "method": "GET", "path": None},
    {"type": None, "method": "GET", "path": "/static/js/a.js"},
])
def test_other_scopes_and_scopes_missing_keys_pass_through_untouched(tiny: Path, scope: dict):
    inner = Inner()
    asyncio.run(one(StaticBundles(inner, static_dir=tiny), scope))
    assert inner.scopes == [scope]


@pytest.mark.parametrize("scope", [
    {"type": "http", "method": "GET", "path": "/static/js/a.js"},  # an HTTP/2-style scope: no headers, raw_path
    {"type": "http", "method": "HEAD", "path": "/static/js/a.js", "headers": None},
    {"type": "http", "method": "GET", "path": "/static/js/a.js", "headers": ((b"if-none-match", b"x"),)},
])
def test_a_scope_without_headers_or_raw_path_still_gets_the_file(tiny: Path, scope: dict):
    inner = Inner()
    got = asyncio.run(one(StaticBundles(inner, static_dir=tiny), scope))
    assert got.status == 200 and got.body == (b"" if scope["method"] == "HEAD" else JS_BODY)
    assert inner.scopes == []


def test_a_file_swapped_for_a_link_after_start_serves_what_was_read_first(tiny: Path):
    """Once read, the bytes are fixed: a later change on disk (package content, not a request) changes nothing."""
    app = StaticBundles(Inner(), static_dir=tiny)
    (first,) = ask(app, scope_for("/static/js/a.js"))
    os.remove(tiny / "static" / "js" / "a.js")
    os.symlink(tiny / "secret.txt", tiny / "static" / "js" / "a.js")
    (again,) = ask(app, scope_for("/static/js/a.js"))
    assert first.body == again.body == JS_BODY
