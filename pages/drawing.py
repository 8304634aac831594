"""The app's own Mermaid drawing component (a plain module, not a page): static HTML/JS served by Streamlit from
a folder built once per version (pages/component_dir.py), Mermaid 11's browser build taken from the pinned
mermaidx package (nothing is loaded from outside 127.0.0.1). The drawing itself is in pages/components/mermaid/drawing.js.

Content Security Policy it needs: ``script-src 'self'`` (no inline script, no eval), ``style-src 'self'
'unsafe-inline'`` (Mermaid writes a ``<style>`` into each SVG, as Streamlit's own styles need anyway),
``img-src 'self' blob: data:`` (Copy PNG rasterises the drawing through a blob: image; a first drawing made on
the server is shown as a data: image, flowcore/ui/first_drawing.py) and the iframe's
``clipboard-write`` permission (Streamlit grants it to component frames).
"""

from __future__ import annotations

import hashlib
import shutil
from functools import cache
from pathlib import Path

import mermaidx
import streamlit as st
import streamlit.components.v1 as components

from flowcore.ui import first_drawing
from pages.component_dir import built

SOURCE = Path(__file__).resolve().parent / "components" / "mermaid"
FILES = ("index.html", "drawing.js", "drawing.css")


def mermaid_js() -> Path:
    """Mermaid 11's browser build inside the installed mermaidx package (an IIFE defining ``mermaid``)."""
    return Path(mermaidx.__file__).resolve().parent / "assets" / "mermaid.js"


@cache
def build_dir() -> Path:
    """The component's folder: our files plus ``mermaid.min.js``, made once per version of either (Streamlit
    serves a component only from inside its folder, so the bundle is copied, not linked)."""
    digest = hashlib.sha256(mermaid_js().read_bytes()[:4096] + str(mermaid_js().stat().st_size).encode())
    for name in FILES:
        digest.update((SOURCE / name).read_bytes())

    def fill(folder: Path) -> None:
        for name in FILES:
            shutil.copyfile(SOURCE / name, folder / name)
        shutil.copyfile(mermaid_js(), folder / "mermaid.min.js")  # last: its presence says the folder is whole

    return built("mermaidflow-drawing-", digest.hexdigest()[:16], fill, "mermaid.min.js")


@cache
def _component():  # noqa: ANN202 - Streamlit's component function
    return components.declare_component("mermaid_drawing", path=str(build_dir()))


def first_image(code: str, key: str) -> dict | None:
    """The server's drawing of ``code`` (first_drawing.image) for the drawing ``key``: drawn (within its
    budget) the first time the key is shown in this session, its page's first paint; afterwards only when
    cached, so that typing never waits for the server (the browser's Mermaid redraws)."""
    seen = st.session_state.setdefault("mf_first_drawings", set())
    first = key not in seen
    seen.add(key)
    scope = st.session_state.get("mf_user") or ""  # a team member's drawings are theirs (first_drawing)
    return first_drawing.image(code, scope=scope) if first else first_drawing.cached(code, scope)


def drawing(code: str, key: str, *, max_height: int = 720, zoom: float | None = None, font_px: int = 16,
            server_first: bool = False) -> None:
    """Draw Mermaid ``code``: Fit (``zoom`` None) or a zoom level to start with; the box grows to
    ``max_height`` pixels and scrolls past it. With ``server_first``, the server's drawing is shown as an image
    until the browser's Mermaid, loaded after the page's first paint, redraws it (``first_image``)."""
    image = first_image(code, key) if server_first else None
    _component()(code=code, max_height=max_height, zoom=zoom, font_px=font_px, image=image, key=key, default=None)
