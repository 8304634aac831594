"""The browser id cookie the server sets with the page (flowcore/ui/browser_cookie.py)."""

from __future__ import annotations

import asyncio

from flowcore.ui.browser_cookie import (
    COOKIE,
    HOST_COOKIE,
    BrowserCookie,
    browser_cookie,
    from_cookies,
    page_is_https,
)
from flowcore.workspace.drafts import member_browser_id, new_browser_id, valid_browser_id


def _serve(kind: bytes = b"text/html", status: int = 200, method: str = "GET", cookie: bytes | None = None,
           scheme: str = "http", forwarded: bytes | None = None) -> list[dict]:
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": b"<html></html>"})

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    headers = [(b"cookie", cookie)] if cookie is not None else []
    if forwarded:
        headers.append((b"x-forwarded-proto", forwarded))
    scope = {"type": "http", "method": method, "path": "/", "scheme": scheme, "headers": headers}
    asyncio.run(BrowserCookie(app)(scope, None, send))
    return sent


def _set_cookies(sent: list[dict]) -> list[str]:
    return [v.decode() for k, v in sent[0]["headers"] if k == b"set-cookie"]


def test_a_new_browser_gets_a_new_http_only_id_with_the_page():
    first, second = _set_cookies(_serve()), _set_cookies(_serve())
    assert len(first) == len(second) == 1
    for header in first + second:
        name, value = header.split(";")[0].split("=")
        assert name == COOKIE and valid_browser_id(value)
        assert "HttpOnly" in header and "SameSite=Lax" in header and "Path=/" in header
        assert "Secure" not in header
    assert first != second  # every browser its own


def test_a_browser_with_an_id_keeps_it_and_gets_it_back_http_only():
    mine = new_browser_id()
    (back,) = _set_cookies(_serve(cookie=f"other=1; {COOKIE}={mine}".encode()))
    assert back.startswith(f"{COOKIE}={mine};") and "HttpOnly" in back  # an old script-set cookie is upgraded
    assert browser_cookie(f"{COOKIE}={mine}".encode()) == mine


def test_a_forged_or_broken_id_is_replaced():
    for bad in [f"{COOKIE}=../../etc", f"{COOKIE}=x" * 3, f'{COOKIE}="<script>"', "garbage;;==;", "\x00\x01"]:
        assert browser_cookie(bad.encode("latin-1")) is None
        assert len(_set_cookies(_serve(cookie=bad.encode("latin-1")))) == 1, bad


def test_only_html_pages_set_it():
    assert _set_cookies(_serve(kind=b"application/javascript")) == []
    assert _set_cookies(_serve(status=404)) == []
    assert _serve(method="POST")[0]["headers"] == [(b"content-type", b"text/html")]


def test_behind_https_it_is_secure():
    assert "Secure" in _set_cookies(_serve(scheme="https"))[0]
    assert "Secure" in _set_cookies(_serve(forwarded=b"https"))[0]


def test_a_hostile_cookie_header_is_read_in_linear_time():
    """Every request passes here: a 64 KB header of quotes and backslashes (quadratic in SimpleCookie,
    CVE-2024-7592) is read at once."""
    import time

    for header in [b'a="' + b"\\\\" * 32_000 + b'"', b";" * 64_000, b"=" * 64_000, (b"x=1; " * 12_000)]:
        t = time.process_time()
        assert browser_cookie(header) is None
        assert time.process_time() - t < 0.05
    mine = new_browser_id()
    assert browser_cookie(b"x=1; " * 10_000 + f"{COOKIE}={mine}".encode()) == mine


def _seen_by_streamlit(headers: list[tuple[bytes, bytes]], kind: str = "http") -> list[tuple[bytes, bytes]]:
    seen: list = []

    async def app(scope, receive, send):
        seen.append(scope["headers"])

    async def send(message):
        return None

    asyncio.run(BrowserCookie(app)({"type": kind, "method": "GET", "path": "/", "headers": headers}, None, send))
    return seen[0]


def test_streamlit_reads_no_hostile_cookie_header_after_it():
    """Streamlit's session middleware parses every request's cookies with Starlette's cookie_parser, which unquotes
    each value with the standard library's quadratic _unquote (CVE-2024-7592): a 60 KB header of backslashes held
    the whole server ~9 s. What reaches Streamlit, for a request and for a websocket, is read at once, and the
    other cookies are kept."""
    import time

    from starlette.requests import cookie_parser

    mine = new_browser_id()
    for hostile in [b'a="' + b"\\\\" * 30_000 + b'"', b'"' + b"\\\\" * 30_000, b'b=1; c="x\\' + b"\\\\" * 30_000 + b'"']:
        for kind in ("http", "websocket"):
            header = f"x=1; {COOKIE}={mine}; ".encode() + hostile + b"; _streamlit_xsrf=2|ab|cd|1"
            seen = dict(_seen_by_streamlit([(b"host", b"h"), (b"cookie", header)], kind))
            t = time.process_time()
            cookies = cookie_parser(seen[b"cookie"].decode("latin-1"))
            assert time.process_time() - t < 0.05, (hostile[:10], kind)
            assert cookies["x"] == "1" and cookies[COOKIE] == mine and cookies["_streamlit_xsrf"] == "2|ab|cd|1"
    ordinary = [(b"cookie", b'x=1; y="quoted"; z=a\\b')]
    assert _seen_by_streamlit(ordinary) == ordinary  # nothing to defuse: left as it came


def test_the_id_it_keeps_is_the_one_the_page_reads():
    """Starlette (st.context.cookies) takes the first Cookie header and the last mf_browser in it; a header read
    the other way round answered a browser whose page would use a broken id with no new one, or replaced a
    good one."""
    mine = new_browser_id()
    assert browser_cookie(f"{COOKIE}=broken; {COOKIE}={mine}".encode()) == mine
    assert browser_cookie(f"{COOKIE}={mine}; {COOKIE}=broken".encode()) is None
    (fresh,) = _set_cookies(_serve(cookie=f"{COOKIE}={mine}; {COOKIE}=broken".encode()))
    assert not fresh.startswith(f"{COOKIE}={mine};")  # the page would read "broken": a new id
    (kept,) = _set_cookies(_serve(cookie=f"{COOKIE}=broken; {COOKIE}={mine}".encode()))
    assert kept.startswith(f"{COOKIE}={mine};")  # the page reads this one: it is sent back


# -- over https: a __Host- cookie, which no other site on this host can plant --------------------------------------

def _serve_headers(headers: list[tuple[bytes, bytes]], scheme: str = "http") -> list[str]:
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<html></html>"})

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    asyncio.run(BrowserCookie(app)({"type": "http", "method": "GET", "path": "/", "scheme": scheme,
                                    "headers": headers}, None, send))
    return _set_cookies(sent)


def test_over_https_the_id_is_a_host_only_secure_cookie():
    ways = [([], "https"), ([(b"x-forwarded-proto", b"https")], "http"),
            ([(b"x-forwarded-proto", b"HTTPS, http")], "http"),  # a chain of proxies: the first is the browser's
            ([(b"forwarded", b'for=192.0.2.1;proto="https";by=10.0.0.1, for=10.0.0.2;proto=http')], "http")]
    for headers, scheme in ways:
        (header,) = _serve_headers(headers, scheme)
        name, value = header.split(";")[0].split("=")
        assert name == HOST_COOKIE and valid_browser_id(value), (headers, header)
        attrs = [a.strip() for a in header.split(";")[1:]]
        assert "Secure" in attrs and "Path=/" in attrs and not any(a.startswith("Domain") for a in attrs)
    for headers in ([(b"x-forwarded-proto", b"http, https")], [(b"forwarded", b"for=1.2.3.4;proto=http")],
                    [(b"x-forwarded-proto", b"httpsx")]):
        (header,) = _serve_headers(headers)
        assert header.startswith(f"{COOKIE}=") and "Secure" not in header, headers


def test_over_https_a_planted_plain_id_is_not_taken_and_the_host_id_is_kept():
    planted, mine = new_browser_id(), new_browser_id()
    (header,) = _serve_headers([(b"cookie", f"{COOKIE}={planted}".encode())], "https")
    assert header.startswith(f"{HOST_COOKIE}=") and planted not in header  # a new id, not the planted one
    (header,) = _serve_headers([(b"cookie", f"{COOKIE}={planted}; {HOST_COOKIE}={mine}".encode())], "https")
    assert header.startswith(f"{HOST_COOKIE}={mine};")
    # the page reads the one the server's step reads: over https only __Host-, over http only the plain one
    assert from_cookies({COOKIE: planted, HOST_COOKIE: mine}, secure=True) == mine
    assert from_cookies({COOKIE: planted}, secure=True) is None
    assert from_cookies({COOKIE: mine, HOST_COOKIE: planted}, secure=False) == mine  # another port's https site
    assert from_cookies({HOST_COOKIE: planted}, secure=False) is None and from_cookies({COOKIE: "x"}, False) is None
    assert page_is_https({"X-Forwarded-Proto": "https, http"}, tls=False)
    assert page_is_https({}, tls=True) and not page_is_https({"Forwarded": "for=1.2.3.4;proto=http"}, tls=False)
    assert not page_is_https({"X-Forwarded-Proto": "http"}, tls=False)


def test_a_signed_in_member_keeps_drafts_under_an_id_of_their_own():
    planted = new_browser_id()
    alice, mallory = member_browser_id("alice@example.com", planted), member_browser_id("mallory@example.com", planted)
    assert valid_browser_id(alice) and valid_browser_id(mallory)
    assert len({alice, mallory, planted}) == 3 and alice == member_browser_id("alice@example.com", planted)


def test_the_page_keys_a_members_drafts_by_member_and_browser(tmp_path, monkeypatch):
    """The same planted cookie in two members' sessions: what one stores, the other does not read."""
    from streamlit.testing.v1 import AppTest

    from flowcore.workspace import drafts
    from flowcore.workspace.store import Workspace

    def script() -> None:
        import streamlit as st

        from pages import common

        st.session_state["mf_browser"] = st.session_state["cookie"]  # what the cookie said
        st.write(common.browser_id())

    monkeypatch.setenv("MERMAIDFLOW_DB", str(tmp_path / "ws.db"))
    planted = new_browser_id()
    ids = []
    for member in ("alice@example.com", "mallory@example.com", None):
        at = AppTest.from_function(script)
        at.session_state["cookie"] = planted
        if member:
            at.session_state["mf_user"] = member
        at.run()
        assert not at.exception, at.exception
        ids.append(at.markdown[0].value)
    assert ids[2] == planted and len(set(ids)) == 3
    ws = Workspace(tmp_path / "ws.db")
    drafts.save_page_state(ws, ids[0], "history", {"hist_run": 7})
    assert drafts.load_page_state(ws, ids[0]) == {"history": {"hist_run": 7}}
    assert drafts.load_page_state(ws, ids[1]) == {} and drafts.load_page_state(ws, planted) == {}
