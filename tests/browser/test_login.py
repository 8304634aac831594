"""Members only (issue 19.8): served to a team, the app requires a login through a real OpenID Connect provider
on 127.0.0.1 (oidc-provider-mock); a stranger is refused, a member gets in, and logging out ends the session.
Claims are read strictly (issue 25.4): an unverified address, a subject without an email claim, an address
with a line break before the team's @domain and a Kelvin-sign look-alike of a member are all refused. A member
cannot point the team's endpoint at a listener, nor make the server call it (issue 25.3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from .conftest import REPO, STARTUP_TIMEOUT_S, _free_port, _healthy, _stop, new_context, wait_for_app

pytestmark = pytest.mark.browser
oidc = pytest.importorskip("oidc_provider_mock", reason="oidc-provider-mock is installed by `make test`")


def _serve(tmp_path: Path, issuer: str, **extra: str) -> tuple[str, subprocess.Popen]:
    import time

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(f'[auth]\nredirect_uri = "{url}/oauth2callback"\ncookie_secret = "{os.urandom(16).hex()}"\n'
                       f'client_id = "mermaidflow"\nclient_secret = "test-secret"\n'
                       f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(MERMAIDFLOW_DB=str(tmp_path / "ws.db"), MERMAIDFLOW_LOGIN="1", PYTHONUNBUFFERED="1",
               MERMAIDFLOW_MEMBERS="alice@example.com")
    env.update(extra)
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address",
           "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--secrets.files", str(secrets)]
    with open(tmp_path / "app.log", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise AssertionError((tmp_path / "app.log").read_text(errors="replace")[-3000:])
        time.sleep(0.2)
    return url, proc


def _log_in(page, issuer: str, who: str) -> None:
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{issuer}/**")  # the provider's own form, on its own port
    page.locator('input[name="sub"]').fill(who)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url("http://127.0.0.1:*/**")
    wait_for_app(page)


def _log_out(page, issuer: str) -> None:
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{issuer}/**")  # RP-initiated logout at the provider, then back to the app
    page.get_by_role("button", name="End session").click()
    page.wait_for_url("http://127.0.0.1:*/**")
    wait_for_app(page)


def test_strangers_are_refused_members_get_in_and_logout_ends_the_session(browser, tmp_path):
    import httpx

    with oidc.run_server_in_thread() as server:
        issuer = f"http://localhost:{server.server_port}"
        for email in ("alice@example.com", "bob@example.com"):
            r = httpx.put(f"{issuer}/users/{quote(email)}", json={"email": email, "email_verified": True,
                                                                  "name": email.split("@")[0]})
            assert r.status_code == 204
        url, proc = _serve(tmp_path, issuer)
        context = new_context(browser, viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            page.goto(url, wait_until="domcontentloaded")
            wait_for_app(page)
            expect(page.get_by_text("This workspace is for the members of its team")).to_be_visible()
            expect(page.get_by_role("link", name="Editor")).to_have_count(0)  # nothing but the login

            _log_in(page, issuer, "bob@example.com")  # the provider knows him; the team does not
            expect(page.get_by_text("bob@example.com is not a member")).to_be_visible()
            expect(page.get_by_role("link", name="Editor")).to_have_count(0)
            _log_out(page, issuer)

            _log_in(page, issuer, "alice@example.com")
            expect(page.get_by_text("Signed in as alice@example.com").first).to_be_visible()
            page.get_by_role("link", name="Editor").first.click()
            wait_for_app(page)
            expect(page.get_by_role("heading", name="Editor")).to_be_visible()
            page.goto(url, wait_until="domcontentloaded")
            wait_for_app(page)
            _log_out(page, issuer)
            expect(page.get_by_text("This workspace is for the members of its team")).to_be_visible()
            page.reload(wait_until="domcontentloaded")  # the identity cookie is gone, not just the page state
            wait_for_app(page)
            expect(page.get_by_text("This workspace is for the members of its team")).to_be_visible()
        finally:
            context.close()
            _stop(proc)


def test_claims_that_do_not_name_a_verified_plain_address_are_refused(browser, tmp_path):
    import httpx

    attackers = {  # subject -> the claims the provider hands over, and what the refusal says
        "unverified": ({"email": "alice@example.com", "email_verified": False}, "is verified"),
        "alice@example.com": ({"email_verified": True}, "gave no email address"),  # the subject looks like a member
        "newline": ({"email": "x\n@team.example.org", "email_verified": True}, "not one plain address"),
        "kelvin": ({"email": "mi\u212ae@example.com", "email_verified": True}, "not one plain address"),
    }
    with oidc.run_server_in_thread() as server:
        issuer = f"http://localhost:{server.server_port}"
        for sub, (claims, _) in attackers.items():
            assert httpx.put(f"{issuer}/users/{quote(sub)}", json=claims).status_code == 204
        url, proc = _serve(tmp_path, issuer, MERMAIDFLOW_MEMBERS="alice@example.com, mike@example.com, "
                                                                 "@team.example.org")
        context = new_context(browser, viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            page.goto(url, wait_until="domcontentloaded")
            wait_for_app(page)
            for sub, (_, why) in attackers.items():
                _log_in(page, issuer, sub)
                expect(page.get_by_text("Not signed in: the identity provider", exact=False)
                       .filter(has_text=why)).to_be_visible()
                expect(page.get_by_role("link", name="Editor")).to_have_count(0)  # nothing of the app
                expect(page.get_by_text("Signed in as")).to_have_count(0)
                _log_out(page, issuer)
        finally:
            context.close()
            _stop(proc)


def test_a_member_cannot_point_the_team_at_a_listener_or_send_it_the_server_key(browser, tmp_path):
    """Issue 25.3 in a real team deployment: a signed-in member types a listener's URL into Settings and
    tests it. Nothing is sent there (a team server calls no loopback address it was not told to), and the
    team's endpoint can only be changed by an admin."""
    import httpx

    from tests.helpers.listener import Listener

    server_key = "sk-server-BROWSER-3f9e1d"
    with oidc.run_server_in_thread() as server, Listener() as shared, Listener() as evil:
        issuer = f"http://localhost:{server.server_port}"
        assert httpx.put(f"{issuer}/users/{quote('alice@example.com')}",
                         json={"email": "alice@example.com", "email_verified": True}).status_code == 204
        url, proc = _serve(tmp_path, issuer, OPENAI_BASE_URL=shared.base_url, OPENAI_API_KEY=server_key,
                           MERMAIDFLOW_ADMINS="boss@example.com")
        context = new_context(browser, viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            page.goto(url, wait_until="domcontentloaded")
            wait_for_app(page)
            _log_in(page, issuer, "alice@example.com")
            page.goto(f"{url}/settings", wait_until="domcontentloaded")
            wait_for_app(page)
            expect(page.get_by_text("The team's endpoint is set by its admins")).to_be_visible()
            expect(page.get_by_role("button", name="Save settings")).to_have_count(0)
            box = page.get_by_label("Endpoint URL (OpenAI-compatible)")
            expect(box).to_have_value(shared.base_url)
            box.fill(evil.base_url)
            page.get_by_role("button", name="Test connection").click()
            wait_for_app(page)
            expect(page.get_by_text("Not sent:")).to_be_visible()
            page.get_by_role("button", name="Use for my session").click()
            wait_for_app(page)
            expect(page.get_by_text("Not sent:")).to_be_visible()
        finally:
            context.close()
            _stop(proc)
    assert evil.received == []  # not the server's key, not a prompt: nothing
