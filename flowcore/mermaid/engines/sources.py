"""The JavaScript both engines (QuickJS in js.py, V8 in v8.py) evaluate around Mermaid's own bundle: the
config, the lexer and parser speed-ups, and the snippets that parse, read the graph and dump the grammar."""

# Mermaid refuses more than 500 edges and 50 000 characters by default; workflows may be bigger.
MERMAID_CONFIG = {"startOnLoad": False, "maxEdges": 100_000, "maxTextSize": 5_000_000}

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
