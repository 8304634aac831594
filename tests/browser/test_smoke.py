"""The app opens in a real browser: its heading renders and no exception box appears."""

import pytest

from .conftest import goto_page, no_exceptions

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
    for path in ["/", *(f"/{url}" for _, _, url, _ in PAGES)]:
        goto_page(page, streamlit_app, path)
        page.wait_for_load_state("networkidle")  # every request the page makes has been sent
        assert no_exceptions(page) == [], path
    assert off_host == [], f"requests to other hosts: {sorted(set(off_host))}"
