"""The AOV Execution page in a real browser: load the example graphs, start the rule's choice in Manual mode,
step through it typing each agent's output, fail one subtask on purpose, read the inspector's verdict and the
repair proposals, accept one and finish. Saves the README screenshot at the proposals stage."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import goto_page, no_exceptions, save_screenshot, wait_for_app

pytestmark = pytest.mark.browser

CHART = '[data-testid="stMermaidChart"] img'  # st.mermaid_chart draws the SVG as an image


def _key(page, key: str):
    """The element Streamlit drew for the widget with this key."""
    return page.locator(f".st-key-{key}")


def _choose(page, key: str, option: str) -> None:
    _key(page, key).get_by_text(option, exact=True).click()
    wait_for_app(page)


def _type_output(page, sid: str, text: str) -> None:
    box = page.locator(f'[class*="st-key-aov_out_"][class*="_{sid}_"] textarea')
    box.fill(text)
    box.press("Control+Enter")  # a text area sends its value on Ctrl+Enter (or blur)
    wait_for_app(page)


def _charts(page, count: int) -> list[dict[str, str]]:
    """Once ``count`` Mermaid charts are drawn: per chart, subtask id -> the style of its node's shape
    (st.mermaid_chart draws the SVG as an image with a blob: URL, which is read back here)."""
    expect(page.locator(CHART)).to_have_count(count)
    page.wait_for_function(f"() => [...document.querySelectorAll('{CHART}')]"
                           ".every(img => img.complete && img.naturalWidth > 0)")
    return page.locator(CHART).evaluate_all("""imgs => Promise.all(imgs.map(img => fetch(img.src)
        .then(r => r.text()).then(svg => Object.fromEntries(
            [...new DOMParser().parseFromString(svg, 'image/svg+xml').querySelectorAll('g.node')].map(n => [
                n.textContent.trim().split(':')[0],
                (n.querySelector('[style*="fill"]') || n).getAttribute('style') || ''])))))""")


def _fills(chart: dict[str, str]) -> dict[str, str]:
    """subtask -> status, read from the fill colour the status classes give"""
    colours = {"#e5e7eb": "pending", "#bfdbfe": "running", "#bbf7d0": "completed", "#fecaca": "failed"}
    return {sid: next((v for k, v in colours.items() if k in style), "?") for sid, style in chart.items()}


def _step(page, outputs: dict[str, str]) -> None:
    for sid, text in outputs.items():
        _type_output(page, sid, text)
    _key(page, "aov_step").locator("button").click()
    wait_for_app(page)


def test_step_through_fail_accept_a_repair_and_finish(page, streamlit_app):
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    page.set_viewport_size({"width": 1500, "height": 1000})
    goto_page(page, streamlit_app, "/aov")
    expect(page.get_by_role("heading", name="AOV Execution")).to_be_visible()

    _key(page, "aov_use").locator("button").click()  # the three example graphs become the candidates
    wait_for_app(page)
    expect(page.get_by_text("chosen by the rule").first).to_be_visible()
    expect(page.locator('[data-testid="stMarkdownContainer"]').filter(has_text="gobang.json")
           .filter(has_text="chosen by the rule")).to_have_count(1)
    charts = _charts(page, 3)
    assert [next(iter(c)) for c in charts] == ["design", "outline", "spec"]  # gobang, report, website
    assert set(_fills(charts[0]).values()) == {"pending"} and len(charts[0]) == 6

    # Manual agents and the rules, whatever endpoint other browser modules gave the server
    _choose(page, "aov_agents", "Manual (you type each output)")
    _choose(page, "aov_inspector", "Rules")
    _choose(page, "aov_repairs", "Rules")
    _key(page, "aov_start").locator("button").click()
    wait_for_app(page)
    expect(page.get_by_text("status ready · step 0")).to_be_visible()

    _step(page, {"design": "Modules: board, win detection, UI loop, tests."})
    expect(page.get_by_text("status ready · step 1")).to_be_visible()
    _step(page, {"board": "15x15 board with move validation.", "win": "ERROR: the diagonal check crashes",
                 "ui": "Text UI reads 'row col'.", "tests": "Tests for every direction."})

    failure = page.locator('[data-testid="stAlert"]').filter(has_text="failed:")
    expect(failure).to_contain_text("Subtask win failed:")
    expect(failure).to_contain_text("error marker in output: ERROR: the diagonal check crashes")
    expect(page.get_by_text("Proposal 1 (rules)")).to_be_visible()
    expect(page.get_by_text("Proposal 3 (rules)")).to_be_visible()
    expect(page.locator('[data-testid="stCode"]').first).to_contain_text("~ win.subtask_requirement")
    expect(_key(page, "aov_step").locator("button")).to_be_disabled()

    # the screenshot for the README: the failure, the proposals with their diffs and diagrams
    charts = _charts(page, 7)  # 3 candidates, 3 proposals with the repaired subtask outlined, the live graph
    outlined = [sorted(s for s, style in c.items() if "dasharray:5 3" in style) for c in charts]
    assert outlined == [[], [], [], ["win"], ["win"], ["win"], []]
    assert _fills(charts[6]) == {"design": "completed", "board": "completed", "win": "failed",
                                 "ui": "completed", "tests": "completed", "assemble": "pending"}

    page.get_by_text("status paused").evaluate("e => e.scrollIntoView({block: 'start'})")
    page.mouse.move(800, 500)
    page.mouse.wheel(0, -110)  # below the app's header bar
    page.wait_for_timeout(500)
    save_screenshot(page, "aov.png")

    _key(page, "aov_accept_0").locator("button").click()  # the rule's best proposal: edit win
    wait_for_app(page)
    expect(page.get_by_text("Repair accepted; the execution goes on.")).to_be_visible()
    expect(page.get_by_text("Proposal 1 (rules)")).to_have_count(0)
    _step(page, {"win": "Five in a row found in all four directions."})
    _step(page, {"assemble": "gobang.py assembled; all tests pass."})
    expect(page.get_by_text("The execution completed after 4 step(s).")).to_be_visible()
    live = _charts(page, 4)[-1]  # no proposals left: the live graph comes after the 3 candidates
    assert set(_fills(live).values()) == {"completed"} and len(live) == 6
    assert no_exceptions(page) == []
    assert js_errors == []
