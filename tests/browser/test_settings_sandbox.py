"""Settings in a real browser: the sandbox status is shown (bubblewrap ready), with no exception box; the token
prices' grid is built only when its section is opened (issue 30), and a price edited there is saved."""

import re

import pytest
from playwright.sync_api import expect

from .conftest import goto_page, no_exceptions, save_screenshot, wait_for_app, wait_for_still

pytestmark = pytest.mark.browser


def test_settings_shows_the_sandbox_status(page, streamlit_app):
    goto_page(page, streamlit_app, "/settings")
    status = page.get_by_text("Sandbox: bubblewrap sandbox ready").first
    status.wait_for(state="visible")
    assert "no network" in status.inner_text()
    assert page.get_by_text("Generated code will not run here").count() == 0
    assert no_exceptions(page) == []
    grids = page.locator('[data-testid="stDataFrame"]')
    expect(page.get_by_role("button", name="Save settings")).to_be_visible()
    expect(grids).to_have_count(0)  # the prices are folded: no grid to draw on the first view
    page.get_by_text(re.compile(r"^Token prices · \d+ models")).click()
    wait_for_app(page)
    # the picture once the page is drawn: the token prices' table, not its grey skeletons
    expect(grids.first).to_be_visible()
    expect(page.get_by_role("button", name="Save prices")).to_be_visible()
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"], .stSkeleton')")
    wait_for_still(page)
    save_screenshot(page, "settings.png", full_page=True)
