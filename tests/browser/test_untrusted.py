"""Untrusted text on pages loads nothing (issue 25.7), in Chromium against a real `streamlit run app.py`:

- a workflow link (``?code=``) whose subgraph title and both edge-label forms hold ``<img src=...>``, drawn in
  the Editor and, as a stored round, in History;
- an optimizer's rationale with a markdown image and an ``<img>`` tag, on Evolve and History;
- ``?wf=`` / ``task=`` / ``v=`` link parameters with bold text, a link and an image, whose "could not be opened"
  warning quotes them.

Every request of every frame is recorded, and every Content Security Policy violation (the policy would block a
load the sanitisers missed; a violation means something tried). Both lists must stay empty; a control image
inserted at the end must be refused by the policy and seen by both recorders, so they are known to work."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import pytest
from playwright.sync_api import expect

from flowcore.evolution import History
from flowcore.ui.words import edit_name
from flowcore.workspace.drafts import encode_text
from flowcore.workspace.store import Workspace

from .conftest import CSP_RECORD, _stop, csp_violations, new_context, no_exceptions, start_app, wait_for_app

pytestmark = pytest.mark.browser

EVIL = "img.evil.invalid"  # never resolves; any request to it is recorded before DNS fails
ATTACK = f"""flowchart TD
    subgraph S1["<img src='http://{EVIL}/title.png'> title"]
        P([PROBLEM])
    end
    P -->|"<img src='http://{EVIL}/pipe.png'>"| C1["Custom<br/>(role: solver)"]
    C1 -- "<img src='http://{EVIL}/dash.png'>" --> R([RETURN])
    class P,R Interface
    class C1 CustomOp
"""
# an edit's name as a model may write it: on the score curve, drawn as SVG by the server, it is hover text only
EDIT = (f"</title></g><img src='http://{EVIL}/edit.png'><script>window.__pwned=1</script>"
        f"**bold** [l](http://{EVIL}/l)")
RATIONALE = (f"**Why**: fewer calls. ![tracker](http://{EVIL}/rationale.png) "
             f"<img src='http://{EVIL}/rationale-tag.png'>")

@pytest.fixture(scope="module")
def app(tmp_path_factory):
    served = start_app(tmp_path_factory.mktemp("untrusted"))
    h = History(Workspace(served.db_path))
    run = h.create_run({"mode": "llm", "candidates": 2}, "untrusted", ATTACK, "gsm8k", "math", offline=True)
    h.add_round(run, {"round": 0, "workflow_text": ATTACK, "status": "structure-only", "operator": "seed"})
    h.add_round(run, {"round": 1, "workflow_text": ATTACK.replace("title", "child title"), "parents": [0],
                      "status": "structure-only", "operator": EDIT, "detail": RATIONALE,
                      "candidates": [{"scores": {"total": 31}}], "chosen": 0})
    h.set_status(run, "finished")
    yield served
    _stop(served.process)


def _visit(page, url: str) -> None:
    page.goto(url, wait_until="domcontentloaded")
    wait_for_app(page)


def _drawn(page, text: str) -> None:
    """Wait until some frame's drawing shows ``text`` (whichever component draws it)."""
    page.wait_for_function("""(t) => [...document.querySelectorAll('iframe')].some((f) => {
        try { return [...f.contentDocument.querySelectorAll('svg')].some((s) => s.textContent.includes(t)); }
        catch (e) { return false; } }) || [...document.querySelectorAll('svg')].some((s) => s.textContent.includes(t))""",
                           arg=text, timeout=30_000)


def test_no_untrusted_text_makes_any_page_load_anything(browser, app):
    context = new_context(browser)  # counts script runs (what wait_for_app waits on)
    context.add_init_script(CSP_RECORD)  # in every frame, components' iframes included
    page = context.new_page()
    off_host: list[str] = []
    page.on("request", lambda r: urlsplit(r.url).hostname not in ("127.0.0.1", "localhost", None)
            and not r.url.startswith(("data:", "blob:", "about:")) and off_host.append(r.url))
    violations: list[str] = []
    try:
        # a link to the attack workflow: the Editor draws its title and both edge labels, as text
        _visit(page, f"{app.url}/editor?" + urlencode({"wf": "attack", "task": "math", "code": encode_text(ATTACK)}))
        _drawn(page, "dash.png")
        _drawn(page, "title.png")
        violations += csp_violations(page)

        # link parameters with markdown: the warning quotes them as text
        bad = f"**bold** [link](http://{EVIL}/l) ![i](http://{EVIL}/param.png)"
        _visit(page, f"{app.url}/editor?" + urlencode({"wf": bad, "task": bad, "v": bad}))
        warning = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="could not be opened")
        expect(warning).to_contain_text("**bold**")  # shown as typed: no emphasis, link or image
        assert warning.locator("strong, a, img").count() == 0, warning.inner_html()
        violations += csp_violations(page)

        # the optimizer's rationale on Evolve (latest run) and History (its round, drawn beside its parent)
        for path in ("/evolve", "/history"):
            _visit(page, app.url + path)
            curve = page.locator("svg.mf-plot").first  # the judge's total per round, its edit named on hover
            expect(curve).to_contain_text("Judge total per round")
            tip = curve.locator("g.mf-point title")
            expect(tip).to_have_count(1)
            assert tip.text_content() == "round 1 · judge total (0-50) 31.0 · " + " ".join(edit_name(EDIT).split())
            assert curve.locator("img, script, a, foreignObject").count() == 0
            assert page.evaluate("window.__pwned === undefined")
            if path == "/history":  # the round's detail is a section of its own, built when opened
                page.get_by_role("tab", name="Round detail").click()
                expect(page.get_by_role("tab", name="Round detail")).to_have_attribute("aria-selected", "true")
                wait_for_app(page)
            caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="fewer calls")
            expect(caption.first).to_contain_text(f"![tracker](http://{EVIL}/rationale.png)")
            expect(caption.first).to_contain_text("<img src=")
            assert caption.locator("img").count() == 0
            assert caption.first.locator("strong").count() == 1  # its own formatting is kept
            violations += csp_violations(page)
        _drawn(page, "child title")  # History drew the round's workflow, its title as text
        violations += csp_violations(page)
        assert no_exceptions(page) == []

        # control: an <img> put on the page by hand is refused by the policy, and both recorders see it
        before_control = list(off_host)
        page.evaluate(f"() => {{ const i = document.createElement('img'); i.src = 'http://{EVIL}/control.png';"
                      " document.body.appendChild(i); }")
        page.wait_for_function("window.__mf_csp.length > 0")
        control = page.evaluate("window.__mf_csp")
    finally:
        context.close()
    assert before_control == [], f"requests to other hosts: {sorted(set(before_control))}"
    assert violations == [], f"loads the policy had to refuse (a sanitiser missed them): {violations}"
    assert control == [f"http://{EVIL}/control.png"] and off_host == control  # (a refused load is still seen)
