"""The hard check: the real Mermaid 11 library (mermaid.js inside QuickJS, via the `mermaidx` wheel).

No Node, no browser. Two engines, each a QuickJS context pinned to its own worker thread, started lazily:
one warm context that only parses (`parse_check`, ~25 ms for a typical workflow) and mermaidx's own render
engine (`render_svg`, ~1 s, a fresh context per diagram as mermaid-cli does).

Two things are fixed on top of mermaidx:
- jison lexers call `input.match(/^.../)` on the rest of the text for every token; QuickJS's regex engine
  tries every start position of an anchored, non-sticky regex, which makes lexing quadratic (600 edges:
  ~25 s). The same regexes with the sticky flag give identical matches in linear time (600 edges: ~1.5 s).
- Mermaid drops front matter, `%%{...}%%` directives, `%%` comment lines and leading blank lines before it
  parses, so its line numbers are not the user's. `_Preprocessed` replays those steps keeping each
  character's original offset, and errors are mapped back to 1-based lines/columns of the text given.
The parse-only context is further sped up (lean RegExp statics, one combined regex per lexer state, no label
sanitizing: _FAST_PARSE_JS); tests compare it with a plain context on valid and broken texts.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from mermaidx.engines.quickjs_engine import Engine as _MxEngine

__all__ = ["MAX_CHECK_CHARS", "MermaidError", "MermaidRenderError", "humanize", "parse_check", "render_png",
           "render_svg"]

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

# (3) FlowDB passes every label through sanitizeText (DOMPurify over the shim's DOM, after a deep copy of the
# whole config): pure formatting of a value the grammar has already accepted, and the bulk of the db's time.
_FAST_FLOWCHART_JS = """
globalThis.__mfOut = null;
mermaid.mermaidAPI.getDiagramFromText("flowchart TD\\n  A --> B\\n").then((d) => {
  const fast = __mfFastLexer(d.parser.parser && d.parser.parser.lexer);
  Object.getPrototypeOf(d.db).sanitizeText = function (text) { return text; };
  globalThis.__mfOut = JSON.stringify({ok: fast});
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


@dataclass
class MermaidError:
    """Why Mermaid rejected a text. `line`/`column` are 1-based in the text that was checked."""

    message: str  # for people: "line 3: expected ']' ... found the end of the text"
    line: int | None
    column: int | None
    raw: str  # Mermaid's own message, unchanged


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
        if self.fast and self._ctx.eval(_FAST_PARSE_JS) == "ok":
            self._ctx.eval(_FAST_FLOWCHART_JS)
            out = self._settle()
            self.fast_ready = bool(out and json.loads(out).get("ok"))

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


_lock = threading.Lock()
_engines: dict[str, _Engine] = {}
_parse_cache: OrderedDict[str, MermaidError | None] = OrderedDict()
_svg_cache: OrderedDict[str, str] = OrderedDict()


def _engine(kind: str) -> _Engine:
    with _lock:
        eng = _engines.get(kind)
        if eng is None:
            eng = _ParseEngine() if kind == "parse" else _Engine()
            eng.start()
            _engines[kind] = eng
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


def _to_error(text: str, out: dict) -> MermaidError:
    raw = out.get("message") or "unknown Mermaid error"
    hash_ = out.get("hash") or {}
    line = column = None
    if out.get("name") == "UnknownDiagramError":
        line = _first_content_line(text)
    else:
        loc = hash_.get("loc") or {}
        pre = _Preprocessed(text)
        if loc.get("first_line"):
            line, column = pre.original_position(int(loc["first_line"]), int(loc.get("first_column") or 0),
                                                 hash_.get("text") or "")
        else:
            m = re.search(r"on line (\d+)", raw)
            if m:
                line, column = pre.original_position(int(m.group(1)), 0, "")
                column = None
        if _is_eof(hash_.get("token")) and "end" in _expected_names(hash_):
            line, column = _unclosed_subgraph_line(text) or line, None
    message = humanize(raw, line=line, found=hash_.get("text"),
                       unknown_diagram=out.get("name") == "UnknownDiagramError")
    return MermaidError(message, line, column, raw)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class _Preprocessed:
    """Mermaid's preprocessDiagram (cleanupText, front matter, directives, comments, trimStart), replayed
    with the original offset of every surviving character."""

    _FRONT_MATTER = re.compile(r"^([^\S\n\r]*)-{3}\s*[\n\r](.*?)[\n\r]\1-{3}\s*[\n\r]+", re.S)
    _DIRECTIVE = re.compile(r"%{2}{\s*(?:(\w+)\s*:|(\w+))\s*(?:(\w+)|((?:(?!}%{2}).|\r?\n)*))?\s*(?:}%{2})?",
                            re.I)
    _COMMENT = re.compile(r"^\s*%%(?!{)[^\n]+\n?", re.M)

    def __init__(self, text: str):
        self.original = text
        chars: list[str] = []
        offs: list[int] = []
        i = 0
        while i < len(text):  # \r\n and lone \r become \n, as Mermaid's cleanupText does
            ch = text[i]
            chars.append("\n" if ch == "\r" else ch)
            offs.append(i)
            i += 2 if text.startswith("\r\n", i) else 1
        s = "".join(chars)
        s, offs = self._drop(self._FRONT_MATTER, s, offs, count=1)
        s, offs = self._drop(self._DIRECTIVE, s, offs)
        s, offs = self._drop(self._COMMENT, s, offs)
        lead = len(s) - len(s.lstrip())
        while lead < len(s) and s[lead] == "\ufeff":  # JS trimStart also drops a BOM
            lead += 1
            lead += len(s[lead:]) - len(s[lead:].lstrip())
        self.text, self.offsets = s[lead:] + "\n", offs[lead:] + [len(text)]

    @staticmethod
    def _drop(pattern: re.Pattern, s: str, offs: list[int], count: int = 0) -> tuple[str, list[int]]:
        keep_s, keep_o, pos = [], [], 0
        for n, m in enumerate(pattern.finditer(s)):
            if count and n >= count:
                break
            keep_s.append(s[pos:m.start()])
            keep_o.extend(offs[pos:m.start()])
            pos = m.end()
        keep_s.append(s[pos:])
        keep_o.extend(offs[pos:])
        return "".join(keep_s), keep_o

    def original_position(self, line: int, column0: int, token_text: str) -> tuple[int, int]:
        """(line, column), 1-based in the original text, of `line`/`column0` in the preprocessed text."""
        lines = self.text.split("\n")
        last = max((k + 1 for k, t in enumerate(lines) if t.strip()), default=1)
        if line > last:  # at the end of the text: point at the end of the last line that has something on it
            line, column0 = last, len(lines[last - 1].rstrip())
        start = sum(len(t) + 1 for t in lines[: line - 1])
        row = lines[line - 1]
        token = token_text.strip()
        if token:  # jison's column is often the blank before the token; prefer where the token starts
            found = row.find(token, max(0, column0 - 1))
            if found >= 0:
                column0 = found
        column0 = min(max(column0, 0), len(row))
        offset = self.offsets[min(start + column0, len(self.offsets) - 1)]
        return _line_col(self.original, offset)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line, line_start = 1, 0
    for m in _LINE_BREAK.finditer(text, 0, offset):
        line, line_start = line + 1, m.end()
    return line, offset - line_start + 1


def _first_content_line(text: str) -> int:
    for n, row in enumerate(_LINE_BREAK.split(text), 1):
        stripped = row.strip()
        if stripped and not stripped.startswith("%%"):
            return n
    return 1


def _unclosed_subgraph_line(text: str) -> int | None:
    stack: list[int] = []
    for n, row in enumerate(_LINE_BREAK.split(text), 1):
        word = row.strip().split(" ", 1)[0].rstrip(";").lower()
        if word == "subgraph":
            stack.append(n)
        elif word == "end" and stack:
            stack.pop()
    return stack[-1] if stack else None


def _is_eof(token) -> bool:
    return token in (1, "1", "EOF", "$end")


def _expected_names(hash_: dict) -> list[str]:
    return [str(t).strip("'") for t in hash_.get("expected") or []]


# ------------------------------------------------------------------------------------------------ wording

# What jison's token names stand for, in the flowchart grammar (and a few shared ones).
_TOKEN_WORDS = {
    "1": "the end of the text", "EOF": "the end of the text", "$end": "the end of the text",
    "SEMI": "';'", "NEWLINE": "a line break", "SPACE": "a space", "GRAPH": "'flowchart'",
    "NODIR": "a direction (TD, LR, ...)", "DIR": "a direction (TD, LR, ...)", "subgraph": "'subgraph'",
    "end": "'end'", "SQS": "'['", "SQE": "']'", "PS": "'('", "PE": "')'", "DIAMOND_START": "'{'",
    "DIAMOND_STOP": "'}'", "DOUBLECIRCLESTART": "'((('", "DOUBLECIRCLEEND": "')))'",
    "(-": "'(-'", "-)": "'-)'",
    "STADIUMSTART": "'(['", "STADIUMEND": "'])'", "SUBROUTINESTART": "'[['", "SUBROUTINEEND": "']]'",
    "CYLINDERSTART": "'[('", "CYLINDEREND": "')]'", "TRAPSTART": "'[/'", "TRAPEND": "'\\]'",
    "INVTRAPSTART": "'[\\'", "INVTRAPEND": "'/]'", "VERTEX_WITH_PROPS_START": "'[|'", "TAGSTART": "'<'",
    "TAGEND": "'>'", "PIPE": "'|'", "AMP": "'&'", "COLON": "':'", "COMMA": "','", "STYLE_SEPARATOR": "':::'",
    "SHAPE_DATA": "shape data '@{ ... }'", "START_LINK": "an arrow with a label ('-- text -->')",
    "LINK": "an arrow such as '-->'", "LINK_ID": "an edge id ('e1@')", "EDGE_TEXT": "the arrow's label",
    "STR": "a quoted string", "MD_STR": "a markdown string", "TEXT": "text", "UNICODE_TEXT": "text",
    "TESTSTR": "text", "NODE_STRING": "a node id or word", "NUM": "a number", "UNIT": "a unit",
    "BRKT": "'#'", "PCT": "'%'", "MINUS": "'-'", "MULT": "'*'", "DOWN": "'v'", "UP": "'^'",
    "STYLE": "'style'", "LINKSTYLE": "'linkStyle'", "CLASSDEF": "'classDef'", "CLASS": "'class'",
    "CLICK": "'click'", "DEFAULT": "'default'", "INTERPOLATE": "'interpolate'", "HREF": "'href'",
    "CALLBACKNAME": "a callback name", "CALLBACKARGS": "callback arguments", "LINK_TARGET": "a link target",
    "acc_title": "'accTitle'", "acc_descr": "'accDescr'", "acc_title_value": "a title",
    "acc_descr_value": "a description", "acc_descr_multiline_value": "a description", "error": "an error",
}
_CLOSERS = ("SQE", "PE", "DIAMOND_STOP", "STADIUMEND", "SUBROUTINEEND", "CYLINDEREND", "DOUBLECIRCLEEND",
            "TRAPEND", "INVTRAPEND", "-)")
_EXPECTING = re.compile(r"Expecting (.+), got '([^']*)'", re.S)
_UNEXPECTED = re.compile(r"Unexpected (end of input|'([^']*)')")
_LINE_IN_RAW = re.compile(r"(?:Parse|Lexical) error on line (\d+)")


def _word(token: str) -> str:
    if token in _TOKEN_WORDS:
        return _TOKEN_WORDS[token]
    base = token.split("[", 1)[0]
    if base.startswith("direction_"):
        return "'direction'"
    if base.startswith(("idString", "NODE_STRING")):
        return "a node id or word"
    if base.startswith("STR"):
        return "a quoted string"
    return f"'{token}'" if not token.isupper() else token.lower().replace("_", " ")


def _join_or(words: list[str]) -> str:
    uniq = list(dict.fromkeys(words))
    if len(uniq) > 6:
        uniq = uniq[:5] + ["something else"]
    return uniq[0] if len(uniq) == 1 else ", ".join(uniq[:-1]) + " or " + uniq[-1]


def humanize(raw_message: str, line: int | None = None, *, found: str | None = None,
             unknown_diagram: bool = False) -> str:
    """Mermaid's parser message in words a person understands, prefixed with `line N:`.

    `line` overrides the line number in `raw_message` (Mermaid counts after dropping comments and front
    matter; `parse_check` passes the line of the original text); `found` is the offending text if known."""
    raw = (raw_message or "").strip()
    if line is None:
        m = _LINE_IN_RAW.search(raw)
        line = int(m.group(1)) if m else None
    desc = _describe(raw, unknown_diagram, (found or "").strip())
    return f"line {line}: {desc}" if line is not None else desc[:1].upper() + desc[1:]


def _describe(raw: str, unknown_diagram: bool, found_text: str) -> str:
    if unknown_diagram or raw.startswith("No diagram type detected"):
        if not raw.split("for text:", 1)[-1].strip():
            return "the diagram is empty; it must start with a header such as 'flowchart TD'"
        return ("the text does not start with a diagram type Mermaid knows; "
                "write a header such as 'flowchart TD'")
    if raw.startswith("Lexical error"):
        return "Mermaid cannot read the characters here (check quotes and brackets)"
    m = _EXPECTING.search(raw)
    if m:
        expected = [t.strip().strip("'") for t in m.group(1).split(",")]
        got = m.group(2)
    else:
        u = _UNEXPECTED.search(raw)
        if not u:  # not a grammar error (a limit, a semantic error): Mermaid's first line, as is
            first = raw.splitlines()[0] if raw else "unknown error"
            return re.sub(r"^(Error|UnknownDiagramError):\s*", "", first)
        expected, got = [], "EOF" if u.group(1) == "end of input" else (u.group(2) or "")
    found = f"'{found_text}'" if found_text and not _is_eof(got) and len(found_text) < 40 else _word(got)
    closers = [_TOKEN_WORDS[t] for t in _CLOSERS if t in expected]
    if closers:
        brackets = _join_or(closers[:2]) + (" (or another closing bracket)" if len(closers) > 2 else "")
        if _is_eof(got):
            return f"a node label is not closed: expected {brackets} before the end of the text"
        return f"expected {brackets} to close the node label, found {found}"
    if _is_eof(got) and "end" in expected:
        return "a 'subgraph' is not closed: add a line 'end' after its nodes"
    if got == "end":
        return "found 'end' but no 'subgraph' is open here"
    if got in ("SQE", "PE", "DIAMOND_STOP") or got.endswith(("END", "STOP")):
        return f"found {found} that closes nothing; a bracket is unbalanced or a label needs quotes"
    if {"LINK", "START_LINK"} & set(expected) and got not in ("LINK", "START_LINK"):
        return (f"expected an arrow such as '-->' or the end of the statement, "
                f"found {found} (not a valid arrow?)")
    if not expected:
        return f"unexpected {found}"
    return f"expected {_join_or([_word(t) for t in expected])}, found {found}"


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
    from mermaidx.raster import render_png as _raster

    return _raster(render_svg(text), scale=scale, background=background)
