"""The Editor's first drawing made on the server (flowcore/ui/first_drawing.py), in Chromium against a real
`streamlit run app.py`: it is an inert image (an <img> with a data: URL; no SVG element from the server in the
frame), the zoom buttons, Fit and Copy PNG work on it before the browser's Mermaid has loaded, the browser's
drawing then takes its place at the same zoom, and hostile texts drawn by the server run nothing and load nothing.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode, urlsplit

import pytest
from playwright.sync_api import expect

from flowcore.mermaid.engines import v8 as mermaid_v8
from flowcore.workspace.drafts import encode_text

from .conftest import CSP_RECORD, _stop, csp_violations, new_context, no_exceptions, start_app, wait_for_app

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not mermaid_v8.available(), reason="the server draws only with V8 (mini-racer)")]

MERMAID = 'iframe[title="pages.drawing.mermaid_drawing"]'
EVIL = "evil.invalid"  # never resolves; any request to it is recorded before DNS fails
TEXT = ('flowchart TD\n%% @prompt s: Solve it.\nPROBLEM(["Problem"])\nC1["Custom<br/>(role: s)"]\n'
        'C2["Custom<br/>(role: s)"]\nRETURN(["Return"])\nPROBLEM --> C1\nPROBLEM --> C2\nC1 --> RETURN\n'
        'C2 --> RETURN\n')
# what a pasted text or a model's output may hold: markup in labels, links, click callbacks, a directive
HOSTILE = (f'%%{{init: {{"securityLevel": "loose", "startOnLoad": true}}}}%%\nflowchart TD\n'
           f'PROBLEM(["<script>window.__pwned=1</script>Problem"])\n'
           f'C1["<img src=\'http://{EVIL}/a.png\' onerror=\'window.__pwned=2\'>"]\n'
           f'C2["<a href=\'javascript:window.__pwned=3\'>go</a>"]\n'
           f'RETURN(["<iframe src=\'http://{EVIL}/f\'></iframe>Return"])\n'
           f'PROBLEM -->|"<svg onload=\'window.__pwned=4\'>"| C1\nC1 --> C2\nC2 --> RETURN\n'
           f'click C1 call alert()\nclick C2 "javascript:window.__pwned=5"\nclick RETURN href "http://{EVIL}/r"\n')


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    served = start_app(tmp_path_factory.mktemp("first_drawing"))
    yield served
    _stop(served.process)


def _link(app, text: str) -> str:
    return f"{app.url}/editor?{urlencode({'wf': 'first', 'task': 'math', 'code': encode_text(text)})}"


def _hold(held: list):
    return lambda route: held.append(route)


def _first_view(browser, url: str, attempts: int = 40):
    """A new session's Editor at ``url`` whose first drawing came from the server, shown while the browser's
    Mermaid is held back: (context, page, release) where ``release()`` lets mermaid.min.js load. The server
    draws once its warm-up has started the V8 engine (the warm-up waits for a quiet second between page views),
    and a text not drawn within the page's budget is drawn meanwhile for the next view: views are repeated, a
    few seconds apart, until the server offers its drawing."""
    for _ in range(attempts):
        ctx = new_context(browser)
        ctx.add_init_script(CSP_RECORD)
        held: list = []
        ctx.route("**/mermaid.min.js", _hold(held))  # answered by release()
        page = ctx.new_page()
        page.goto(url, wait_until="domcontentloaded")
        wait_for_app(page)
        frame = page.frame_locator(MERMAID).first
        frame.locator("body[data-offered]").wait_for(state="attached", timeout=30_000)
        if frame.locator("body").get_attribute("data-offered") == "image":
            frame.locator('body[data-source="server"]').wait_for(state="attached")
            return ctx, page, lambda held=held: [r.continue_() for r in held]
        ctx.close()
        time.sleep(2)  # a quiet moment for the server's warm-up (it never runs during a page view)
    pytest.fail("the server never drew the Editor's first drawing")


def test_the_first_drawing_is_an_inert_image_that_zooms_fits_and_copies_before_mermaid_loads(browser, app):
    ctx, page, _ = _first_view(browser, _link(app, TEXT))
    try:
        ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=app.url)
        frame = page.frame_locator(MERMAID).first
        body = frame.locator("body")
        img = frame.locator("#stage > img")
        expect(img).to_have_count(1)
        assert frame.locator("svg").count() == 0  # nothing from the server is markup in the frame
        assert img.get_attribute("src").startswith("data:image/svg+xml;base64,")
        assert img.evaluate("i => i.complete && i.naturalWidth > 0")
        assert page.locator(MERMAID).first.element_handle().content_frame().evaluate("typeof window.mermaid") \
            == "undefined"  # the drawing is the server's: Mermaid has not loaded

        fit = body.get_attribute("data-scale")
        frame.get_by_role("button", name="+").click()
        expect(body).not_to_have_attribute("data-scale", fit)
        assert float(body.get_attribute("data-scale")) > float(fit)
        width = float(img.get_attribute("width"))
        assert abs(img.evaluate("i => i.getBoundingClientRect().width") - width) < 1.5  # the image follows
        frame.get_by_role("button", name="100%").click()
        expect(body).to_have_attribute("data-scale", "1")
        frame.get_by_role("button", name="−").click()
        expect(body).not_to_have_attribute("data-scale", "1")
        frame.get_by_role("button", name="Fit").click()
        expect(body).to_have_attribute("data-scale", fit)
        expect(frame.locator("#zoom")).to_contain_text("(fit)")

        frame.get_by_role("button", name="Copy PNG").click()
        expect(frame.locator("#note")).to_have_text("PNG copied")
        size = page.evaluate("""async () => { const [item] = await navigator.clipboard.read();
            return (await item.getType('image/png')).size; }""")
        assert size > 2_000
        assert no_exceptions(page) == []
    finally:
        ctx.close()


def test_mermaid_takes_over_the_image_at_the_same_zoom(browser, app):
    ctx, page, release = _first_view(browser, _link(app, TEXT))
    try:
        frame = page.frame_locator(MERMAID).first
        body = frame.locator("body")
        frame.get_by_role("button", name="+").click()
        frame.get_by_role("button", name="+").click()
        expect(frame.locator("#zoom")).not_to_contain_text("(fit)")
        scale = body.get_attribute("data-scale")
        release()  # Mermaid loads (after the page's first paint and an idle moment) and redraws the text
        expect(body).to_have_attribute("data-source", "browser", timeout=30_000)
        expect(frame.locator("svg g.node")).to_have_count(4)
        assert frame.locator("#stage > img").count() == 0
        assert {"Problem", "Return"} <= {t.strip() for t in frame.locator("svg g.node").all_text_contents()}
        assert body.get_attribute("data-scale") == scale  # the zoom chosen on the image is kept
        assert float(frame.locator("#stage > svg").get_attribute("width")) > 0
        expect(body).to_have_attribute("data-drawn", "1")  # Mermaid's first drawing (the image is drawing 0)
        assert no_exceptions(page) == []
    finally:
        ctx.close()


def test_hostile_texts_drawn_by_the_server_run_nothing_and_load_nothing(browser, app):
    from flowcore.mermaid.engines import js
    from flowcore.ui import first_drawing

    # 1. In the Editor: a link with the hostile text, its first drawing made by the server
    ctx, page, _ = _first_view(browser, _link(app, HOSTILE))
    off_host: list[str] = []
    try:
        page.on("request", lambda r: urlsplit(r.url).hostname not in ("127.0.0.1", None)
                and not r.url.startswith(("data:", "blob:", "about:")) and off_host.append(r.url))
        frame = page.frame_locator(MERMAID).first
        assert frame.locator("#stage > img").count() == 1 and frame.locator("svg, iframe").count() == 0
        scripts = frame.locator("script").evaluate_all("ss => ss.map((s) => s.getAttribute('src'))")
        assert set(scripts) <= {"drawing.js", "mermaid.min.js"}, scripts  # the component's own, nothing else

        # 2. The raw hostile Mermaid (no Editor reading it first: directives, click lines and markup as given)
        # drawn by the server's engine here, and shown as the component shows it, in the drawing's frame
        if js.backend("render") != "v8":
            pytest.skip("V8 did not start in the test process")
        first_drawing.clear()
        image = first_drawing.image(HOSTILE, budget_s=60)
        assert image is not None, "the server could not draw the hostile text"
        handle = page.locator(MERMAID).first.element_handle().content_frame()
        handle.evaluate("""async (src) => { const img = new Image(); img.src = src; document.body.append(img);
            await img.decode(); window.__shown = img.naturalWidth; }""", image["src"])
        assert handle.evaluate("window.__shown") > 0
        page.mouse.click(10, 10)  # a click anywhere (a click callback's trigger, if any ran)
        frame.locator("#stage > img").click()
        wait_for_app(page)
        for f in page.frames:
            assert f.evaluate("typeof window.__pwned") == "undefined", f.url
        assert off_host == []
        assert [v for v in csp_violations(page) if EVIL in v] == []
        assert no_exceptions(page) == []
    finally:
        ctx.close()
