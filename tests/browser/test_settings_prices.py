"""The Settings page's token prices in a real browser (issue 30): folded on the first view (no grid drawn),
opened on request, and a price typed into the grid is saved by the section's own Save while the endpoint form's
unsaved values are not. A server of its own: the save changes its workspace's settings."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from flowcore.workspace import settings as store
from flowcore.workspace.store import Workspace

from .conftest import _stop, goto_page, no_exceptions, start_app, wait_for_app

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    app = start_app(tmp_path_factory.mktemp("prices"))
    try:
        yield app
    finally:
        _stop(app.process)


def test_a_price_typed_in_the_opened_section_is_saved_on_its_own(served, page):
    goto_page(page, served, "/settings")
    expect(page.get_by_role("button", name="Save settings")).to_be_visible()
    grids = page.locator('[data-testid="stDataFrame"]')
    expect(grids).to_have_count(0)
    timeout = page.get_by_role("spinbutton", name="Timeout per call (s)")
    timeout.fill("77")  # typed in the endpoint form, never saved
    page.get_by_text(re.compile(r"^Token prices · \d+ models")).click()
    wait_for_app(page)
    grid = grids.first
    expect(grid).to_be_visible()
    cell = grid.locator('td[role="gridcell"][aria-colindex="2"]').first  # the first model's input price
    expect(cell).to_be_attached()
    model = grid.locator('td[role="gridcell"][aria-colindex="1"]').first.inner_text()
    editor = page.locator("#portal input, #portal textarea").first
    # a double click opens the cell's editor (glide-data-grid's overlay, outside the grid). Not a click and
    # Enter: when the grid had not taken the click yet (CI, under load), Enter went to the focused number box
    # and the rerun redrew the section under the test
    for attempt in range(3):
        box = grid.locator("canvas").first.bounding_box()  # the grid's canvas: a 36 px header, then 35 px rows
        page.mouse.dblclick(box["x"] + box["width"] / 2, box["y"] + 36 + 35 / 2)  # the first model's input price
        try:
            expect(editor).to_be_focused(timeout=10_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    editor.fill("12.5")
    editor.press("Enter")
    expect(editor).to_have_count(0)
    expect(cell).to_have_text("12.5")  # the grid holds the edit
    # The grid is in a form: the edit asks for no run, and Streamlit's grid hands it to the form 150 ms later
    # (debounced). A Save clicked within that window submits the prices before the edit (seen once in CI). Nothing
    # on the page shows the hand-over, so the test waits for the saved state instead: a second Save, as a user
    # would click again, and after it the price must be stored
    for _ in range(2):
        wait_for_app(page)
        page.get_by_role("button", name="Save prices").click()
        expect(page.get_by_text(re.compile("Saved to the workspace"))).to_be_visible()
        wait_for_app(page)
        saved = store.load_llm_settings(Workspace(served.db_path))
        if saved["prices"][model][0] == 12.5:
            break
    assert saved["prices"][model][0] == 12.5, (model, saved["prices"])
    assert saved["timeout"] != 77  # the other section's unsaved value stayed out
    # the section stays open on the stored prices (in their stored order)
    row = grid.locator('td[role="gridcell"][aria-colindex="1"]').filter(has_text=re.compile(f"^{re.escape(model)}$"))
    expect(row).to_have_count(1)
    expect(grid.locator('td[role="gridcell"][aria-colindex="2"]').filter(has_text=re.compile(r"^12\.5$"))).to_have_count(1)
    assert no_exceptions(page) == []
