"""The AOV Execution page in a real browser. (1) Load the example graphs, start the rule's choice in Manual
mode, step through it typing each agent's output, fail one subtask on purpose, read the inspector's verdict
and the repair proposals, accept one and finish. (2) Run the same graph event-driven with LLM agents against a
scripted endpoint: watch which subtasks run now, then accept a periodic refinement like a repair. Saves the
README screenshots (the repair proposals; the refinement with the live graph and the timeline)."""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
from playwright.sync_api import expect

from flowcore.workspace import settings as settings_store
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, message_text

from .conftest import (
    REPO,
    _free_port,
    _healthy,
    _stop,
    goto_page,
    new_context,
    no_exceptions,
    save_screenshot,
    scroll_under_header,
    wait_for_app,
)

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


# st.mermaid_chart draws the SVG as an image with a blob: URL. The app's CSP allows no fetch of blob: URLs
# (connect-src 'self'), so the page keeps each Blob it makes a URL for, and the test reads the Blob itself.
KEEP_BLOBS = """(() => { const keep = window.__mfBlobs = new Map(); const make = URL.createObjectURL;
  URL.createObjectURL = function (obj) { const url = make.call(URL, obj); if (obj instanceof Blob) keep.set(url, obj);
    return url; }; })()"""


@pytest.fixture(autouse=True)
def _keep_blobs(request):
    if "page" in request.fixturenames:
        request.getfixturevalue("page").add_init_script(KEEP_BLOBS)


def _charts(page, count: int) -> list[dict[str, str]]:
    """Once ``count`` Mermaid charts are drawn: per chart, subtask id -> the style of its node's shape
    (st.mermaid_chart draws the SVG as an image with a blob: URL; its Blob is read back here)."""
    expect(page.locator(CHART)).to_have_count(count)
    page.wait_for_function(f"() => [...document.querySelectorAll('{CHART}')]"
                           ".every(img => img.complete && img.naturalWidth > 0 && window.__mfBlobs.has(img.src))")
    return page.locator(CHART).evaluate_all("""imgs => Promise.all(imgs.map(img => window.__mfBlobs.get(img.src)
        .text().then(svg => Object.fromEntries(
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

    _key(page, "aov_use").locator("button").click()  # the first example set: three plans for the Gobang game
    wait_for_app(page)
    expect(page.get_by_text("chosen by the rule").first).to_be_visible()
    expect(page.locator('[data-testid="stMarkdownContainer"]').filter(has_text="gobang.json")
           .filter(has_text="chosen by the rule")).to_have_count(1)
    charts = _charts(page, 3)
    assert [next(iter(c)) for c in charts] == ["design", "board", "design"]  # as bundled, core first, a chain
    # each candidate's metrics by name, each with its one-line explanation on hover (no P_avg on show)
    cards = page.locator('[data-testid="stMetric"]')
    expect(cards).to_have_count(9)
    labels = cards.locator('[data-testid="stMetricLabel"]').all_inner_texts()
    assert [t.strip() for t in labels[:3]] == ["Parallelism", "Dependency spread", "Steps"]
    assert not any("P_avg" in t or "C_dependency" in t for t in cards.all_inner_texts())
    tip = page.locator('[data-testid="stTooltipContent"]')
    for i, words in [(0, "run at the same time"), (1, "fewer bottlenecks"), (2, "Rounds of waiting")]:
        cards.nth(i).locator('[data-testid="stTooltipIcon"]').hover()
        expect(tip).to_contain_text(words)
        page.mouse.move(1, 1)
        expect(tip).to_have_count(0)
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
    expect(page.get_by_text("Proposal 1 (from the rules)")).to_be_visible()
    expect(page.get_by_text("Proposal 3 (from the rules)")).to_be_visible()
    expect(page.locator('[data-testid="stCode"]').first).to_contain_text("~ win · requirement")
    expect(_key(page, "aov_step").locator("button")).to_be_disabled()

    # the screenshot for the README: the failure, the proposals with their diffs and diagrams
    charts = _charts(page, 7)  # 3 candidates, 3 proposals with the repaired subtask outlined, the live graph
    outlined = [sorted(s for s, style in c.items() if "dasharray:5 3" in style) for c in charts]
    assert outlined == [[], [], [], ["win"], ["win"], ["win"], []]
    assert _fills(charts[6]) == {"design": "completed", "board": "completed", "win": "failed",
                                 "ui": "completed", "tests": "completed", "assemble": "pending"}

    page.mouse.move(800, 500)
    scroll_under_header(failure)  # the failure first, whole, below the app's header bar
    save_screenshot(page, "aov.png")

    _key(page, "aov_accept_0").locator("button").click()  # the rule's best proposal: edit win
    wait_for_app(page)
    expect(page.get_by_text("Repair accepted; the execution goes on.")).to_be_visible()
    expect(page.get_by_text("Proposal 1 (from the rules)")).to_have_count(0)
    _step(page, {"win": "Five in a row found in all four directions."})
    _step(page, {"assemble": "gobang.py assembled; all tests pass."})
    expect(page.get_by_text("The execution completed after 4 steps.")).to_be_visible()
    live = _charts(page, 4)[-1]  # no proposals left: the live graph comes after the 3 candidates
    assert set(_fills(live).values()) == {"completed"} and len(live) == 6
    assert no_exceptions(page) == []
    assert js_errors == []


# ---- the event-driven run, live, and a periodic refinement accepted like a repair --------------------------

def _flow_reply(request: dict) -> str:
    """Agents answer at once (the slow 'win' is delayed by the server); a refinement adds a README subtask
    that needs the finished design and that 'assemble' now waits for."""
    text = message_text(request)
    if "This is update" in text:
        doc = json.loads(text.split("Current graph:\n", 1)[1].split("\nReply with JSON", 1)[0])
        doc["subtasks"]["docs"] = {"subtask_requirement": "Write the README with the rules and how to play.",
                                   "agent": "architect", "parents": ["design"]}
        doc["subtasks"]["assemble"]["parents"].append("docs")
        return json.dumps(doc)
    sid = re.search(r"Your subtask \((\w+)\)", text).group(1)
    if sid == "win":
        RELEASE_WIN.wait(60)  # 'win' runs until the test has seen it running
    return f"Done: {sid}"


RELEASE_WIN = threading.Event()
FLOW_FAKE = FakeLLMServer(_flow_reply, delays={"Your subtask (": 0.3}).start()
atexit.register(FLOW_FAKE.stop)


@contextmanager
def flow_endpoint(db_path):
    """The app's saved LLM settings point at this module's scripted server for one test (saved settings
    overlay the environment other browser modules set), then go back to what they were."""
    ws = Workspace(db_path)
    before = settings_store.load_llm_settings(ws)
    settings_store.save_llm_settings(ws, {**(before or {}), "base_url": FLOW_FAKE.base_url,
                                          "cache": False, "max_retries": 0})
    try:
        yield
    finally:
        if before is None:
            with ws.transaction() as conn:
                conn.execute("DELETE FROM settings WHERE name = ?", (settings_store.LLM_SETTINGS,))
        else:
            settings_store.save_llm_settings(ws, before)
        ws.close()


def test_event_driven_run_live_and_a_refinement_accepted(page, streamlit_app):
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    page.set_viewport_size({"width": 1500, "height": 1100})
    with flow_endpoint(streamlit_app.db_path):
        goto_page(page, streamlit_app, "/aov")
        _key(page, "aov_use").locator("button").click()
        wait_for_app(page)
        _choose(page, "aov_agents", "LLM agents")
        _choose(page, "aov_inspector", "Rules")
        _choose(page, "aov_repairs", "Rules")
        expect(_key(page, "aov_refine").get_by_text("LLM", exact=True)).to_be_visible()  # every 3, the default
        _key(page, "aov_start").locator("button").click()
        wait_for_app(page)
        _key(page, "aov_run").locator("button").click()

        # live: 'win' still runs while its siblings have completed: nobody waits for a step's slowest
        running = page.get_by_text(re.compile(r"Running now: win \(coder(#\d)?, \d+\.\d s\)$"))
        expect(running).to_be_visible(timeout=30_000)
        expect(page.get_by_text("Timeline · overlapping bars ran at the same time")).to_be_visible()
        page.wait_for_function(f"() => [...document.querySelectorAll('{CHART}')].length === 4")
        fills = _fills(_charts(page, 4)[-1])  # 3 candidates, then the live graph
        assert fills == {"design": "completed", "board": "completed", "win": "running", "ui": "completed",
                         "tests": "completed", "assemble": "pending"}
        expect(_key(page, "aov_pause").locator("button")).to_be_enabled()
        expect(_key(page, "aov_step").locator("button")).to_be_disabled()
        RELEASE_WIN.set()

        # after 3 completions nothing new starts; once 'win' is done, the refinement awaits a decision
        note = page.locator('[data-testid="stAlert"]').filter(has_text="Periodic refinement:")
        expect(note).to_be_visible(timeout=30_000)
        expect(page.get_by_text(re.compile(r"Proposal 1 \(from the LLM\) · re-plan: 1 added"))).to_be_visible()
        expect(page.locator('[data-testid="stCode"]').first).to_contain_text(
            "+ subtask docs (architect): Write the README")
        charts = _charts(page, 5)  # 3 candidates, the update with its new subtask outlined, the live graph
        assert [s for s, style in charts[3].items() if "dasharray:5 3" in style] == ["docs"]
        assert _fills(charts[4]) == {"design": "completed", "board": "completed", "win": "completed",
                                     "ui": "completed", "tests": "completed", "assemble": "pending"}
        page.mouse.move(800, 500)
        scroll_under_header(note)
        save_screenshot(page, "aov_flow.png")

        _key(page, "aov_accept_0").locator("button").click()
        wait_for_app(page)
        done = page.get_by_text(re.compile(r"The execution completed after 3 steps\."))
        expect(done).to_be_visible(timeout=30_000)
        final = _charts(page, 4)[-1]
        assert set(_fills(final).values()) == {"completed"} and set(final) == {
            "design", "board", "win", "ui", "tests", "assemble", "docs"}
        assert no_exceptions(page) == []
        assert js_errors == []


def test_a_reload_mid_run_reopens_the_live_run_with_the_settings_it_runs_with(page, streamlit_app):
    """A reload (or a second tab of the same browser) while the run goes on: the same live run on screen,
    with the agents / inspector / refinement choices it was started with, not the page's defaults."""
    RELEASE_WIN.clear()  # 'win' runs until this test has reloaded
    try:
        with flow_endpoint(streamlit_app.db_path):
            goto_page(page, streamlit_app, "/aov")
            _key(page, "aov_use").locator("button").click()
            wait_for_app(page)
            for key, option in [("aov_agents", "LLM agents"), ("aov_inspector", "Rules"),
                                ("aov_repairs", "Rules"), ("aov_refine", "Off")]:
                _choose(page, key, option)
            _key(page, "aov_start").locator("button").click()
            wait_for_app(page)
            expect(page.get_by_text(re.compile(r" · started \d{1,2} [A-Z][a-z]{2} \d\d:\d\d$"))).to_be_visible()
            _key(page, "aov_run").locator("button").click()
            running = page.get_by_text(re.compile(r"Running now: win \(coder(#\d)?, \d+\.\d s\)$"))
            expect(running).to_be_visible(timeout=30_000)
            assert [c for c in page.context.cookies() if c["name"] == "mf_browser" and c["httpOnly"]]
            for view in (page, page.context.new_page()):  # a reload, then a second tab of this browser
                if view is page:
                    page.reload(wait_until="domcontentloaded")
                else:
                    view.goto(streamlit_app.url + "/aov", wait_until="domcontentloaded")
                wait_for_app(view)
                expect(view.get_by_text(re.compile(r"^The execution “Develop a Gobang.*” \(started .*\) is running: "
                                                   r"its live view is below\.$"))).to_be_visible()
                expect(view.get_by_text(re.compile(r"Running now: win \("))).to_be_visible(timeout=30_000)
                for key, option in [("aov_inspector", "Rules"), ("aov_repairs", "Rules"), ("aov_refine", "Off")]:
                    expect(_key(view, key).get_by_role("radio", name=option)).to_be_checked()
                assert no_exceptions(view) == []
            RELEASE_WIN.set()
            done = page.get_by_text(re.compile(r"The execution completed after 3 steps\."))
            expect(done).to_be_visible(timeout=30_000)
    finally:
        RELEASE_WIN.set()


@pytest.mark.parametrize("path", ["/aov", "/compare"])
def test_a_link_to_the_page_on_a_fresh_server_opens_inside_the_app(browser, tmp_path, path):
    """The first visit of a server that has just started is a copied link to the page: it opens inside the
    app (its menu, the browser's cookie that a reload finds its work by), not as a lone script."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MERMAIDFLOW_DB": str(tmp_path / "ws.db"), "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "streamlit.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                                 "--server.address", "127.0.0.1", "--server.port", str(port),
                                 "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    ctx = new_context(browser, viewport={"width": 1200, "height": 800})
    try:
        deadline = time.monotonic() + 90
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "streamlit.log").read_text()
            time.sleep(0.1)
        page = ctx.new_page()
        page.goto(url + path, wait_until="domcontentloaded")
        wait_for_app(page, timeout_ms=60_000)
        expect(page.get_by_role("link", name="Editor")).to_be_visible()
        # the id cookie came with the page, out of reach of the page's scripts
        assert [c for c in page.context.cookies() if c["name"] == "mf_browser" and c["httpOnly"]]
        assert "mf_browser" not in page.evaluate("document.cookie")
        assert no_exceptions(page) == []
    finally:
        ctx.close()
        _stop(proc)
