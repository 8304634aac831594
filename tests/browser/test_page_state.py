"""Every page keeps its state across page switches and reloads (issue 30, item 5), through the per-browser draft
(flowcore.workspace.drafts.save_page_state): Run (mode, problem, expected answer, the answer), AOV (the candidate
graphs), Compare (its form), History (the chosen run). A server of its own: its own workspace with two stored
evolution runs and a scripted endpoint."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from flowcore.evolution import History
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer

from .conftest import _stop, no_exceptions, start_app, wait_for_app

pytestmark = pytest.mark.browser

SEED = """flowchart TD
    PROBLEM([Problem])
    C1["Custom<br/>(role: solver)"]
    RETURN([Return])
    PROBLEM --> C1
    C1 --> RETURN
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with FakeLLMServer("Adding it up, the answer is 5.") as fake:
        app = start_app(tmp_path_factory.mktemp("page_state"), env={"OPENAI_BASE_URL": fake.base_url})
        h = History(Workspace(app.db_path))
        for bench in ("gsm8k", "math"):  # two runs: History opens on the latest (#2) unless told otherwise
            run = h.create_run({"rounds": 1}, f"k-{bench}", SEED, bench, "math", offline=True)
            h.add_round(run, {"round": 0, "workflow_text": SEED, "status": "structure-only", "operator": "seed"})
            h.set_status(run, "finished")
        try:
            yield app
        finally:
            _stop(app.process)


def _open(page, app, path: str) -> None:
    page.goto(f"{app.url}/{path}", wait_until="domcontentloaded")
    wait_for_app(page)


def _switch(page, title: str) -> None:
    """A page switch inside the session (the menu), not a reload."""
    page.get_by_role("link", name=title, exact=True).click()
    expect(page.get_by_role("heading", name=title, exact=True)).to_be_visible()
    wait_for_app(page)


def _number(page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    box.fill(value)
    box.press("Enter")
    wait_for_app(page)
    expect(box).to_have_value(value)


def _check_run(page) -> None:
    expect(page.get_by_role("radio", name="One problem")).to_be_checked()
    expect(page.get_by_role("textbox", name="Problem")).to_have_value("What is 2 + 3?")
    expect(page.get_by_role("textbox", name="Expected answer (optional)")).to_have_value("5")
    expect(page.locator('[data-testid="stCode"]').filter(has_text="the answer is 5")).to_be_visible()


def _check_compare(page) -> None:
    expect(page.get_by_role("spinbutton", name="Problems (0 = the whole split)")).to_have_value("7")
    expect(page.get_by_role("radio", name="validation")).to_be_checked()


def _check_aov(page) -> None:
    expect(page.get_by_text(re.compile(r"^Candidate \d+ · "))).to_have_count(3)


def _check_history(page) -> None:
    expect(page.get_by_role("combobox", name="Run", exact=True)).to_have_value(re.compile(r"^#1 · gsm8k"))


def test_every_page_keeps_its_state_across_switches_and_reloads(served, browser):
    from .conftest import new_context

    ctx = new_context(browser)
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # Run: one problem with an expected answer, run against the scripted endpoint
        _open(page, served, "run")
        page.get_by_role("textbox", name="Problem").fill("What is 2 + 3?")
        page.get_by_role("textbox", name="Expected answer (optional)").fill("5")
        page.get_by_role("textbox", name="Expected answer (optional)").press("Enter")
        wait_for_app(page)
        page.get_by_role("button", name="Run", exact=True).click()
        wait_for_app(page)
        _check_run(page)

        # Compare: its form
        _switch(page, "Compare")
        _number(page, "Problems (0 = the whole split)", "7")
        page.get_by_text("validation", exact=True).click()
        wait_for_app(page)
        _check_compare(page)

        # AOV: the example graphs as candidates
        _switch(page, "AOV Execution")
        page.get_by_role("button", name="Use as candidates").click()
        wait_for_app(page)
        _check_aov(page)

        # History: the older run
        _switch(page, "History")
        picker = page.get_by_role("combobox", name="Run", exact=True)
        expect(picker).to_have_value(re.compile(r"^#2 · "))
        page.locator('[data-testid="stSelectbox"]').filter(has=picker).click()
        expect(picker).to_have_attribute("aria-expanded", "true")
        page.get_by_role("option", name=re.compile(r"^#1 · ")).click()
        wait_for_app(page)
        _check_history(page)

        # page switches keep each page as it was left
        for title, check in (("Run", _check_run), ("Compare", _check_compare), ("AOV Execution", _check_aov),
                             ("History", _check_history)):
            _switch(page, title)
            check(page)

        # and so do reloads (a new session of the same browser), of every page
        for path, check in (("run", _check_run), ("compare", _check_compare), ("aov", _check_aov),
                            ("history", _check_history)):
            _open(page, served, path)
            page.reload(wait_until="domcontentloaded")
            wait_for_app(page)
            check(page)
        assert no_exceptions(page) == [] and errors == []
    finally:
        ctx.close()
