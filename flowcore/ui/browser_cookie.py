"""This browser's id cookie (``mf_browser``: its drafts and each page's state are kept under it), set by the
server on the page the browser opens.

It used to be set by a script element on the first page view: a second script run's worth of elements and
Streamlit's sanitiser chunk on every first visit. Set here, in the HTML response, it is already in the
websocket's request when the session starts (``st.context.cookies``), and it can be HttpOnly: no script on the
page ever needs to read it. ASGI middleware (no Streamlit import); ``app.py`` hands it to ``st.App``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flowcore.workspace.drafts import new_browser_id, valid_browser_id

COOKIE = "mf_browser"
# Over https the id is a __Host- cookie: a browser takes it only from this origin (Secure, Path=/, no Domain), so
# another site on the same host or a sibling subdomain cannot plant an id it knows (it can plant a plain one).
HOST_COOKIE = "__Host-mf_browser"
MAX_AGE = 365 * 24 * 3600


def cookie_name(secure: bool) -> str:
    return HOST_COOKIE if secure else COOKIE


def from_cookies(cookies: Mapping[str, str], secure: bool) -> str | None:
    """The browser id the page's request carries (``st.context.cookies``), read as the server's cookie step reads
    it: over https only the __Host- one (a plain one may be planted), over http only the plain one (a __Host- one
    set by an https site on another port of this host reaches http://localhost too)."""
    value = cookies.get(cookie_name(secure))
    return value if valid_browser_id(value) else None


def page_is_https(headers: Mapping[str, str], tls: bool) -> bool:
    """:func:`is_https` for a page's session: ``tls`` when this server terminates TLS itself (its requests'
    scheme is https), else what the proxy's headers on the session's request say."""
    raw = {k.lower().encode("latin-1"): str(v).encode("latin-1", "replace") for k, v in headers.items()}
    return is_https({"scheme": "https" if tls else "http"}, raw)


def is_https(scope: dict, headers: Mapping[bytes, bytes]) -> bool:
    """Whether the browser reached this app over https: directly, or through a proxy that says so in the first
    entry of ``X-Forwarded-Proto`` (``https, http`` from a chain) or of ``Forwarded`` (``for=…;proto=https``)."""
    if scope.get("scheme") in ("https", "wss"):
        return True
    proto = headers.get(b"x-forwarded-proto", b"").split(b",")[0].strip().lower()
    if proto == b"https":
        return True
    first = headers.get(b"forwarded", b"").split(b",")[0]
    return any(k.strip().lower() == b"proto" and v.strip().strip(b'"').lower() == b"https"
               for k, _, v in (pair.partition(b"=") for pair in first.split(b";")))


def browser_cookie(header: bytes | None, name: str = COOKIE) -> str | None:
    """The valid browser id in a Cookie request header, else None. Split by hand, in one pass: the standard
    library's SimpleCookie takes quadratic time on some headers (CVE-2024-7592, unfixed in this Python), and every
    request of every visitor passes here. Read as the page will read it (Starlette's ``cookie_parser``, behind
    ``st.context.cookies``): the last ``mf_browser`` in the header wins."""
    found: bytes | None = None
    for part in (header or b"").split(b";"):
        key, _, value = part.partition(b"=")
        if key.strip() == name.encode():
            found = value.strip()
    if found is None:
        return None
    browser = found.decode("latin-1")
    return browser if valid_browser_id(browser) else None


def defused(header: bytes) -> bytes:
    """``header`` without its pairs holding both a quote and a backslash. Streamlit reads every request's cookies
    (its session middleware) with Starlette's ``cookie_parser``, which unquotes each value with the standard
    library's ``_unquote``: quadratic on backslashes (CVE-2024-7592, unfixed in this Python), one 30 KB header held
    the whole server ~3 s. No cookie this app reads (its id, Streamlit's XSRF and login cookies) is ever quoted."""
    if b"\\" not in header:
        return header
    return b";".join(p for p in header.split(b";") if not (b"\\" in p and b'"' in p))


def set_cookie_header(browser: str, secure: bool) -> tuple[bytes, bytes]:
    attrs = (f"{cookie_name(secure)}={browser}; Path=/; Max-Age={MAX_AGE}; HttpOnly; SameSite=Lax"
             + ("; Secure" if secure else ""))
    return b"set-cookie", attrs.encode("ascii")


class BrowserCookie:
    """ASGI middleware: an HTML page sets the browser's id cookie (a new id when it has no valid one); every
    request's and websocket's Cookie header is ``defused`` on its way to Streamlit."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = list(scope.get("headers") or ())
        if any(k.lower() == b"cookie" and b"\\" in v for k, v in raw):  # before Streamlit reads it
            raw = [(k, defused(v) if k.lower() == b"cookie" else v) for k, v in raw]
            scope = {**scope, "headers": raw}
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        sent = dict((k.lower(), v) for k, v in reversed(raw))  # the first of each, as Starlette's Headers.get
        # a browser's own id is sent back as it is: HttpOnly (a cookie an older version set from a script was not),
        # and its year counts from this visit. Over https only the __Host- id counts: a plain one may be planted.
        secure = is_https(scope, sent)
        browser = browser_cookie(sent.get(b"cookie"), cookie_name(secure)) or new_browser_id()

        async def patched(message: dict) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                headers = list(message.get("headers") or ())
                kind = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                if kind.startswith(b"text/html"):
                    message = {**message, "headers": headers + [set_cookie_header(browser, secure)]}
            await send(message)

        await self.app(scope, receive, patched)
