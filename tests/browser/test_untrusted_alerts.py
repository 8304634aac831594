"""An endpoint's error and an upload's column names load nothing (attacks a05 and a06 of issue 25's fresh
attacker), in Chromium against a real `streamlit run app.py`:

- Run page: the endpoint answers 400 with ``![x](http://127.0.0.1:<listener>/run-error.png)``; "The run failed: …"
  quoted it as markdown, an <img> the browser fetched (the Settings page already escaped the same words);
- Tasks page: an uploaded CSV's header names ``![x](http://127.0.0.1:<listener>/column.png)``; the rows caption
  quoted it as markdown.

A listener on 127.0.0.1 counts every request it gets, the page records every request to it and every Content
Security Policy violation (a load the policy refused is still an attempt). All must stay empty, the text must be
shown as typed, and a control image inserted by hand must be seen by the recorders, so they are known to work."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.helpers.fakellm import FakeLLMServer, Fault
from tests.helpers.listener import Listener

from .conftest import CSP_RECORD, _stop, csp_violations, new_context, no_exceptions, start_app, wait_for_app

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def listener():
    with Listener() as srv:
        yield srv


@pytest.fixture(scope="module")
def app(tmp_path_factory, listener):
    beacon = f"![x](http://127.0.0.1:{listener.port}/run-error.png)"
    with FakeLLMServer(Fault(status=400, body=f"bad request {beacon}")) as llm:
        served = start_app(tmp_path_factory.mktemp("alerts"), env={
            "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "k", "MERMAIDFLOW_MAX_RETRIES": "0",
            "MERMAIDFLOW_CACHE": "0"})
        yield served
        _stop(served.process)


def _shown(text: str) -> str:
    """``text`` as the page shows it: as typed, a word joiner after "http:" so it is not made a link."""
    return text.replace("://", ":\u2060//")


def test_the_run_error_and_the_column_caption_load_nothing(browser, app, listener):
    port = listener.port
    context = new_context(browser)
    context.add_init_script(CSP_RECORD)
    page = context.new_page()
    seen: list[str] = []
    page.on("request", lambda r: f":{port}/" in r.url and seen.append(r.url))
    violations: list[str] = []
    try:
        # Run page: the endpoint's 400 quotes a markdown image
        page.goto(f"{app.url}/run", wait_until="domcontentloaded")
        wait_for_app(page, 60_000)
        box = page.get_by_label("Problem", exact=True)
        box.fill("What is 6 times 7?")
        box.press("Control+Enter")
        wait_for_app(page)
        page.get_by_role("button", name="Run", exact=True).click()
        failed = page.locator('[data-testid="stAlertContentError"]').filter(has_text="The run failed")
        expect(failed).to_contain_text(_shown(f"![x](http://127.0.0.1:{port}/run-error.png)"), timeout=60_000)
        assert failed.locator("img, a").count() == 0, failed.inner_html()
        violations += csp_violations(page)

        # Tasks page: a column named as a markdown image
        page.goto(f"{app.url}/tasks", wait_until="domcontentloaded")
        wait_for_app(page, 60_000)
        column = f"![x](http://127.0.0.1:{port}/column.png)"
        page.locator('[data-testid="stFileUploaderDropzoneInput"]').first.set_input_files(
            files=[{"name": "rows.csv", "mimeType": "text/csv",
                    "buffer": f"country,{column},capital\nFrance,1,Paris\nSpain,2,Madrid\n".encode()}])
        caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="rows · columns:")
        expect(caption).to_contain_text(f"2 rows · columns: country, {_shown(column)}, capital", timeout=30_000)
        wait_for_app(page)
        assert caption.locator("img, a").count() == 0, caption.inner_html()
        violations += csp_violations(page)
        assert no_exceptions(page) == []

        # control: an image put on the page by hand is seen by the recorders
        before = list(seen)
        page.evaluate(f"() => {{ const i = document.createElement('img'); i.src = 'http://127.0.0.1:{port}/c.png';"
                      " document.body.appendChild(i); }")
        page.wait_for_function("window.__mf_csp.length > 0 || false")
        control = csp_violations(page)
    finally:
        context.close()
    assert before == [] and listener.received == [], (before, listener.received)
    assert violations == [], f"loads the policy had to refuse (an escape missed them): {violations}"
    assert control == [f"http://127.0.0.1:{port}/c.png"] and seen == [f"http://127.0.0.1:{port}/c.png"]
