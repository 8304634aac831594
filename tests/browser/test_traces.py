"""The Traces page in a real browser: a trace stored in the app's workspace (as a served request stores one) is
listed with who made it, and opens as a timeline of its nodes with the failing node's error."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from flowcore.workspace import traces
from flowcore.workspace.store import Workspace

from .conftest import goto_page, no_exceptions, wait_for_app

pytestmark = pytest.mark.browser


def test_traces_page_lists_a_trace_and_draws_its_timeline(page, streamlit_app):
    ws = Workspace(streamlit_app.db_path)
    tid = f"{int(time.time() * 1e6):032x}"
    spans = [traces.Span("C1", "CustomOp", "gpt-4o-mini", 120, 30, 0.0001, 1, 0.0, 0.8),
             traces.Span("E1", "ScEnsembleOp", "gpt-4o-mini", 0, 0, 0.0, 1, 0.8, 0.2, "node E1 failed: boom")]
    traces.save_trace(ws, traces.Trace(tid, time.time(), "api", "browser-solver", 3, "grace@example.com", "error",
                                       "node E1 failed: boom", 1.0, 0.0001, 2, 120, 30, "a problem", None, spans))
    ws.close_all()
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    goto_page(page, streamlit_app, "/traces", timeout_ms=60_000)
    expect(page.get_by_role("heading", name="Traces")).to_be_visible()
    table = page.locator('[data-testid="stDataFrame"]').first
    expect(table).to_be_visible()
    expect(table.locator('td[role="gridcell"]', has_text="grace@example.com").first).to_be_attached(timeout=30_000)
    plot = page.locator(".js-plotly-plot").first
    expect(plot).to_be_visible()
    expect(plot.get_by_text(re.compile(r"browser-solver@v3 · error"))).to_be_visible()
    expect(page.locator('[data-testid="stAlert"]', has_text="node E1 failed: boom")).to_be_visible()
    wait_for_app(page)
    assert no_exceptions(page) == [] and js_errors == []
