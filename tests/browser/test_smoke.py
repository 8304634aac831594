"""The app opens in a real browser: its heading renders and no exception box appears."""

import pytest

from .conftest import goto_page, no_exceptions, track_requests, wait_network_idle

pytestmark = pytest.mark.browser


def test_home_renders_without_exceptions(page, streamlit_app):
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    goto_page(page, streamlit_app, "/")
    heading = page.locator("h1").filter(has_text="MermaidFlow").first
    heading.wait_for(state="visible")
    assert "MermaidFlow" in heading.inner_text()
    assert no_exceptions(page) == []
    assert errors == [], f"JavaScript errors on the page: {errors}"


def test_nothing_leaves_127_0_0_1_on_any_page(page, streamlit_app):
    """Issue 21.1: no font, icon, favicon or script is fetched from another host, on every page."""
    from urllib.parse import urlsplit

    from app import PAGES

    off_host: list[str] = []
    page.on("request", lambda r: urlsplit(r.url).hostname not in ("127.0.0.1", "localhost", None)
            and not r.url.startswith(("data:", "blob:", "about:")) and off_host.append(r.url))
    inflight = track_requests(page)
    for path in ["/", *(f"/{url}" for _, _, url, _ in PAGES)]:
        goto_page(page, streamlit_app, path)
        wait_network_idle(page, inflight)  # every request the page makes has been sent
        assert no_exceptions(page) == [], path
    assert off_host == [], f"requests to other hosts: {sorted(set(off_host))}"


def test_the_editors_popovers_build_their_contents_when_opened_and_save(page, streamlit_app):
    """Issue 30 first paint: Open, Save and Publish are built only when opened; opened, they work as before."""
    import re

    from playwright.sync_api import expect

    from .conftest import wait_for_app

    goto_page(page, streamlit_app, "/editor")
    expect(page.get_by_role("heading", name="Editor", level=1)).to_be_visible()
    wait_for_app(page)
    expect(page.get_by_role("button", name="Save version")).to_have_count(0)  # not built while closed
    page.get_by_role("button", name="Save", exact=True).click()
    wait_for_app(page)
    name = page.get_by_role("textbox", name="Name")
    expect(name).to_be_visible()
    name.fill("smoke popover")
    name.press("Enter")
    wait_for_app(page)
    page.get_by_role("button", name="Save version").click()
    wait_for_app(page)
    expect(page.get_by_text(re.compile(r"Saved smoke popover as version \d+"))).to_be_visible()
    assert no_exceptions(page) == []


def test_streamlits_bundles_come_from_memory_and_the_page_still_runs(page, streamlit_app):
    """flowcore/ui/static_files.py in the served app: every script and style the page loads from /static/ is
    answered by it (its ETag is the body's MD5; Streamlit's own is of the file's time and size), and the page
    still draws its heading with no script error."""
    import hashlib
    import urllib.request

    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    bundles: list[str] = []
    page.on("response", lambda r: "/static/" in r.url and r.status == 200 and bundles.append(r.url))
    goto_page(page, streamlit_app, "/")
    page.locator("h1").filter(has_text="MermaidFlow").first.wait_for(state="visible")
    assert len(bundles) > 20 and errors == []
    for url in bundles[:5] + bundles[-5:]:
        with urllib.request.urlopen(url, timeout=10) as r:
            body, tag = r.read(), r.headers["ETag"]
            assert tag == f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"', url
            assert "immutable" in r.headers["Cache-Control"] and r.headers["Content-Security-Policy"]
