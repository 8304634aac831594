"""The flowchart grammar's hot loop: Mermaid 11's jison lexer and LALR driver over flat tables.

``grammar._Run.run`` is the reference driver (the jison algorithm written plainly, kept for the tests to compare
against); this module runs the same tables and the same semantic actions faster, for every dialect alike:

- The parse table is one flat array indexed by ``state * symbols + symbol`` (shift, reduce, accept and goto as small
  integers), the state stack is an array of C ints, and the productions whose action only passes a value on (most
  of them) never leave the loop.
- The lexer is one DFA over all of jison's rules (``lexdfa``: the rules in order, first match wins, each with the
  match a backtracking matcher finds), one table step per character, built as it is first needed. The rules that
  skip ahead to a literal (Mermaid's ``[^\\n]*direction\\s+TD`` and ``[^\\s"]+@``) are left out of the start state
  while that literal does not come before the end of their skip: they cannot match there, and tried at every
  token each would cost the rest of the line (quadratic on one long line).

``setup.py`` compiles this file with Cython when it can (``make`` runs it; ``lalr.pxd`` gives the loop's types);
without the compiled module Python runs this same file, and the tests run both.
"""

from __future__ import annotations

import codecs
import re
import sys
from array import array

from flowcore.mermaid import lexdfa
from flowcore.mermaid.errors import MermaidParseError, _DbError
from flowcore.mermaid.text import JS_SPACE, LazyRegex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from flowcore.mermaid.grammar import _Grammar


# A rule that starts by skipping every character but some (a negated class) to a literal: (class body, literal).
_SCAN_AHEAD = re.compile(r"\(\?:\[\^([^\]]*)\][*+]([A-Za-z@]+)")


# rule -> token, for rules whose action only returns a token
_SIMPLE_TOKENS = {61: 78, 62: 105, 63: 111, 64: 46, 65: 60, 66: 44, 67: 8, 68: 106, 69: 115, 72: 119, 75: 119,
                  78: 119, 79: 77, 81: "TEXT", 87: 58, 95: 117, 98: 118, 99: 67, 100: 90, 101: "SEP", 102: 89,
                  103: 115, 104: 111, 105: 44, 106: 109, 107: 114, 108: 116, 117: "TEXT", 118: "QUOTE",
                  119: 9, 120: 10, 121: 11}
# rule -> (state pushed, token)
_PUSH_TOKENS = {71: ("edgeText", 75), 74: ("thickEdgeText", 75), 77: ("dottedEdgeText", 75),
                82: ("ellipseText", 52), 84: ("text", 54), 86: ("text", 56), 88: ("text", 67), 90: ("text", 63),
                92: ("text", 48), 96: ("trapText", 68), 97: ("trapText", 70), 110: ("text", 62),
                112: ("text", 50), 114: ("text", 29), 116: ("text", 65)}
# rule -> token returned after popping the state
_POP_TOKENS = {70: 77, 73: 77, 76: 77, 80: 53, 83: 55, 85: 57, 89: 64, 91: 49, 93: 69, 94: 71, 109: 62,
               111: 51, 113: 31, 115: 66}



# ------------------------------------------------------------------------------------------ actions

def destruct_start(s: str) -> tuple[str, str]:
    r = s.strip()
    t = "arrow_open"
    if r[:1] == "<":
        t, r = "arrow_point", r[1:]
    elif r[:1] == "x":
        t, r = "arrow_cross", r[1:]
    elif r[:1] == "o":
        t, r = "arrow_circle", r[1:]
    stroke = "normal"
    if "=" in r:
        stroke = "thick"
    if "." in r:
        stroke = "dotted"
    return t, stroke


def destruct_end(s: str) -> tuple[str, str, int]:
    r = s.strip()
    n = r[:-1]
    t = "arrow_open"
    last = r[-1:]
    if last == "x":
        t = "arrow_cross"
        if r.startswith("x"):
            t, n = "double_" + t, n[1:]
    elif last == ">":
        t = "arrow_point"
        if r.startswith("<"):
            t, n = "double_" + t, n[1:]
    elif last == "o":
        t = "arrow_circle"
        if r.startswith("o"):
            t, n = "double_" + t, n[1:]
    stroke, length = "normal", len(n) - 1
    if n.startswith("="):
        stroke = "thick"
    if n.startswith("~"):
        stroke = "invisible"
    dots = n.count(".")
    if dots:
        stroke, length = "dotted", dots
    return t, stroke, length


def destruct_link(end: str, start: str | None = None) -> dict:
    """FlowDB's destructLink: a new dict each call (the caller may add to it), worked out once per spelling."""
    key = (end, start)
    d = _LINKS.get(key)
    if d is None:
        d = _destruct_link(end, start)
        if len(_LINKS) < 4096:
            _LINKS[key] = d
    return d.copy()


_LINKS: dict[tuple, dict] = {}  # (end, start) -> destructLink's answer


def _destruct_link(end: str, start: str | None) -> dict:
    t, stroke, length = destruct_end(end)
    if start:
        st, sst = destruct_start(start)
        if sst != stroke:
            return {"type": "INVALID", "stroke": "INVALID"}
        if st == "arrow_open":
            st = t
        else:
            if st != t:
                return {"type": "INVALID", "stroke": "INVALID"}
            st = "double_" + st
        if st == "double_arrow":
            st = "double_arrow_point"
        return {"type": st, "stroke": sst, "length": length}
    return {"type": t, "stroke": stroke, "length": length}


def reduce_action(r, db, prod: int, v: list, p, top: int, n: int) -> Any:  # noqa: C901, PLR0911, PLR0912, PLR0915
    """The semantic action of production ``prod`` (flow.jison's, on the FlowDB ``db``); ``v`` and ``p`` are the
    parser's value and position stacks (their top at index ``top``; entries above it are stale), whose top ``n``
    entries are the production's right-hand side: ``v[top - k]`` and ``p[top - k]`` are those of the entry k below
    the top. ``db``'s methods are C methods in the compiled build, which takes no keywords: add_vertex(id, text,
    type, styles, classes, dir, props, shape data) is called positionally."""
    if prod == 3:  # document: document line (the commonest)
        doc, line = v[top - 1], v[top]
        if not isinstance(line, list) or line:
            doc.append(line)
        return doc
    first = v[top - n + 1] if n else None
    if prod in (142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 181, 183, 40, 41, 42, 4, 54):
        return first
    if prod in (182, 184, 133, 43):
        return v[top - 1] + v[top]
    if prod == 2:
        return []
    if prod == 72:
        db.cur_pos = p[top]
        db.add_vertex(v[top])
        return v[top]
    if 56 <= prod <= 71:
        db.cur_pos = p[top - n + 1]
        if prod == 62:
            db.add_vertex(v[top - 7], v[top - 1], "rect", None, None, None, {v[top - 5]: v[top - 3]})  # (props)
            return v[top - 7]
        if n == 4:  # id, opening bracket, text, closing bracket
            db.add_vertex(v[top - 3], v[top - 1], _VERTEX_SHAPES[prod - 56])
            return v[top - 3]
        db.add_vertex(v[top - 5], v[top - 2], _VERTEX_SHAPES[prod - 56])  # the two six-token shapes: (( )) and {{ }}
        return v[top - 5]
    if prod == 51:
        return [v[top]]
    if prod == 55:
        db.set_class(v[top - 2], v[top])
        return v[top - 2]
    if prod == 27:
        stmt = v[top - 1]  # a vertex statement: (last nodes, nodes, None) or (last nodes, None, nodes reversed)
        return stmt[2][::-1] if stmt[2] is not None else stmt[1]
    if prod in (28, 29, 32):  # style, linkStyle, click: kept as written
        start = p[top - 1]
        raw = r.p.code[start:p[top]].strip()
        if prod == 32:  # 'click ' itself yields no token: the statement's first token is the node id
            start = r.p.code.rfind("click", 0, start)
            raw = r.p.code[start:p[top]].strip()
            target = v[top - 1]
            if not _names_anything(db, str(target)):
                raw = "\0early\0" + raw  # applied to nothing yet: must stay before the nodes
        db.kept_statements.append(raw)
        return []
    if prod in (30, 31):
        return []
    if prod == 50 or prod == 48:
        node = v[top] if prod == 50 else v[top - 1]
        return (node, node, None)  # Mermaid's {stmt, nodes}, as a tuple (made at every statement)
    if prod in (45, 46, 47):
        if prod == 46:
            vs, link, node = v[top - 2], v[top - 1], v[top]
        else:
            vs, link, node = v[top - 3], v[top - 2], v[top - 1]
        if prod == 45:
            db.cur_pos = p[top - 1]
            db.add_vertex(node[-1], None, None, None, None, None, None, v[top])
        db.cur_pos = p[top - 2] if prod == 46 else p[top - 2]
        db.add_link(vs[0], node, link)
        # Mermaid's nodes are `node + vs.nodes` (newest first); copying that list at every link made a chain of n
        # links on one line cost n^2. Kept reversed in one list that grows at its end (prod 27 turns it back).
        rev = vs[2] if vs[2] is not None else vs[1][::-1]
        for k in range(len(node) - 1, -1, -1):  # (a loop: reversed() and extend cost more for the one node)
            rev.append(node[k])
        return (node, None, rev)
    if prod == 49:
        db.cur_pos = p[top - 1]
        db.add_vertex(v[top - 1][-1], None, None, None, None, None, None, v[top])
        return (v[top - 1], v[top - 1], None)  # (Mermaid's shapeData there is never read)
    if prod == 52:  # `a & b`: the group's list (made by prod 51 for this group) grows in place, not copied
        db.add_vertex(v[top - 5][-1], None, None, None, None, None, None, v[top - 4])
        v[top - 5].append(v[top])
        return v[top - 5]
    if prod == 53:
        v[top - 4].append(v[top])
        return v[top - 4]
    if prod in (79, 86, 101, 103):
        return {"text": v[top], "type": "text"}
    if prod in (80, 87, 102):
        return {"text": v[top - 1]["text"] + v[top], "type": v[top - 1]["type"]}
    if prod in (81, 88):
        return {"text": v[top], "type": "string"}
    if prod in (82, 89, 104):
        return {"text": v[top], "type": "markdown"}
    if prod == 83:
        return destruct_link(v[top])
    if prod == 84:
        d = destruct_link(v[top])
        d["id"] = v[top - 1]
        return d
    if prod == 85:
        return v[top - 1]
    if prod == 73:
        v[top - 1]["text"] = v[top]
        return v[top - 1]
    if prod in (74, 75):
        v[top - 2]["text"] = v[top - 1]
        return v[top - 2]
    if prod == 76:
        return v[top]
    if prod == 77:
        d = destruct_link(v[top], v[top - 2])
        return {"type": d["type"], "stroke": d["stroke"], "length": d.get("length"), "text": v[top - 1]}
    if prod == 78:
        d = destruct_link(v[top], v[top - 2])
        return {"type": d["type"], "stroke": d["stroke"], "length": d.get("length"), "text": v[top - 1],
                "id": v[top - 3]}
    if prod == 11:
        db.set_direction("TB")
        return "TB"
    if prod == 12:
        db.set_direction(v[top - 1])
        return v[top - 1]
    if prod == 33:
        return db.add_subgraph(v[top - 6], v[top - 1], v[top - 4], p[top - 8])
    if prod == 34:
        return db.add_subgraph(v[top - 3], v[top - 1], v[top - 3], p[top - 5])
    if prod == 35:  # Mermaid's addSubGraph reads the id's text and fails on a subgraph without one
        raise _DbError("a subgraph needs an id or a title ('subgraph S1' or 'subgraph S1 [Title]')")
    if prod == 37:
        db.acc_title = v[top].strip()
        db.kept_statements.append(f"accTitle: {db.acc_title}")
        return db.acc_title
    if prod in (38, 39):
        db.acc_descr = v[top].strip()
        db.kept_statements.append(f"accDescr: {db.acc_descr}" if prod == 38 or "\n" not in db.acc_descr
                                  else "accDescr {\n" + db.acc_descr + "\n}")
        return db.acc_descr
    if prod == 105:
        db.add_class(v[top - 2], v[top])
        return v[top - 4]
    if prod == 106:
        db.set_class(v[top - 2], v[top])
        return v[top - 4]
    if prod in (107, 115):
        db.set_click(v[top - 1], v[top])
        return v[top - 1]
    if prod in (108, 116):
        db.set_click(v[top - 3], v[top - 2])
        db.set_tooltip(v[top - 3], v[top])
        return v[top - 3]
    if prod == 109:
        db.set_click(v[top - 2], v[top - 1], v[top])
        return v[top - 2]
    if prod == 110:
        db.set_click(v[top - 4], v[top - 3], v[top - 2])
        db.set_tooltip(v[top - 4], v[top])
        return v[top - 4]
    if prod == 111:
        db.set_click(v[top - 2], "href", v[top])
        return v[top - 2]
    if prod == 112:
        db.set_click(v[top - 4], "href", v[top - 2])
        db.set_tooltip(v[top - 4], v[top])
        return v[top - 4]
    if prod == 113:
        db.set_click(v[top - 4], "href", v[top - 2], v[top])
        return v[top - 4]
    if prod == 114:
        db.set_click(v[top - 6], "href", v[top - 4], v[top])
        db.set_tooltip(v[top - 6], v[top - 2])
        return v[top - 6]
    if prod == 117:
        db.set_click(v[top - 1], "href", v[top])
        return v[top - 1]
    if prod == 118:
        db.set_click(v[top - 3], "href", v[top - 2])
        db.set_tooltip(v[top - 3], v[top])
        return v[top - 3]
    if prod == 119:
        db.set_click(v[top - 3], "href", v[top - 2], v[top])
        return v[top - 3]
    if prod == 120:
        db.set_click(v[top - 5], "href", v[top - 4], v[top])
        db.set_tooltip(v[top - 5], v[top - 2])
        return v[top - 5]
    if prod == 121:
        db.cur_pos = p[top - 2]
        db.add_vertex(v[top - 2], None, None, v[top])  # (styles)
        return v[top - 4]
    if prod == 122:
        db.update_link([v[top - 2]], v[top])
        return v[top - 4]
    if prod == 123:
        db.update_link(v[top - 2], v[top])
        return v[top - 4]
    if prod == 124:
        db.update_link_interpolate([v[top - 6]], v[top - 2])
        db.update_link([v[top - 6]], v[top])
        return v[top - 8]
    if prod == 125:
        db.update_link_interpolate(v[top - 6], v[top - 2])
        db.update_link(v[top - 6], v[top])
        return v[top - 8]
    if prod == 126:
        db.update_link_interpolate([v[top - 4]], v[top])
        return v[top - 6]
    if prod == 127:
        db.update_link_interpolate(v[top - 4], v[top])
        return v[top - 6]
    if prod in (128, 130):
        return [v[top]]
    if prod in (129, 131):
        v[top - 2].append(v[top])
        return v[top - 2]
    if 185 <= prod <= 189:
        return {"stmt": "dir", "value": ("TB", "BT", "RL", "LR", "TD")[prod - 185]}
    return first


def _names_anything(db, ids: str) -> bool:
    """Whether one of the comma-separated ids is a vertex, an edge or a subgraph already."""
    return any(t in db.vertices or t in db._edge_ids or t in db.sub_lookup for t in ids.split(","))


# the shapes of vertex productions 56 to 71 (62, [|field:value|text], has its own action); 58 (circle) and 66
# (hexagon) have six tokens, the others four
_VERTEX_SHAPES = ("square", "doublecircle", "circle", "ellipse", "stadium", "subroutine", "rect", "cylinder", "round",
                  "diamond", "hexagon", "odd", "trapezoid", "inv_trapezoid", "lean_right", "lean_left")


# ------------------------------------------------------------------------------------------ the tables

_SPECIAL_PRODS = frozenset([
    2, 3, 11, 12, 27, 28, 29, 30, 31, 32, 33, 34, 35, 37, 38, 39, 45, 46, 47, 48, 49, 50, 51, 52, 53, 55,
    *range(56, 90), 101, 102, 103, 104, *range(105, 132), 133, 182, 184, 43, *range(185, 190),
])  # every production grammar._Run._reduce gives an action of its own; the others pass their first value on
_MAX_PAIRS = 2  # skip-ahead literals the driver tracks (INITIAL has two: 'direction' and '@')


class Tables:
    """The grammar in the driver's form, built once per process from ``grammar.grammar()``."""

    def __init__(self, g: _Grammar):
        self.g = g
        self.nsym = g.nsym
        self.flat = g.flat  # C ints: the compiled loop reads them without boxing
        self.plhs = array("i", [p[0] for p in g.productions])
        self.plen = array("i", [p[1] for p in g.productions])
        # 0: pass the first value on; 1: `document: document line` (the commonest), done in the loop; 2: call
        # reduce_action
        self.psem = array("i", [1 if k == 3 else 2 if k in _SPECIAL_PRODS else 0 for k in range(len(g.productions))])
        # start conditions by number (INITIAL is 0)
        self.cond_names = ["INITIAL", *sorted(n for n in g.condition_rules if n != "INITIAL")]
        self.cond_ids = {name: i for i, name in enumerate(self.cond_names)}
        # tokens named by a string that the grammar has no symbol for: negative ids (always a parse error)
        self.names: dict[int, str] = {}
        kind, tok, state = _rule_actions(g.symbols, self.names)
        self.rule_kind, self.rule_tok = array("i", kind), array("i", tok)
        self.rule_cond = array("i", [self.cond_ids.get(s, 0) for s in state])
        # the rules that first skip ahead to a literal (Mermaid's `[^\n]*direction\s+TD...` and `[^\s"]+@`): per
        # condition, (index in its rules, pair) and the pairs (literal, regex of the characters that end the skip)
        self.rules: list[tuple] = []
        self.pairs: list[list[tuple[str, re.Pattern]]] = []
        self.ahead: list[list[tuple[int, int]]] = []
        patterns = g.condition_res._rules
        skips = {}  # rule -> (literal, class body) for the rules that skip ahead (Mermaid's direction and @ rules)
        for k, pattern in enumerate(patterns):
            m = _SCAN_AHEAD.match(pattern) if pattern.startswith("(?:[^") else None
            if m:
                skips[k] = (m.group(2), m.group(1))
        for name in self.cond_names:
            rules = tuple(g.condition_rules[name])
            pairs: list[tuple[str, re.Pattern]] = []
            keys: list[tuple[str, str]] = []
            ahead = []
            for i, k in enumerate(rules):
                key = skips.get(k)
                if key is not None:
                    if key not in keys:
                        keys.append(key)
                        pairs.append((key[0], re.compile(f"[{key[1]}]", re.ASCII)))
                    ahead.append((i, keys.index(key)))
            self.rules.append(rules)
            self.pairs.append(pairs)
            self.ahead.append(ahead)
        with_pairs = [i for i, p in enumerate(self.pairs) if p]
        if with_pairs not in ([], [0]) or len(self.pairs[0]) > _MAX_PAIRS:
            raise NotImplementedError("skip-ahead rules outside INITIAL, or more than the driver keeps")
        self.masks = 1 << _MAX_PAIRS
        self.dfa: lexdfa.Dfa | None = None
        try:
            program = lexdfa.Program(stored=g.lexer) if g.lexer is not None else lexdfa.Program(patterns)
            self.dfa = lexdfa.Dfa(program, len(self.cond_names) * self.masks * 2)
        except lexdfa.Unsupported:
            self.dfa = None  # the reader runs the reference lexer (grammar._Lexer)

    def start(self, slot: int) -> int:
        """The DFA state a token starts in, for slot ``(condition * masks + mask) * 2 + previous is a word
        character``: the condition's rules in order, less the skip-ahead ones the mask leaves out."""
        rest, prev_word = divmod(slot, 2)
        cond, mask = divmod(rest, self.masks)
        dropped = {i for i, pair in self.ahead[cond] if not mask >> pair & 1}
        rules = tuple(k for i, k in enumerate(self.rules[cond]) if i not in dropped)
        sid = self.dfa.start(rules, bool(prev_word))
        self.dfa.start_tab[slot] = sid
        return sid


# rule kinds: what the lexer does after a rule matched
_K_TOKEN, _K_PUSH, _K_POP, _K_POP_PUSH, _K_GRAPH, _K_SHAPE_OPEN, _K_SHAPE_TEXT = range(7)


def _rule_actions(symbols: dict, names: dict) -> tuple[list, list, list]:
    """Per lexer rule: (kind, token, state pushed), as ``grammar._Lexer._action`` does it (-1: no token)."""
    n = 122
    kind, tok, state = [_K_TOKEN] * n, [-1] * n, [""] * n

    def token(t) -> int:
        if t is None:
            return -1
        if isinstance(t, int):
            return t
        if t in symbols:
            return symbols[t]
        k = -2 - len(names)
        names[k] = t
        return k

    for r in range(n):
        if 56 <= r <= 60:
            tok[r] = 121 + r - 56
        elif r in _SIMPLE_TOKENS:
            tok[r] = token(_SIMPLE_TOKENS[r])
        elif r in _PUSH_TOKENS:
            kind[r], state[r], tok[r] = _K_PUSH, _PUSH_TOKENS[r][0], token(_PUSH_TOKENS[r][1])
        elif r in _POP_TOKENS:
            kind[r], tok[r] = _K_POP, token(_POP_TOKENS[r])
        elif 46 <= r <= 55:
            kind[r], tok[r] = _K_POP, 14
        elif 35 <= r <= 38:
            kind[r], tok[r], state[r] = _K_GRAPH, 12, "dir"
    table = {0: (_K_PUSH, "acc_title", 34), 1: (_K_POP, "", "acc_title_value"), 2: (_K_PUSH, "acc_descr", 36),
             3: (_K_POP, "", "acc_descr_value"), 4: (_K_PUSH, "acc_descr_multiline", None),
             6: (_K_TOKEN, "", "acc_descr_multiline_value"), 7: (_K_SHAPE_OPEN, "shapeData", 40),
             8: (_K_PUSH, "shapeDataStr", 40), 9: (_K_POP, "", 40), 10: (_K_SHAPE_TEXT, "", 40), 11: (_K_TOKEN, "", 40),
             13: (_K_PUSH, "callbackname", None), 15: (_K_POP_PUSH, "callbackargs", None), 16: (_K_TOKEN, "", 95),
             18: (_K_TOKEN, "", 96), 19: (_K_TOKEN, "", "MD_STR"), 21: (_K_PUSH, "md_string", None),
             22: (_K_TOKEN, "", "STR"), 24: (_K_PUSH, "string", None), 25: (_K_TOKEN, "", 84),
             26: (_K_TOKEN, "", 102), 27: (_K_TOKEN, "", 85), 28: (_K_TOKEN, "", 104), 29: (_K_TOKEN, "", 86),
             30: (_K_TOKEN, "", 87), 31: (_K_TOKEN, "", 97), 32: (_K_PUSH, "click", None), 34: (_K_TOKEN, "", 88),
             39: (_K_TOKEN, "", 27), 40: (_K_TOKEN, "", 32), 45: (_K_POP, "", 13)}
    for r in (5, 12, 14, 17, 20, 23, 33):
        table[r] = (_K_POP, "", None)
    for r in range(41, 45):
        table[r] = (_K_TOKEN, "", 98)
    for r, (k, s, t) in table.items():
        kind[r], state[r], tok[r] = k, s, token(t)
    return kind, tok, state


_TABLES: Tables | None = None


def tables(g: _Grammar) -> Tables:
    global _TABLES
    if _TABLES is None or _TABLES.g is not g:
        _TABLES = Tables(g)
    return _TABLES


# ------------------------------------------------------------------------------------------ the driver

class LexState:
    """What error reporting and recovery (``grammar._Run._error`` / ``_resync``) read and reset of the lexer."""

    __slots__ = ("code", "pos", "tok_pos", "stack", "done", "match", "yytext")

    def __init__(self, code: str):
        self.code, self.pos, self.tok_pos, self.stack, self.done = code, 0, 0, ["INITIAL"], False
        self.match = self.yytext = ""


_NEWLINE_SUB = LazyRegex(f"\n[{JS_SPACE}]*")  # (shape data text only)
_WIDTH = lexdfa.Dfa.WIDTH
# UTF-32 as the machine stores a C unsigned int (the codec function itself: str.encode would import its module)
_utf32 = codecs.utf_32_le_encode if sys.byteorder == "little" else codecs.utf_32_be_encode


def _is_word(ch: int) -> bool:
    return 48 <= ch <= 57 or 65 <= ch <= 90 or 97 <= ch <= 122 or ch == 95


def _recover(r, lex: LexState, snap_state: int, snap_depth: int, snap_doc, states, positions, sp: int,
             values: list) -> int:
    """``grammar._Run._resync`` on the driver's stacks from the last statement boundary (state, depth, document;
    depth -1: none yet): the new top of the stacks, or -1 (stop reading). The arrays keep what is below the top."""
    snapshot = None if snap_depth < 0 else (snap_state, snap_depth, snap_doc)
    as_list = list(states[:sp + 1])
    if not r._resync(lex, snapshot, as_list, values[:sp + 1], list(positions[:sp + 1])):
        return -1
    return len(as_list) - 1  # (the stacks only lost entries above the new top)


def run(r) -> bool:  # noqa: C901, PLR0912, PLR0915 - the lexer and the LR loop in one function, for speed
    """Parse ``r.p.code`` into ``r.db`` (``r`` is a ``grammar._Run``), appending errors to ``r.errors``. False when
    the lexer's DFA could not be built (the caller then runs the reference driver)."""
    t = tables(r.g)
    dfa = t.dfa
    if dfa is None:
        return False
    db = r.db
    code: str = r.p.code
    length = len(code)
    flat, plhs, plen, psem, ns = t.flat, t.plhs, t.plen, t.psem, t.nsym
    rule_kind, rule_tok, rule_cond = t.rule_kind, t.rule_tok, t.rule_cond
    masks = t.masks
    width = _WIDTH
    pairs = t.pairs[0]
    npairs = len(pairs)
    trans, start_tab, ascii_cls, bmp = dfa.trans, dfa.start_tab, dfa.ascii, dfa.bmp
    # the code as an array of code points (a view of its UTF-32 encoding: one load per character in the loop)
    chars = memoryview(_utf32(code, "surrogatepass")[0]).cast("I")
    lex = LexState(code)
    cstack = [0]  # start conditions (numbers)
    cond = 0
    # the next index at or after pos of each skip-ahead literal and of the character that ends its skip
    next_word = array("q", [-1] * _MAX_PAIRS)  # (C arrays in the compiled loop)
    next_stop = array("q", [-1] * _MAX_PAIRS)
    pos = 0
    done = False
    cap = 256
    stack_array = array("i", bytes(4 * cap))
    states = stack_array
    pos_array = array("q", bytes(8 * cap))  # where each entry of the stack starts in the code
    positions = pos_array
    sp = 0  # top of the stacks
    values: list = [None] * cap  # the value of each entry (above sp: stale)
    sym = -1
    tok_pos = 0
    yytext = ""
    last_shift_pos = 0
    snap_state = snap_depth = -1  # the last statement boundary (for recovery)
    snap_doc = None
    while True:
        state = states[sp]
        if sym == -1:
            # ---- lex one token (jison's lex(): rules in order, skipping those whose action returns nothing)
            while True:
                if done:
                    sym = 1
                    break
                if pos >= length:
                    done = True
                mask = 0
                if cond == 0 and npairs:
                    bit = 1
                    for j in range(npairs):
                        w = next_word[j]
                        if w < pos:
                            w = code.find(pairs[j][0], pos)
                            w = length if w < 0 else w
                            next_word[j] = w
                        if w < length:  # the literal comes later: is it before the end of the skip?
                            s = next_stop[j]
                            if s < pos:
                                m = pairs[j][1].search(code, pos)
                                s = m.start() if m is not None else length
                                next_stop[j] = s
                            if w < s:
                                mask += bit
                        bit <<= 1
                slot = (cond * masks + mask) * 2
                if pos > 0 and _is_word(chars[pos - 1]):
                    slot += 1
                sid = start_tab[slot]
                if sid < 0:
                    sid = t.start(slot)
                    trans, start_tab = dfa.trans, dfa.start_tab
                # ---- the DFA: one step per character until no thread is left; the last match wins
                i = pos
                end = -1
                rule = -1
                while True:
                    if i < length:
                        ch = chars[i]
                        if ch < 128:
                            cls = ascii_cls[ch]
                        elif ch < 65536:
                            cls = bmp[ch]
                            if cls < 0:
                                cls = dfa.char_class(ch)
                        else:
                            cls = dfa.char_class(ch)
                    else:
                        cls = 0
                    e = trans[sid * width + cls]
                    if e == 0:
                        e = dfa.step(sid, cls)
                        trans, start_tab = dfa.trans, dfa.start_tab
                    if e & 255:
                        end = i
                        rule = (e & 255) - 1
                    sid = (e >> 8) - 2
                    if sid < 0:
                        break
                    i += 1
                if rule < 0:
                    if pos >= length:
                        sym = 1
                        break
                    line = code.count("\n", 0, pos) + 1
                    err = MermaidParseError(f"Lexical error on line {line}. Unrecognized text.", pos=pos,
                                            line=line, column0=None, kind="lexical")
                    sym = -3
                    break
                tok_pos = pos
                pos = end
                yytext = code[tok_pos:pos]
                if done and pos < length:
                    done = False
                kind = rule_kind[rule]
                tok = rule_tok[rule]
                if kind != 0:
                    if kind == 1:
                        cstack.append(rule_cond[rule])
                    elif kind == 2:
                        if len(cstack) > 1:
                            cstack.pop()
                    elif kind == 3:
                        if len(cstack) > 1:
                            cstack.pop()
                        cstack.append(rule_cond[rule])
                    elif kind == 4:
                        if db.first_graph():
                            cstack.append(rule_cond[rule])
                    elif kind == 5:
                        cstack.append(rule_cond[rule])
                        yytext = ""
                    else:
                        yytext = _NEWLINE_SUB.sub("<br/>", yytext)
                    cond = cstack[-1]
                if tok != -1:
                    sym = tok
                    break
            if sym == -3:  # a lexical error
                r.errors.append(err)
                lex.pos, lex.tok_pos, lex.done = pos, tok_pos, done
                sp = _recover(r, lex, snap_state, snap_depth, snap_doc, states, positions, sp, values)
                if sp < 0:
                    return True
                pos, done, cstack, cond = lex.pos, lex.done, [0], 0
                sym = -1
                continue
        action = flat[state * ns + sym] if sym >= 0 else 0
        if action == 0:
            lex.pos, lex.tok_pos, lex.done, lex.match = pos, tok_pos, done, code[tok_pos:pos]
            lex.stack = [t.cond_names[c] for c in cstack]
            r.errors.append(r._error(state, sym if sym >= 0 else t.names[sym], lex, last_shift_pos))
            sp = _recover(r, lex, snap_state, snap_depth, snap_doc, states, positions, sp, values)
            if sp < 0:
                return True
            pos, done, cstack, cond = lex.pos, lex.done, [0], 0
            sym = -1
            continue
        how = action & 3
        if how == 1:  # shift
            sp += 1
            if sp == cap:
                stack_array, pos_array = _grown(stack_array), _grown(pos_array)
                states, positions = stack_array, pos_array
                cap *= 2
                values.extend([None] * cap)
            states[sp] = action >> 2
            positions[sp] = tok_pos
            values[sp] = yytext
            last_shift_pos = tok_pos
            sym = -1
        elif how == 2:  # reduce
            prod = action >> 2
            n = plen[prod]
            sem = psem[prod]
            if sem == 0:
                val = values[sp - n + 1] if n else None
            elif sem == 1:  # document: document line (as reduce_action's prod 3)
                val = values[sp - 1]
                item = values[sp]
                if not isinstance(item, list) or item:
                    val.append(item)
            else:
                try:
                    val = reduce_action(r, db, prod, values, pos_array, sp, n)
                except _DbError as exc:
                    at = positions[sp - n + 1] if n else last_shift_pos
                    r.errors.append(MermaidParseError(str(exc), pos=at, line=None, column0=None, kind="db"))
                    lex.pos, lex.tok_pos, lex.done = pos, tok_pos, done
                    sp = _recover(r, lex, snap_state, snap_depth, snap_doc, states, positions, sp, values)
                    if sp < 0:
                        return True
                    pos, done, cstack, cond = lex.pos, lex.done, [0], 0
                    sym = -1
                    continue
            if n:  # pop n, push the value: the position of the first popped stays where it is
                if n > 1 or sem:
                    sp -= n - 1
                    values[sp] = val
            else:
                sp += 1
                if sp == cap:
                    stack_array, pos_array = _grown(stack_array), _grown(pos_array)
                    states, positions = stack_array, pos_array
                    values.extend([None] * cap)
                    cap *= 2
                values[sp] = val
                positions[sp] = positions[sp - 1]
            lhs = plhs[prod]
            goto = flat[states[sp - 1] * ns + lhs] >> 2
            states[sp] = goto
            if lhs == 5:  # a document: a statement boundary, where recovery restarts
                snap_state, snap_depth, snap_doc = goto, sp + 1, val
        else:
            return True


def _grown(old: array) -> array:
    """A stack with twice the room (a new array: the loop holds a view of the old one)."""
    more = array(old.typecode, bytes(2 * old.itemsize * len(old)))
    more[:len(old)] = old
    return more
