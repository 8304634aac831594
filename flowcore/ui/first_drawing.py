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
component then draws in the browser as before. Results, failures included, are cached by text and ``scope``.

A team server keeps each member's drawings apart (``scope``: the member): a drawing that comes back at once is one
made before, so a shared cache told anyone who guessed another member's exact text that it had been drawn. Drawings
made with no scope (the warm-up's, of the bundled default workflow; every drawing of a one-user app) are shown to
everyone.
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
# A team server's bounds, whatever its users paste (every drawing of a new text costs the one drawing thread):
# texts waiting to be drawn (past them the browser draws, nothing queues for hours), the images kept in all
# (64 images of MAX_SVG_BYTES were 340 MB), and one drawing's time (the engine's own deadline is a minute, and
# Export waits for the same engine; an Editor drawing takes about a second).
MAX_PENDING = 8
MAX_CACHE_BYTES = 24_000_000
DRAW_TIMEOUT_S = 8.0
# Mermaid's settings in the browser (pages/components/mermaid/drawing.js), so that both draw the same picture
CONFIG = {"startOnLoad": False, "securityLevel": "strict", "maxEdges": 2000, "htmlLabels": False,
          "flowchart": {"htmlLabels": False, "useMaxWidth": False}}
SVG_NS = "{http://www.w3.org/2000/svg}"

_lock = threading.Lock()
_cache: OrderedDict[tuple[str, str], dict | None] = OrderedDict()  # (scope, code) -> image
_pending: dict[tuple[str, str], Future] = {}
_cached_bytes = 0  # the size of the images in _cache (their data URLs)
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mermaidflow-first-drawing")


def engine_ready() -> bool:
    """Whether the drawing engine is started and runs in V8 (never starts it)."""
    from flowcore.mermaid.engines import js

    return js.started_backend("render") == "v8"


def _draw(code: str) -> str:
    from flowcore.mermaid.engines import js

    return js.render_svg_with(code, CONFIG, timeout_s=DRAW_TIMEOUT_S)


def to_image(svg: str) -> dict | None:
    """``{"src": data URL, "w", "h"}`` for an SVG document that parses as XML with an ``<svg>`` root and a
    positive viewBox; else None."""
    data = svg.encode("utf-8")
    # no DTD (anywhere: a comment before it must not hide it), so no entities to expand
    if len(data) > MAX_SVG_BYTES or "<!DOCTYPE" in svg.upper() or "<!ENTITY" in svg.upper():
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


def _size(value: dict | None) -> int:
    return len(value["src"]) if value else 0


def _work(key: tuple[str, str]) -> dict | None:
    """Draw ``key``'s code and cache the image (None when it cannot be drawn); in the drawing thread."""
    global _cached_bytes
    try:
        value = to_image(_draw(key[1]))
    except Exception:  # noqa: BLE001 - Mermaid refused the text, or the engine failed: the browser draws it
        value = None
    with _lock:
        _pending.pop(key, None)
        _cached_bytes -= _size(_cache.pop(key, None))
        _cache[key] = value
        _cached_bytes += _size(value)
        while len(_cache) > CACHE_SIZE or (_cached_bytes > MAX_CACHE_BYTES and len(_cache) > 1):
            _cached_bytes -= _size(_cache.popitem(last=False)[1])
    return value


def _lookup(code: str, scope: str) -> tuple[bool, dict | None]:
    """(found, image) among ``scope``'s drawings and the public ones; under ``_lock``."""
    for key in dict.fromkeys([(scope, code), ("", code)]):
        if key in _cache:
            _cache.move_to_end(key)
            return True, _cache[key]
    return False, None


def image(code: str, budget_s: float = BUDGET_S, scope: str = "") -> dict | None:
    """The drawing of Mermaid ``code`` as an image (see ``to_image``), or None: not drawable on the server now
    (engine not started or not V8, text too long, Mermaid refused it, or not done within ``budget_s``).
    ``scope``: whose drawing it is (a team member; "" for everyone)."""
    if not isinstance(code, str) or not isinstance(scope, str) or len(code) > MAX_CODE_CHARS:
        return None
    key = (scope, code)
    with _lock:
        found, value = _lookup(code, scope)
        if found:
            return value
        fut = _pending.get(key)
    if fut is None:
        if not engine_ready():
            return None
        with _lock:
            fut = _pending.get(key)
            if fut is None:
                if len(_pending) >= MAX_PENDING:  # the drawing thread has enough to do: the browser draws
                    return None
                fut = _pending[key] = _pool.submit(_work, key)
    try:
        return fut.result(timeout=budget_s)
    except FutureTimeout:  # still drawing: cached when done, for the next view
        return None


def cached(code: str, scope: str = "") -> dict | None:
    """The image of ``code`` if it has been drawn for ``scope`` or for everyone, else None (nothing is drawn)."""
    if not isinstance(code, str) or not isinstance(scope, str):
        return None
    with _lock:
        return _lookup(code, scope)[1]


def clear() -> None:
    """Forget every drawing (tests)."""
    global _cached_bytes
    with _lock:
        _cache.clear()
        _cached_bytes = 0
