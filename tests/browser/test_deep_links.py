"""Issue 30: a page opened by its address (/editor?code=…, /history, a reload) shows that page, and the load
asks for nothing that is not there. Before, every such load first asked for /<page>/_stcore/health and
/<page>/_stcore/host-config: two 404s and two console errors (flowcore/ui/deeplinks.py)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from .conftest import goto_page, no_exceptions, track_requests, wait_network_idle

pytestmark = pytest.mark.browser


def _watch(page) -> tuple[list[str], dict]:
    bad: list[str] = []
    page.on("response", lambda r: r.status >= 400 and bad.append(f"{r.status} {r.url}"))
    page.on("requestfailed", lambda r: "ERR_ABORTED" not in (r.failure or "")  # not one a reload cut short
            and bad.append(f"failed {r.url}: {r.failure}"))
    page.on("console", lambda m: m.type == "error" and bad.append(f"console: {m.text}"))
    return bad, track_requests(page)


def test_every_page_opens_by_its_address_without_a_404(page, streamlit_app):
    from app import PAGES

    bad, inflight = _watch(page)
    for _, title, url, _ in PAGES:
        for path in (f"/{url}", f"/{url}/"):  # a trailing slash too
            goto_page(page, streamlit_app, path)
            expect(page.get_by_role("heading", name=title, level=1)).to_be_visible()
            assert page.url.startswith(f"{streamlit_app.url}/{url}"), (path, page.url)
            wait_network_idle(page, inflight)  # every request the load makes has been answered
            assert bad == [], (path, bad)
            assert no_exceptions(page) == [], path


def test_a_shared_editor_link_opens_its_workflow_and_survives_a_reload(page, streamlit_app):
    from flowcore.workspace.drafts import encode_text

    text = ('flowchart TD\n%% @prompt solver: Solve it.\nPROBLEM(["Problem"])\nC1["Custom<br/>(role: solver)"]\n'
            'RETURN(["Return"])\nPROBLEM --> C1\nC1 --> RETURN\n')
    bad, inflight = _watch(page)
    goto_page(page, streamlit_app, f"/editor?{urlencode({'wf': 'shared', 'task': 'math', 'code': encode_text(text)})}")
    ace = page.frame_locator('iframe[title="pages.ace.ace_editor"] >> visible=true').locator(".ace_content")
    expect(ace).to_contain_text("(role: solver)")
    expect(page.get_by_text("Open workflow:").first).to_contain_text("shared")
    page.reload(wait_until="domcontentloaded")
    expect(page.get_by_role("heading", name="Editor", level=1)).to_be_visible()
    expect(ace).to_contain_text("(role: solver)")
    wait_network_idle(page, inflight)
    assert bad == []
    assert no_exceptions(page) == []
