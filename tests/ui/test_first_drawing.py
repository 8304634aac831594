"""The Editor's first drawing made on the server (flowcore/ui/first_drawing.py): an image only, cached by text,
and None (the browser draws) whenever the server cannot draw quickly."""

from __future__ import annotations

import base64
import threading
import time

import pytest

from flowcore.mermaid.engines import v8 as mermaid_v8
from flowcore.ui import first_drawing as fd

SVG = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 120.5 80" width="100%"><g class="node">'
       '<text>A</text></g></svg>')


@pytest.fixture
def fake(monkeypatch):
    """An engine that is ready and draws SVG (counted); the cache emptied before and after."""
    calls: list[str] = []

    def draw(code: str) -> str:
        calls.append(code)
        return SVG

    fd.clear()
    monkeypatch.setattr(fd, "engine_ready", lambda: True)
    monkeypatch.setattr(fd, "_draw", draw)
    yield calls
    fd.clear()


def test_an_svg_becomes_a_data_url_image_with_its_viewbox_size():
    got = fd.to_image(SVG)
    assert got["src"].startswith("data:image/svg+xml;base64,")
    assert base64.b64decode(got["src"].split(",", 1)[1]).decode() == SVG
    assert (got["w"], got["h"]) == (120.5, 80.0)


@pytest.mark.parametrize("svg", [
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 10 10'><g>unclosed</svg>",  # not XML
    "<html><body>hi</body></html>",  # not an SVG
    "<svg xmlns='http://www.w3.org/2000/svg'><g/></svg>",  # no size
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 0 10'/>",
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 nan 10'/>",
    "<?xml version='1.0'?><!DOCTYPE svg [<!ENTITY a 'aaaa'>]><svg xmlns='http://www.w3.org/2000/svg' "
    "viewBox='0 0 1 1'><text>&a;</text></svg>",  # no DTD, no entities
])
def test_what_is_not_a_plain_svg_document_is_not_shown(svg):
    assert fd.to_image(svg) is None


def test_a_text_is_drawn_once_then_served_from_the_cache(fake):
    first = fd.image("flowchart TD\nA-->B\n")
    assert first and first["w"] == 120.5
    assert fd.image("flowchart TD\nA-->B\n") == first
    assert fd.cached("flowchart TD\nA-->B\n") == first
    assert fake == ["flowchart TD\nA-->B\n"]


def test_nothing_is_drawn_when_the_engine_is_not_started_or_not_v8(fake, monkeypatch):
    monkeypatch.setattr(fd, "engine_ready", lambda: False)
    assert fd.image("flowchart TD\nA-->B\n") is None
    assert fake == []
    assert fd.cached("flowchart TD\nA-->B\n") is None


def test_a_text_too_long_is_left_to_the_browser(fake):
    assert fd.image("flowchart TD\n" + "A-->B\n" * fd.MAX_CODE_CHARS) is None
    assert fake == []


def test_a_failure_is_none_and_remembered(fake, monkeypatch):
    calls: list[str] = []

    def broken(code: str) -> str:
        calls.append(code)
        raise RuntimeError("Mermaid could not draw the diagram")

    monkeypatch.setattr(fd, "_draw", broken)
    assert fd.image("flowchart TD\nA-->\n") is None
    assert fd.image("flowchart TD\nA-->\n") is None
    assert calls == ["flowchart TD\nA-->\n"]  # not drawn again on every rerun
    monkeypatch.setattr(fd, "_draw", lambda code: "<svg not xml")
    assert fd.image("flowchart TD\nB-->C\n") is None  # what does not parse as XML is never shown


def test_a_slow_drawing_is_not_waited_for_but_cached_for_the_next_view(fake, monkeypatch):
    release = threading.Event()

    def slow(code: str) -> str:
        release.wait(10)
        return SVG

    monkeypatch.setattr(fd, "_draw", slow)
    t0 = time.monotonic()
    assert fd.image("flowchart TD\nA-->B\n", budget_s=0.05) is None
    assert time.monotonic() - t0 < 1
    assert fd.image("flowchart TD\nA-->B\n", budget_s=0.05) is None  # still drawing: not drawn twice
    release.set()
    assert fd.image("flowchart TD\nA-->B\n", budget_s=5)["w"] == 120.5


@pytest.mark.skipif(not mermaid_v8.available(), reason="mini-racer is not installed")
def test_the_real_engine_draws_the_browsers_picture():
    from flowcore import parse_lenient
    from flowcore.mermaid.engines import js
    from flowcore.ui import view
    from flowcore.workspace.drafts import default_workflow

    fd.clear()
    if js.backend("render") != "v8":
        pytest.skip("V8 did not start")
    code = view.diagram_code(parse_lenient(default_workflow().text)[0])
    got = fd.image(code, budget_s=60)
    svg = base64.b64decode(got["src"].split(",", 1)[1]).decode()
    assert 'class="node' in svg and "<foreignObject" not in svg  # SVG text labels, as drawing.js asks Mermaid
    assert got["w"] > 50 and got["h"] > 50
    assert fd.cached(code) is got
    fd.clear()
