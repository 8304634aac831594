"""The studio as a whole in a real browser: work survives a reload, a copied link and a return visit; the
first load of a fresh server under CPU load is right every time."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest
from playwright.sync_api import expect

from .conftest import (
    ACE,
    REPO,
    _free_port,
    _healthy,
    _stop,
    goto_page,
    new_context,
    no_exceptions,
    runs_sent,
    wait_for_app,
)

pytestmark = pytest.mark.browser

MINE = ('flowchart TD\n%% @prompt solver: Reload-proof prompt.\nPROBLEM(["Problem"])\n'
        'C1["Custom<br/>(role: solver)"]\nRETURN(["Return"])\nPROBLEM --> C1\nC1 --> RETURN\n')


def _editor_text(page) -> str:
    ace = page.frame_locator(ACE)
    ace.locator(".ace_content").wait_for()
    return ace.locator(".ace_editor").first.evaluate("e => e.env.editor.getValue()")


def _type(page, text: str) -> None:
    ace = page.frame_locator(ACE)
    ace.locator(".ace_content").wait_for()
    ace.locator(".ace_text-input").focus()
    before = runs_sent(page)
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)
    wait_for_app(page, since=before)  # Ace sends the text after its debounce: wait for that run


def test_edit_reload_link_and_return_visit_keep_the_text(page, browser, streamlit_app):
    goto_page(page, streamlit_app, "/editor")
    _type(page, MINE)
    expect(page.get_by_text("Open workflow:").first).to_contain_text("edited example, not saved yet")
    page.wait_for_function("() => location.search.includes('code=z')")  # the text is in the URL
    link = page.url

    page.reload(wait_until="domcontentloaded")  # F5
    wait_for_app(page)
    assert _editor_text(page) == MINE
    assert not no_exceptions(page)

    other = new_context(browser, viewport={"width": 1400, "height": 1000})  # a second browser, no cookie
    try:
        p2 = other.new_page()
        p2.goto(link, wait_until="domcontentloaded")
        wait_for_app(p2)
        assert _editor_text(p2) == MINE
    finally:
        other.close()

    page.goto(streamlit_app.url + "/editor", wait_until="domcontentloaded")  # no link: this browser's draft
    wait_for_app(page)
    assert _editor_text(page) == MINE

    page.get_by_role("link", name="Run").click()  # and back: the same workflow is open
    wait_for_app(page)
    expect(page.get_by_text("Open workflow:").first).to_contain_text("math_seed")
    for _ in range(3):  # the page switch and its URL update are two history entries
        page.go_back()
        wait_for_app(page)
        if "/editor" in page.url:
            break
        expect(page.get_by_text("Open workflow:").first).to_contain_text("math_seed")  # nothing lost meanwhile
    assert "/editor" in page.url
    assert _editor_text(page) == MINE


def test_a_broken_link_says_so_and_opens_the_default(page, streamlit_app):
    goto_page(page, streamlit_app, "/editor?wf=x&code=z:not-base64!")
    expect(page.get_by_text("The link could not be opened")).to_be_visible()
    assert "flowchart" in _editor_text(page)


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_first_load_of_a_fresh_server_under_load(browser, tmp_path):
    """Ten first views of a server that has just started while both cores are busy: no exception, and the
    menu is the app's from the first paint (Streamlit's list of files in pages/ never appears)."""
    burners = [multiprocessing.Process(target=_burn, args=(90.0,), daemon=True) for _ in range(2)]
    for b in burners:
        b.start()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MERMAIDFLOW_DB": str(tmp_path / "ws.db"), "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "streamlit.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.address", "127.0.0.1", "--server.port", str(port),
                             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    watch = """() => { window.__raw = []; new MutationObserver(() => {
        const nav = document.querySelector('[data-testid="stSidebarNav"]');
        if (nav) window.__raw.push(nav.innerText);
        const t = document.body ? document.body.innerText : '';
        if (/ImportError|cannot import name/.test(t)) window.__raw.push(t.slice(0, 300));
      }).observe(document, {subtree: true, childList: true, characterData: true}); }"""
    ctx = new_context(browser, viewport={"width": 1200, "height": 800})
    ctx.add_init_script(f"({watch})()")
    ctx.set_default_timeout(90_000)
    try:
        deadline = time.monotonic() + 90
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "streamlit.log").read_text()
            time.sleep(0.1)
        pages = [ctx.new_page() for _ in range(10)]
        for p in pages:  # all at once: the first sessions race the first imports
            p.goto(url + "/", wait_until="commit")
        for i, p in enumerate(pages):
            wait_for_app(p, timeout_ms=90_000)
            expect(p.get_by_role("heading", name="MermaidFlow Studio")).to_be_visible()
            expect(p.get_by_role("link", name="Editor")).to_be_visible()
            assert not no_exceptions(p), f"load {i}: {no_exceptions(p)}"
            assert p.evaluate("window.__raw") == [], f"load {i} showed: {p.evaluate('window.__raw')}"
    finally:
        ctx.close()
        _stop(proc)
        log.close()
        for b in burners:
            b.terminate()


def test_home_lists_the_examples_as_a_plain_table_without_loading_the_data_grid(page, streamlit_app):
    """Home's examples are a markdown table (flowcore.mermaid.safe.table): drawn with the page's markdown, no
    Arrow scripts (st.table and the grid load 1.2 MB of them, ~0.2 s of the first paint)."""
    from flowcore.workspace import library

    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    goto_page(page, streamlit_app, "/")
    table = page.locator('[data-testid="stMarkdownContainer"] table').first
    expect(table).to_be_visible()
    assert table.locator("th").all_inner_texts() == ["name", "task", "nodes", "edges", "prompts", "valid"]
    names = [n for n, _, _ in library.examples()]
    assert table.locator("tbody tr td:first-child").all_inner_texts() == names
    assert set(table.locator("tbody tr td:last-child").all_inner_texts()) == {"yes"}  # every example is valid
    assert not [u for u in asked if "/static/js/Quiver." in u or "/static/js/arrowFormatUtils." in u]
