"""Attacks on what the Editor's first drawing shows (pages/components/mermaid/drawing.js): the server's image of
one text must not stand, unmarked, for another text while the browser's Mermaid has not drawn it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import no_exceptions
from .test_editor_first_drawing import MERMAID, TEXT, _first_view, _link, app  # noqa: F401 - app: the fixture

pytestmark = [pytest.mark.browser]


def test_the_image_of_an_earlier_text_is_not_passed_off_as_the_new_texts_drawing(browser, app):  # noqa: F811
    """The server's image of text A is shown while mermaid.min.js is still loading (here: held, as a stalled
    request holds it), and the text becomes B (a rerun's args, as Streamlit sends them, no image for B): A's
    picture stood, at full strength and without a word, for B until Mermaid loaded (forever if it never did).
    It is dimmed (stale) until B is drawn."""
    ctx, page, release = _first_view(browser, _link(app, TEXT))
    try:
        frame = page.frame_locator(MERMAID).first
        handle = page.locator(MERMAID).first.element_handle().content_frame()
        handle.evaluate("""() => window.postMessage({ type: "streamlit:render", args: {
            code: "flowchart TD\\n  Other --> Text\\n", max_height: 720 } }, "*")""")
        expect(frame.locator("body")).to_have_attribute("data-offered", "none")
        expect(frame.locator("#stage > img")).to_have_count(1)  # A's image, still there
        expect(frame.locator("#stage")).to_have_class("stale")
        assert float(frame.locator("#stage > img").evaluate("i => getComputedStyle(i).opacity")) < 0.5
        release()  # Mermaid loads and draws (B, or A again when the app's next render sends its own text back)
        expect(frame.locator("body")).to_have_attribute("data-source", "browser", timeout=30_000)
        expect(frame.locator("#stage > svg")).to_have_count(1)
        expect(frame.locator("#stage")).not_to_have_class("stale")
        assert no_exceptions(page) == []
    finally:
        ctx.close()
