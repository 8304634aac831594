"""Mermaid 11's flowchart grammar, run in Python: the soft reader accepts exactly what Mermaid accepts.

The grammar is not re-written by hand. ``flow_tables.json`` holds the jison parser that ships in
the bundled Mermaid 11 (its LALR table, productions, lexer rules and start conditions), extracted from
the JS engine by ``python -m flowcore.mermaid.engines.js --dump-grammar`` (a test checks the file still equals the
bundled parser). It is stored in the form the driver reads (integer keys as [key, value] pairs, lexer rules
already translated to Python patterns), so loading it is a JSON decode and ``dict(pairs)`` per state; each
start condition's lexer regex is compiled when the lexer first enters it. (Converting the raw dump and
compiling all 21 conditions cost ~40 ms of every ``python -m flowcore check``.)

Speed: ``lalr.run`` drives the same tables, flattened, with a lexer that tries only the rules that can match at
each character (compiled by Cython when ``make`` could build it); ``_Run.run`` below is jison's loop as written,
kept as the reference the tests compare it with (``parse_flowchart(..., fast=False)``).
"""

from __future__ import annotations

import binascii
import json
import os
import re
import sys
import zlib
from array import array
from dataclasses import dataclass

from flowcore.mermaid.compiled import load
from flowcore.mermaid.errors import MermaidParseError, _DbError
from flowcore.mermaid.text import JS_SPACE, Prepared, decode_entities

TYPE_CHECKING = False  # not typing's: `check` starts without importing typing (~3 ms)
if TYPE_CHECKING:
    from typing import Any

_TABLES = os.path.join(os.path.dirname(__file__), "flow_tables.json")


# ------------------------------------------------------------------------------------------ the tables

def _js_regex_to_python(src: str) -> str:
    """A jison rule (JS regex source, anchored with ^) as a Python pattern with the same matches."""
    assert src.startswith("^")
    src = src[1:]
    src = src.replace("(?!\\n||)*", "").replace("(?!-)+", "(?!-)")
    out, i, in_class = [], 0, False
    while i < len(src):
        ch = src[i]
        if ch == "\\" and i + 1 < len(src):
            nxt = src[i + 1]
            if nxt == "s":
                out.append(JS_SPACE if in_class else f"[{JS_SPACE}]")
            else:
                out.append(src[i:i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
            out.append(ch)
        elif ch == "[":
            in_class = True
            out.append(ch)
            if src[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if src[i + 1:i + 2] == "]":  # a literal ']' first in a class
                out.append("\\]")
                i += 1
        elif ch == ".":
            out.append("[^\n\r\u2028\u2029]")
        elif ch == "$":
            out.append(r"\Z")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


class _Grammar:
    """The jison tables as the drivers read them (``flow_tables.json``, loaded by ``grammar()``). The parse table is
    one flat array of action codes (``flat[state * nsym + symbol]``: ``goto * 4``, ``state * 4 + 1`` shift,
    ``production * 4 + 2`` reduce, ``3`` accept, 0 none); ``table`` gives it in jison's own form."""

    def __init__(self, symbols: dict[str, int], terminals: dict[int, str], productions: list[list[int]], flat: array,
                 nsym: int, default_actions: dict[int, Any], condition_res: dict, condition_rules: dict[str, list[int]],
                 lexer: dict | None = None) -> None:
        self.symbols, self.terminals, self.productions = symbols, terminals, productions
        self.flat, self.nsym, self.default_actions = flat, nsym, default_actions
        self.condition_res, self.condition_rules = condition_res, condition_rules
        self.lexer = lexer  # the lexer's program as stored (lexdfa.Program.dump), or None: built from the rules
        self._table: list[dict[int, Any]] | None = None

    @property
    def table(self) -> list[dict[int, Any]]:
        """state -> {symbol: [1, state] shift | [2, production] reduce | [3] accept | goto state} (made when the
        reference driver or an error message first needs it)."""
        if self._table is None:
            flat, ns = self.flat, self.nsym
            rows: list[dict[int, Any]] = []
            for state in range(len(flat) // ns):
                row: dict[int, Any] = {}
                for sym in range(ns):
                    code = flat[state * ns + sym]
                    if code:
                        kind = code & 3
                        row[sym] = code >> 2 if kind == 0 else [3] if kind == 3 else [kind, code >> 2]
                rows.append(row)
            self._table = rows
        return self._table


def _pack_table(rows: list[dict[int, Any]], nsym: int) -> dict:
    """The parse table as ``flow_tables.json`` stores it: the flat array of action codes (see ``_Grammar``), as
    little-endian int32, zlib-compressed, base64 (a JSON list of lists cost ~20% of a cold ``check`` to decode)."""
    import base64

    flat = array("i", bytes(4 * len(rows) * nsym))
    for state, row in enumerate(rows):
        for sym, act in row.items():
            if isinstance(act, int):
                assert act > 0, "a goto to state 0 would read as no action"
                code = act * 4
            else:
                code = 3 if act[0] == 3 else act[1] * 4 + act[0]
            flat[state * nsym + sym] = code
    if sys.byteorder != "little":
        flat.byteswap()
    return {"states": len(rows), "symbols": nsym,
            "codes": base64.b64encode(zlib.compress(flat.tobytes(), 9)).decode("ascii")}


def _unpack_table(packed: dict) -> array:
    flat = array("i")
    flat.frombytes(zlib.decompress(binascii.a2b_base64(packed["codes"])))
    if sys.byteorder != "little":
        flat.byteswap()
    assert len(flat) == packed["states"] * packed["symbols"]
    return flat


class _ConditionRegexes(dict):
    """Start condition -> the lexer's regex for it (one named group per rule), compiled on first use: a
    workflow rarely enters more than a few of the 21 conditions."""

    def __init__(self, rules: list[str], conditions: dict[str, list[int]]):
        super().__init__()
        self._rules, self._conditions = rules, conditions

    def __missing__(self, name: str) -> re.Pattern:
        pattern = re.compile("|".join(f"(?P<r{k}>{self._rules[k]})" for k in self._conditions[name]), re.ASCII)
        self[name] = pattern
        return pattern

    def lookahead(self, name: str) -> tuple[re.Pattern | None, tuple[tuple[str, re.Pattern], ...]]:
        """The condition's regex without its rules that first skip ahead to a literal (Mermaid's
        ``[^\\n]*direction\\s+TD[^\\n]*`` and ``[^\\s"]+@``), and for each such rule (literal, the characters that
        end the skip). Tried at every token, such a rule costs the rest of the line (or of a run without spaces)
        each time: quadratic on one long line. Where its literal does not come before the skip must end, the rule
        cannot match, and the regex without it gives the same token (None: the condition has no such rule)."""
        key = f"\0ahead:{name}"
        if key not in self:
            ahead, kept = [], []
            for k in self._conditions[name]:
                m = _SCAN_AHEAD.match(self._rules[k])
                if m:
                    ahead.append((m.group(2), re.compile(f"[{m.group(1)}]", re.ASCII)))
                else:
                    kept.append(k)
            pattern = re.compile("|".join(f"(?P<r{k}>{self._rules[k]})" for k in kept), re.ASCII) \
                if ahead else None
            self[key] = (pattern, tuple(ahead))
        return self[key]


lalr = load("lalr")  # the driver: Cython's build of lalr.py when it matches the source, else lalr.py itself
_SCAN_AHEAD, destruct_end, destruct_link, destruct_start = (lalr._SCAN_AHEAD, lalr.destruct_end, lalr.destruct_link,
                                                            lalr.destruct_start)
_SIMPLE_TOKENS, _PUSH_TOKENS, _POP_TOKENS = lalr._SIMPLE_TOKENS, lalr._PUSH_TOKENS, lalr._POP_TOKENS

_GRAMMAR: _Grammar | None = None


def grammar() -> _Grammar:
    global _GRAMMAR
    if _GRAMMAR is None:
        with open(_TABLES, encoding="utf-8") as f:
            raw = json.load(f)
        _GRAMMAR = _Grammar(raw["symbols"], dict(raw["terminals"]), raw["productions"], _unpack_table(raw["table"]),
                            raw["table"]["symbols"], dict(raw["defaultActions"]),
                            _ConditionRegexes(raw["rules"], raw["conditions"]), raw["conditions"], raw.get("lexer"))
    return _GRAMMAR


def runtime_tables(raw: dict) -> dict[str, Any]:
    """The jison parser as the JS engine dumps it (string keys, JS regexes) in the form
    ``flow_tables.json`` stores it: integer-keyed [key, value] pairs, the parse table packed (``_pack_table``),
    Python patterns, and the lexer's program (``lexdfa``) built from those patterns."""
    from flowcore.mermaid import lexdfa

    rules = [_js_regex_to_python(r) for r in raw["rules"]]
    return {
        "symbols": raw["symbols"],
        "terminals": [[int(k), v] for k, v in raw["terminals"].items()],
        "productions": [p if isinstance(p, list) else [0, 0] for p in raw["productions"]],
        "table": _pack_table([{int(k): v for k, v in state.items()} for state in raw["table"]],
                             max(raw["symbols"].values()) + 1),
        "defaultActions": [[int(k), v] for k, v in raw["defaultActions"].items()],
        "rules": rules,
        "conditions": raw["conditions"],
        "lexer": lexdfa.Program(rules).dump(),
    }


# ------------------------------------------------------------------------------------------ the graph

flowdb = load("flowdb")  # FlowDB and its records: Cython's build of flowdb.py when current, else flowdb.py itself
FlowDB, Vertex, FlowEdge, SubGraph = flowdb.FlowDB, flowdb.Vertex, flowdb.FlowEdge, flowdb.SubGraph
SHAPE_NAMES, load_yaml = flowdb.SHAPE_NAMES, flowdb.load_yaml


# ------------------------------------------------------------------------------------------ the lexer

class _Lexer:
    """jison's lexer semantics: rules tried in order (first match wins), start-condition stack."""

    __slots__ = ("code", "pos", "stack", "db", "g", "yytext", "match", "tok_pos", "done", "line", "_next")

    def __init__(self, code: str, db: FlowDB, g: _Grammar):
        self.code, self.pos, self.stack, self.db, self.g = code, 0, ["INITIAL"], db, g
        self.yytext, self.match, self.tok_pos, self.done = "", "", 0, False
        self._next: dict = {}  # literal or class -> its next index at or after pos

    def _find(self, what: str | re.Pattern) -> int:
        """Next index of a literal or a one-character class at or after pos (len(code) when none): cached until
        pos passes it, so all the lookups of a lex cost one pass over the text."""
        at = self._next.get(what, -1)
        if at < self.pos:
            if isinstance(what, str):
                at = self.code.find(what, self.pos)
            else:
                m = what.search(self.code, self.pos)
                at = m.start() if m else -1
            at = len(self.code) if at < 0 else at
            self._next[what] = at
        return at

    def _regex(self, state: str) -> re.Pattern:
        quick, ahead = self.g.condition_res.lookahead(state)
        if quick is None or any(self._find(word) < self._find(stop) for word, stop in ahead):
            return self.g.condition_res[state]
        return quick

    def pop(self) -> None:
        if len(self.stack) > 1:
            self.stack.pop()

    def lex(self):  # noqa: C901 - one branch per lexer rule, as jison's performAction
        code = self.code
        while True:
            if self.done:
                return 1
            if self.pos >= len(code):
                self.done = True
            m = self._regex(self.stack[-1]).match(code, self.pos)
            if m is None:
                if self.pos >= len(code):
                    return 1
                line = code.count("\n", 0, self.pos) + 1
                raise MermaidParseError(f"Lexical error on line {line}. Unrecognized text.", pos=self.pos,
                                        line=line, column0=None, kind="lexical")
            rule = int(m.lastgroup[1:])
            text = m.group(0)
            self.tok_pos = self.pos
            self.pos = m.end()
            self.yytext = self.match = text
            if self.done and self.pos < len(code):
                self.done = False
            tok = self._action(rule)
            if tok is not None:
                return tok

    def _action(self, r: int):  # noqa: C901, PLR0911, PLR0912
        # Token numbers are the grammar's (symbols); strings are token names looked up by the parser.
        if r >= 56:
            if r <= 60:
                return (121, 122, 123, 124, 125)[r - 56]
            simple = _SIMPLE_TOKENS.get(r)
            if simple is not None:
                return simple
            push = _PUSH_TOKENS.get(r)
            if push is not None:
                self.stack.append(push[0])
                return push[1]
            pop = _POP_TOKENS.get(r)
            if pop is not None:
                self.pop()
                return pop
        if 46 <= r <= 55:
            self.pop()
            return 14
        if 35 <= r <= 38:
            if self.db.first_graph():
                self.stack.append("dir")
            return 12
        if r == 0:
            self.stack.append("acc_title")
            return 34
        if r == 1:
            self.pop()
            return "acc_title_value"
        if r == 2:
            self.stack.append("acc_descr")
            return 36
        if r == 3:
            self.pop()
            return "acc_descr_value"
        if r == 4:
            self.stack.append("acc_descr_multiline")
            return None
        if r in (5, 12, 14, 17, 20, 23, 33):
            self.pop()
            return None
        if r == 6:
            return "acc_descr_multiline_value"
        if r == 7:
            self.stack.append("shapeData")
            self.yytext = ""
            return 40
        if r == 8:
            self.stack.append("shapeDataStr")
            return 40
        if r == 9:
            self.pop()
            return 40
        if r == 10:
            self.yytext = re.sub(f"\n[{JS_SPACE}]*", "<br/>", self.yytext)
            return 40
        if r == 11:
            return 40
        if r == 13:
            self.stack.append("callbackname")
            return None
        if r == 15:
            self.pop()
            self.stack.append("callbackargs")
            return None
        if r == 16:
            return 95
        if r == 18:
            return 96
        if r == 19:
            return "MD_STR"
        if r == 21:
            self.stack.append("md_string")
            return None
        if r == 22:
            return "STR"
        if r == 24:
            self.stack.append("string")
            return None
        if r == 25:
            return 84
        if r == 26:
            return 102
        if r == 27:
            return 85
        if r == 28:
            return 104
        if r == 29:
            return 86
        if r == 30:
            return 87
        if r == 31:
            return 97
        if r == 32:
            self.stack.append("click")
            return None
        if r == 34:
            return 88
        if r == 39:
            return 27
        if r == 40:
            return 32
        if 41 <= r <= 44:
            return 98
        if r == 45:
            self.pop()
            return 13
        raise AssertionError(f"lexer rule {r} has no action")


# ------------------------------------------------------------------------------------------ the parser

@dataclass
class FlowParse:
    """The outcome of reading one text: the graph, and the errors (the first is Mermaid's)."""

    db: FlowDB
    prepared: Prepared
    kind: str | None
    errors: list[MermaidParseError]


def parse_flowchart(text: str, *, recover: bool = True, fast: bool = True) -> FlowParse:
    """Read ``text`` as Mermaid 11 does. With ``recover``, reading goes on after an error from the next line
    (so an editor can show every broken line); ``errors[0]`` is always the error Mermaid reports."""
    from flowcore.mermaid.text import text_budget

    with text_budget():  # the front matter and every node's data count together against one bound
        return _parse_flowchart(text, recover, fast)


def _parse_flowchart(text: str, recover: bool, fast: bool) -> FlowParse:
    prepared = Prepared(text)
    db = FlowDB()
    errors: list[MermaidParseError] = []
    from flowcore.mermaid.text import diagram_kind

    kind = diagram_kind(prepared)
    if kind is None:
        return FlowParse(db, prepared, None, errors)
    if prepared.front_matters:  # js-yaml loads it before the flowchart is read: an error there is Mermaid's
        from flowcore.mermaid import frontmatter

        errors += frontmatter.errors(prepared.original, prepared.front_matters)
        if errors and not recover:
            return FlowParse(db, prepared, kind, errors)
    _Run(prepared, db, errors, recover, fast).run()
    return FlowParse(db, prepared, kind, errors)


class _Run:
    """One LR parse (with optional recovery after errors)."""

    def __init__(self, prepared: Prepared, db: FlowDB, errors: list, recover: bool, fast: bool):
        self.p, self.db, self.errors, self.recover, self.fast = prepared, db, errors, recover, fast
        self.g = grammar()
        self.has_direction = "direction" in prepared.code  # the lexer reads such a line as a direction

    def run(self) -> None:  # noqa: C901, PLR0912, PLR0915 - the jison driver loop, kept in one place
        """With ``fast``, ``lalr.run`` (flat tables, compiled when built); else jison's algorithm as written, over
        the tables as loaded: the reference the tests hold the fast driver to."""
        if self.fast and lalr.run(self):
            return
        g, db = self.g, self.db
        code = self.p.code
        lexer = _Lexer(code, db, g)
        table, defaults, prods, symbols = g.table, g.default_actions, g.productions, g.symbols
        states = [0]
        values: list[Any] = [None]
        poss: list[int] = [0]
        sym = None
        last_shift_pos = 0
        snapshot = None  # parser stacks at the last statement boundary (for recovery)
        act = self._reduce
        while True:
            state = states[-1]
            action = defaults.get(state)
            if action is None:
                if sym is None:
                    try:
                        sym = lexer.lex()
                    except MermaidParseError as err:
                        self.errors.append(err)
                        if not self._resync(lexer, snapshot, states, values, poss):
                            return
                        sym = None
                        continue
                    if not isinstance(sym, int):
                        sym = symbols.get(sym, sym)
                    tok_pos = lexer.tok_pos
                action = table[state].get(sym) if isinstance(sym, int) else None
            if action is None:
                self.errors.append(self._error(state, sym, lexer, last_shift_pos))
                if not self._resync(lexer, snapshot, states, values, poss):
                    return
                sym = None
                continue
            kind = action[0]
            if kind == 1:
                states.append(action[1])
                values.append(lexer.yytext)
                poss.append(tok_pos)
                last_shift_pos = tok_pos
                sym = None
            elif kind == 2:
                prod = action[1]
                lhs, n = prods[prod]
                try:
                    val = act(prod, values, poss, n)
                except _DbError as err:
                    line, col = self.p.code_line_col(poss[-n] if n else last_shift_pos)
                    self.errors.append(MermaidParseError(str(err), pos=poss[-n] if n else last_shift_pos,
                                                         line=None, column0=None, kind="db"))
                    if not self._resync(lexer, snapshot, states, values, poss):
                        return
                    sym = None
                    continue
                p0 = poss[-n] if n else (poss[-1] if poss else 0)
                if n:
                    del states[-n:]
                    del values[-n:]
                    del poss[-n:]
                goto = table[states[-1]][lhs]
                states.append(goto)
                values.append(val)
                poss.append(p0)
                if lhs == 5:  # a document: a statement boundary, where recovery restarts
                    # (the stack below is unchanged while it stays at least this long: no copy needed)
                    snapshot = (goto, len(states), val)
            else:
                return

    def _resync(self, lexer: _Lexer, snapshot, states: list, values: list, poss: list) -> bool:
        """After an error: drop the rest of the line and go on from the last statement boundary."""
        if not self.recover or snapshot is None or lexer.pos >= len(lexer.code):
            return False
        nl = lexer.code.find("\n", max(lexer.tok_pos, lexer.pos - 1) if lexer.pos > 0 else 0)
        if nl < 0:
            return False
        lexer.pos = nl + 1
        lexer.stack = ["INITIAL"]
        lexer.done = False
        state, depth, doc = snapshot
        if len(states) < depth or states[depth - 1] != state or values[depth - 1] is not doc:
            return False  # the parser has left that statement boundary: no safe place to go on from
        del states[depth:]
        del values[depth:]
        del poss[depth:]
        return len(self.errors) < 50

    def _reduce(self, prod: int, v: list, poss: list, n: int) -> Any:
        # (the action reads positions from an array, as the fast driver keeps them; both stacks have one entry each)
        return lalr.reduce_action(self, self.db, prod, v, array("q", poss), len(v) - 1, n)

    def _error(self, state: int, sym: Any, lexer: _Lexer, last_shift_pos: int) -> MermaidParseError:
        g = self.g
        expected = [f"'{g.terminals[k]}'" for k in sorted(g.table[state]) if k in g.terminals and k > 2]
        token = g.terminals.get(sym, sym) if isinstance(sym, int) else sym
        line, col0 = self.p.code_line_col(last_shift_pos)
        msg = (f"Parse error on line {line}:\nExpecting {', '.join(expected)}, got '{token}'")
        return MermaidParseError(msg, pos=last_shift_pos, line=line, column0=col0, text=lexer.match,
                                 token=str(token), expected=expected)

def label_of(text: str | None) -> str | None:
    return decode_entities(text) if text is not None else None


# ---------------------------------------------------------------------------------- comparing graphs

def graph_json(db: FlowDB) -> dict:
    """The graph in the form ``mermaid_js.mermaid_graph`` reads out of Mermaid's FlowDB."""
    def vdata(v: Vertex) -> dict:
        d = v.data
        return {"id": v.id, "type": v.type, "text": v.text, "labelType": v.label_type, "classes": list(v.classes),
                "styles": list(v.styles), "props": v.props or {}, "icon": d.get("icon"), "img": d.get("img"),
                "form": d.get("form"), "pos": d.get("pos"), "constraint": d.get("constraint"),
                "w": d.get("w"), "h": d.get("h")}

    return {
        "ok": True, "direction": db.direction,
        "vertices": [vdata(v) for v in db.vertices.values()],
        "edges": [{"start": e.start, "end": e.end, "type": e.type, "stroke": e.stroke, "length": e.length,
                   "text": e.text, "labelType": e.label_type, "id": e.id if e.user_id else None,
                   "classes": list(e.classes), "style": e.style, "interpolate": e.interpolate,
                   "animate": e.data.get("animate"), "animation": e.data.get("animation")} for e in db.edges],
        "subgraphs": [{"id": s.id, "title": s.title, "nodes": list(s.nodes), "dir": s.dir,
                       "labelType": s.label_type, "classes": list(s.classes)} for s in db.subgraphs],
        "classes": {k: list(v) for k, v in db.classes.items()},
        "accTitle": db.acc_title, "accDescr": db.acc_descr,
        "defaultStyle": db.default_style, "defaultInterpolate": db.default_interpolate,
    }


def _lt(label_type: str | None) -> str:
    return "markdown" if label_type == "markdown" else "text"  # a quoted string draws as plain text


def canonical_graph(g: dict, *, exact_order: bool = True) -> dict:
    """What decides the drawing, comparable with ``==``: vertices (shape, label, classes as a set, styles),
    edges in order (ends, head, stroke, length, label, user id, classes), subgraphs (title, members as a
    set, direction, classes), classDefs, direction. A quoted and an unquoted label draw the same."""
    def num(x: Any) -> Any:
        return int(x) if isinstance(x, float) and x.is_integer() else x

    # (FlowDB's props, from [|field:value|x], never reach the drawing: getData does not pass them on)
    verts = {v["id"]: (v["type"], v["text"], _lt(v["labelType"]), tuple(sorted(set(v["classes"]))),
                       tuple(v["styles"]), (),
                       tuple(str(v.get(k)) for k in ("icon", "img", "form", "pos", "constraint", "w", "h")))
             for v in g["vertices"]}
    edges = [(e["start"], e["end"], e["type"], e["stroke"], num(e["length"]), e["text"], _lt(e["labelType"]),
              e["id"], tuple(sorted(set(e["classes"]))), tuple(e["style"] or ()), e.get("interpolate"),
              str(e.get("animate")), str(e.get("animation"))) for e in g["edges"]]
    real = set(verts) | {s["id"] for s in g["subgraphs"]}  # other members (a title string) draw nothing
    for s in g["subgraphs"]:  # a vertex with a group's id: the group is drawn, with the vertex's classes
        if s["id"] in verts:
            v = verts[s["id"]]
            verts[s["id"]] = (None, None, "text", v[3], v[4], (), ())
    seen_ids: dict[str, int] = {}

    def key(sid: str) -> str:  # Mermaid keeps two subgraphs written with one id as two groups
        seen_ids[sid] = seen_ids.get(sid, 0) + 1
        return sid if seen_ids[sid] == 1 else f"{sid}#{seen_ids[sid]}"

    subs = {key(s["id"]): (s["title"], _lt(s["labelType"]), frozenset(n for n in s["nodes"] if n in real), s["dir"],
                      tuple(sorted(set(verts[s["id"]][3] if s["id"] in verts else s["classes"]))))
            for s in g["subgraphs"]}
    return {"direction": g["direction"], "vertices": verts, "edges": edges, "subgraphs": subs,
            "classes": {k: tuple(v) for k, v in g["classes"].items()},
            "vertex_order": list(verts) if exact_order else None,
            "defaults": (tuple(g.get("defaultStyle") or ()), g.get("defaultInterpolate"))}
