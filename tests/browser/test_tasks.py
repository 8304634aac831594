"""A task of your own, end to end in a real browser: upload the worked example's CSV on the Tasks page -> map the
problem template and the reference -> pick the metric and see each reference score 1 against itself -> save ->
evolve the text seed on it for two rounds (programmatic operators, scored by the scripted endpoint the browser
session shares, see tests/helpers/capitals.py) -> compare the evolved workflow against the IO baseline.
Saves the screenshots tasks.png, evolve_task.png and compare_task.png."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from flowcore.evaluation.compare import list_comparisons
from flowcore.evolution import History
from flowcore.tasks.saved import saved
from flowcore.workspace.store import Workspace

from .conftest import (
    APP_ENV,
    choose,
    goto_page,
    no_exceptions,
    open_box,
    save_screenshot,
    scroll_under_header,
    turn_on,
    wait_for_app,
)

pytestmark = pytest.mark.browser

CSV = Path(__file__).resolve().parents[2] / "assets" / "tasks" / "capitals" / "capitals.csv"


def _fill(page, box, value: str) -> None:
    box.fill(value)
    box.press("Enter")
    wait_for_app(page)
    expect(box).to_have_value(value)


def _number(page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    box.fill(value)
    box.press("Enter")
    wait_for_app(page)
    expect(box).to_have_value(value)


def test_upload_map_metric_save_evolve_and_compare(page, streamlit_app):
    if "OPENAI_BASE_URL" not in APP_ENV:
        pytest.skip("the browser session has no scripted endpoint (tests/browser/test_run_export.py sets it)")
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    page.set_viewport_size({"width": 1400, "height": 1500})
    goto_page(page, streamlit_app, "/tasks", timeout_ms=60_000)
    expect(page.get_by_role("heading", name="Tasks", exact=True)).to_be_visible()
    # 1. upload
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').first.set_input_files(str(CSV))
    expect(page.get_by_text("40 rows · columns: country, capital, continent")).to_be_visible(timeout=30_000)
    wait_for_app(page)
    # 2. map: the problem template over the row's fields; the reference column is guessed as "capital"
    _fill(page, page.locator('input[aria-label^="Problem:"]'),
          "What is the capital of {country}? Reply with the city's name only.")
    expect(page.get_by_text("The reference scored against itself is 1 on all 5 rows shown.")).to_be_visible()
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="Rows")).to_contain_text("40")
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="Validation (evolution)")).to_contain_text("8")
    samples = page.locator('[data-testid="stDataFrame"]').nth(1)
    expect(samples).to_contain_text("What is the capital of France?")
    # 3. save
    page.get_by_role("button", name="Save task 'capitals' to the workspace").click()
    expect(page.get_by_text(re.compile(r"Saved task capitals \(text, 40 rows, metric exact\)"))).to_be_visible()
    assert [t["name"] for t in saved(Workspace(streamlit_app.db_path))] == ["capitals"]
    assert no_exceptions(page) == [] and js_errors == []
    scroll_under_header(page.get_by_role("heading", name="2 · Problem and reference"))  # no row cut at the top
    save_screenshot(page, "tasks.png")

    # 4. evolve the text seed on it: two rounds, programmatic operators, measured on 4 validation rows
    goto_page(page, streamlit_app, "/evolve?wf=text_seed&task=text", timeout_ms=60_000)
    expect(page.get_by_role("heading", name="Evolve")).to_be_visible()
    open_box(page, "New run")  # another test's run may be open in the Run section
    bench = page.get_by_role("combobox", name="Benchmark or task")
    expect(bench).to_have_value("capitals")
    _number(page, "Rounds", "2")
    _number(page, "Validation problems (0 = all)", "4")
    turn_on(page, "Programmatic operators", role="radio")
    before = max((r.id for r in History(Workspace(streamlit_app.db_path)).runs()), default=0)
    page.get_by_role("button", name="Launch").click()
    run_id = before + 1  # not the heading of a run another test left finished on this page
    heading = page.get_by_role("heading", name=f"Run #{run_id}: finished")
    expect(heading).to_be_visible(timeout=120_000)
    rows = History(Workspace(streamlit_app.db_path)).rounds(run_id)
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[0]["status"] == "ok" and 0 <= rows[0]["score"] <= 1
    expect(page.locator("svg.mf-plot").first).to_contain_text("Validation score per round")
    heading.scroll_into_view_if_needed()
    wait_for_app(page)
    assert no_exceptions(page) == [] and js_errors == []
    save_screenshot(page, "evolve_task.png")

    # 5. compare the run's best round against the IO baseline on the held-out test rows
    goto_page(page, streamlit_app, "/compare", timeout_ms=60_000)
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    fold = page.get_by_text("New comparison", exact=True)
    if fold.count():  # another test's comparison is stored: the form is folded
        fold.click()
        wait_for_app(page)
    page.get_by_text("text", exact=True).click()
    wait_for_app(page)
    expect(page.get_by_role("combobox", name="Benchmark or task")).to_have_value("capitals")
    picker = page.get_by_role("combobox", name=re.compile(r"^Workflows"))
    # the IO and CoT baselines are picked by default; add the run's best round
    choose(page, picker, re.compile(rf"^run #{run_id} · round"))
    page.keyboard.press("Escape")
    wait_for_app(page)
    _number(page, "Problems (0 = the whole split)", "8")
    earlier = max((c.id for c in list_comparisons(Workspace(streamlit_app.db_path))), default=0)
    page.get_by_role("button", name="Compare", exact=True).click()
    # the page may still show another test's comparison (and its "Best:"): wait for this one's line
    expect(page.get_by_text(re.compile(rf"#{earlier + 1} · capitals · .*status done"))).to_be_visible(timeout=120_000)
    expect(page.get_by_text(re.compile(r"^Best: "))).to_be_visible()
    stored = list_comparisons(Workspace(streamlit_app.db_path))[0]
    assert stored.benchmark == "capitals" and stored.status == "done"
    assert "IO (text)" in stored.names and any(n.startswith(f"run #{run_id} · round") for n in stored.names)
    table = page.locator('[data-testid="stMarkdownContainer"] table').first  # Compare's plain table
    expect(table).to_contain_text("IO (text)")
    assert no_exceptions(page) == [] and js_errors == []
    save_screenshot(page, "compare_task.png")
