"""The app bound to 127.0.0.1 behind a reverse proxy (how TLS is usually added) is served to everyone the proxy
serves. Before, it stayed login-free there: the proxied visitor got the one-person loopback app, whose Settings
page tests a typed URL with the server's key (a listener received ``Bearer <server key>``). Now a session is a
team one (login required) when the app answers to a name beyond this machine (MERMAIDFLOW_HOSTS, which a proxied
browser's name must be listed in) or its request carries a proxy's forwarding header. A real proxy
(tests/helpers/revproxy.py) stands between Chromium and the app; Chromium resolves the public name to 127.0.0.1
(``--host-resolver-rules``), so it sends exactly the Host and Origin it would send through a deployed proxy."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.helpers.listener import Listener
from tests.helpers.revproxy import ReverseProxy

from .conftest import CHROMIUM, CHROMIUM_ARGS, _stop, new_context, start_app, wait_for_app

pytestmark = pytest.mark.browser
NAME = "studio.example.org"
SERVER_KEY = "sk-server-PROXIED-7c41"
LOCKED = "requires a login"
ENDPOINT = "Endpoint URL (OpenAI-compatible)"


def _visit(browser, url: str, evil_url: str, **context) -> str:
    """Open Settings at ``url`` and, if the loopback app's Settings is there, test the listener's URL with the
    server's key; 'locked' or 'app' for what the visitor got."""
    ctx = new_context(browser, **context)
    try:
        page = ctx.new_page()
        page.goto(f"{url}/settings", wait_until="domcontentloaded")
        wait_for_app(page)
        box, lock = page.get_by_label(ENDPOINT), page.get_by_text(LOCKED)
        expect(box.or_(lock)).to_be_visible()  # one or the other, once the page has drawn
        if box.count():
            box.fill(evil_url)
            page.get_by_role("button", name="Test connection").click()
            wait_for_app(page)
            return "app"
        expect(lock).to_be_visible()
        return "locked"
    finally:
        ctx.close()


def test_a_visitor_through_a_forwarding_proxy_gets_the_login(browser, tmp_path):
    """nginx's usual Streamlit setup: X-Forwarded-For added, Host set to the upstream's 127.0.0.1:port."""
    with Listener() as shared, Listener() as evil:
        app = start_app(tmp_path, env={"OPENAI_BASE_URL": shared.base_url, "OPENAI_API_KEY": SERVER_KEY})
        try:
            with ReverseProxy(int(app.url.rsplit(":", 1)[1]), forward=True, rewrite_host=True) as proxy:
                assert _visit(browser, proxy.url, evil.base_url) == "locked"
                assert any(b"x-forwarded-for: 127.0.0.1" in h.lower() and b"upgrade: websocket" in h.lower()
                           for h in proxy.heads)  # the session's own request came through the proxy
            assert evil.received == []
            # A local visitor who sends the header himself locks only his own session: the owner, at the same
            # time on 127.0.0.1 without it, still has the one-person app (a forged header never unlocks).
            assert _visit(browser, app.url, evil.base_url, extra_http_headers={"X-Forwarded-For": "1.2.3.4"}) \
                == "locked"
            assert _visit(browser, app.url, shared.base_url) == "app"
        finally:
            _stop(app.process)
    assert evil.keys() == [] and evil.received == []  # neither the server's key nor anything else


def test_a_public_name_makes_the_app_a_teams_for_everyone(browser, tmp_path):
    """A bare proxy (no forwarding header, the browser's Host kept): the name must be in MERMAIDFLOW_HOSTS or
    the app refuses it (403, tests/ui/test_webguard.py), and once it is, everyone logs in, the owner on
    127.0.0.1 too."""
    with Listener() as shared, Listener() as evil:
        env = {"OPENAI_BASE_URL": shared.base_url, "OPENAI_API_KEY": SERVER_KEY}
        app = start_app(tmp_path, env={**env, "MERMAIDFLOW_HOSTS": NAME})
        try:
            with ReverseProxy(int(app.url.rsplit(":", 1)[1]), forward=False) as proxy:
                named = browser.browser_type.launch(
                    executable_path=CHROMIUM, headless=True,
                    args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {NAME} 127.0.0.1"])
                try:
                    assert _visit(named, f"http://{NAME}:{proxy.port}", evil.base_url) == "locked"
                finally:
                    named.close()
                assert not any(b"x-forwarded" in h.lower() for h in proxy.heads)
            assert _visit(browser, app.url, evil.base_url) == "locked"
        finally:
            _stop(app.process)
    assert evil.keys() == [] and evil.received == []
