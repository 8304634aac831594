"""The flowchart grammar's hot loop: Mermaid 11's jison lexer and LALR driver over flat tables.

``grammar._Run.run`` is the reference driver (the jison algorithm written plainly, kept for the tests to compare
against); this module runs the same tables and the same semantic actions faster, for every dialect alike:

- The parse table is one flat list indexed by ``state * symbols + symbol`` (shift, reduce, accept and goto as small
  integers), and the productions whose action only passes a value on (most of them) never leave the loop.
- The lexer still runs jison's rules in order, first match wins. For each start condition and each first character
  it joins into one regex only the rules that can match text starting with that character (their FIRST sets, read
  off each rule's parsed pattern; a rule that can match the empty string is kept everywhere). Rules dropped there
  cannot match, so the first rule that matches is the same. The rules that skip ahead to a literal (Mermaid's
  ``[^\\n]*direction\\s+TD`` and ``[^\\s"]+@``) are dropped, in the same way, while that literal does not come
  before the end of their skip (else each would cost the rest of the line at every token: quadratic).

``setup.py`` compiles this file with Cython when it can (``make`` runs it; ``lalr.pxd`` gives the loop's types);
without the compiled module Python runs this same file, and the tests run both.
"""

from __future__ import annotations

import re
from array import array

from flowcore.mermaid.errors import MermaidParseError, _DbError
from flowcore.mermaid.text import JS_SPACE

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


def reduce_action(r, prod: int, v: list, poss: list, n: int) -> Any:  # noqa: C901, PLR0911, PLR0912, PLR0915
    """The semantic action of production ``prod`` (flow.jison's, on the FlowDB ``r.db``); ``v`` and ``poss`` are the
    parser's value and position stacks, whose top ``n`` entries are the production's right-hand side."""
    db = r.db
    first = v[-n] if n else None
    if prod in (142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 181, 183, 40, 41, 42, 4, 54):
        return first
    if prod in (182, 184, 133, 43):
        return v[-2] + v[-1]
    if prod == 3:
        doc, line = v[-2], v[-1]
        if not isinstance(line, list) or line:
            doc.append(line)
        return doc
    if prod == 2:
        return []
    if prod == 72:
        db.cur_pos = poss[-1]
        db.add_vertex(v[-1])
        return v[-1]
    if 56 <= prod <= 71:
        db.cur_pos = poss[-n]
        if prod == 62:
            db.add_vertex(v[-8], v[-2], "rect", props={v[-6]: v[-4]})
            return v[-8]
        shape, idx, tidx = _VERTEX_PRODS[prod]
        db.add_vertex(v[idx], v[tidx], shape)
        return v[idx]
    if prod == 51:
        return [v[-1]]
    if prod == 55:
        db.set_class(v[-3], v[-1])
        return v[-3]
    if prod == 27:
        stmt = v[-2]
        return stmt["rev"][::-1] if "rev" in stmt else stmt["nodes"]
    if prod in (28, 29, 32):  # style, linkStyle, click: kept as written
        start = poss[-2]
        raw = r.p.code[start:poss[-1]].strip()
        if prod == 32:  # 'click ' itself yields no token: the statement's first token is the node id
            start = r.p.code.rfind("click", 0, start)
            raw = r.p.code[start:poss[-1]].strip()
            target = v[-2]
            if not _names_anything(db, str(target)):
                raw = "\0early\0" + raw  # applied to nothing yet: must stay before the nodes
        db.kept_statements.append(raw)
        return []
    if prod in (30, 31):
        return []
    if prod == 50 or prod == 48:
        node = v[-1] if prod == 50 else v[-2]
        return {"stmt": node, "nodes": node}
    if prod in (45, 46, 47):
        if prod == 46:
            vs, link, node = v[-3], v[-2], v[-1]
        else:
            vs, link, node = v[-4], v[-3], v[-2]
        if prod == 45:
            db.cur_pos = poss[-2]
            db.add_vertex(node[-1], shape_data=v[-1])
        db.cur_pos = poss[-3] if prod == 46 else poss[-3]
        db.add_link(vs["stmt"], node, link)
        # Mermaid's nodes are `node + vs.nodes` (newest first); copying that list at every link made a chain of n
        # links on one line cost n^2. Kept reversed in one list that grows at its end (prod 27 turns it back).
        rev = vs["rev"] if "rev" in vs else vs["nodes"][::-1]
        rev.extend(reversed(node))
        return {"stmt": node, "rev": rev}
    if prod == 49:
        db.cur_pos = poss[-2]
        db.add_vertex(v[-2][-1], shape_data=v[-1])
        return {"stmt": v[-2], "nodes": v[-2], "shapeData": v[-1]}
    if prod == 52:  # `a & b`: the group's list (made by prod 51 for this group) grows in place, not copied
        db.add_vertex(v[-6][-1], shape_data=v[-5])
        v[-6].append(v[-1])
        return v[-6]
    if prod == 53:
        v[-5].append(v[-1])
        return v[-5]
    if prod in (79, 86, 101, 103):
        return {"text": v[-1], "type": "text"}
    if prod in (80, 87, 102):
        return {"text": v[-2]["text"] + v[-1], "type": v[-2]["type"]}
    if prod in (81, 88):
        return {"text": v[-1], "type": "string"}
    if prod in (82, 89, 104):
        return {"text": v[-1], "type": "markdown"}
    if prod == 83:
        return destruct_link(v[-1])
    if prod == 84:
        d = destruct_link(v[-1])
        d["id"] = v[-2]
        return d
    if prod == 85:
        return v[-2]
    if prod == 73:
        v[-2]["text"] = v[-1]
        return v[-2]
    if prod in (74, 75):
        v[-3]["text"] = v[-2]
        return v[-3]
    if prod == 76:
        return v[-1]
    if prod == 77:
        d = destruct_link(v[-1], v[-3])
        return {"type": d["type"], "stroke": d["stroke"], "length": d.get("length"), "text": v[-2]}
    if prod == 78:
        d = destruct_link(v[-1], v[-3])
        return {"type": d["type"], "stroke": d["stroke"], "length": d.get("length"), "text": v[-2],
                "id": v[-4]}
    if prod == 11:
        db.set_direction("TB")
        return "TB"
    if prod == 12:
        db.set_direction(v[-2])
        return v[-2]
    if prod == 33:
        return db.add_subgraph(v[-7], v[-2], v[-5], poss[-9])
    if prod == 34:
        return db.add_subgraph(v[-4], v[-2], v[-4], poss[-6])
    if prod == 35:  # Mermaid's addSubGraph reads the id's text and fails on a subgraph without one
        raise _DbError("a subgraph needs an id or a title ('subgraph S1' or 'subgraph S1 [Title]')")
    if prod == 37:
        db.acc_title = v[-1].strip()
        db.kept_statements.append(f"accTitle: {db.acc_title}")
        return db.acc_title
    if prod in (38, 39):
        db.acc_descr = v[-1].strip()
        db.kept_statements.append(f"accDescr: {db.acc_descr}" if prod == 38 or "\n" not in db.acc_descr
                                  else "accDescr {\n" + db.acc_descr + "\n}")
        return db.acc_descr
    if prod == 105:
        db.add_class(v[-3], v[-1])
        return v[-5]
    if prod == 106:
        db.set_class(v[-3], v[-1])
        return v[-5]
    if prod in (107, 115):
        db.set_click(v[-2], v[-1])
        return v[-2]
    if prod in (108, 116):
        db.set_click(v[-4], v[-3])
        db.set_tooltip(v[-4], v[-1])
        return v[-4]
    if prod == 109:
        db.set_click(v[-3], v[-2], v[-1])
        return v[-3]
    if prod == 110:
        db.set_click(v[-5], v[-4], v[-3])
        db.set_tooltip(v[-5], v[-1])
        return v[-5]
    if prod == 111:
        db.set_click(v[-3], "href", v[-1])
        return v[-3]
    if prod == 112:
        db.set_click(v[-5], "href", v[-3])
        db.set_tooltip(v[-5], v[-1])
        return v[-5]
    if prod == 113:
        db.set_click(v[-5], "href", v[-3], v[-1])
        return v[-5]
    if prod == 114:
        db.set_click(v[-7], "href", v[-5], v[-1])
        db.set_tooltip(v[-7], v[-3])
        return v[-7]
    if prod == 117:
        db.set_click(v[-2], "href", v[-1])
        return v[-2]
    if prod == 118:
        db.set_click(v[-4], "href", v[-3])
        db.set_tooltip(v[-4], v[-1])
        return v[-4]
    if prod == 119:
        db.set_click(v[-4], "href", v[-3], v[-1])
        return v[-4]
    if prod == 120:
        db.set_click(v[-6], "href", v[-5], v[-1])
        db.set_tooltip(v[-6], v[-3])
        return v[-6]
    if prod == 121:
        db.cur_pos = poss[-3]
        db.add_vertex(v[-3], styles=v[-1])
        return v[-5]
    if prod == 122:
        db.update_link([v[-3]], v[-1])
        return v[-5]
    if prod == 123:
        db.update_link(v[-3], v[-1])
        return v[-5]
    if prod == 124:
        db.update_link_interpolate([v[-7]], v[-3])
        db.update_link([v[-7]], v[-1])
        return v[-9]
    if prod == 125:
        db.update_link_interpolate(v[-7], v[-3])
        db.update_link(v[-7], v[-1])
        return v[-9]
    if prod == 126:
        db.update_link_interpolate([v[-5]], v[-1])
        return v[-7]
    if prod == 127:
        db.update_link_interpolate(v[-5], v[-1])
        return v[-7]
    if prod in (128, 130):
        return [v[-1]]
    if prod in (129, 131):
        v[-3].append(v[-1])
        return v[-3]
    if 185 <= prod <= 189:
        return {"stmt": "dir", "value": ("TB", "BT", "RL", "LR", "TD")[prod - 185]}
    return first


def _names_anything(db, ids: str) -> bool:
    """Whether one of the comma-separated ids is a vertex, an edge or a subgraph already."""
    return any(t in db.vertices or t in db._edge_ids or t in db.sub_lookup for t in ids.split(","))


# vertex productions: (shape, index of the id, index of the text) counted from the top of the stack
_VERTEX_PRODS = {
56: ("square", -4, -2), 57: ("doublecircle", -4, -2), 58: ("circle", -6, -3), 59: ("ellipse", -4, -2),
60: ("stadium", -4, -2), 61: ("subroutine", -4, -2), 63: ("cylinder", -4, -2), 64: ("round", -4, -2),
65: ("diamond", -4, -2), 66: ("hexagon", -6, -3), 67: ("odd", -4, -2), 68: ("trapezoid", -4, -2),
69: ("inv_trapezoid", -4, -2), 70: ("lean_right", -4, -2), 71: ("lean_left", -4, -2),
}


# ------------------------------------------------------------------------------------------ FIRST sets

_ALL = frozenset(range(128))


def _first(items, re_parser=None, flags: int = 0) -> tuple[set, bool, bool]:
    """(ASCII codes a match can start with, whether it can start with a non-ASCII character, whether it can match
    the empty string) of a parsed pattern (a sequence of items). Over-approximated where unsure: that only keeps a
    rule in more places."""
    out: set = set()
    wide = False
    for op, av in items:
        s, w, nul = _first_item(str(op), op, av, re_parser, flags)
        out |= s
        wide = wide or w
        if not nul:
            return out, wide, False
    return out, wide, True


def _first_item(name: str, op, av, re_parser, flags: int) -> tuple[set, bool, bool]:
    if name == "LITERAL":
        return ({av}, False, False) if av < 128 else (set(), True, False)
    if name == "SUBPATTERN":
        return _first(av[-1], re_parser, flags)
    if name == "ATOMIC_GROUP":
        return _first(av, re_parser, flags)
    if name == "BRANCH":
        out: set = set()
        wide = nul = False
        for alt in av[1]:
            s, w, n = _first(alt, re_parser, flags)
            out |= s
            wide, nul = wide or w, nul or n
        return out, wide, nul
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        s, w, n = _first(av[2], re_parser, flags)
        return s, w, n or av[0] == 0
    if name in ("AT", "ASSERT", "ASSERT_NOT"):  # zero width: what follows decides
        return set(), False, True
    if name == "IN":
        return _class_chars(av), True, False
    if name == "NOT_LITERAL":
        return set(_ALL) - {av}, True, False
    if name == "ANY":
        return set(_ALL) - {10}, True, False
    if name == "CATEGORY":
        return set(_CATEGORIES.get(str(av), _ALL)), True, False
    return set(_ALL), True, True  # anything else (a back reference...): assume it can start anywhere


_DIGITS = frozenset(range(48, 58))
_WORD = _DIGITS | frozenset(range(65, 91)) | frozenset(range(97, 123)) | {95}
_SPACE = frozenset(b" \t\n\r\f\v")
_CATEGORIES = {"CATEGORY_DIGIT": _DIGITS, "CATEGORY_NOT_DIGIT": _ALL - _DIGITS, "CATEGORY_SPACE": _SPACE,
               "CATEGORY_NOT_SPACE": _ALL - _SPACE, "CATEGORY_WORD": _WORD, "CATEGORY_NOT_WORD": _ALL - _WORD}


def _class_chars(items) -> set:
    """The ASCII codes a character class (``[...]``, parsed) matches; anything unknown counts as everything."""
    out: set = set()
    negate = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            out.add(av)
        elif name == "RANGE":
            out.update(range(av[0], min(av[1], 127) + 1))
        elif name == "CATEGORY" and str(av) in _CATEGORIES:
            out |= _CATEGORIES[str(av)]
        else:
            return set(_ALL)
    out &= _ALL
    return set(_ALL) - out if negate else out


def first_set(pattern: str) -> tuple[frozenset, bool, bool]:
    """``_first`` of one lexer rule (a Python pattern, matched with re.ASCII as the lexer does)."""
    import re._parser as re_parser

    s, wide, nul = _first(list(re_parser.parse(pattern, re.ASCII)), re_parser, re.ASCII)
    return frozenset(s), wide, nul


# ------------------------------------------------------------------------------------------ the tables

# buckets: a non-ASCII first character, the end of the text, and every rule (what a start condition uses for its
# first _WARM tokens: one regex to compile, as jison's own lexer has; a text that lexes more pays for the buckets)
_OTHER, _END, _EVERY = 128, 129, 130
_WARM = 256
_SPECIAL_PRODS = frozenset([
    2, 3, 11, 12, 27, 28, 29, 30, 31, 32, 33, 34, 35, 37, 38, 39, 45, 46, 47, 48, 49, 50, 51, 52, 53, 55,
    *range(56, 90), 101, 102, 103, 104, *range(105, 132), 133, 182, 184, 43, *range(185, 190),
])  # every production grammar._Run._reduce gives an action of its own; the others pass their first value on


class Tables:
    """The grammar in the driver's form, built once per process from ``grammar.grammar()``."""

    def __init__(self, g: _Grammar):
        self.g = g
        self.nsym = ns = max(g.symbols.values()) + 1
        flat = [0] * (len(g.table) * ns)
        for state, row in enumerate(g.table):
            for sym, act in row.items():
                if isinstance(act, int):
                    code = act * 4  # goto
                elif act[0] == 1:
                    code = act[1] * 4 + 1
                elif act[0] == 2:
                    code = act[1] * 4 + 2
                else:
                    code = 3
                flat[state * ns + sym] = code
        self.flat = array("i", flat)  # C ints: the compiled loop reads them without boxing
        self.plhs = array("i", [p[0] for p in g.productions])
        self.plen = array("i", [p[1] for p in g.productions])
        self.psem = array("i", [2 if k in _SPECIAL_PRODS else 0 for k in range(len(g.productions))])
        # tokens named by a string that the grammar has no symbol for: negative ids (always a parse error)
        self.names: dict[int, str] = {}
        kind, tok, self.rule_state = _rule_actions(g.symbols, self.names)
        self.rule_kind, self.rule_tok = array("i", kind), array("i", tok)
        self.conditions: dict[str, _Condition] = {}
        self.joined: dict[tuple, tuple] = {}  # rules joined (in order) -> (the regex's match method, group -> rule)
        self.groups: dict[int, int] = {}  # rule -> its own capturing groups

    def join(self, rules: tuple) -> tuple:
        """One regex trying ``rules`` in order, and which rule each top-level group is: built once per process for
        each distinct list (most first characters share one)."""
        out = self.joined.get(rules)
        if out is None:
            import re._parser as re_parser

            patterns = self.g.condition_res._rules
            parts, gmap, group = [], [], 1
            for k in rules:
                n = self.groups.get(k)
                if n is None:
                    n = self.groups[k] = re_parser.parse(patterns[k], re.ASCII).state.groups - 1
                gmap += [-1] * (group - len(gmap)) + [k]
                group += 1 + n
                parts.append(f"({patterns[k]})")
            out = self.joined[rules] = (re.compile("|".join(parts), re.ASCII).match if parts else None, gmap)
        return out

    def condition(self, name: str) -> _Condition:
        c = self.conditions.get(name)
        if c is None:
            c = self.conditions[name] = _Condition(self.g, name, self.join)
            # the driver keeps one set of skip-ahead positions: for one start condition (INITIAL) with at most 4
            if c.pairs and (len(c.pairs) > 4 or any(o.pairs for o in self.conditions.values() if o is not c)):
                raise NotImplementedError(f"lexer condition {name}: skip-ahead rules the driver cannot keep")
        return c


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


class _Condition:
    """One start condition: per first character (and per which skip-ahead rules may match), the regex of the rules
    that can match there, built on first use."""

    def __init__(self, g: _Grammar, name: str, join):
        self.join = join
        rules = g.condition_res._rules
        self.rules = list(g.condition_rules[name])
        self.patterns = [rules[k] for k in self.rules]
        self.buckets: list | None = None  # bucket -> indexes into self.rules (FIRST sets read when first needed)
        self.uses = 0  # tokens lexed in this condition (in _EVERY until _WARM)
        # the skip-ahead rules: (index in self.rules, pair number); pairs: (literal, regex of the characters that
        # end the skip)
        self.pairs: list[tuple[str, re.Pattern]] = []
        self.ahead: list[tuple[int, int]] = []
        keys: list[tuple[str, str]] = []
        for i, p in enumerate(self.patterns):
            m = _SCAN_AHEAD.match(p)
            if m:
                key = (m.group(2), m.group(1))
                if key not in keys:
                    keys.append(key)
                    self.pairs.append((key[0], re.compile(f"[{key[1]}]", re.ASCII)))
                self.ahead.append((i, keys.index(key)))
        self.width = 1 << len(self.pairs)
        self.slots: list = [None] * (131 * self.width)

    def _buckets(self) -> list:
        firsts = [first_set(p) for p in self.patterns]
        out = [[i for i, (s, wide, nul) in enumerate(firsts) if nul or (b < 128 and b in s) or (b == _OTHER and wide)]
               for b in range(130)]
        out.append(list(range(len(self.rules))))  # _EVERY
        return out

    def build(self, slot: int) -> tuple:
        """(the regex's match method or None, group number -> rule) for slot ``bucket * width + mask``."""
        bucket, mask = divmod(slot, self.width)
        if bucket == _EVERY:
            candidates = range(len(self.rules))
        else:
            if self.buckets is None:
                self.buckets = self._buckets()
            candidates = self.buckets[bucket]
        dropped = {i for i, pair in self.ahead if not mask >> pair & 1}
        out = self.slots[slot] = self.join(tuple(self.rules[i] for i in candidates if i not in dropped))
        return out


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


_NEWLINE_SUB = re.compile(f"\n[{JS_SPACE}]*")


def run(r) -> None:  # noqa: C901, PLR0912, PLR0915 - the lexer and the LR loop in one function, for speed
    """Parse ``r.p.code`` into ``r.db`` (``r`` is a ``grammar._Run``), appending errors to ``r.errors``."""
    t = tables(r.g)
    db = r.db
    code: str = r.p.code
    length = len(code)
    flat, plhs, plen, psem, ns = t.flat, t.plhs, t.plen, t.psem, t.nsym
    rule_kind, rule_tok, rule_state = t.rule_kind, t.rule_tok, t.rule_state
    condition = t.condition
    lex = LexState(code)
    stack = lex.stack
    cond = condition("INITIAL")
    # the next index at or after pos of each skip-ahead literal and of the character that ends its skip
    # (only INITIAL has such rules; a start condition with more pairs is not in the grammar)
    next_word = [-1] * 4
    next_stop = [-1] * 4
    pos = 0
    done = False
    states = [0]
    values: list = [None]
    poss = [0]
    sym = -1
    tok_pos = 0
    yytext = ""
    last_shift_pos = 0
    snapshot = None
    while True:
        state = states[-1]
        if sym == -1:
            # ---- lex one token (jison's lex(): rules in order, skipping those whose action returns nothing)
            while True:
                if done:
                    sym = 1
                    break
                if pos >= length:
                    done = True
                    bucket = _END
                elif cond.uses < _WARM:
                    cond.uses += 1
                    bucket = _EVERY
                else:
                    bucket = ord(code[pos])
                    if bucket > 127:
                        bucket = _OTHER
                slot = bucket
                if cond.width > 1:
                    slot = bucket * cond.width
                    bit = 1
                    for j in range(len(cond.pairs)):
                        w = next_word[j]
                        if w < pos:
                            w = code.find(cond.pairs[j][0], pos)
                            w = length if w < 0 else w
                            next_word[j] = w
                        if w < length:  # the literal comes later: is it before the end of the skip?
                            s = next_stop[j]
                            if s < pos:
                                m = cond.pairs[j][1].search(code, pos)
                                s = m.start() if m is not None else length
                                next_stop[j] = s
                            if w < s:
                                slot += bit
                        bit <<= 1
                entry = cond.slots[slot]
                if entry is None:
                    entry = cond.build(slot)
                matcher = entry[0]
                m = matcher(code, pos) if matcher is not None else None
                if m is None:
                    if pos >= length:
                        sym = 1
                        break
                    line = code.count("\n", 0, pos) + 1
                    lex.pos = pos
                    err = MermaidParseError(f"Lexical error on line {line}. Unrecognized text.", pos=pos,
                                            line=line, column0=None, kind="lexical")
                    sym = -3
                    break
                rule = entry[1][m.lastindex]
                tok_pos = pos
                pos = m.end()
                yytext = m.group()
                lex.match = yytext
                if done and pos < length:
                    done = False
                kind = rule_kind[rule]
                tok = rule_tok[rule]
                if kind != 0:
                    if kind == 1:
                        stack.append(rule_state[rule])
                    elif kind == 2:
                        if len(stack) > 1:
                            stack.pop()
                    elif kind == 3:
                        if len(stack) > 1:
                            stack.pop()
                        stack.append(rule_state[rule])
                    elif kind == 4:
                        if db.first_graph():
                            stack.append("dir")
                    elif kind == 5:
                        stack.append(rule_state[rule])
                        yytext = ""
                    else:
                        yytext = _NEWLINE_SUB.sub("<br/>", yytext)
                    cond = condition(stack[-1])
                if tok != -1:
                    sym = tok
                    break
            if sym == -3:  # a lexical error
                r.errors.append(err)
                lex.pos, lex.tok_pos, lex.done = pos, tok_pos, done
                if not r._resync(lex, snapshot, states, values, poss):
                    return
                pos, done, stack = lex.pos, lex.done, lex.stack
                cond = condition(stack[-1])
                sym = -1
                continue
        action = flat[state * ns + sym] if sym >= 0 else 0
        if action == 0:
            lex.pos, lex.tok_pos, lex.done = pos, tok_pos, done
            r.errors.append(r._error(state, sym if sym >= 0 else t.names[sym], lex, last_shift_pos))
            if not r._resync(lex, snapshot, states, values, poss):
                return
            pos, done, stack = lex.pos, lex.done, lex.stack
            cond = condition(stack[-1])
            sym = -1
            continue
        how = action & 3
        if how == 1:  # shift
            states.append(action >> 2)
            values.append(yytext)
            poss.append(tok_pos)
            last_shift_pos = tok_pos
            sym = -1
        elif how == 2:  # reduce
            prod = action >> 2
            n = plen[prod]
            if psem[prod] == 0:
                val = values[-n] if n else None
            else:
                try:
                    val = reduce_action(r, prod, values, poss, n)
                except _DbError as exc:
                    at = poss[-n] if n else last_shift_pos
                    r.errors.append(MermaidParseError(str(exc), pos=at, line=None, column0=None, kind="db"))
                    lex.pos, lex.tok_pos, lex.done = pos, tok_pos, done
                    if not r._resync(lex, snapshot, states, values, poss):
                        return
                    pos, done, stack = lex.pos, lex.done, lex.stack
                    cond = condition(stack[-1])
                    sym = -1
                    continue
            if n:
                p0 = poss[-n]
                del states[-n:]
                del values[-n:]
                del poss[-n:]
            else:
                p0 = poss[-1] if poss else 0
            lhs = plhs[prod]
            goto = flat[states[-1] * ns + lhs] >> 2
            states.append(goto)
            values.append(val)
            poss.append(p0)
            if lhs == 5:  # a document: a statement boundary, where recovery restarts
                snapshot = (goto, len(states), val)
        else:
            return
