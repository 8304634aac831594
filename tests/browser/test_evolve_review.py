"""Evolve's review in a real browser (issue 30, item 6): with K=3 and an optimizer that proposes one workflow three
times, all three candidates are shown while the round waits for review, the two dropped ones each with its reason
(before: only "Candidate 0", the reason only after the round); an invalid in-place edit says so right under the
button that was clicked (it appeared 1,800 px above it); a vetoed round is drawn as a failed round (✖ on the axis).
A server of its own with a scripted endpoint."""

from __future__ import annotations

import json
import random
import re

import pytest
from playwright.sync_api import expect

from flowcore.evolution import ops
from flowcore.mermaid.reader import parse
from flowcore.workspace import library
from tests.helpers.fakellm import FakeLLMServer, message_text

from .conftest import _stop, new_context, no_exceptions, open_box, start_app, turn_on, wait_for_app

pytestmark = pytest.mark.browser

SEED = dict((n, t) for n, _, t in library.examples())["math_seed"]


def _variant() -> str:
    rng = random.Random(1)
    while True:
        res = ops.apply("insert", [parse(SEED)], "math", rng)
        if isinstance(res, ops.Child):
            return res.text


VARIANT = _variant()


def _respond(req: dict) -> str:
    text = message_text(req)
    if "workflow optimizer of MermaidFlow" in text:  # the same proposal every time
        return f"I add a step that checks the answer.\n```mermaid\n{VARIANT}```"
    if "judge of MermaidFlow" in text:
        n = len(re.findall(r"^Candidate \d+ \(", text, re.MULTILINE))
        return json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": 5, "complexity_balance": 7,
                                       "prompt_quality": 6, "rationale": 5} for i in range(n)]})
    return "The answer is 42."


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with FakeLLMServer(_respond) as fake:
        app = start_app(tmp_path_factory.mktemp("evolve_review"), env={"OPENAI_BASE_URL": fake.base_url})
        try:
            yield app
        finally:
            _stop(app.process)


def _number(page, label: str, value: str) -> None:
    box = page.get_by_role("spinbutton", name=label, exact=True)
    box.fill(value)
    box.press("Enter")
    wait_for_app(page)
    expect(box).to_have_value(value)


def test_review_shows_all_k_candidates_and_says_where_the_action_was(served, browser):
    ctx = new_context(browser)
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{served.url}/evolve", wait_until="domcontentloaded")
        wait_for_app(page)
        open_box(page, "New run")
        _number(page, "Rounds", "1")
        _number(page, "Candidates per round (K)", "3")
        _number(page, "Validation problems (0 = all)", "1")
        expect(page.get_by_role("radio", name="LLM optimizer")).to_be_checked()
        turn_on(page, "Review each round's candidates before evaluation")
        page.get_by_role("button", name="Launch").click()
        expect(page.get_by_role("heading", name=re.compile(r"round 1: review before evaluation"))).to_be_visible(
            timeout=60_000)
        wait_for_app(page)

        # all K = 3 candidates, while the round waits: one judged, two dropped with the reason
        expect(page.get_by_text(re.compile(r"^Candidate 0 \(judge pick\)"))).to_be_visible()
        for i in (1, 2):
            expect(page.get_by_text(re.compile(rf"^Candidate {i} · optimizer · dropped$"))).to_be_visible()
        expect(page.get_by_text("the same workflow as an earlier round")).to_have_count(2)
        expect(page.get_by_text("2 of the 3 candidates were dropped before judging", exact=False)).to_be_visible()

        # an invalid edit: the message sits under the button that was clicked
        page.get_by_role("textbox", name=re.compile(r"^Edit candidate 0")).fill("flowchart TD\n    PROBLEM --> C1\n")
        button = page.get_by_role("button", name="Use the edited workflow")
        button.click()
        wait_for_app(page)
        message = page.locator('[data-testid="stAlert"]').filter(has_text="Not applied")
        expect(message).to_be_visible()
        b, m = button.bounding_box(), message.bounding_box()
        assert 0 <= m["y"] - (b["y"] + b["height"]) < 120, (b, m)  # just below it, not 1,800 px above

        # veto: the round is stored failed and drawn as a failed round
        page.get_by_role("button", name="Veto round").click()
        expect(page.get_by_role("heading", name=re.compile(r"Run #\d+: stopped"))).to_be_visible(timeout=60_000)  # its one round vetoed
        wait_for_app(page)
        curve = page.locator("svg.mf-plot").filter(has_text="Validation score per round")
        expect(curve).to_contain_text("failed round (vetoed or not evaluated)")
        assert no_exceptions(page) == [] and errors == []
    finally:
        ctx.close()
