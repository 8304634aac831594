"""The Evolve and History pages in a real browser. Evolve: a 3-round run in review mode pauses before each
round's evaluation, so the run is visibly in progress: the progress text moves from round to round while the
curve and the candidates' drawings are shown; approving the last round finishes it. History: pick a round,
see parent and child drawn side by side with the diff, and fork it into the Editor. Saves the README
screenshots evolve.png and history.png.

No endpoint of its own: if another module set one in APP_ENV the rounds are measured against it (with two
validation problems), otherwise they are structure-only; the assertions hold either way."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from flowcore.evolution import History
from flowcore.workspace.store import Workspace

from .conftest import (
    goto_page,
    no_exceptions,
    open_box,
    open_tab,
    save_screenshot,
    turn_on,
    wait_for_app,
    wait_for_still,
)

pytestmark = pytest.mark.browser

MERMAID = 'iframe[title="pages.drawing.mermaid_drawing"]'
ROUNDS = 3


def _number(page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    if box.is_enabled():
        box.fill(value)
        box.press("Enter")
        wait_for_app(page)
        expect(box).to_have_value(value)  # the rerun it started kept it (not a stale box redrawn over it)


def _drawn(page, count: int) -> None:
    """Wait until the first ``count`` Mermaid iframes have drawn their nodes."""
    for i in range(count):
        expect(page.frame_locator(MERMAID).nth(i).locator("svg g.node").first).to_be_visible(timeout=20_000)


def _whole(page, count: int) -> None:
    """Each of the first ``count`` drawings is shown whole across (no node past the box's right edge) with text
    of at least 11 px (issue 30: History cut the fifth parallel node of a round at 69 %)."""
    for i in range(count):
        frame = page.frame_locator(MERMAID).nth(i)
        body = frame.locator("body")
        expect(body).to_have_attribute("data-drawn", re.compile(r"\d"))
        size = frame.locator("#view").evaluate("v => [v.scrollWidth, v.clientWidth]")
        assert size[0] <= size[1] + 1, f"drawing {i} is cut: {size[0]} px drawn in a {size[1]} px box"
        assert float(body.get_attribute("data-text-px")) >= 11


def test_evolve_progress_and_curve_then_fork_a_round_from_history(page, streamlit_app):
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    goto_page(page, streamlit_app, "/evolve")
    expect(page.get_by_role("heading", name="Evolve")).to_be_visible()
    open_box(page, "New run")  # another test's run may be open in the Run section
    _number(page, "Rounds", str(ROUNDS))
    _number(page, "Validation problems (0 = all)", "2")  # only enabled with an endpoint
    programmatic = page.get_by_text("Programmatic operators")
    if page.get_by_role("radio", name="LLM optimizer").is_enabled():
        programmatic.click()
        wait_for_app(page)
    expect(page.get_by_role("radio", name="Programmatic operators")).to_be_checked()
    turn_on(page, "Review each round's candidates before evaluation")
    page.get_by_role("button", name="Launch").click()

    progress = page.locator('[data-testid="stProgress"]')
    seen = []
    for rnd in range(1, ROUNDS + 1):  # the run waits for a review before each round's evaluation
        expect(page.get_by_role("heading", name=re.compile(rf"round {rnd}: review before evaluation"))) \
            .to_be_visible(timeout=30_000)
        wait_for_app(page)
        expect(progress).to_contain_text(f"round {rnd} of {ROUNDS}: waiting for your review · {rnd - 1} of "
                                         f"{ROUNDS} rounds done")
        seen.append(progress.inner_text())
        expect(page.locator("svg.mf-plot").first).to_be_visible()  # the curve so far
        expect(page.locator('[data-testid="stMetric"]').filter(has_text="Rounds done")) \
            .to_contain_text(f"{rnd - 1} / {ROUNDS}")
        if rnd == 1:
            _drawn(page, 2)  # the candidates, drawn (at least two; more further down)
        if rnd == 2:  # a reload mid-run is a new session: it finds the run in the server and the workspace
            page.reload(wait_until="domcontentloaded")
            wait_for_app(page)
            expect(progress).to_contain_text(f"round {rnd} of {ROUNDS}: waiting for your review")
        page.get_by_role("button", name="Approve").click()
        wait_for_app(page)
    assert len(set(seen)) == ROUNDS  # the progress moved on while the run went on

    heading = page.get_by_role("heading", name=re.compile(r"Run #\d+: finished"))
    expect(heading).to_be_visible(timeout=30_000)
    run_id = int(re.search(r"#(\d+)", heading.inner_text()).group(1))
    rows = History(Workspace(streamlit_app.db_path)).rounds(run_id)
    assert [r["round"] for r in rows] == list(range(ROUNDS + 1))
    offline = rows[0]["status"] == "structure-only"
    chart = page.locator("svg.mf-plot").first
    expect(chart).to_be_visible()
    expect(chart).to_contain_text("Judge total per round" if offline else "Validation score per round")
    expect(page.locator('[data-testid="stMetric"]').filter(has_text="Rounds done")) \
        .to_contain_text(f"{ROUNDS} / {ROUNDS}")
    if offline:
        expect(page.get_by_text("no benchmark score is measured")).to_be_visible()
    assert no_exceptions(page) == [] and js_errors == []
    page.set_viewport_size({"width": 1400, "height": 1200})
    wait_for_app(page)
    page.get_by_role("heading", name=re.compile(r"Run #\d+: finished")).scroll_into_view_if_needed()
    save_screenshot(page, "evolve.png")

    # History: pick round 2, see parent and child with the diff, fork it into the Editor
    page.get_by_role("button", name="Open in History").click()
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    # Interact only once the page's first run is over (its first section, the score curves, is drawn, and
    # then the script is idle): waiting a fixed moment for a rerun to start, then for "not running", can
    # return before the run has even begun on a loaded machine.
    expect(page.locator("svg.mf-plot").first).to_be_visible(timeout=20_000)
    wait_for_app(page)
    expect(page.locator("pre.mf-diff")).to_have_count(0)  # the round's detail is built only when opened
    open_tab(page, "Round detail")
    expect(page.locator("pre.mf-diff").filter(has_text=f"+++ round {ROUNDS}")).to_be_visible()
    picker = page.get_by_role("combobox", name="Round", exact=True)  # not "Run", whose labels say "rounds"
    expect(picker).to_have_value(re.compile(rf"^#{ROUNDS} · "))  # the last round is picked
    picker.evaluate("e => e.scrollIntoView({block: 'center'})")  # its list closes if the page scrolls
    page.locator('[data-testid="stSelectbox"]').filter(has=picker).click()
    expect(picker).to_have_attribute("aria-expanded", "true")
    page.get_by_role("option", name=re.compile(r"^#2 ")).click()
    expect(page.get_by_role("heading", name=re.compile(r"Round #2 · "))).to_be_visible()
    wait_for_app(page)
    expect(page.locator(MERMAID)).to_have_count(2)  # parent, child
    _drawn(page, 2)
    _whole(page, 2)
    diff = page.locator("pre.mf-diff").filter(has_text="+++ round 2")
    expect(diff).to_be_visible()
    open_tab(page, "Lineage")
    expect(page.get_by_text(re.compile(r"Lineage \(parents → children.*all \d+ rounds"))).to_be_visible()
    lineage = page.locator('[data-testid="stVegaLiteChart"]').filter(has_text="selected")  # its legend
    expect(lineage.locator("g.role-mark text", has_text="#2").first).to_be_visible()  # the tree, its rounds named
    assert no_exceptions(page) == [] and js_errors == []
    open_tab(page, "Round detail")
    expect(diff).to_be_visible()
    _drawn(page, 2)  # the section is built again when reopened: its drawings too (the screenshot showed none)
    page.set_viewport_size({"width": 1400, "height": 2000})
    wait_for_app(page)
    page.get_by_role("tab", name="Round detail").evaluate("e => e.scrollIntoView({block: 'start'})")
    wait_for_still(page)  # the drawings settle after the resize
    save_screenshot(page, "history.png")
    page.set_viewport_size({"width": 1400, "height": 1000})

    text = rows[2]["workflow_text"]
    seed_lines = {ln.strip() for ln in rows[0]["workflow_text"].splitlines()}
    new_line = next(ln.strip() for ln in text.splitlines() if ln.strip() not in seed_lines and "[" in ln)
    page.get_by_role("button", name="Fork to Editor").click()
    wait_for_app(page)
    expect(page.get_by_role("heading", name="Editor")).to_be_visible()
    ace = page.frame_locator('iframe[title="pages.ace.ace_editor"] >> visible=true').locator(".ace_content")
    expect(ace).to_contain_text(new_line)  # the round's workflow is open in the Editor
    expect(page.get_by_text("Open workflow:").first).to_contain_text(f"gsm8k_run{run_id}_round2")
    wait_for_still(page)  # whatever scrolling the page would do has been done
    top = page.evaluate("() => Math.max(window.scrollY, ...[...document.querySelectorAll("
                        "'[data-testid=\"stMain\"], [data-testid=\"stAppViewContainer\"]')].map(e => e.scrollTop))")
    assert top == 0, f"the Editor opened scrolled down by {top} px"
    expect(page.get_by_text(re.compile("Valid for math tasks"))).to_be_visible()
    assert no_exceptions(page) == [] and js_errors == []
