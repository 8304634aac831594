"""The Run and Export pages in a real browser. Run: a 3-problem GSM8K evaluation against a scripted endpoint
shows its progress, then the score, its interval and the per-problem table. Export: the generated Python
and the five download buttons; the PNG and .py downloads carry real files. Saves the README screenshots."""

from __future__ import annotations

import atexit
import re
import threading
from pathlib import Path

import pytest
from playwright.sync_api import expect

from flowcore.tasks import load
from tests.helpers.capitals import capitals_reply
from tests.helpers.fakellm import FakeLLMServer, message_text

from .conftest import APP_ENV, goto_page, no_exceptions, save_screenshot, scroll_under_header, wait_for_app

pytestmark = pytest.mark.browser

PROBLEMS = load("gsm8k", "validation", limit=3)


RELEASE = threading.Event()  # the third problem's reply waits for it, so the test sees the run in progress


def _respond(request: dict) -> str:
    """Right for the first two problems, wrong for the third (answered once RELEASE is set); the worked example
    task's questions (tests/browser/test_tasks.py shares this endpoint) get the capitals model's reply."""
    text = message_text(request)
    if (capital := capitals_reply(request)) is not None:
        return capital
    for p in PROBLEMS[:2]:
        if p.question in text:
            return f"Adding it up step by step, the answer is {p.reference}."
    if PROBLEMS[2].question in text:
        RELEASE.wait(60)
    return "After working through it, the answer is 7."


# The Streamlit server reads its environment once, when the first browser test starts it: the endpoint is
# set at import time and serves the whole session.
FAKE = FakeLLMServer(_respond).start()
atexit.register(FAKE.stop)
APP_ENV.setdefault("OPENAI_BASE_URL", FAKE.base_url)
OURS = APP_ENV["OPENAI_BASE_URL"] == FAKE.base_url  # another module may have set its own endpoint first


def test_run_page_evaluates_gsm8k_with_progress_and_scores(page, streamlit_app):
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    goto_page(page, streamlit_app, "/run")
    expect(page.get_by_role("heading", name="Run")).to_be_visible()
    page.get_by_text("Benchmark", exact=True).click()
    wait_for_app(page)
    limit = page.get_by_role("spinbutton", name="Limit (0 = all)")
    limit.fill("3")
    limit.press("Enter")
    wait_for_app(page)
    conc = page.get_by_role("spinbutton", name="Concurrency")
    conc.fill("1")
    conc.press("Enter")
    wait_for_app(page)

    page.get_by_role("button", name="Start evaluation").click()
    progress = page.locator('[data-testid="stProgress"]')
    if OURS:  # the third reply is held back: the run is visibly in progress until RELEASE
        expect(progress).to_be_visible(timeout=20_000)
        expect(page.get_by_text(re.compile(r"Evaluation #\d+: 2/3 problems"))).to_be_visible(timeout=20_000)
        expect(page.locator('[data-testid="stMetric"]').filter(has_text="Running score")).to_contain_text(
            "100.0%", timeout=20_000)
        expect(page.get_by_role("button", name="Cancel")).to_be_visible()
        RELEASE.set()

    # the fragment polls the job and reruns the page once it has finished
    score = page.locator('[data-testid="stMetric"]').filter(has_text="Score").filter(has_not_text="Running")
    expect(score).to_be_visible(timeout=30_000)
    expect(progress).to_have_count(0)
    if OURS:
        expect(score).to_contain_text("66.7%")
        expect(page.locator('[data-testid="stMetric"]').filter(has_text="Solved")).to_contain_text("2 / 3")
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="95% interval")).to_contain_text("–")
    table = page.locator('[data-testid="stDataFrame"]').first
    expect(table).to_be_visible()
    headers = table.locator('th[role="columnheader"]')  # glide-data-grid's accessible table
    expect(headers).to_have_count(8)
    assert headers.all_inner_texts() == ["id", "verdict", "extracted", "reference", "error", "cost",
                                         "latency (s)", "model's answer"]
    ids = table.locator('td[role="gridcell"][aria-colindex="1"]')
    assert ids.all_inner_texts() == [p.id for p in PROBLEMS]
    page.get_by_text("Failures (wrong or error)", exact=True).click()  # the failure filter
    wait_for_app(page)
    table = page.locator('[data-testid="stDataFrame"]').first
    expect(table.locator('td[role="gridcell"][aria-colindex="1"]')).to_have_count(1 if OURS else 3)
    if OURS:  # the wrong answer, with what was extracted and the reference it missed
        row = [table.locator(f'td[role="gridcell"][aria-colindex="{i}"]').first.inner_text() for i in (1, 2, 3, 4)]
        assert row == [PROBLEMS[2].id, "wrong", "7", PROBLEMS[2].reference]
    # a click anywhere on a row (here its "extracted" cell, not the selection checkbox) opens its answer and trace
    expect(page.get_by_role("button", name="Show this problem's trace")).to_have_count(0)
    first_id = table.locator('td[role="gridcell"][aria-colindex="1"]').first.inner_text()
    table.scroll_into_view_if_needed()
    box = table.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + 35 + 17)  # header row, then the first row
    wait_for_app(page)
    expect(page.get_by_role("button", name="Show this problem's trace")).to_be_visible()
    expect(page.locator('[data-testid="stMarkdown"]').filter(has_text="Problem").filter(has_text=first_id)
           ).to_be_visible()
    page.get_by_role("button", name="Show this problem's trace").click()  # replayed: its call is the cache's
    wait_for_app(page)
    expect(page.get_by_text("Calls answered from this workspace's cache cost nothing now")).to_be_visible()
    trace = page.locator('[data-testid="stDataFrame"]').filter(
        has=page.locator('th[role="columnheader"]', has_text="answered by"))
    expect(trace.locator('td[role="gridcell"][aria-colindex="4"]').first).to_have_text("cached")
    assert no_exceptions(page) == [] and js_errors == []
    page.set_viewport_size({"width": 1400, "height": 1250})  # the app scrolls inside: make room for the table
    page.mouse.move(1, 1)  # no button's tooltip left open over the trace where the last click was
    wait_for_app(page)
    expect(page.locator('[data-testid="stTooltipContent"]')).to_have_count(0)
    scroll_under_header(page.locator('[data-testid="stRadio"]').filter(has_text="One problem"))  # the form whole
    save_screenshot(page, "run.png")

    # a reload is a new session: the stored evaluation is still there
    goto_page(page, streamlit_app, "/run")
    page.get_by_text("Benchmark", exact=True).click()
    wait_for_app(page)
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="Score")).to_be_visible()


def test_export_page_shows_code_and_downloads(page, streamlit_app):
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    goto_page(page, streamlit_app, "/export")
    code = page.locator(".mf-code").first  # highlighted on the server: keywords in their own colour
    expect(code).to_contain_text("class Workflow")
    expect(code).to_contain_text("async def __call__")
    assert code.locator("span.k", has_text="class").first.evaluate("e => getComputedStyle(e).color") \
        != code.evaluate("e => getComputedStyle(e).color")
    assert not [u for u in asked if "/StreamlitSyntaxHighlighter." in u]  # 1.5 MB of scripts not loaded
    labels = ["Python (.py)", "Mermaid (.mmd)", "Drawing (.svg)", "Drawing (.png)", "JSON (.json)"]
    for label in labels:
        expect(page.get_by_role("button", name=label)).to_be_enabled()
    assert no_exceptions(page) == [] and js_errors == []
    save_screenshot(page, "export.png")

    with page.expect_download() as info:
        page.get_by_role("button", name="Drawing (.png)").click()
    download = info.value
    assert download.suggested_filename.endswith(".png")
    assert Path(download.path()).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with page.expect_download() as info:
        page.get_by_role("button", name="Python (.py)").click()
    source = Path(info.value.path()).read_text()
    compile(source, info.value.suggested_filename, "exec")  # valid Python
    assert "class Workflow" in source
