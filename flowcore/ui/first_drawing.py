"""A drawing's first view drawn on the server, shown as an inert image until the browser's Mermaid takes over.

The drawing component (pages/drawing.py) draws with Mermaid 11's browser build: 3.5 MB of script to load and
compile before anything shows, on the main thread the page's first paint needs too. The server already runs the
same Mermaid 11 in V8 (flowcore.mermaid.engines, as Export's SVG does): ``image(code)`` is that drawing as a
``data:image/svg+xml`` URL and its natural size, which the component shows in an ``<img>`` at once and swaps for
the browser's own drawing once Mermaid has loaded after the page's first paint.

Safety: ``code`` comes from untrusted text (pasted Mermaid, an LLM's output) and the SVG from a DOM shim whose
serializer need not escape as a browser does. It is therefore never markup in the app's origin: only the URL of an
image, in which an SVG runs no script, follows no link and loads nothing. It must also read as XML (a real parser:
anything else is not shown), and its size comes from that parse.

Never slower than the browser's path: nothing is drawn unless the drawing engine is already started (the server's
warm-up starts it) and runs in V8 (QuickJS takes seconds), a text is drawn within ``BUDGET_S`` or not at all this
time (the drawing goes on in the background and is cached for the next view), and every failure is ``None``: the
component then draws in the browser as before. Results, failures included, are cached by text.
"""

from __future__ import annotations

import base64
import threading
import xml.etree.ElementTree as ET
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

MAX_CODE_CHARS = 40_000  # larger texts are drawn on demand anyway (view.LIVE_DRAWING_NODES)
MAX_SVG_BYTES = 4_000_000
BUDGET_S = 0.6  # how long a page's script may wait for a drawing it has not cached
CACHE_SIZE = 64
# Mermaid's settings in the browser (pages/components/mermaid/drawing.js), so that both draw the same picture
CONFIG = {"startOnLoad": False, "securityLevel": "strict", "maxEdges": 2000, "htmlLabels": False,
          "flowchart": {"htmlLabels": False, "useMaxWidth": False}}
SVG_NS = "{http://www.w3.org/2000/svg}"

_lock = threading.Lock()
_cache: OrderedDict[str, dict | None] = OrderedDict()
_pending: dict[str, Future] = {}
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mermaidflow-first-drawing")


def engine_ready() -> bool:
    """Whether the drawing engine is started and runs in V8 (never starts it)."""
    from flowcore.mermaid.engines import js

    return js.started_backend("render") == "v8"


def _draw(code: str) -> str:
    from flowcore.mermaid.engines import js

    return js.render_svg_with(code, CONFIG)


def to_image(svg: str) -> dict | None:
    """``{"src": data URL, "w", "h"}`` for an SVG document that parses as XML with an ``<svg>`` root and a
    positive viewBox; else None."""
    data = svg.encode("utf-8")
    if len(data) > MAX_SVG_BYTES or "<!DOCTYPE" in svg[:2000].upper():  # no DTD: no entities to expand
        return None
    try:
        root = ET.fromstring(data)
        box = [float(v) for v in root.attrib.get("viewBox", "").replace(",", " ").split()]
    except (ET.ParseError, ValueError):
        return None
    if root.tag != f"{SVG_NS}svg" or len(box) != 4 or not all(v == v and abs(v) < 1e7 for v in box) \
            or box[2] <= 0 or box[3] <= 0:
        return None
    return {"src": "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii"), "w": box[2], "h": box[3]}


def _work(code: str) -> dict | None:
    """Draw ``code`` and cache the image (None when it cannot be drawn); in the drawing thread."""
    try:
        value = to_image(_draw(code))
    except Exception:  # noqa: BLE001 - Mermaid refused the text, or the engine failed: the browser draws it
        value = None
    with _lock:
        _pending.pop(code, None)
        _cache[code] = value
        _cache.move_to_end(code)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return value


def image(code: str, budget_s: float = BUDGET_S) -> dict | None:
    """The drawing of Mermaid ``code`` as an image (see ``to_image``), or None: not drawable on the server now
    (engine not started or not V8, text too long, Mermaid refused it, or not done within ``budget_s``)."""
    if not isinstance(code, str) or len(code) > MAX_CODE_CHARS:
        return None
    with _lock:
        if code in _cache:
            _cache.move_to_end(code)
            return _cache[code]
        fut = _pending.get(code)
    if fut is None:
        if not engine_ready():
            return None
        with _lock:
            fut = _pending.get(code)
            if fut is None:
                fut = _pending[code] = _pool.submit(_work, code)
    try:
        return fut.result(timeout=budget_s)
    except FutureTimeout:  # still drawing: cached when done, for the next view
        return None


def cached(code: str) -> dict | None:
    """The image of ``code`` if it has been drawn, else None (nothing is drawn)."""
    with _lock:
        return _cache.get(code) if isinstance(code, str) else None


def clear() -> None:
    """Forget every drawing (tests)."""
    with _lock:
        _cache.clear()
