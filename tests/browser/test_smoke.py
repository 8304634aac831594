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
