"""The Compare page in a real browser. A comparison of four baselines and the math seed, measured by the command
line (`compare ... --db`) against a scripted endpoint whose per-problem correctness is known, is shown: the
stakeholder table with intervals and paired tests, the score-vs-cost plot with its Pareto front, the per-problem
agreement. Saves the README screenshot compare.png. When the app has an endpoint (another module sets one), a
comparison is also launched from the page and followed to its result."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from flowcore.tasks import load
from tests.helpers.fakellm import FakeLLMServer, message_text

from .conftest import REPO, goto_page, no_exceptions, save_screenshot, wait_for_app

pytestmark = pytest.mark.browser

PROBLEMS = load("gsm8k", "test", limit=12)
# Which problems (indices) each workflow's prompt gets right; CoT-SC samples the CoT prompt five times.
RIGHT = {"Reply with only the final answer": {0, 3, 6, 9},
         "Let's think step by step.": {0, 1, 2, 4, 6, 8, 10},
         "Revise the solution using the feedback": {0, 1, 2, 4, 5, 6, 8, 10, 11},
         "Solve the math problem step by step.": {0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11}}


def _respond(request: dict) -> str:
    text = message_text(request)
    if "Answer: X" in text:
        return "Answer: A"
    for i, p in enumerate(PROBLEMS):
        if p.question in text:
            right = next((i in ok for key, ok in RIGHT.items() if key in text), False)
            return f"Working through it, the answer is {p.reference if right else -1}. Verdict: correct"
    return "no idea"


def _stored_comparison(db_path) -> None:
    with FakeLLMServer(_respond) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k", MERMAIDFLOW_MAX_RETRIES="0")
        cmd = [sys.executable, "-m", "flowcore", "compare", "baseline:io", "baseline:cot", "baseline:cot_sc",
               "baseline:self_refine", "assets/examples/math_seed.mmd", "--benchmark", "gsm8k", "--split", "test",
               "--limit", str(len(PROBLEMS)), "--db", str(db_path)]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "McNemar p" in done.stdout


def test_compare_page_shows_table_pareto_plot_and_agreement(page, streamlit_app):
    _stored_comparison(streamlit_app.db_path)
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    page.set_viewport_size({"width": 1700, "height": 1800})  # the whole stakeholder table, the plot below it
    goto_page(page, streamlit_app, "/compare", timeout_ms=60_000)  # may be the app's first page: cold imports
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    expect(page.get_by_text(re.compile(r"Best: math_seed at 91\.7%"))).to_be_visible()
    expect(page.get_by_text(re.compile(r"264 validation / 1055 test"))).to_be_visible()
    table = page.locator('[data-testid="stMarkdownContainer"] table').first  # a plain table: no grid scripts
    expect(table).to_be_visible()
    headers = table.locator("th").all_inner_texts()
    assert headers[:8] == ["workflow", "best", "score %", "95% CI", "sd %", "errors", "cost/problem $", "tokens"]
    names = table.locator("tbody tr td:first-child").all_inner_texts()
    # the command line's baseline:io, as the pages name baselines
    assert names == ["IO (math)", "CoT (math)", "CoT-SC (5 samples) (math)", "Self-Refine (math)", "math_seed"]
    cells = table.locator("tbody td").all_inner_texts()
    assert "None" not in cells and "nan" not in cells and any(c.startswith("$0.") for c in cells)
    plots = page.locator('[data-testid="stVegaLiteChart"]')
    expect(plots).to_have_count(0)  # the plot's tab is closed: not built, not drawn
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(0)  # nor is the agreement grid
    expect(page.get_by_role("button", name="Compare", exact=True)).to_have_count(0)  # the form is folded
    page.get_by_text("Results", exact=True).scroll_into_view_if_needed()
    wait_for_app(page)
    save_screenshot(page, "compare.png")

    page.get_by_role("tab", name="Score vs cost").click()
    wait_for_app(page)
    plot = plots.filter(has_text="Score vs cost per problem")
    expect(plot).to_be_visible()  # a Vega-Lite chart, drawn as SVG
    expect(plot.locator("g.role-legend-label").get_by_text("Pareto front", exact=True)).to_be_visible()  # the front
    # names drawn on the plot: the Pareto points only (the others are on hover)
    labels = plot.locator("g.mark-text.role-mark text")
    expect(labels).to_have_count(2)
    assert sorted(labels.all_text_contents()) == ["IO (math)", "math_seed"]
    ticks = plot.locator("g.role-axis-label text").all_text_contents()  # percent on one axis, dollars on the other
    assert any(t.endswith("%") for t in ticks) and any(t.startswith("$") for t in ticks)
    assert all(t.endswith("%") or t.startswith("$") for t in ticks), ticks
    expect(page.locator('[data-testid="stMarkdownContainer"] table')).to_have_count(0)  # the table's tab is closed

    page.get_by_role("tab", name="Per problem").click()
    wait_for_app(page)
    expect(page.get_by_text(re.compile(r"the workflows disagree on \d+ of 12 problems"))).to_be_visible()
    expect(plots).to_have_count(0)
    # a page switch and back: the same tab is open
    page.get_by_role("link", name="Run").click()
    expect(page.get_by_role("heading", name="Run")).to_be_visible()
    wait_for_app(page)
    page.get_by_role("link", name="Compare").click()
    expect(page.get_by_role("tab", name="Per problem")).to_have_attribute("aria-selected", "true")
    expect(page.get_by_text(re.compile(r"the workflows disagree on \d+ of 12 problems"))).to_be_visible()
    wait_for_app(page)
    page.reload(wait_until="domcontentloaded")  # and a reload (a new session of the same browser)
    wait_for_app(page)
    expect(page.get_by_role("tab", name="Per problem")).to_have_attribute("aria-selected", "true")
    expect(page.get_by_text(re.compile(r"the workflows disagree on \d+ of 12 problems"))).to_be_visible()
    assert no_exceptions(page) == [] and js_errors == []

    page.get_by_text("New comparison", exact=True).click()  # unfold the form
    wait_for_app(page)
    start = page.get_by_role("button", name="Compare", exact=True)
    expect(start).to_be_visible()
    if not start.is_enabled():  # no endpoint in this app: launching is covered by the page's AppTest
        return
    limit = page.get_by_role("spinbutton", name="Problems (0 = the whole split)")
    limit.fill("2")
    limit.press("Enter")
    wait_for_app(page)
    page.get_by_role("radiogroup", name="Split").get_by_text("validation", exact=True).click()
    wait_for_app(page)
    start.click()
    expect(page.get_by_text(re.compile(r"#2 · gsm8k · 2 problems × 1 repeat · status done"))).to_be_visible(
        timeout=60_000)  # the page follows the job and then shows the new comparison
    expect(page.get_by_text(re.compile(r"Best: IO \(math\)"))).to_be_visible()
    expect(page.get_by_text(re.compile(r"the workflows disagree on \d+ of 2 problems"))).to_be_visible()  # same tab
    assert no_exceptions(page) == []


def test_the_compare_form_keeps_its_values_across_a_page_switch(page, streamlit_app):
    goto_page(page, streamlit_app, "/compare", timeout_ms=60_000)
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    fold = page.get_by_text("New comparison", exact=True)
    if fold.count():  # comparisons exist (another test stored one): the form is folded
        fold.click()
        wait_for_app(page)
    box = page.get_by_role("spinbutton", name="Problems (0 = the whole split)")
    box.fill("7")
    box.press("Enter")
    wait_for_app(page)
    page.get_by_role("radiogroup", name="Split").get_by_text("validation", exact=True).click()
    wait_for_app(page)
    page.get_by_role("link", name="Run").click()
    wait_for_app(page)
    expect(page.get_by_role("heading", name="Run")).to_be_visible()
    page.get_by_role("link", name="Compare").click()
    wait_for_app(page)
    # an unfolded form stays unfolded, with its values
    expect(page.get_by_role("spinbutton", name="Problems (0 = the whole split)")).to_have_value("7")
    expect(page.get_by_role("radio", name="validation")).to_be_checked()
    assert no_exceptions(page) == []
