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

import json
import os
import re
from dataclasses import dataclass, field

from flowcore.mermaid.compiled import load
from flowcore.mermaid.errors import MermaidParseError, _DbError
from flowcore.mermaid.text import JS_SPACE, Prepared, decode_entities

TYPE_CHECKING = False  # not typing's: `check` starts without importing typing (~3 ms)
if TYPE_CHECKING:
    from typing import Any

_TABLES = os.path.join(os.path.dirname(__file__), "flow_tables.json")
MAX_EDGES = 100_000  # as the hard check configures Mermaid (its default is 500)


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


@dataclass
class _Grammar:
    symbols: dict[str, int]
    terminals: dict[int, str]
    productions: list[list[int]]  # [lhs, length]
    table: list[dict[int, Any]]  # state -> {symbol: [1, state] shift | [2, production] reduce | [3] accept | goto}
    default_actions: dict[int, Any]
    condition_res: dict[str, re.Pattern]
    condition_rules: dict[str, list[int]]


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
        _GRAMMAR = _Grammar(raw["symbols"], dict(raw["terminals"]), raw["productions"],
                            [dict(state) for state in raw["table"]], dict(raw["defaultActions"]),
                            _ConditionRegexes(raw["rules"], raw["conditions"]), raw["conditions"])
    return _GRAMMAR


def runtime_tables(raw: dict) -> dict[str, Any]:
    """The jison parser as the JS engine dumps it (string keys, JS regexes) in the form
    ``flow_tables.json`` stores it: integer-keyed [key, value] pairs, Python patterns."""
    return {
        "symbols": raw["symbols"],
        "terminals": [[int(k), v] for k, v in raw["terminals"].items()],
        "productions": [p if isinstance(p, list) else [0, 0] for p in raw["productions"]],
        "table": [[[int(k), v] for k, v in state.items()] for state in raw["table"]],
        "defaultActions": [[int(k), v] for k, v in raw["defaultActions"].items()],
        "rules": [_js_regex_to_python(r) for r in raw["rules"]],
        "conditions": raw["conditions"],
    }


# ------------------------------------------------------------------------------------------ the graph

@dataclass(slots=True)
class Vertex:
    id: str
    text: str | None = None
    label_type: str = "text"
    type: str | None = None  # Mermaid's shape name (square, round, ... or a shape-data name)
    styles: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    props: dict | None = None
    data: dict = field(default_factory=dict)  # icon, img, form, pos, constraint, w, h from shape data
    pos: int = field(default=-1, compare=False)  # offset in the parsed code of the first mention
    labeled: bool = field(default=False, compare=False)  # a label was written (not the id by default)


@dataclass(slots=True)
class FlowEdge:
    start: str
    end: str
    type: str | None
    stroke: str | None
    length: int | None
    text: str = ""
    label_type: str = "text"
    id: str = ""
    user_id: bool = False
    classes: list[str] = field(default_factory=list)
    style: list[str] | None = None
    interpolate: str | None = None
    data: dict = field(default_factory=dict)  # animate, animation, curve from edge data
    pos: int = field(default=-1, compare=False)


@dataclass
class SubGraph:
    id: str
    title: str
    nodes: list[str]
    dir: str | None
    label_type: str
    classes: list[str] = field(default_factory=list)
    pos: int = field(default=-1, compare=False)


class FlowDB:
    """A port of Mermaid 11's FlowDB: the graph the grammar's actions build."""

    def __init__(self) -> None:
        self.vertices: dict[str, Vertex] = {}
        self.edges: list[FlowEdge] = []
        self.classes: dict[str, list[str]] = {}
        self.subgraphs: list[SubGraph] = []
        self.sub_lookup: dict[str, SubGraph] = {}
        self.direction: str | None = None
        self.acc_title = ""
        self.acc_descr = ""
        self.tooltips: dict[str, str] = {}
        self.clicks: list[tuple[str, ...]] = []
        self.first_graph_flag = True
        self.sub_count = 0
        self.default_style: list[str] | None = None
        self.default_interpolate: str | None = None
        self._edge_ids: dict[str, FlowEdge] = {}
        self._pair_count: dict[tuple[str, str], int] = {}
        self._claimed: set[str] = set()  # nodes of subgraphs already pushed (makeUniq)
        self.relabels: list[tuple[str, str, str, int]] = []  # (vertex, old label, new label, where)
        self.kept_statements: list[str] = []  # style, linkStyle, click, accTitle, accDescr as written
        self.cur_pos = -1

    def first_graph(self) -> bool:
        if self.first_graph_flag:
            self.first_graph_flag = False
            return True
        return False

    def set_direction(self, d: str) -> None:
        d = d.strip()
        if "<" in d:
            d = "RL"
        if "^" in d:
            d = "BT"
        if ">" in d:
            d = "LR"
        if "v" in d:
            d = "TB"
        self.direction = "TB" if d == "TD" else d

    def add_vertex(self, vid: Any, text: dict | None = None, vtype: str | None = None,
                   styles: list[str] | None = None, classes: list[str] | None = None, dir_: str | None = None,
                   props: dict | None = None, shape_data: str | None = None) -> None:
        if not vid or not str(vid).strip():
            return
        data = None
        if shape_data is not None:
            doc = shape_data + "\n" if "\n" in shape_data else "{\n" + shape_data + "\n}"
            data = load_yaml(doc)
        edge = self._edge_ids.get(vid)
        if edge is not None:
            if isinstance(data, dict):
                for key, attr in (("animate", "animate"), ("animation", "animation"), ("curve", "curve")):
                    if key in data:
                        edge.data = {**edge.data, attr: data[key]}
            return
        v = self.vertices.get(vid)
        if v is None:
            v = self.vertices[vid] = Vertex(vid, pos=self.cur_pos)
        if text is not None:
            f = str(text["text"]).strip()
            v.label_type = text["type"]
            if len(f) >= 1 and f.startswith('"') and f.endswith('"'):
                f = f[1:-1]
            if v.labeled and f != v.text:
                self.relabels.append((vid, v.text or "", f, self.cur_pos))
            v.text, v.labeled = f, True
        elif v.text is None:
            v.text = vid
        if vtype is not None:
            v.type = vtype
        if styles:
            v.styles.extend(styles)
        if classes:
            v.classes.extend(classes)
        if v.props is None:
            v.props = props if props is not None else {}
        elif props:
            v.props.update(props)
        if data is not None:
            if not isinstance(data, dict):
                raise _DbError("Cannot read shape data (it must be 'key: value' pairs)")
            shape = data.get("shape")
            if shape:
                shape = str(shape)
                if shape != shape.lower() or "_" in shape:
                    raise _DbError(f"No such shape: {shape}. Shape names should be lowercase.")
                if shape not in SHAPE_NAMES:
                    raise _DbError(f"No such shape: {shape}.")
                v.type = shape
            if data.get("label"):
                v.text = _js_str(data["label"])
                lt = data.get("labelType")
                v.label_type = lt if lt in ("markdown", "string", "text") else "markdown"
            for key in ("icon", "img"):
                if data.get(key):
                    v.data[key] = data[key]
                    if not str(data.get("label") or "").strip() and v.text == vid:
                        v.text = ""
            for key in ("form", "pos", "constraint", "w", "h"):
                if data.get(key):
                    v.data[key] = data[key]

    def add_link(self, starts: list[str], ends: list[str], link: dict) -> None:
        lid = link.get("id")
        lid = lid.replace("@", "", 1) if isinstance(lid, str) else None
        last = starts[-1]
        first = ends[0]
        for a in starts:
            for b in ends:
                self._add_single_link(a, b, link, lid if (a == last and b == first) else None)

    def _add_single_link(self, start: str, end: str, link: dict, lid: str | None) -> None:
        e = FlowEdge(start, end, link.get("type"), link.get("stroke"), None, interpolate=self.default_interpolate,
                     pos=self.cur_pos)
        t = link.get("text")
        if t is not None:
            if isinstance(t, dict):
                txt = str(t["text"]).strip()
                e.label_type = t["type"] if t["type"] in ("markdown", "string", "text") else "markdown"
            else:  # unreachable in the grammar (TESTSTR), kept for parity
                txt = str(t).strip()
            if len(txt) >= 1 and txt.startswith('"') and txt.endswith('"'):
                txt = txt[1:-1]
            e.text = txt
        length = link.get("length")
        e.length = 10 if length is not None and length > 10 else length
        pair = (start, end)
        if lid and lid not in self._edge_ids:
            e.id, e.user_id = lid, True
        else:
            n = self._pair_count.get(pair, 0)
            e.id = f"L_{start}_{end}_{0 if n == 0 else n + 1}"
        self._pair_count[pair] = self._pair_count.get(pair, 0) + 1
        if len(self.edges) >= MAX_EDGES:
            raise _DbError(f"Edge limit exceeded. {len(self.edges)} edges found, but the limit is {MAX_EDGES}.")
        self.edges.append(e)
        self._edge_ids.setdefault(e.id, e)

    def _edge_at(self, index: Any) -> FlowEdge:
        if isinstance(index, str) and re.fullmatch(r"0|[1-9][0-9]*", index) and int(index) < len(self.edges):
            return self.edges[int(index)]
        raise _DbError(f"linkStyle {index}: there is no edge number {index} (edges are numbered from 0 to "
                       f"{len(self.edges) - 1} in the order they are written)")

    def update_link_interpolate(self, positions: list[str], interp: str) -> None:
        for p in positions:
            if p == "default":
                self.default_interpolate = interp
            else:
                self._edge_at(p).interpolate = interp

    def update_link(self, positions: list[str], style: list[str]) -> None:
        for p in positions:
            if p == "default":
                self.default_style = style
            else:
                e = self._edge_at(p)
                e.style = list(style)
                if e.style and not any(s.startswith("fill") for s in e.style):
                    e.style.append("fill:none")

    def add_class(self, ids: str, styles: list[str]) -> None:
        parts = ",".join(styles).replace("\\,", "\u00a7\u00a7\u00a7").replace(",", ";") \
            .replace("\u00a7\u00a7\u00a7", ",").split(";")
        for cid in ids.split(","):
            self.classes.setdefault(cid, []).extend(parts)

    def set_class(self, ids: str, cls: str) -> None:
        for nid in ids.split(","):
            v = self.vertices.get(nid)
            if v is not None:
                v.classes.append(cls)
            e = self._edge_ids.get(nid)
            if e is not None:
                e.classes = [*e.classes, cls]
            s = self.sub_lookup.get(nid)
            if s is not None:
                s.classes.append(cls)

    def set_click(self, ids: str, *args: Any) -> None:
        self.clicks.append((ids, *[str(a) for a in args if a is not None]))
        self.set_class(ids, "clickable")

    def set_tooltip(self, ids: str, tip: str | None) -> None:
        if tip is not None:
            for nid in ids.split(","):
                self.tooltips[nid] = tip

    def add_subgraph(self, idobj: dict | None, doc: list, titleobj: dict | None, pos: int) -> str:
        sid = idobj["text"].strip() if idobj is not None else None
        title = titleobj["text"] if titleobj is not None else None
        if idobj is not None and idobj is titleobj and re.search(f"[{JS_SPACE}]", titleobj["text"]):
            sid = None
        flat: list[Any] = []
        for item in doc:
            if isinstance(item, list):
                flat.extend(item)
            else:
                flat.append(item)
        seen: set[str] = set()
        nodes: list[str] = []
        direction = None
        for item in flat:
            if isinstance(item, dict):
                if item.get("stmt") == "dir":
                    direction = item["value"]
                continue
            if not isinstance(item, str) or not item.strip(f"{JS_SPACE}") or item in seen:
                continue
            seen.add(item)
            nodes.append(item)
        sid = sid if sid is not None else f"subGraph{self.sub_count}"
        title = (title or "").strip()
        self.sub_count += 1
        lt = titleobj.get("type") if titleobj else None
        sg = SubGraph(sid, title, [n for n in nodes if n not in self._claimed], direction,
                      lt if lt in ("markdown", "string", "text") else "markdown", pos=pos)
        self._claimed.update(sg.nodes)
        self.subgraphs.append(sg)
        self.sub_lookup[sid] = sg
        return sid


def _js_str(v: Any) -> str:
    """``String(v)`` in JavaScript, for a value js-yaml loaded (a list joins its items with ',', null in a list is
    empty)."""
    if isinstance(v, list):
        return ",".join("" if x is None else _js_str(x) for x in v)
    if isinstance(v, dict):
        return "[object Object]"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        if v.is_integer():
            return str(int(v))
    return str(v)


# ------------------------------------------------------------------------------------ shape data (YAML)

SHAPE_NAMES = frozenset(json.loads(
    '["anchor","bang","bolt","bow-rect","bow-tie-rectangle","brace","brace-l","brace-r","braces","card",'
    '"choice","circ","circle","cloud","collate","com-link","comment","cross-circ","crossed-circle","curv-trap",'
    '"curved-trapezoid","cyl","cylinder","das","data-store","database","datastore","db","dbl-circ","decision",'
    '"delay","diam","diamond","disk","display","div-proc","div-rect","divided-process","divided-rectangle",'
    '"doc","docs","document","documents","double-circle","doublecircle","event","extract","f-circ",'
    '"filled-circle","flag","flip-tri","flipped-triangle","fork","fr-circ","fr-rect","framed-circle",'
    '"framed-rectangle","h-cyl","half-rounded-rectangle","hex","hexagon","horizontal-cylinder","hourglass",'
    '"icon","in-out","internal-storage","inv-trapezoid","join","junction","lean-l","lean-left","lean-r",'
    '"lean-right","lightning-bolt","lin-cyl","lin-doc","lin-proc","lin-rect","lined-cylinder","lined-document",'
    '"lined-process","lined-rectangle","loop-limit","manual","manual-file","manual-input","notch-pent",'
    '"notch-rect","notched-pentagon","notched-rectangle","note","odd","out-in","paper-tape","pill","prepare",'
    '"priority","proc","process","processes","procs","question","rect","rectangle","rounded","shaded-process",'
    '"sl-rect","sloped-rectangle","sm-circ","small-circle","st-doc","st-rect","stacked-document",'
    '"stacked-rectangle","stadium","start","state","stop","stored-data","subproc","subprocess","subroutine",'
    '"summary","tag-doc","tag-proc","tag-rect","tagged-document","tagged-process","tagged-rectangle",'
    '"terminal","text","trap-b","trap-t","trapezoid","trapezoid-bottom","trapezoid-top","tri","triangle",'
    '"win-pane","window-pane"]'))

def load_yaml(doc: str) -> Any:
    """Shape or edge data as Mermaid reads it (js-yaml, JSON schema: ``yamldata``); a document js-yaml would
    refuse raises :class:`_DbError` (reported as a syntax problem, never guessed at)."""
    from flowcore.mermaid import yamldata

    try:
        return yamldata.load(doc)
    except yamldata.YamlDataError as exc:
        raise _DbError(f"shape data is not valid YAML: {exc}") from None


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
    prepared = Prepared(text)
    db = FlowDB()
    errors: list[MermaidParseError] = []
    from flowcore.mermaid.text import diagram_kind

    kind = diagram_kind(prepared)
    if kind is None:
        return FlowParse(db, prepared, None, errors)
    fm = prepared.front_matter
    if fm is not None and not re.search(r"^\s*\?", fm, re.M) and re.search(r"^\s*:(\s|$)", fm, re.M):
        # a value with no key: js-yaml rejects the front matter, so Mermaid rejects the text
        errors.append(MermaidParseError("the front matter between the --- lines is not valid YAML (a ':' line "
                                        "has no key)", pos=-1, line=None, column0=None, kind="db"))
        if not recover:
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
        if self.fast:
            lalr.run(self)
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
        return lalr.reduce_action(self, prod, v, poss, n)

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
