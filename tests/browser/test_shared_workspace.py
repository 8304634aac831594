"""Two app processes on one PostgreSQL workspace: a run launched in one appears, live, in the other's History."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import (
    REPO,
    STARTUP_TIMEOUT_S,
    _free_port,
    _healthy,
    _stop,
    goto_page,
    new_context,
    no_exceptions,
    open_box,
    wait_for_app,
)

pytestmark = pytest.mark.browser


def _serve(db_url: str, log: Path) -> tuple[str, subprocess.Popen]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(MERMAIDFLOW_DB=db_url, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.address",
           "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"streamlit on {url} did not start: {log.read_text(errors='replace')[-800:]}")
        time.sleep(0.2)
    return url, proc


def _rounds_shown(page) -> int:
    caption = page.get_by_text(re.compile(r"^\d+ of \d+ rounds shown\.$"))
    return int(re.search(r"of (\d+) rounds", caption.inner_text()).group(1))


def test_run_launched_in_one_app_appears_live_in_the_other(browser, pg_server, tmp_path):
    db_url = pg_server.new_schema()
    apps = [_serve(db_url, tmp_path / f"app{i}.log") for i in (1, 2)]
    try:
        a = new_context(browser, viewport={"width": 1400, "height": 1000}).new_page()
        b = new_context(browser, viewport={"width": 1400, "height": 1400}).new_page()
        for p in (a, b):
            p.set_default_timeout(30_000)
        goto_page(a, type("App", (), {"url": apps[0][0]}), "/evolve")
        open_box(a, "New run")
        for label, value in (("Rounds", "200"), ("Candidates per round (K)", "16")):  # a run that lasts a while
            box = a.get_by_role("spinbutton", name=label, exact=True)
            box.fill(value)
            box.press("Enter")
            wait_for_app(a)
        a.get_by_role("button", name="Launch").click()
        wait_for_app(a)
        expect(a.get_by_text(re.compile(r"^Run #1 · Round \d+ of 200"))).to_be_visible(timeout=30_000)

        b.goto(apps[1][0] + "/history", wait_until="domcontentloaded")  # it keeps rerunning: never idle for long
        expect(b.get_by_text(re.compile(r"running elsewhere")).first).to_be_visible(timeout=60_000)
        expect(b.get_by_text(re.compile(r"The run is going"))).to_be_visible(timeout=30_000)
        b.get_by_role("tab", name="Rounds").click()  # the history buffer's table: its own section
        expect(b.get_by_text(re.compile(r"^\d+ of \d+ rounds shown\.$"))).to_be_visible(timeout=30_000)
        first = _rounds_shown(b)
        # no reload: the page reruns itself as app 1 stores rounds in the shared workspace
        b.wait_for_function(
            "n => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')].some(e => "
            "{ const m = e.innerText.match(/of (\\d+) rounds shown/); return m && +m[1] > n; })", arg=first,
            timeout=60_000)
        assert _rounds_shown(b) > first
        assert no_exceptions(a) == [] and no_exceptions(b) == []
    finally:
        for _, proc in apps:
            _stop(proc)
