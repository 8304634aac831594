"""The hard check: the real Mermaid 11 library (mermaid.js from the `mermaidx` wheel), run in V8 or QuickJS.

No Node, no browser. Two engines, started lazily: one warm context that only parses (`parse_check`) and a render
engine (`render_svg`, a fresh context per diagram as mermaid-cli opens a page per diagram). With the `mini-racer`
wheel both run in V8 (``mermaid_v8``: a typical workflow parses in ~4-6 ms, a 100-node SVG in ~1.4 s); otherwise,
or when V8 fails to start, in mermaidx's QuickJS (~18 ms; ~5 s). ``backend()`` says which, ``ENGINE_ENV`` chooses.

Two things are fixed on top of mermaidx:
- jison lexers call `input.match(/^.../)` on the rest of the text for every token; QuickJS's regex engine
  tries every start position of an anchored, non-sticky regex, which makes lexing quadratic (600 edges:
  ~25 s). The same regexes with the sticky flag give identical matches in linear time (600 edges: ~1.5 s).
- Mermaid drops front matter, `%%{...}%%` directives, `%%` comment lines and leading blank lines before it
  parses, so its line numbers are not the user's. `mermaid_text.Prepared` replays those steps keeping each
  character's original offset, and errors are mapped back to 1-based lines/columns of the text given.
The parse-only context is further sped up (lean RegExp statics, one combined regex per lexer state, no label
sanitizing: _FAST_PARSE_JS); tests compare it with a plain context on valid and broken texts.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import threading
from collections import OrderedDict

from mermaidx.engines.quickjs_engine import Engine as _MxEngine

from flowcore.mermaid.engines.sources import (
    _FAST_FLOWCHART_JS,
    _FAST_LEXER_JS,
    _FAST_PARSE_JS,
    _GRAMMAR_JS,
    _GRAPH_JS,
    _PARSE_JS,
    _PLAIN_FLOWCHART_JS,
    _STICKY_LEXER_JS,
    MERMAID_CONFIG,
    SHIM_SPEEDUPS_JS,
)
from flowcore.mermaid.text import MermaidError, humanize
from flowcore.mermaid.text import to_error as _to_error

__all__ = ["MAX_CHECK_CHARS", "MermaidError", "MermaidRenderError", "backend", "flowchart_grammar_tables",
           "humanize", "mermaid_graph", "parse_check", "render_png", "render_svg", "render_svg_with",
           "started_backend"]

# Above this the check would hold the engine for tens of seconds; refuse with a clear message instead.
MAX_CHECK_CHARS = 200_000
_CACHE_SIZE = 256


class MermaidRenderError(RuntimeError):
    """Mermaid could not draw the text; `error` holds the parse error when that was the reason."""

    def __init__(self, message: str, error: MermaidError | None = None):
        super().__init__(message)
        self.error = error


class _Engine(_MxEngine):
    """mermaidx's QuickJS engine with linear-time lexing."""

    def _build_context(self):
        ctx = super()._build_context()
        ctx.eval(_STICKY_LEXER_JS)
        ctx.eval(SHIM_SPEEDUPS_JS)
        return ctx


class _ParseEngine(_Engine):
    """One context kept warm for `mermaid.parse` only (parsing leaves no state a later parse could see).

    With `fast` (the default) the context gets _FAST_PARSE_JS and _FAST_FLOWCHART_JS; `fast=False` is the
    plain one, kept so tests can show both give the same answers."""

    def __init__(self, fast: bool = True):
        super().__init__()
        self.fast = fast
        self.fast_ready = False  # whether the flowchart speed-ups are in place (a test checks it)

    def _init_context(self) -> None:
        super()._init_context()
        self._ctx.eval(f"mermaid.initialize({json.dumps(MERMAID_CONFIG)});")
        self.fast_ready = False
        if self.fast and self._ctx.eval(_FAST_PARSE_JS) == "ok" and self._ctx.eval(_FAST_LEXER_JS) == "ok":
            self._ctx.eval(_FAST_FLOWCHART_JS)
            out = self._settle()
            self.fast_ready = bool(out and json.loads(out).get("ok"))
        else:
            self._ctx.eval(_PLAIN_FLOWCHART_JS)
            self._settle()

    def _parse_sync(self, text: str) -> dict:
        try:
            return self._parse_in_context(text)
        except Exception:  # a broken context (out of memory, stack): rebuild once and retry
            self._init_context()
            return self._parse_in_context(text)

    def _settle(self) -> str | None:
        """Runs promise jobs (and, when none is left, the shim's timers) until `__mfOut` is set."""
        ctx = self._ctx
        for _ in range(10_000):
            while self._run_job():
                pass
            out = ctx.eval("__flat(globalThis.__mfOut)")
            if out is not None or not ctx.eval("__runNextTimer()"):
                return out
        return None

    def _parse_in_context(self, text: str) -> dict:
        self._ctx.eval(_PARSE_JS % json.dumps(text))
        out = self._settle()
        if not out:
            raise RuntimeError("mermaid.parse did not finish")
        return json.loads(out)

    def parse(self, text: str) -> dict:
        return self._executor.submit(self._parse_sync, text).result()

    def _eval_settled(self, js: str) -> dict:
        self._ctx.eval(js)
        out = self._settle()
        if not out:
            raise RuntimeError("mermaid did not finish")
        return json.loads(out)

    def graph(self, text: str) -> dict:
        return self._executor.submit(self._eval_settled, _GRAPH_JS % json.dumps(text)).result()

    def grammar_tables(self) -> dict:
        return json.loads(self._executor.submit(lambda: self._ctx.eval(_GRAMMAR_JS)).result())


_lock = threading.Lock()
_engines: dict[str, object] = {}
_parse_cache: OrderedDict[str, MermaidError | None] = OrderedDict()
_svg_cache: OrderedDict[str, str] = OrderedDict()


# Which JS engine runs Mermaid: "v8" (mini-racer, when installed: 2-5x faster, see mermaid_v8) or "quickjs"
# (always there: mermaidx's own). Set MERMAIDFLOW_MERMAID_ENGINE to choose; V8 falls back to QuickJS if it fails
# to start, and `backend()` says which one runs and why.
ENGINE_ENV = "MERMAIDFLOW_MERMAID_ENGINE"
_backends: dict[str, str] = {}
_fallbacks: dict[str, str] = {}


def wanted_backend() -> str:
    choice = os.environ.get(ENGINE_ENV, "").strip().lower()
    if choice in ("quickjs", "v8"):
        return choice
    from flowcore.mermaid.engines import v8 as mermaid_v8

    return "v8" if mermaid_v8.available() else "quickjs"


def backend(kind: str = "parse") -> str:
    """The engine that runs the hard check (``kind="parse"``) or the drawing (``"render"``): "v8" or "quickjs",
    with the reason when V8 was wanted but could not start. Starts the engine if needed."""
    _engine(kind)
    name = _backends.get(kind, "quickjs")
    why = _fallbacks.get(kind)
    return f"{name} (V8 did not start: {why})" if why and name != "v8" else name


def started_backend(kind: str = "render") -> str | None:
    """The engine running ``kind`` ("v8" or "quickjs") if it has been started, else None (never starts it)."""
    with _lock:
        return _backends.get(kind) if _engines.get(kind) is not None else None


def _start_engine(kind: str):
    """The parse engine runs in a child process stopped at its deadline (engines/process.py); the drawing
    engine is mermaidx's (V8: a child process with its own timeout)."""
    if kind == "parse":
        from flowcore.mermaid.engines.process import ParseProcess

        eng = ParseProcess()
        eng.start()
        _backends[kind] = eng.backend
        if eng.fallback:
            _fallbacks[kind] = eng.fallback
        atexit.register(eng.close)
        return eng
    return _start_local(kind)


def _start_local(kind: str):
    """An engine in this process: V8 when wanted and it starts, else QuickJS."""
    if wanted_backend() == "v8":
        try:
            from flowcore.mermaid.engines import v8 as mermaid_v8

            eng = mermaid_v8.V8ParseEngine() if kind == "parse" else mermaid_v8.render_engine()
            eng.start()
            _backends[kind] = "v8"
            if kind == "parse":
                atexit.register(eng.close)
            return eng
        except Exception as exc:  # noqa: BLE001 - any failure to start V8: QuickJS still checks and draws
            _fallbacks[kind] = f"{type(exc).__name__}: {exc}"[:300]
    eng = _ParseEngine() if kind == "parse" else _Engine()
    eng.start()
    _backends[kind] = "quickjs"
    return eng


def boot() -> dict:  # pragma: no cover - runs in the parse engine's child process (engines/process.py)
    engine = _start_local("parse")
    return {"engine": engine, "info": {"backend": _backends.get("parse", "quickjs"), "fallback": _fallbacks.get("parse"),
                                       "fast_ready": bool(getattr(engine, "fast_ready", False))}}


def handle(state: dict, request: dict) -> object:  # pragma: no cover - runs in the child
    engine = state["engine"]
    if request["op"] == "grammar":
        return engine.grammar_tables()
    return (engine.parse if request["op"] == "parse" else engine.graph)(request["text"])


def _engine(kind: str):
    with _lock:
        eng = _engines.get(kind)
        if eng is None:
            eng = _engines[kind] = _start_engine(kind)
        return eng


def _cache_get(cache: OrderedDict, key: str):
    with _lock:
        if key in cache:
            cache.move_to_end(key)
            return True, cache[key]
    return False, None


def _cache_put(cache: OrderedDict, key: str, value, size: int = _CACHE_SIZE) -> None:
    with _lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > size:
            cache.popitem(last=False)


# ---------------------------------------------------------------------------------------------- checking

def parse_check(text: str) -> MermaidError | None:
    """None when Mermaid 11 accepts `text`; otherwise the error, mapped to the text's own lines."""
    if not isinstance(text, str):
        raise TypeError(f"parse_check expects the diagram text as str, got {type(text).__name__}")
    if len(text) > MAX_CHECK_CHARS:
        msg = f"the diagram is too large to check ({len(text)} characters, limit {MAX_CHECK_CHARS})"
        return MermaidError(msg, None, None, msg)
    hit, cached = _cache_get(_parse_cache, text)
    if hit:
        return cached
    from flowcore.mermaid.engines.process import CheckTimeout

    try:
        out = _engine("parse").parse(text)  # type: ignore[attr-defined]
    except CheckTimeout as exc:  # past its budget: said once per text, and the engine was stopped
        err = MermaidError(f"{exc}: the text is too large or too deeply nested for the hard check", None, None,
                           str(exc))
        _cache_put(_parse_cache, text, err)
        return err
    except Exception as exc:  # the engine itself failed (not the text): say so, and do not cache it
        return MermaidError(f"the Mermaid engine failed while checking this text: {exc}", None, None,
                            str(exc))
    err = None if out["ok"] else _to_error(text, out)
    _cache_put(_parse_cache, text, err)
    return err


def mermaid_graph(text: str) -> dict:
    """Mermaid 11's own reading of a flowchart: ``{"ok": True, "vertices", "edges", "subgraphs", "classes",
    "direction", ...}`` as its FlowDB holds them, or ``{"ok": False, "error": MermaidError}``. Labels are as
    the grammar read them (not sanitized for HTML). For differential tests of the soft reader."""
    out = _engine("parse").graph(text)  # type: ignore[attr-defined]
    if not out.get("ok"):
        return {"ok": False, "error": _to_error(text, out)}
    return out


def flowchart_grammar_tables() -> dict:
    """The bundled Mermaid's flowchart parser (jison tables and lexer rules) as the JS engine holds it (JSON
    shapes); ``mermaid.grammar.runtime_tables`` turns it into what flow_tables.json stores."""
    return _engine("parse").grammar_tables()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------- rendering

def render_svg(text: str) -> str:
    """The diagram as an SVG document, drawn by Mermaid 11 (about a second; results are cached)."""
    err = parse_check(text)
    if err is not None:
        raise MermaidRenderError(f"Mermaid cannot draw this diagram: {err.message}", err)
    hit, svg = _cache_get(_svg_cache, text)
    if hit:
        return svg
    svg = render_svg_with(text, {})
    _cache_put(_svg_cache, text, svg, size=32)
    return svg


def render_svg_with(text: str, config: dict, theme: str = "default", timeout_s: float | None = None) -> str:
    """The diagram as Mermaid 11 draws it with ``config`` (e.g. the browser component's settings); not cached
    (flowcore.ui.first_drawing caches its images), no hard check first: Mermaid's own error is raised.
    ``timeout_s``: V8's drawing is stopped (its child killed and replaced) past it, not at the engine's minute."""
    try:
        eng = _engine("render")
        extra = {"timeout_ms": max(1, int(timeout_s * 1000))} if timeout_s and _backends.get("render") == "v8" else {}
        return eng.render_svg(text, theme, {**MERMAID_CONFIG, **config}, None, **extra)
    except Exception as exc:  # mermaidx raises its own MermaidRenderError or a JS exception
        raise MermaidRenderError(f"Mermaid could not draw the diagram: {exc}") from exc


def render_png(text: str, scale: float = 2.0, background: str | None = "#ffffff") -> bytes:
    """The diagram as PNG bytes, `scale` times its natural size (default 2x, on white)."""
    if not scale or scale <= 0:
        raise ValueError(f"scale must be positive, got {scale!r}")
    from mermaidx.raster import render_bitmap

    bitmap = render_bitmap(render_svg(text), scale=scale, background=background)
    try:
        from PIL import Image  # noqa: F401 - only to know Pillow is there
    except ImportError:  # pragma: no cover - Pillow is pinned
        return bitmap.to_bytes("png")
    # The same pixels as novasvg's own PNG encoder, ~3x sooner and smaller (100 nodes at 2x: 1.9 s -> 0.7 s)
    buf = io.BytesIO()
    bitmap.to_pil().save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _dump_grammar(path: str) -> None:
    """Write the bundled Mermaid's flowchart grammar to ``path`` (flow_tables.json), in the form the
    Python reader loads."""
    from pathlib import Path

    import mermaidx

    from flowcore.mermaid.grammar import runtime_tables

    tables = runtime_tables(flowchart_grammar_tables())
    tables = {"source": f"Mermaid's flowchart jison parser as bundled in mermaidx {mermaidx.__version__}", **tables}
    Path(path).write_text(json.dumps(tables, separators=(",", ":")), encoding="utf-8")


if __name__ == "__main__":  # python -m flowcore.mermaid.engines.js --dump-grammar [PATH]
    import sys

    if len(sys.argv) >= 2 and sys.argv[1] == "--dump-grammar":
        from pathlib import Path as _P

        _dump_grammar(sys.argv[2] if len(sys.argv) > 2 else str(_P(__file__).parents[1] / "flow_tables.json"))
    else:
        print("usage: python -m flowcore.mermaid.engines.js --dump-grammar [PATH]", file=sys.stderr)
