"""Mermaid 11 in V8 (the `mini-racer` wheel): the hard check and the SVG export, without Node or a browser.

The same mermaid.js, DOM shim and fonts as mermaidx's QuickJS engine (``mermaid_js``), run by V8's JIT. What makes
it fast, measured with ``benchmarks/mermaid_backends.py`` (see README):

- The DOM shim replaces ``RegExp.prototype.exec`` to fill the legacy ``RegExp.$1``... statics that QuickJS lacks.
  V8 has them natively, and a replaced ``exec`` takes every regex operation in V8 off its fast path (100-node
  render 2.3 s -> 1.7 s, parse 79 -> 26 ms): the V8 contexts load the shim without that wrapper.
- The shim's ``querySelector`` walks the whole document even after a match, and every label measurement looks up
  the ``<style>`` element that way and re-parses the stylesheet's selectors: quadratic in the drawing's size.
  ``SHIM_SPEEDUPS_JS`` (in ``mermaid_js``, used by both engines) stops at the first match and parses each selector
  once (1.7 s -> 0.8 s). Renders give the same SVG byte for byte (a test draws with a seeded ``Math.random``).
- Parse-only: one combined regex per lexer state and no label sanitising, as in the QuickJS parse context.

mini-racer's default flag ``--single-threaded`` is kept: background compilation threads use more CPU than they
save on two shared cores. Parsing runs in this process (one context, kept warm, behind a lock); drawing runs in a
child process, as mermaidx's V8 engine does, so that a diagram whose JS never stops can be killed; that child keeps
one warm context for every drawing (``render_warm``; state reset, not rebooted).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

_EXEC_SHIM = "(function () {\n  const origExec = RegExp.prototype.exec;"


def available() -> bool:
    """Whether the V8 wheel (mini-racer) is installed."""
    try:
        import py_mini_racer  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=2)
def context_scripts(patched: bool = False) -> tuple[str, ...]:
    """mermaidx's scripts for a fresh context, with the DOM shim's ``RegExp.prototype.exec`` wrapper left out; with
    ``patched``, Mermaid's text carries draw_speedups.MERMAID_PATCHES (after the prelude they call)."""
    from mermaidx.engines._common import context_scripts as mx_scripts

    scripts = list(mx_scripts())
    shim = scripts[1]
    start = shim.find(_EXEC_SHIM)
    if start >= 0:
        end = shim.index("})();", start) + len("})();")
        scripts[1] = shim[:start] + shim[end:]
    if patched:
        from flowcore.mermaid.engines.draw_speedups import PRELUDE_JS, patch_mermaid

        scripts[2] = patch_mermaid(scripts[2])[0]
        scripts.insert(2, PRELUDE_JS)
    return tuple(scripts)


def build_context(*, speedups: bool = True):
    """A V8 context with Mermaid loaded, as mermaidx's V8 engine makes it (text measured from font tables); with
    ``speedups``, the shim's and Mermaid's (SHIM_SPEEDUPS_JS, draw_speedups), which draw the same bytes."""
    from mermaidx.engines import v8_engine
    from py_mini_racer import MiniRacer

    from flowcore.mermaid.engines.draw_speedups import SHIM_JS
    from flowcore.mermaid.engines.sources import SHIM_SPEEDUPS_JS

    ctx = MiniRacer()
    ctx.eval("globalThis.__log = (s) => {};")
    ctx.eval(v8_engine._measure_text_js())
    for script in context_scripts(patched=speedups):
        ctx.eval(script)
    if speedups:
        ctx.eval(SHIM_SPEEDUPS_JS)
        ctx.eval(SHIM_JS)
    return ctx


class V8ParseEngine:
    """One warm V8 context for `mermaid.parse` (and the FlowDB read-out used by the differential tests)."""

    def __init__(self) -> None:
        self._ctx = None
        self._lock = threading.Lock()
        self.fast_ready = False

    def start(self) -> None:
        with self._lock:
            if self._ctx is None:
                self._init_context()

    def _init_context(self) -> None:
        from flowcore.mermaid.engines.sources import _FAST_FLOWCHART_JS, _FAST_LEXER_JS, MERMAID_CONFIG

        if self._ctx is not None:  # a dropped context must be closed, or V8 can hang the interpreter's exit
            self._ctx.close()
            self._ctx = None
        ctx = build_context()
        ctx.eval(f"mermaid.initialize({json.dumps(MERMAID_CONFIG)});")
        ctx.eval("globalThis.__mfNativeExec = RegExp.prototype.exec;")
        ctx.eval(_FAST_LEXER_JS)
        ctx.eval(_FAST_FLOWCHART_JS)
        self._ctx = ctx
        out = self._settle()
        self.fast_ready = bool(out and json.loads(out).get("ok"))

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                self._ctx.close()
                self._ctx = None

    def _settle(self) -> str | None:
        """V8 runs promise jobs at the end of every eval; run the shim's timers until `__mfOut` is set."""
        ctx = self._ctx
        for _ in range(10_000):
            out = ctx.eval("globalThis.__mfOut")
            if out is not None or not ctx.eval("__runNextTimer()"):
                return out
        return None

    def _eval_settled(self, js: str) -> dict:
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._ctx is None:
                        self._init_context()
                    self._ctx.eval(js)
                    out = self._settle()
                    break
                except Exception:  # a broken context (out of memory, stack): rebuild once and retry
                    if attempt == 2:
                        raise
                    self._init_context()
        if not out:
            raise RuntimeError("mermaid did not finish")
        return json.loads(out)

    def parse(self, text: str) -> dict:
        from flowcore.mermaid.engines.sources import _PARSE_JS

        return self._eval_settled(_PARSE_JS % json.dumps(text))

    def graph(self, text: str) -> dict:
        from flowcore.mermaid.engines.sources import _GRAPH_JS

        return self._eval_settled(_GRAPH_JS % json.dumps(text))

    def grammar_tables(self) -> dict:
        from flowcore.mermaid.engines.sources import _GRAMMAR_JS

        with self._lock:
            if self._ctx is None:
                self._init_context()
            return json.loads(self._ctx.eval(_GRAMMAR_JS))


# ------------------------------------------------------------------------------------------------ drawing

# What one drawing leaves in a context that the next could see, and how it is reset instead of booting a fresh
# context (~0.3 s of CPU each, and mermaidx's child built two after every drawing): the document (render_script's
# __resetDocument), Mermaid's config (its mermaid.initialize), the result slots (set by render_script), and the
# label sizes asked for (__foMissing, reset here before every pass). Mermaid's FlowDB is cleared by mermaid.render.
# A test draws in a fresh context and in a reused one (after another diagram) and compares the bytes.
RESET_JS = "globalThis.__foMissing = {}; globalThis.__renderResult = null; globalThis.__renderError = null;"


def render_warm(ctx, code: str, theme: str, config: dict | None, css: str | None, known: dict, measure) -> str:
    """mermaidx's ``_render`` (draw until no label size is missing), all passes in the one warm ``ctx``."""
    from mermaidx.engines import v8_engine
    from mermaidx.engines._common import MermaidRenderError, collect_svg, render_script, run_event_loop

    if len(known) > v8_engine._KNOWN_LIMIT:
        known.clear()
    for _ in range(v8_engine._MAX_PASSES):
        ctx.eval(RESET_JS)
        ctx.eval(f"globalThis.__foKnown = {json.dumps(known)};")
        ctx.eval(render_script(code, theme, config, css))
        run_event_loop(ctx.eval)
        asked = json.loads(ctx.eval("JSON.stringify(globalThis.__foMissing)"))
        if not asked:
            return collect_svg(ctx.eval)
        for key, what in asked.items():  # rough sizes were used this pass: measure them and draw again
            known[key] = measure(*what)
    raise MermaidRenderError(f"the sizes of the <foreignObject> labels did not settle in {v8_engine._MAX_PASSES} "
                             "passes")


def _child_main(conn) -> None:  # pragma: no cover - runs in the child process
    """mermaidx's V8 child loop (one isolate, requests over a pipe) with one warm context reused by every drawing, as
    the parse engine is; after a drawing that failed the context is replaced (its state is then unknown)."""
    from mermaidx.engines._common import MermaidRenderError, TextMeasurer

    known: dict = {}
    measurer = TextMeasurer()
    try:
        ctx = build_context()
        conn.send(("ready", None))
    except Exception as exc:  # noqa: BLE001 - any boot failure goes to the parent
        conn.send(("boot_error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        code, theme, config, css = msg
        failed = True
        try:
            svg = render_warm(ctx, code, theme, config, css, known, measurer.foreign_object)
            failed = False
            conn.send(("ok", svg))
        except MermaidRenderError as exc:
            conn.send(("render_error", str(exc)))
        except Exception as exc:  # noqa: BLE001
            conn.send(("render_error", f"{type(exc).__name__}: {exc}"))
        if failed:
            try:
                ctx.close()
                ctx = build_context()
            except Exception as exc:  # noqa: BLE001
                conn.send(("boot_error", f"{type(exc).__name__}: {exc}"))
                return


_MAIN_LOCK = threading.Lock()


@contextmanager
def _plain_main() -> Iterator[None]:
    """A bare ``__main__`` while a child is spawned. multiprocessing's spawn re-runs the parent's ``__main__`` file
    in the child, and Streamlit installs each page run's script as ``__main__`` (AppTest a generated one): a child
    started after a page had run executed that page (AppTest's died of it: every drawing failed from then on)."""
    with _MAIN_LOCK:
        main, bare = sys.modules.get("__main__"), types.ModuleType("__main__")
        sys.modules["__main__"] = bare
        try:
            yield
        finally:
            if main is not None and sys.modules.get("__main__") is bare:  # unless a page run installed its own
                sys.modules["__main__"] = main


def render_engine(timeout_ms: int = 60_000):
    """mermaidx's V8 render engine (a child process, killed and replaced when a render overruns ``timeout_ms``)
    running this module's contexts."""
    from mermaidx.engines import v8_engine

    class _Engine(v8_engine.Engine):
        def __init__(self, render_timeout_ms: int) -> None:
            super().__init__(render_timeout_ms=render_timeout_ms)
            self._one_at_a_time = threading.Lock()

        def _spawn(self) -> None:  # mermaidx's, with this module's child loop as the target
            parent_conn, child_conn = v8_engine._MP_CONTEXT.Pipe()
            process = v8_engine._MP_CONTEXT.Process(target=_child_main, args=(child_conn,), daemon=True)
            with _plain_main():
                process.start()
            child_conn.close()
            if not parent_conn.poll(timeout=v8_engine._BOOT_TIMEOUT_MS / 1000):
                process.kill()
                raise v8_engine.MermaidRenderError("the V8 engine did not start in time")
            status, payload = parent_conn.recv()
            if status != "ready":
                process.kill()
                raise v8_engine.MermaidRenderError(f"the V8 engine failed to start: {payload}")
            self._process, self._parent_conn = process, parent_conn

        def _replace_child(self, dead: object = None) -> None:
            """A new child for one that died (killed, out of memory; ``dead``: the one that died under a drawing,
            maybe not reaped yet): mermaidx would write to its closed pipe and fail every drawing from then on."""
            process = self._process
            if process is None:
                self.start()
                return
            if process is not dead and process.is_alive():
                return
            with self._lock:
                conn, self._process, self._parent_conn = self._parent_conn, None, None
            process.kill()
            process.join(2)
            if conn is not None:
                conn.close()
            self.start()

        def render_svg(self, code: str, theme: str, config: dict | None, css: str | None,
                       timeout_ms: int | None = None) -> str:
            # One drawing at a time: mermaidx sends and receives on one pipe without holding its lock, so two
            # threads (Export and the Editor's first drawing, flowcore/ui/first_drawing.py) took each other's
            # replies: one user's drawing was shown (and cached) as another's. ``timeout_ms``: this call's
            # deadline (a first drawing is not worth a minute of the engine), the engine's own otherwise.
            with self._one_at_a_time:
                default = self._render_timeout_ms
                self._render_timeout_ms = timeout_ms or default
                end = time.monotonic() + self._render_timeout_ms / 1000
                try:
                    self._replace_child()
                    child = self._process
                    try:
                        return super().render_svg(code, theme, config, css)
                    except (OSError, EOFError, v8_engine.MermaidRenderError) as exc:
                        # The child died under this drawing (killed between drawings and not reaped yet, out of
                        # memory): an engine failure, not Mermaid's verdict on the text, so a new child draws it
                        # once more. A deadline or a refusal is raised at once.
                        if not isinstance(exc, (OSError, EOFError)) \
                                and not isinstance(exc.__cause__, (OSError, EOFError)):
                            raise
                        died = exc
                    self._replace_child(dead=child)  # unless mermaidx replaced it already
                    # ... within what is left of this call's deadline: a text that kills its child seconds in was
                    # drawn twice as long as its callers wait (Export's minute, first_drawing's DRAW_TIMEOUT_S)
                    left_ms = int((end - time.monotonic()) * 1000)
                    if left_ms <= 0:
                        raise died
                    self._render_timeout_ms = left_ms
                    return super().render_svg(code, theme, config, css)
                finally:
                    self._render_timeout_ms = default

    return _Engine(render_timeout_ms=timeout_ms)
