"""Speed-ups for drawing in V8 that change no byte of the SVG (tests draw a corpus with and without them).

Where a warm 10-node drawing spent its time (node --cpu-prof on the same scripts, before): 42 % in Mermaid's
``getConfig``, which deep-copies the whole config (~600 values, themeVariables and every diagram's section) with a
generic merge, ~140 times per drawing; 15 % in the DOM shim's label measurement, which for each of three font
properties walks up the label's ancestors and tries every stylesheet rule at each, re-tokenizing each selector; 14 %
in DOMPurify (Mermaid's sanitizeText), run over the shim's DOM for every label, the same labels many times.

- ``getConfig``: the copy of the current config is made once per config change by Mermaid's own merge; each call
  then copies that copy with a function compiled for its shape (same keys, same depth of copying, values below that
  depth shared, as the merge shares them). Mermaid's current config is a module variable that only
  ``updateCurrentConfig`` (a new object) and ``setConfig`` (in place, patched to say so) change.
- DOMPurify: ``sanitize`` of a label-sized string with a JSON-plain config is remembered; the memory is dropped when
  a hook or the persistent config changes (the only other inputs of its result). The whole SVG is not remembered.
- The shim: a compound selector is tokenized once, and a property's value is looked up in only the rules declaring
  it, last first (the shim's cascade is "last matching rule wins"). ``querySelector`` of a bare type selector
  compares tag names in its walk: the stylesheet lookup asks for ``style`` ~1,500 times a 10-node drawing, each
  through the selector machinery (6 % of a warm drawing, node --cpu-prof; 6-12 % less CPU per drawing after).
"""

from __future__ import annotations

# (what, Mermaid's text, replacement): each applied only where the text occurs exactly once (else left out, and
# ``missing_patches`` says so; a test checks none is missing for the bundled Mermaid).
MERMAID_PATCHES: tuple[tuple[str, str, str], ...] = (
    ("getConfig copies a cached copy",
     '_k=o(e=>(lZ(e),Yn(Vx,e),_t()),"setConfig"),_t=o(()=>Yn({},Vx),"getConfig")',
     '_k=o(e=>(lZ(e),Yn(Vx,e),__mfConfigCopy.changed(),_t()),"setConfig"),'
     '_t=o(()=>__mfConfigCopy(Vx,Yn),"getConfig")'),
    ("DOMPurify remembers labels", 'o(bZ,"createDOMPurify");Zs=bZ()',
     'o(bZ,"createDOMPurify");Zs=__mfMemoPurify(bZ())'),
)

# Evaluated before mermaid.js (its patched text calls these).
PRELUDE_JS = r"""
globalThis.__mfConfigCopy = (function () {
  "use strict";
  const isObj = (v) => v !== null && typeof v === "object";
  const compiled = new Map();  // function body -> function (one per config shape)
  let src = null, base = null, copy = null;
  // assignWithDepth({}, x) at its default depth 2 makes new objects at levels 0-2 (level 2 by Object.assign) and
  // shares what is below; arrays are copied (already free of duplicates in `base`, so a slice is the same copy).
  const literal = (v, depth, path) => {
    if (!isObj(v)) return path;
    if (Array.isArray(v)) return path + ".slice()";
    if (depth === 0) return "Object.assign({}, " + path + ")";
    const keys = Object.keys(v);
    if (keys.includes("__proto__")) throw new Error("__proto__ key");  // a literal would set the prototype
    return "{" + keys.map((k) => {
      const q = JSON.stringify(k);
      return q + ": " + literal(v[k], depth - 1, path + "[" + q + "]");
    }).join(",") + "}";
  };
  function get(current, assign) {
    if (current !== src) {
      src = current;
      base = assign({}, current);
      try {
        const body = "return " + literal(base, 2, "R") + ";";
        copy = compiled.get(body);
        if (copy === undefined) {
          copy = new Function("R", body);
          if (compiled.size < 64) compiled.set(body, copy);
        }
      } catch (e) {
        copy = null;
      }
    }
    return copy === null ? assign({}, base) : copy(base);
  }
  get.changed = () => { src = null; };
  return get;
})();

globalThis.__mfMemoPurify = function (purify) {
  "use strict";
  if (!purify || typeof purify.sanitize !== "function") return purify;
  const sanitize = purify.sanitize;
  let memo = new Map();
  const plain = (v, depth) => {  // JSON says exactly what it is (no undefined, function, RegExp, NaN, hole)
    if (v === null || typeof v === "string" || typeof v === "boolean") return true;
    if (typeof v === "number") return Number.isFinite(v);
    if (typeof v !== "object" || depth > 4) return false;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) if (!(i in v) || !plain(v[i], depth + 1)) return false;
      return true;
    }
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) return false;
    for (const k of Object.keys(v)) if (!plain(v[k], depth + 1)) return false;
    return true;
  };
  purify.sanitize = function (dirty, cfg) {
    if (typeof dirty !== "string" || dirty.length > 4096 || arguments.length > 2
        || !(cfg === undefined || plain(cfg, 0))) {
      return Reflect.apply(sanitize, this, arguments);
    }
    const key = (cfg === undefined ? "" : JSON.stringify(cfg)) + "\u0000" + dirty;
    let out = memo.get(key);
    if (out === undefined) {
      out = Reflect.apply(sanitize, this, arguments);
      if (typeof out !== "string") return out;
      if (memo.size >= 4096) memo = new Map();
      memo.set(key, out);
    }
    return out;
  };
  for (const name of ["setConfig", "clearConfig", "addHook", "removeHook", "removeHooks", "removeAllHooks"]) {
    const f = purify[name];
    if (typeof f === "function") {
      purify[name] = function () { memo = new Map(); return Reflect.apply(f, this, arguments); };
    }
  }
  return purify;
};
"""

# Evaluated after the DOM shim (replaces two of its functions by ones giving the same answers).
SHIM_JS = r"""
(function () {
  "use strict";
  const compounds = new Map();
  const classSets = new Map();
  const compile = (part) => {
    const notRe = /:not\(([^()]*)\)/g;
    const nots = [];
    let m;
    while ((m = notRe.exec(part))) nots.push(m[1]);
    const rest = part.replace(notRe, "");
    const re = /(#[\w-]+|\.[\w-]+|\[[^\]]+\]|:[\w-]+|[\w-]+|\*)/g;
    const tests = [];  // [kind, a, b]: 0 id, 1 class, 2 first-child, 3 last-child, 4 never, 5 has attr, 6 attr =, 7 tag
    while ((m = re.exec(rest))) {
      const t = m[0];
      if (t === "*") continue;
      if (t[0] === "#") tests.push([0, t.slice(1)]);
      else if (t[0] === ".") tests.push([1, t.slice(1)]);
      else if (t[0] === ":") tests.push([t === ":first-child" ? 2 : t === ":last-child" ? 3 : 4]);
      else if (t[0] === "[") {
        const am = /\[([\w-]+)(?:([~^$*|]?=)"?([^"\]]*)"?)?\]/.exec(t);
        if (am) tests.push(am[2] === undefined ? [5, am[1]] : [6, am[1], am[3]]);
      } else tests.push([7, t.toLowerCase()]);
    }
    return { nots, tests };
  };
  const hasClass = (el, name) => {  // ClassList.contains: the class attribute split on blanks
    const attr = el.getAttribute("class") || "";
    let set = classSets.get(attr);
    if (set === undefined) {
      set = new Set(attr.split(/\s+/).filter(Boolean));
      if (classSets.size > 20000) classSets.clear();
      classSets.set(attr, set);
    }
    return set.has(name);
  };
  const elementSiblings = (el) => (el.parentNode ? el.parentNode.childNodes.filter((c) => c.nodeType === 1) : []);
  globalThis.__matchesCompound = function (el, part) {
    let c = compounds.get(part);
    if (c === undefined) {
      c = compile(part);
      compounds.set(part, c);
    }
    for (const inner of c.nots) if (__matchesCompound(el, inner)) return false;
    for (const [kind, a, b] of c.tests) {
      switch (kind) {
        case 0: if (el.getAttribute("id") !== a) return false; break;
        case 1: if (!hasClass(el, a)) return false; break;
        case 2: if (elementSiblings(el)[0] !== el) return false; break;
        case 3: { const s = elementSiblings(el); if (s[s.length - 1] !== el) return false; break; }
        case 4: return false;
        case 5: if (el.getAttribute(a) === null) return false; break;
        case 6: if (el.getAttribute(a) !== b) return false; break;
        default: if ((el.tagName || "").toLowerCase() !== a) return false;
      }
    }
    return true;
  };
  // querySelector of a bare type selector ("style": the stylesheet lookup runs it ~1,500 times a drawing) compares
  // tag names in the same walk, without the selector machinery (what __matchesCompound's tag test does)
  const TYPE_ONLY = /^[A-Za-z][\w-]*$/;
  const querySelector = globalThis.__querySelector;
  globalThis.__querySelector = function (root, sel) {
    if (typeof sel !== "string" || !TYPE_ONLY.test(sel)) return querySelector(root, sel);
    const want = sel.toLowerCase();
    const stack = [];
    for (let i = root.childNodes.length - 1; i >= 0; i--) stack.push(root.childNodes[i]);
    while (stack.length) {
      const el = stack.pop();
      if (el.nodeType !== 1) continue;
      if ((el.tagName || "").toLowerCase() === want) return el;
      const kids = el.childNodes;
      for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
    }
    return null;
  };
  const declaring = new WeakMap();  // the parsed stylesheet -> prop -> the rules that declare prop
  globalThis.__resolveCssProp = function (el, prop) {
    const rules = __getCssRules();
    let byProp = declaring.get(rules);
    if (byProp === undefined) {
      byProp = new Map();
      declaring.set(rules, byProp);
    }
    let list = byProp.get(prop);
    if (list === undefined) {
      list = rules.filter((rule) => prop in rule.decls);
      byProp.set(prop, list);
    }
    for (let i = list.length - 1; i >= 0; i--) {
      if (__matches(el, list[i].selectors)) return list[i].decls[prop];
    }
    return null;
  };
})();
"""


def patch_mermaid(source: str) -> tuple[str, list[str]]:
    """mermaid.js with MERMAID_PATCHES applied, and the names of those whose text was not found exactly once."""
    missing = []
    for what, old, new in MERMAID_PATCHES:
        if source.count(old) == 1:
            source = source.replace(old, new)
        else:
            missing.append(what)
    return source, missing
