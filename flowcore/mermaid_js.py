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

from .mermaid_text import MermaidError, humanize
from .mermaid_text import to_error as _to_error

__all__ = ["MAX_CHECK_CHARS", "MermaidError", "MermaidRenderError", "backend", "flowchart_grammar_tables",
           "humanize", "mermaid_graph", "parse_check", "render_png", "render_svg"]

# Mermaid refuses more than 500 edges and 50 000 characters by default; workflows may be bigger.
MERMAID_CONFIG = {"startOnLoad": False, "maxEdges": 100_000, "maxTextSize": 5_000_000}
# Above this the check would hold the engine for tens of seconds; refuse with a clear message instead.
MAX_CHECK_CHARS = 200_000
_CACHE_SIZE = 256

_STICKY_LEXER_JS = r"""
(function () {
  "use strict";
  const match = String.prototype.match;
  const sticky = new WeakMap();  // anchored regex -> its sticky twin
  String.prototype.match = function (re) {
    if (re instanceof RegExp && !re.global && !re.sticky && !re.multiline && re.source.charCodeAt(0) === 94) {
      let s = sticky.get(re);
      if (s === undefined) { s = new RegExp(re.source, re.flags + "y"); sticky.set(re, s); }
      s.lastIndex = 0;
      return s.exec(this);
    }
    return match.call(this, re);
  };
})();
"""

# Speed-ups for the parse-only context (see _ParseEngine); none of them can change what the grammar accepts.
_FAST_PARSE_JS = r"""
(function () {
  "use strict";
  // (1) mermaidx's DOM shim wraps RegExp.prototype.exec to fill the legacy RegExp.$1..$9, $&, $`, $' after
  // every match (only roughjs's path parser reads them, when drawing): 13 property writes and two copies
  // of the rest of the input per match, which is most of the lexing time. Here the same statics are
  // computed when read, from the last match. The native exec is recovered from inside the shim's wrapper.
  const shimExec = RegExp.prototype.exec, fcall = Function.prototype.call;
  let nativeExec = null;
  Function.prototype.call = function (thisArg, ...args) {
    if (nativeExec === null) nativeExec = this;
    return Reflect.apply(this, thisArg, args);
  };
  try { Reflect.apply(shimExec, /a/, ["a"]); } finally { Function.prototype.call = fcall; }
  if (typeof nativeExec !== "function" || nativeExec === shimExec) return "no native exec";
  let last = null, lastInput = "";
  RegExp.prototype.exec = function exec(str) {
    const r = Reflect.apply(nativeExec, this, [str]);
    if (r) { last = r; lastInput = str; }
    return r;
  };
  const statics = {
    "$&": () => last[0], "$_": () => lastInput, "$`": () => String(lastInput).slice(0, last.index),
    "$'": () => String(lastInput).slice(last.index + last[0].length),
  };
  for (let i = 1; i <= 9; i++) statics["$" + i] = () => (last[i] !== undefined ? last[i] : "");
  for (const [key, get] of Object.entries(statics)) {
    Object.defineProperty(RegExp, key, { configurable: true, enumerable: false,
      get: () => (last ? get() : undefined), set: () => {} });
  }
  globalThis.__mfNativeExec = nativeExec;
  return "ok";
})();
"""

# (2) needs `__mfNativeExec`, the engine's own RegExp.prototype.exec (found by (1) under QuickJS; V8's is unwrapped).
_FAST_LEXER_JS = r"""
(function () {
  "use strict";
  const nativeExec = globalThis.__mfNativeExec;
  if (typeof nativeExec !== "function") return "no native exec";
  // (2) A jison lexer tries the rules of its current condition one after another (one exec each, from JS)
  // until one matches. All the rules of a condition joined as `(r1)|(r2)|...` find, in one native exec,
  // the same first rule that matches (alternatives are tried in order); that rule's own regex is then run
  // once more so the match array handed to the lexer is exactly the one it would have got.
  globalThis.__mfFastLexer = function (lexer) {
    if (!lexer || lexer.__mfFast || typeof lexer.next !== "function" || !Array.isArray(lexer.rules)) return false;
    const ok = lexer.rules.every((re) => re instanceof RegExp && re.flags === "" && re.source[0] === "^"
      && !/\\[1-9]|\\k</.test(re.source));
    if (!ok) return false;
    const sticky = lexer.rules.map((re) => new RegExp(re.source, "y"));
    const groupsOf = (src) => Reflect.apply(nativeExec, new RegExp(src + "|"), [""]).length - 1;
    const combos = new WeakMap();  // a condition's rule list -> {re, groups}
    const combo = (rules) => {
      let c = combos.get(rules);
      if (c === undefined) {
        let n = 1; const groups = [], parts = [];
        for (const k of rules) { groups.push(n); parts.push("(" + lexer.rules[k].source + ")"); n += 1 + groupsOf(lexer.rules[k].source); }
        c = { re: new RegExp(parts.join("|"), "y"), groups };
        combos.set(rules, c);
      }
      return c;
    };
    const next = lexer.next;
    lexer.next = function () {
      if (this.done || !this._input || (this.options && (this.options.backtrack_lexer || this.options.flex))) {
        return next.call(this);
      }
      const rules = this._currentRules();
      const c = combo(rules);
      c.re.lastIndex = 0;
      const m = Reflect.apply(nativeExec, c.re, [this._input]);
      if (!m) return next.call(this);  // no rule matches: the original reports the lexical error
      let k = 0;
      while (m[c.groups[k]] === undefined) k++;
      if (!this._more) { this.yytext = ""; this.match = ""; }
      const re = sticky[rules[k]];
      re.lastIndex = 0;
      const token = this.test_match(Reflect.apply(nativeExec, re, [this._input]), rules[k]);
      return token !== false ? token : false;
    };
    lexer.__mfFast = true;
    return true;
  };
  return "ok";
})();
"""

# Both engines' DOM shim (mermaidx's dom_shim.js) is quadratic in the drawing's size where mermaid measures labels:
# `querySelector` walks the whole document even after a match, and each measurement looks up the <style> element
# that way and parses the stylesheet's selector lists again for every rule. Same answers (document order, same
# parse): the first match ends the walk, and a selector list is parsed once.
SHIM_SPEEDUPS_JS = r"""
(function () {
  "use strict";
  globalThis.__querySelector = function (root, sel) {
    const stack = [];
    for (let i = root.childNodes.length - 1; i >= 0; i--) stack.push(root.childNodes[i]);
    while (stack.length) {
      const el = stack.pop();
      if (el.nodeType !== 1) continue;
      if (__matches(el, sel)) return el;
      const kids = el.childNodes;
      for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
    }
    return null;
  };
  const chains = new Map();
  globalThis.__matches = function (el, sel) {
    let list = chains.get(sel);
    if (list === undefined) {
      list = __splitTopLevel(sel.trim(), (c) => c === ",").map(([part]) => __parseComplex(part.trim()));
      chains.set(sel, list);
    }
    for (const chain of list) {
      if (chain.length > 0 && __matchesChain(el, chain, chain.length - 1)) return true;
    }
    return false;
  };
})();
"""

# (3) FlowDB passes every label through sanitizeText (DOMPurify over the shim's DOM, after a deep copy of the
# whole config): pure formatting of a value the grammar has already accepted, and the bulk of the db's time.
_FAST_FLOWCHART_JS = """
globalThis.__mfOut = null;
mermaid.mermaidAPI.getDiagramFromText("flowchart TD\\n  A --> B\\n").then((d) => {
  globalThis.__mfFlowParser = d.parser.parser;
  const fast = __mfFastLexer(d.parser.parser && d.parser.parser.lexer);
  Object.getPrototypeOf(d.db).sanitizeText = function (text) { return text; };
  globalThis.__mfOut = JSON.stringify({ok: fast});
}, (e) => { globalThis.__mfOut = JSON.stringify({ok: false, message: String(e)}); });
"""

_PLAIN_FLOWCHART_JS = """
globalThis.__mfOut = null;
mermaid.mermaidAPI.getDiagramFromText("flowchart TD\\n  A --> B\\n").then((d) => {
  globalThis.__mfFlowParser = d.parser.parser; globalThis.__mfOut = "{}";
}, (e) => { globalThis.__mfOut = JSON.stringify({ok: false, message: String(e)}); });
"""

_PARSE_JS = """
globalThis.__mfOut = null;
mermaid.parse(%s).then(
  (r) => { globalThis.__mfOut = JSON.stringify({ok: true, type: r && r.diagramType}); },
  (e) => { globalThis.__mfOut = JSON.stringify({
    ok: false, name: (e && e.name) || "Error", message: String((e && e.message) || e),
    hash: (e && e.hash) || null,
  }); });
"""


# The graph Mermaid built (its FlowDB), for differential tests: read from the flowchart parser's `yy` right
# after `mermaid.parse` (every flowchart type shares that parser object).
_GRAPH_JS = """
globalThis.__mfOut = null;
mermaid.parse(%s).then((r) => {
  const db = __mfFlowParser.yy;
  const arr = (x) => (Array.isArray(x) ? x.map(String) : []);
  globalThis.__mfOut = JSON.stringify({ok: true, type: r && r.diagramType, direction: db.direction,
    vertices: [...db.vertices.values()].map((v) => ({id: v.id, type: v.type === undefined ? null : v.type,
      text: v.text === undefined ? null : String(v.text), labelType: v.labelType, classes: arr(v.classes),
      styles: arr(v.styles), props: v.props || {}, icon: v.icon || null, img: v.img || null,
      form: v.form || null, pos: v.pos || null, constraint: v.constraint || null,
      w: v.assetWidth || null, h: v.assetHeight || null})),
    edges: db.edges.map((e) => ({start: e.start, end: e.end, type: e.type === undefined ? null : e.type,
      stroke: e.stroke === undefined ? null : e.stroke, length: e.length === undefined ? null : e.length,
      text: e.text, labelType: e.labelType, id: e.isUserDefinedId ? e.id : null, classes: arr(e.classes),
      style: e.style ? arr(e.style) : null, interpolate: e.interpolate === undefined ? null : e.interpolate,
      animate: e.animate === undefined ? null : e.animate, animation: e.animation || null})),
    subgraphs: db.subGraphs.map((s) => ({id: s.id, title: s.title, nodes: arr(s.nodes),
      dir: s.dir === undefined ? null : s.dir, labelType: s.labelType, classes: arr(s.classes)})),
    classes: Object.fromEntries([...db.classes.entries()].map(([k, c]) => [k, arr(c.styles)])),
    accTitle: db.getAccTitle(), accDescr: db.getAccDescription(),
    defaultStyle: db.edges.defaultStyle ? arr(db.edges.defaultStyle) : null,
    defaultInterpolate: db.edges.defaultInterpolate === undefined ? null : db.edges.defaultInterpolate});
}, (e) => { globalThis.__mfOut = JSON.stringify({
    ok: false, name: (e && e.name) || "Error", message: String((e && e.message) || e),
    hash: (e && e.hash) || null}); });
"""

_GRAMMAR_JS = """JSON.stringify((function () {
  const p = __mfFlowParser, L = p.lexer;
  return {symbols: p.symbols_, terminals: p.terminals_, productions: p.productions_, table: p.table,
    defaultActions: p.defaultActions, rules: L.rules.map((r) => r.source),
    conditions: Object.fromEntries(Object.entries(L.conditions).map(([k, c]) => [k, c.rules]))};
})())"""


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
    from . import mermaid_v8

    return "v8" if mermaid_v8.available() else "quickjs"


def backend(kind: str = "parse") -> str:
    """The engine that runs the hard check (``kind="parse"``) or the drawing (``"render"``): "v8" or "quickjs",
    with the reason when V8 was wanted but could not start. Starts the engine if needed."""
    _engine(kind)
    name = _backends.get(kind, "quickjs")
    why = _fallbacks.get(kind)
    return f"{name} (V8 did not start: {why})" if why and name != "v8" else name


def _start_engine(kind: str):
    if wanted_backend() == "v8":
        try:
            from . import mermaid_v8

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
    try:
        out = _engine("parse").parse(text)  # type: ignore[attr-defined]
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
    shapes); ``mermaid_grammar.runtime_tables`` turns it into what mermaid_flow_tables.json stores."""
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
    try:
        svg = _engine("render").render_svg(text, "default", dict(MERMAID_CONFIG), None)
    except Exception as exc:  # mermaidx raises its own MermaidRenderError or a JS exception
        raise MermaidRenderError(f"Mermaid could not draw the diagram: {exc}") from exc
    _cache_put(_svg_cache, text, svg, size=32)
    return svg


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
    """Write the bundled Mermaid's flowchart grammar to ``path`` (mermaid_flow_tables.json), in the form the
    Python reader loads."""
    from pathlib import Path

    import mermaidx

    from .mermaid_grammar import runtime_tables

    tables = runtime_tables(flowchart_grammar_tables())
    tables = {"source": f"Mermaid's flowchart jison parser as bundled in mermaidx {mermaidx.__version__}", **tables}
    Path(path).write_text(json.dumps(tables, separators=(",", ":")), encoding="utf-8")


if __name__ == "__main__":  # python -m flowcore.mermaid_js --dump-grammar [PATH]
    import sys

    if len(sys.argv) >= 2 and sys.argv[1] == "--dump-grammar":
        from pathlib import Path as _P

        _dump_grammar(sys.argv[2] if len(sys.argv) > 2 else str(_P(__file__).with_name("mermaid_flow_tables.json")))
    else:
        print("usage: python -m flowcore.mermaid_js --dump-grammar [PATH]", file=sys.stderr)
