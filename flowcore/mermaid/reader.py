"""Mermaid flowchart reader and canonical printer (DESIGN §2).

The reader is Mermaid 11's own flowchart grammar (``mermaid_grammar``: the jison tables of the bundled
Mermaid, run in Python, and a port of its FlowDB), so it accepts exactly what Mermaid accepts and reads
the same graph: vertices with shape and label, edges in order with head, stroke, length and label,
subgraph membership as Mermaid decides it, classes. This module turns that graph into the workflow model
(operator types, prompts, ports) and prints a model back as a text Mermaid draws the same way.
"""

from __future__ import annotations

import gc
import json
import re
import threading
from contextlib import contextmanager
from itertools import compress, repeat

from flowcore import catalogue as cat
from flowcore.mermaid.compiled import load
from flowcore.mermaid.grammar import FlowDB, MermaidParseError, parse_flowchart
from flowcore.mermaid.text import JS_SPACE, LazyRegex, decode_entities, humanize, to_error
from flowcore.mermaid.text import lines as text_lines
from flowcore.mermaid.unclosed import relocate
from flowcore.model import SHAPE_OPENER, SHAPES, Diagnostic, Edge, Node, Subgraph, Workflow

# the conversion of FlowDB's graph to the model: Cython's build of convert.py when current, else convert.py itself
convert = load("convert")
arrow_text, label_type_word, resolve_class = convert.arrow_text, convert.label_type_word, convert.resolve_class
_minus_clicks = convert.minus_clicks

TYPE_CHECKING = False  # not typing's: `check` starts without importing typing (~3 ms)
if TYPE_CHECKING:
    from typing import Any

DIRECTIONS = ("TD", "TB", "LR", "RL", "BT")
_PROMPT = LazyRegex(r"^%%\s*@prompt\s+(?P<name>[\w.\-]+)\s*:\s?(?P<text>.*)$")


EARLY = "%%early "  # extras with this prefix are printed before the nodes (a click on a node not yet drawn)


class WorkflowSyntaxError(ValueError):
    """Raised by :func:`parse` when the text is not a readable flowchart; carries the diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("; ".join(str(d) for d in diagnostics) or "syntax error")


# ------------------------------------------------------------------------------------------------ arrows

def canonical_arrow(raw: str) -> str:
    """Any arrow spelling (``--->``, ``<-.->``, ``x--x``) in its canonical form."""
    from flowcore.mermaid.grammar import destruct_end

    t, stroke, length = destruct_end(raw)
    return arrow_text(t, stroke, length)


# ------------------------------------------------------------------------------------------------ reading

def _unescape(text: str) -> str:
    """A prompt's only escapes are \\n (newline) and \\\\ (backslash); LaTeX such as \\boxed stays as is."""
    return re.sub(r"\\([\\n])", lambda m: "\n" if m.group(1) == "n" else "\\", text)


def _escape(text: str) -> str:
    """The prompt as one comment line: a line break is written \\n ('\\r\\n' and '\\r' too: Mermaid ends the line at
    each of them, and the rest of the prompt would be read as statements)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return re.sub(r"\\(?=[\\n]|$)", r"\\\\", text).replace("\n", "\\n")


def mermaid_error(text: str, err: MermaidParseError) -> Diagnostic:
    """An M001 diagnostic at the line (and column) Mermaid names for this error."""
    me = to_error(text, err.as_mermaid())
    msg = me.message
    if me.line is None and err.kind == "db":  # FlowDB errors carry no line: use the statement's
        from flowcore.mermaid.text import Prepared

        line, col = err.at or (Prepared(text).position(err.pos) if err.pos >= 0 else (1, 1))
        return Diagnostic("M001", "error", f"line {line}: {msg[:1].lower() + msg[1:]}", line, col)
    column = me.column
    if column is None and me.line is not None:  # Mermaid names only the line: point at what is wrong on it
        rows = text_lines(text) or [""]  # (the lines the diagnostic counts: a U+2028 in a comment ends none)
        row = rows[me.line - 1] if me.line <= len(rows) else ""
        column = len(row) - len(row.lstrip()) + 1
        if err.kind == "lexical":
            from flowcore.mermaid.text import Prepared

            code = Prepared(text)
            pos = err.pos
            while pos < len(code.code) and code.code[pos] in " \t":
                pos += 1
            line, col = code.position(pos)
            if line == me.line:
                column = col
    # a label, bracket or quote left open further up is reported where it was opened, Mermaid's place kept
    line, col, msg = relocate(text, me.line, column, msg)
    moved = (me.line, column) if (line, col) != (me.line, column) and me.line else None
    return Diagnostic("M001", "error", msg, line, col, mermaid_at=moved)


@contextmanager
def gc_paused():
    """No cyclic garbage collection while a text is read and checked. Reading a large workflow allocates tens of
    thousands of short-lived objects (and no cycles): each 700 of them start a collection, and in a process as
    big as the app a full one can follow (~10% of a 1,000-node soft check). Nesting and threads share one count
    under a lock: the first reader in turns the collector off (if it was on), the last one out turns it back on."""
    global _readers, _gc_was_on
    with _gc_lock:
        if _readers == 0:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _readers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _readers -= 1
            if _readers == 0 and _gc_was_on:
                gc.enable()


_gc_lock = threading.Lock()
_readers = 0
_gc_was_on = False


def parse_lenient(text: str) -> tuple[Workflow, list[Diagnostic]]:
    """Read as much of the flowchart as possible; syntax problems become M001/M002 diagnostics."""
    if not isinstance(text, str):
        return Workflow(), [Diagnostic("M001", "error", "the workflow must be text", 1, 1)]
    with gc_paused():
        return _parse_lenient(text)


def _parse_lenient(text: str) -> tuple[Workflow, list[Diagnostic]]:
    res = parse_flowchart(text)
    diags: list[Diagnostic] = []
    if res.kind is None:
        stripped = res.prepared.detect_text.strip()
        msg = humanize(f"No diagram type detected matching given configuration for text: {stripped[:40]}",
                       unknown_diagram=True)
        from flowcore.mermaid.text import _first_content_line

        line = _first_content_line(text)
        diags.append(Diagnostic("M001", "error", f"line {line}: " + msg[:1].lower() + msg[1:], line, 1))
        w = Workflow()
        _read_prompts(text, w)
        return w, diags
    seen: set[int] = set()
    for err in res.errors:
        d = mermaid_error(text, err)
        if d.line in seen and err is not res.errors[0]:
            continue
        seen.add(d.line or 0)
        diags.append(d)
    w = _to_workflow(text, res, diags)
    return w, diags


def parse(text: str) -> Workflow:
    """Parse a workflow; raise :class:`WorkflowSyntaxError` when the text is not a readable flowchart."""
    w, diags = parse_lenient(text)
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        raise WorkflowSyntaxError(errors)
    return w


def _comment_lines(text: str) -> list[str]:
    """The lines of ``text`` that hold '%%', in order, cut where Mermaid 11 ends a line (``text.lines``: at '\\r\\n',
    '\\r', '\\n'). A '%%' comment runs to the '\\n' there: a U+2028 (or U+2029, U+0085, '\\v', '\\f', '\\x1c'-'\\x1e')
    is part of it, and str.splitlines cut a '%% @prompt' line there, losing the rest of the prompt. A large
    workflow has thousands of other lines: without a '\\r' each '%%' is found with str.find and its line cut around
    it, without making a string of every line."""
    if "\r" in text:
        rows = text_lines(text)
        return list(compress(rows, map(str.__contains__, rows, repeat("%%"))))
    out = []
    at = text.find("%%")
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        if end < 0:
            end = len(text)
        out.append(text[start:end])
        at = text.find("%%", end)
    return out


def _read_prompts(text: str, w: Workflow) -> None:
    """The ``%% @prompt`` lines, and the other whole-line comments: kept as extras printed before the nodes,
    so the canonical text (fmt, the Editor's Format) never drops a note its author wrote."""
    if "%%" not in text:
        return
    for raw in _comment_lines(text):
        line = raw.strip()
        if not line.startswith("%%") or line.startswith("%%{"):
            continue
        if "@prompt" in line and (m := _PROMPT.match(line)):
            w.prompts[m["name"]] = _unescape(m["text"].rstrip())
        elif len(line) > 2:
            w.extras.append(EARLY + line)


def _header_direction(res) -> str:
    m = re.match(r"[ \t\n]*(?:flowchart-elk|flowchart|graph|swimlane-beta)[ \t]*([A-Za-z<>^]+)?", res.prepared.code)
    raw = (m.group(1) if m else None) or ""
    if raw.upper() in DIRECTIONS:
        return raw.upper()
    return res.db.direction or "TB"


def _to_workflow(text: str, res, diags: list[Diagnostic]) -> Workflow:
    db: FlowDB = res.db
    pre = res.prepared
    w = Workflow()
    w.header = "flowchart" if res.kind == "graph" else res.kind  # one diagram type, one parser
    w.direction = _header_direction(res)
    w.front_matter = pre.front_matter
    w.extras.extend(d.strip() for d in pre.directives)
    body = text
    for start, end in reversed(pre.front_matter_spans):  # a '%%' line in the YAML is no comment of the chart
        body = body[:start] + body[end:]
    _read_prompts(body, w)
    for name, styles in db.classes.items():
        w.class_defs[name] = decode_entities(",".join(styles))
    click_targets: dict[str, int] = {}
    for click in db.clicks:
        for nid in click[0].split(","):
            click_targets[nid] = click_targets.get(nid, 0) + 1
    position = pre.position
    verts = list(db.vertices.values())
    edges = db.edges
    lines, columns = convert.lines_columns(pre._steps, pre.original_line_starts(), [v.pos for v in verts]
                                           + [e.pos for e in edges], len(pre.original))
    own: list[Diagnostic] = []  # the nodes' own diagnostics, after the relabelling ones
    convert.add_nodes(w.nodes, verts, lines, columns, click_targets, w.class_defs, own)
    keys: list[str] = []  # model key of each of Mermaid's subgraphs (a repeated id gets "id#2")
    tried: dict[str, int] = {}  # the last suffix tried per id: 13,000 subgraphs of one id stay linear
    for sg in db.subgraphs:
        # when a node has the subgraph's id, Mermaid draws the group with the node's classes (getData)
        classes = [] if sg.id in db.vertices else _minus_clicks(sg.classes, click_targets.get(sg.id, 0))
        n = tried.get(sg.id, 1)
        k = sg.id if n == 1 else f"{sg.id}#{n}"
        while k in w.subgraphs:  # suffixes below n are all taken already: keys are only ever added
            n += 1
            k = f"{sg.id}#{n}"
        tried[sg.id] = n
        keys.append(k)
        w.subgraphs[k] = Subgraph(sg.id, decode_entities(sg.title), None, sg.dir,
                                  "markdown" if sg.label_type == "markdown" else "text", classes)
    unplaced: dict[str, list[int]] = {}  # id -> indexes of the subgraphs of that id stored so far, not yet placed
    for i, (k, sg) in enumerate(zip(keys, db.subgraphs)):
        for member in sg.nodes:
            # a nested subgraph closes (and is stored) before its parent: a member naming a subgraph is the latest
            # one of that id stored before this one and not placed yet (an earlier one of that id is another group).
            # A stack per id finds it at once; scanning past the placed ones made members naming them quadratic.
            waiting = unplaced.get(member)
            if waiting:
                w.subgraphs[keys[waiting.pop()]].parent = k
            node = w.nodes.get(member)
            if node is not None and node.subgraph is None:
                node.subgraph = k
        unplaced.setdefault(sg.id, []).append(i)
    convert.add_edges(w.edges, edges, lines, columns, len(verts), click_targets)
    w.extras.extend(_statement_extras(db, pre))
    for rl in db.relabels:
        vid, old, new, pos = rl
        line, col = position(pos)
        diags.append(Diagnostic("M002", "error", f"node {vid} is declared twice with different labels: "
                                f"'{decode_entities(old)}' and '{decode_entities(new)}' (Mermaid draws the last)",
                                line, col, vid))
    diags.extend(own)
    return w


def _statement_extras(db: FlowDB, pre) -> list[str]:
    """style / linkStyle / click / accTitle / accDescr statements, as written (a click that came before
    its node existed is marked, so the printer keeps it before the nodes, where it classes nothing)."""
    out = []
    for raw in db.kept_statements:
        early = raw.startswith("\0early\0")
        x = decode_entities(raw.removeprefix("\0early\0")).strip()
        if x:
            out.append(EARLY + x if early else x)
    return out


# ---------------------------------------------------------------------------------------------- printer

# an edge label that reads back the same without quotes (no bracket, pipe, quote, tilde, backtick)
_PLAIN_EDGE_LABEL = LazyRegex(r"[^\s\[\](){}|\"~`\\/@]([^\[\](){}|\"~`\\/@\n]*[^\s\[\](){}|\"~`\\/@])?")
# [A-Za-z0-9_\u00c0-\uffff][A-Za-z0-9_\-.\u00c0-\uffff]*, written as the complement: the same matches
# (test_mermaid_printer_safe_id), but re compiles the range up to \uffff one character at a time (~10 ms of
# every start-up) and the complement in 0.5 ms
_SAFE_ID = LazyRegex(r"[^\x00-/:-@\[-^`{-\xbf\U00010000-\U0010ffff][^\x00-,/:-@\[-^`{-\xbf\U00010000-\U0010ffff]*")


def _stmt(line: str) -> str:
    """A statement Mermaid does not take for a comment: a line starting with '%%' (blanks before it too) is one,
    so a statement opening with an id like '%%B' gets an empty statement (';') in front."""
    return ";" + line if line.startswith("%%") else line


# a label line Mermaid would strip as a comment (its '^' in multiline mode follows any JS line terminator)
_COMMENT_LINE = re.compile("[\n\r\u2028\u2029][" + JS_SPACE + "]*%%")


def _label_text(label: str, label_type: str) -> str | None:
    """The label written between brackets so that Mermaid reads it back unchanged; None if it cannot be."""
    if _COMMENT_LINE.search(label):  # only shape data holds it (written with an escaped line break)
        return None
    if label_type == "markdown":
        if not label.strip():
            return '"` `"'
        if '"' in label or "`" in label or label != label.strip():  # (Mermaid trims a markdown label's blanks)
            return None
        return f'"`{label}`"'
    if not label.strip():
        return " "
    if '"' in label:  # only an unquoted label holds a quote: write it back as it was read
        return label if "\n" not in label else None
    return f'"{label}"'


def _yaml_str(s: str) -> str:
    if "\n" in s or "\r" in s or "\t" in s:  # escapes in a double-quoted scalar (JSON's are YAML's): no raw line break,
        return json.dumps(s, ensure_ascii=False)  # which the lexer would turn into <br/>
    if '"' not in s and "\\" not in s:
        return f'"{s}"'
    return "'" + s.replace("'", "''") + "'"


def _yaml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return json.dumps(v)
    return _yaml_str(str(v))


def _node_text(n: Node) -> list[str]:
    """The node's statement(s): brackets when the shape has them, else shape data; other data after."""
    shape = n.shape
    if n.label is None and not shape and not n.data:
        return [n.id]
    data: dict[str, Any] = {}
    if shape in SHAPES:
        inner = _label_text(n.label if n.label is not None else n.id, n.label_type)
        if inner is not None:
            if shape == "[|":  # one declaration per property: Mermaid merges them
                heads = [f"{n.id}[|{k}:{v}|{inner}]" for k, v in (n.props or {"field": "value"}).items()]
            else:
                heads = [f"{n.id}{SHAPE_OPENER[shape]}{inner}{SHAPES[shape]}"]
            if not n.data:
                return heads
            return heads + [f"{n.id}@{{ " + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in n.data.items()) + " }"]
    if shape:
        data["shape"] = _DATA_NAME.get(shape, shape)
    if shape and n.label is not None and "\n" in n.label and (inner := _label_text(n.label, n.label_type)):
        # shape data turns a line break into <br/>: give the label in brackets, then the shape (a node with no
        # shape keeps its label in the data, the line break written as an escape: brackets would make it square)
        return [f"{n.id}[{inner}]", f"{n.id}@{{ " + ", ".join(f"{k}: {_yaml_value(v)}"
                                                                for k, v in {**data, **n.data}.items()) + " }"]
    if n.label is not None:
        data["label"] = n.label
        data["labelType"] = "markdown" if n.label_type == "markdown" else "text"
    data.update(n.data)
    body = ", ".join(f"{k}: {_yaml_value(v)}" for k, v in data.items())
    return [f"{n.id}@{{ {body} }}"]


# shape-data names of the bracket shapes (used only when a label cannot be written between brackets)
_DATA_NAME = {"[": "rect", "(": "rounded", "([": "stadium", "[[": "subroutine", "((": "circle", "{": "diamond",
              "{{": "hexagon", "[(": "cylinder", ">": "odd", "[/": "lean-r", "[\\": "lean-l",
              "(((": "doublecircle", "[/\\": "trap-b", "[\\/": "trap-t", "(-": "rounded", "[|": "rect"}


def _edge_text(e: Edge) -> str:
    eid = f"{e.id}@" if e.id else ""
    if e.arrow == "INVALID":  # Mermaid keeps an edge whose two ends disagree (x-- text -->) as INVALID
        return f"{e.src} {eid}x-- {_label_text(e.label or '', e.label_type) or ' '} --> {e.dst}"
    label = ""
    if e.label:
        plain = e.label_type == "text" and _PLAIN_EDGE_LABEL.fullmatch(e.label)
        inner = e.label if plain else (_label_text(e.label, e.label_type) or f'"{e.label}"')
        label = f"|{inner}|"
    arrow = e.arrow if e.arrow else "-->"
    return f"{e.src} {eid}{arrow}{label} {e.dst}"


def _op_class(n: Node) -> str | None:
    """The class to print for a node's operator type, or None when its id/label/shape already say it."""
    if n.op is None:
        return None
    if n.op_class and cat.resolve(n.op_class) == n.op:
        return n.op_class
    if convert.implied_op(n.id, n.label, n.shape) == n.op:
        return None
    return n.op


def to_mermaid(w: Workflow, *, styles: bool = False) -> str:  # noqa: C901
    """The canonical text: header, prompts, nodes (in their subgraphs), edges, classes, classDefs, then the
    kept style/click/accessibility statements. Mermaid draws it as it draws the text it was read from.

    ``styles=True`` adds a classDef for every operator that has none, for nicer rendering; the canonical
    form (``styles=False``) adds nothing so that ``parse(to_mermaid(w)) == w``.
    """
    out: list[str] = []
    if w.front_matter is not None:
        out += ["---", w.front_matter, "---"]
    out += [x for x in w.extras if x.startswith("%%{")]
    header = "flowchart" if w.header in (None, "", "graph") else w.header  # graph and flowchart are one type
    out.append(f"{header} {w.direction}")
    for name, text in w.prompts.items():
        out.append(f"    %% @prompt {name}: {_escape(text)}")
    out.extend("    " + x.removeprefix(EARLY) for x in w.extras if x.startswith(EARLY))

    by_parent: dict[str | None, list[Node]] = {}
    for n in w.nodes.values():
        parent = n.subgraph if n.subgraph in w.subgraphs else None
        by_parent.setdefault(parent, []).append(n)
    subs_of: dict[str | None, list[tuple[str, Subgraph]]] = {}
    for key, s in w.subgraphs.items():
        parent = s.parent if s.parent in w.subgraphs and s.parent != key else None
        subs_of.setdefault(parent, []).append((key, s))
    # Mermaid finds a subgraph's classes by id, and a later subgraph with the same id takes the id over: the
    # classes of an earlier one are printed right after its own `end`, before the id moves on
    last = {s.id: s for s in w.subgraphs.values()}
    shadowed = {id(s) for s in w.subgraphs.values() if last[s.id] is not s and s.classes and s.id not in w.nodes}
    order: list[Node] = []  # nodes in printed order, so class lines are a fixed point too
    # iterative depth-first walk: a thousand nested subgraphs must not exhaust Python's stack
    stack: list[tuple[str, Any, int]] = [("sub", None, 1)]
    while stack:
        kind, item, depth = stack.pop()
        pad = "    " * min(depth, 4)  # deeper nesting is not indented further (keeps the text linear)
        if kind == "end":
            out.append(pad + "end")
            if id(item) in shadowed:  # classed now, while its id still finds it
                out.extend(f"{pad}class {item.id} {c}" for c in item.classes)
            continue
        if kind == "open":
            key, s = item
            out.append(f"{pad}subgraph {_subgraph_head(s)}")
            if s.direction:
                out.append(f"{pad}    direction {s.direction}")
            stack.append(("end", s, depth))
            stack.append(("sub", key, depth + 1))
            continue
        sid = item
        for n in by_parent.get(sid, []):
            first, *more = _node_text(n)
            out.append(pad + _stmt(first))
            out.extend(pad + _stmt(line) for line in more)
            order.append(n)
        for pair in reversed(subs_of.get(sid, [])):
            stack.append(("open", pair, depth))
    for e in w.edges:
        out.append("    " + _stmt(_edge_text(e)))
    for e in w.edges:
        if e.id and e.data:
            out.append("    " + _stmt(f"{e.id}@{{ " + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in e.data.items()) + " }"))
    by_class: dict[str, list[str]] = {}
    for n in order:
        for c in ([oc] if (oc := _op_class(n)) else []) + n.classes:
            by_class.setdefault(c, []).append(n.id)
    for e in w.edges:
        if e.id:
            for c in e.classes:
                by_class.setdefault(c, []).append(e.id)
    for s in w.subgraphs.values():
        if s.id not in w.nodes and id(s) not in shadowed:  # a node with the same id draws the
            for c in s.classes:  # group with its own classes
                by_class.setdefault(c, []).append(s.id)
    for c, ids in by_class.items():
        out.append(f"    class {','.join(ids)} {c}")
    defs = dict(w.class_defs)
    if styles:
        for n in order:
            if n.op in cat.CATALOGUE:
                c = _op_class(n) or n.op
                if c not in defs:
                    defs[c] = f"fill:{cat.CATALOGUE[n.op].color},stroke:#5f6368,stroke-width:1px"
    for c, style in defs.items():
        out.append(f"    classDef {c} {style}".rstrip())
    out.extend("    " + x for x in w.extras if not x.startswith(("%%{", EARLY)))
    return "\n".join(out) + "\n"


def _subgraph_head(s: Subgraph) -> str:
    title = s.title if s.title is not None else s.id
    if title == s.id and s.label_type == "text" and _SAFE_ID.fullmatch(s.id) and s.id not in ("end",):
        return s.id
    if title == s.id and '"' not in title and "`" not in title and not any(c.isspace() for c in title):
        # an id no bare word spells (')T'): a quoted title alone is its id too, in Mermaid
        return f'"`{title}`"' if s.label_type == "markdown" else f'"{title}"'
    inner = _label_text(title, s.label_type) or f'"{title}"'
    return f"{s.id}[{inner}]"
