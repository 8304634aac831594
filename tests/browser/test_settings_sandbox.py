"""Settings in a real browser: the sandbox status is shown (bubblewrap ready), with no exception box."""

import pytest
from playwright.sync_api import expect

from .conftest import goto_page, no_exceptions, save_screenshot, wait_for_still

pytestmark = pytest.mark.browser


def test_settings_shows_the_sandbox_status(page, streamlit_app):
    goto_page(page, streamlit_app, "/settings")
    status = page.get_by_text("Sandbox: bubblewrap sandbox ready").first
    status.wait_for(state="visible")
    assert "no network" in status.inner_text()
    assert page.get_by_text("Generated code will not run here").count() == 0
    assert no_exceptions(page) == []
    # the picture once the page is drawn: the token prices' table, not its grey skeletons
    expect(page.locator('[data-testid="stDataFrame"]').first).to_be_visible()
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"], .stSkeleton')")
    wait_for_still(page)
    save_screenshot(page, "settings.png", full_page=True)
