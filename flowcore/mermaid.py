"""Mermaid flowchart reader and canonical printer (DESIGN §2).

The reader is a small scanner over statements (lines split on ``;``), not a regex per line: it accepts
general flowchart syntax (shapes, quoted labels, every arrow kind, pipe and inline edge labels, chains,
``&`` groups, classes, subgraphs, comments) and records the line and column of every node and edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import catalogue as cat
from .model import SHAPES, Diagnostic, Edge, Node, Subgraph, Workflow

DIRECTIONS = ("TD", "TB", "LR", "RL", "BT")
_ID = re.compile(r"[A-Za-z0-9_\u00c0-\uffff]+")
_OPENERS = sorted(SHAPES, key=len, reverse=True)
_ALT_CLOSERS = {"[/": ("/]", "\\]"), "[\\": ("\\]", "/]")}
_ARROW = re.compile(
    r"(?P<a><?(?:-{2,}>|-{3,}|-\.+->|-\.+-|={2,}>|={3,}|--[xo](?=[\s|]))|<?-\.+->|<?={2,}>)"
)
_TEXT_ARROW = re.compile(r"(?P<start><?(?:--|==|-\.))\s+(?P<text>[^|]*?)\s*(?P<end>-{2,}>|-{3,}|={2,}>|={3,}|\.+->|\.+-)")
_PROMPT = re.compile(r"^%%\s*@prompt\s+(?P<name>[\w.\-]+)\s*:\s?(?P<text>.*)$")
_ROLE = re.compile(r"\(\s*(?:role|instruction)\s*:\s*([^)]*?)\s*\)", re.I)
_FIRST_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNQUOTED_BAD = set('()[]{}"')
_KEYWORD_PREFIXES = ("subgraph", "end", "direction", "class", "style", "linkStyle", "click")
# Fast paths for the two commonest statements; anything they do not match goes through the scanner.
_FAST_EDGE = re.compile(r"([A-Za-z0-9_]+)[ \t]*(-->|---|-\.->|==>)[ \t]*(?:\|([^|\"]*)\|)?[ \t]*([A-Za-z0-9_]+)$")
_FAST_NODE = re.compile(r'([A-Za-z0-9_]+)(\(\[|\[\[|\(\(|\{\{|\[\(|\[|\(|\{)"([^"]*)"(\]\)|\]\]|\)\)|\}\}|\)\]|\]|\)|\})$')


class WorkflowSyntaxError(ValueError):
    """Raised by :func:`parse` when the text is not a readable flowchart; carries the diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("; ".join(str(d) for d in diagnostics) or "syntax error")


def canonical_arrow(raw: str) -> str:
    """Collapse arrow length variants (``--->``) to one spelling per kind."""
    both = raw.startswith("<")
    body = raw[1:] if both else raw
    if "." in body:
        kind = "-.->" if body.endswith(">") else "-.-"
    elif body.startswith("="):
        kind = "==>" if body.endswith(">") else "==="
    elif body.endswith(("x", "o")) and not body.endswith("-"):
        kind = "--" + body[-1]
    else:
        kind = "-->" if body.endswith(">") else "---"
    return ("<" + kind) if both and kind.endswith(">") else kind


@dataclass
class _State:
    w: Workflow = field(default_factory=Workflow)
    diags: list[Diagnostic] = field(default_factory=list)
    declared: dict[str, tuple[str | None, str, int, int]] = field(default_factory=dict)
    class_assign: list[tuple[str, str, int, int]] = field(default_factory=list)  # node, class, line, col
    sub_stack: list[str] = field(default_factory=list)
    sub_lines: dict[str, tuple[int, int]] = field(default_factory=dict)

    def error(self, code: str, msg: str, line: int, col: int, node: str | None = None) -> None:
        self.diags.append(Diagnostic(code, "error", msg, line, col, node))


class _Scan:
    """Cursor over one statement; ``col0`` maps positions back to the source line."""

    def __init__(self, text: str, line: int, col0: int):
        self.s, self.i, self.line, self.col0 = text, 0, line, col0

    @property
    def col(self) -> int:
        return self.col0 + self.i + 1

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def done(self) -> bool:
        self.ws()
        return self.i >= len(self.s)

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]


class _Fail(Exception):
    def __init__(self, msg: str, col: int):
        super().__init__(msg)
        self.msg, self.col = msg, col


def _split_statements(line: str) -> list[tuple[str, int]]:
    """Split on ';' outside quotes; returns (statement, 0-based start column)."""
    if ";" not in line:
        stripped = line.strip()
        return [(stripped, len(line) - len(line.lstrip()))] if stripped else []
    out, start, quote = [], 0, False
    for i, ch in enumerate(line):
        if ch == '"':
            quote = not quote
        elif ch == ";" and not quote:
            out.append((line[start:i], start))
            start = i + 1
    out.append((line[start:], start))
    return [(s.strip(), c + len(s) - len(s.lstrip())) for s, c in out if s.strip()]


def _unescape(text: str) -> str:
    """A prompt's only escapes are \\n (newline) and \\\\ (backslash); LaTeX such as \\boxed stays as is."""
    return re.sub(r"\\([\\n])", lambda m: "\n" if m.group(1) == "n" else "\\", text)


def _escape(text: str) -> str:
    return re.sub(r"\\(?=[\\n]|$)", r"\\\\", text).replace("\n", "\\n")


def parse_lenient(text: str) -> tuple[Workflow, list[Diagnostic]]:
    """Read as much of the flowchart as possible; syntax problems become M001/M002 diagnostics."""
    st = _State()
    if not isinstance(text, str):
        st.error("M001", "the workflow must be text", 1, 1)
        return st.w, st.diags
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    header_seen = False
    for ln, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if stripped.startswith("%%"):
            if stripped.startswith("%%{"):
                st.w.extras.append(stripped)
            elif m := _PROMPT.match(stripped):
                st.w.prompts[m["name"]] = _unescape(m["text"].rstrip())
            continue
        indent = len(raw) - len(raw.lstrip())
        if not header_seen:
            m = re.match(r"(flowchart|graph)\b\s*([A-Za-z]{2})?\s*;?(.*)$", stripped)
            if not m:
                st.error("M001", "a workflow starts with 'flowchart TD' (or graph/flowchart with TB, LR, RL, BT)",
                         ln, indent + 1)
                header_seen = True
                continue
            header_seen = True
            direction = (m[2] or "TD").upper()
            if direction not in DIRECTIONS:
                st.error("M001", f"unknown direction '{m[2]}' (use one of {', '.join(DIRECTIONS)})",
                         ln, indent + 1 + stripped.find(m[2]))
            else:
                st.w.direction = direction
            rest = m[3]
            if rest.strip():
                _line(st, rest, ln, indent + len(stripped) - len(rest))
            continue
        if ";" in raw:
            _line(st, raw.rstrip(), ln, 0)
        else:  # the common case: one statement per line
            try:
                _statement(st, stripped, ln, indent)
            except _Fail as f:
                st.error("M001", f.msg, ln, f.col)
    if not header_seen:
        st.error("M001", "empty workflow: expected a 'flowchart TD' header", 1, 1)
    if st.sub_stack:
        ln, col = st.sub_lines[st.sub_stack[-1]]
        st.error("M001", f"subgraph '{st.sub_stack[-1]}' is never closed with 'end'", ln, col)
    _finish(st)
    return st.w, st.diags


def parse(text: str) -> Workflow:
    """Parse a workflow; raise :class:`WorkflowSyntaxError` when the text is not a readable flowchart."""
    w, diags = parse_lenient(text)
    errors = [d for d in diags if d.severity == "error"]
    if errors:
        raise WorkflowSyntaxError(errors)
    return w


def _line(st: _State, line: str, ln: int, col0: int) -> None:
    for stmt, c in _split_statements(line):
        try:
            _statement(st, stmt.rstrip(), ln, col0 + c)
        except _Fail as f:
            st.error("M001", f.msg, ln, f.col)


def _statement(st: _State, s: str, ln: int, col0: int) -> None:
    if not s.startswith(_KEYWORD_PREFIXES) and _fast(st, s, ln, col0):
        return
    word = s.split(None, 1)[0]
    rest = s[len(word):].strip()
    if word == "subgraph":
        _subgraph(st, rest, ln, col0)
    elif word == "end" and not rest:
        if not st.sub_stack:
            raise _Fail("'end' without an open subgraph", col0 + 1)
        st.sub_stack.pop()
    elif word == "direction" and st.sub_stack:
        st.w.subgraphs[st.sub_stack[-1]].direction = rest.upper() or None
    elif word == "classDef":
        parts = rest.split(None, 1)
        if not parts:
            raise _Fail("classDef needs a class name and styles", col0 + 1)
        for name in parts[0].split(","):
            st.w.class_defs[name] = parts[1].strip() if len(parts) > 1 else ""
    elif word == "class":
        parts = rest.split()
        if len(parts) != 2:
            raise _Fail("use 'class node1,node2 ClassName'", col0 + 1)
        for nid in parts[0].split(","):
            if nid:
                st.class_assign.append((nid, parts[1], ln, col0 + 1))
    elif word in ("style", "linkStyle", "click"):
        st.w.extras.append(s.strip())
    else:
        _chain(st, _Scan(s, ln, col0))


def _fast(st: _State, s: str, ln: int, col0: int) -> bool:
    """Handle 'A --> B', 'A -->|x| B' and 'A["label"]' without the scanner; False when it does not apply."""
    m = _FAST_EDGE.match(s)
    if m:
        _declare(st, m[1], "", None, ln, col0 + 1)
        _declare(st, m[4], "", None, ln, col0 + m.start(4) + 1)
        label = m[3].strip() if m[3] is not None else None
        st.w.edges.append(Edge(m[1], m[4], label or None, m[2], ln, col0 + m.start(2) + 1))
        return True
    m = _FAST_NODE.match(s)
    if m and SHAPES[m[2]] == m[4]:
        _declare(st, m[1], m[2], m[3], ln, col0 + 1)
        return True
    return False


def _subgraph(st: _State, rest: str, ln: int, col0: int) -> None:
    m = re.match(r'^(?P<id>[\w\-]+)?\s*(?:\[\s*"?(?P<t1>[^"\]]*)"?\s*\])?\s*$', rest)
    if m and m["id"]:
        sid, title = m["id"], m["t1"]
    elif rest.startswith('"') and rest.endswith('"') and len(rest) > 1:
        sid = title = rest[1:-1]
    elif rest:
        sid = title = rest
    else:
        raise _Fail("subgraph needs an id or a title", col0 + 1)
    if sid in st.w.subgraphs:
        sid = f"{sid}_{len(st.w.subgraphs)}"
    st.w.subgraphs[sid] = Subgraph(sid, title, st.sub_stack[-1] if st.sub_stack else None)
    st.sub_stack.append(sid)
    st.sub_lines[sid] = (ln, col0 + 1)


def _chain(st: _State, sc: _Scan) -> None:
    groups = [_group(st, sc)]
    links: list[tuple[str, str | None, int]] = []
    while not sc.done():
        col = sc.col
        arrow, label = _arrow(sc)
        groups.append(_group(st, sc))
        links.append((arrow, label, col))
    for (arrow, label, col), srcs, dsts in zip(links, groups, groups[1:], strict=False):
        for a in srcs:
            for b in dsts:
                st.w.edges.append(Edge(a, b, label, arrow, sc.line, col))


def _group(st: _State, sc: _Scan) -> list[str]:
    ids = [_node(st, sc)]
    while True:
        sc.ws()
        if sc.peek() != "&":
            return ids
        sc.i += 1
        ids.append(_node(st, sc))


def _node(st: _State, sc: _Scan) -> str:
    sc.ws()
    col = sc.col
    m = _ID.match(sc.s, sc.i)
    if not m:
        got = sc.peek() or "end of line"
        raise _Fail(f"expected a node id, found '{got}'", col)
    nid = m.group(0)
    sc.i = m.end()
    shape, label = "", None
    opener = next((o for o in _OPENERS if sc.s.startswith(o, sc.i)), None)
    if opener:
        shape = opener
        sc.i += len(opener)
        label = _label(sc, opener, nid)
    cls_list: list[str] = []
    while sc.peek(3) == ":::":
        sc.i += 3
        cm = re.compile(r"[\w\-]+").match(sc.s, sc.i)
        if not cm:
            raise _Fail("expected a class name after ':::'", sc.col)
        cls_list.append(cm.group(0))
        sc.i = cm.end()
    _declare(st, nid, shape, label, sc.line, col)
    for c in cls_list:
        st.class_assign.append((nid, c, sc.line, col))
    return nid


def _label(sc: _Scan, opener: str, nid: str) -> str:
    closers = _ALT_CLOSERS.get(opener, (SHAPES[opener],))
    start_col = sc.col
    rest = sc.s[sc.i:]
    stripped = rest.lstrip()
    if stripped.startswith('"'):
        sc.i += len(rest) - len(stripped) + 1
        end = sc.s.find('"', sc.i)
        if end < 0:
            raise _Fail(f"node {nid}: the quoted label is never closed with '\"'", start_col)
        label = sc.s[sc.i:end]
        sc.i = end + 1
        sc.ws()
        closer = next((c for c in closers if sc.s.startswith(c, sc.i)), None)
        if not closer:
            raise _Fail(f"node {nid}: expected '{closers[0]}' to close the label", sc.col)
        sc.i += len(closer)
        return label
    best = -1
    for c in closers:
        k = sc.s.find(c, sc.i)
        if k >= 0 and (best < 0 or k < best):
            best, closer = k, c
    if best < 0:
        raise _Fail(f"node {nid}: '{opener}' is never closed with '{closers[0]}'", start_col)
    label = sc.s[sc.i:best]
    bad = next((i for i, ch in enumerate(label) if ch in _UNQUOTED_BAD), None)
    if bad is not None:
        raise _Fail(f"node {nid}: '{label[bad]}' inside an unquoted label; put the label in quotes: "
                    f'{nid}{opener}"..."{closers[0]}', sc.col + bad)
    sc.i = best + len(closer)
    return label.strip()


def _arrow(sc: _Scan) -> tuple[str, str | None]:
    sc.ws()
    col = sc.col
    m = _ARROW.match(sc.s, sc.i)
    if m:
        sc.i = m.end()
        arrow = canonical_arrow(m.group("a"))
        sc.ws()
        label = None
        if sc.peek() == "|":
            end = sc.s.find("|", sc.i + 1)
            if end < 0:
                raise _Fail("edge label opened with '|' is never closed", sc.col)
            label = sc.s[sc.i + 1:end].strip().strip('"').strip() or None
            sc.i = end + 1
        return arrow, label
    m = _TEXT_ARROW.match(sc.s, sc.i)
    if m:
        sc.i = m.end()
        start, end = m.group("start"), m.group("end")
        raw = start + ("." if "." in end and "." not in start else "") + end.lstrip(".")
        return canonical_arrow(raw.replace("..", ".")), m.group("text").strip().strip('"').strip() or None
    got = sc.s[sc.i:sc.i + 12].split(" ")[0] or "end of line"
    raise _Fail(f"expected an arrow such as '-->' between nodes, found '{got}'", col)


def _declare(st: _State, nid: str, shape: str, label: str | None, ln: int, col: int) -> None:
    w = st.w
    node = w.nodes.get(nid)
    if node is None:
        node = w.nodes[nid] = Node(nid, line=ln, column=col, subgraph=st.sub_stack[-1] if st.sub_stack else None)
    if label is None and not shape:
        return
    prev = st.declared.get(nid)
    if prev is not None and prev[0] != label:
        st.error("M002", f"node {nid} is declared twice with different labels: '{prev[0]}' (line {prev[2]}) "
                 f"and '{label}'", ln, col, nid)
        return
    if prev is None:
        st.declared[nid] = (label, shape, ln, col)
        node.label, node.shape, node.line, node.column = label, shape, ln, col


def label_type_word(label: str | None) -> str | None:
    """The first word of a label, which names the operator when no class does."""
    if not label:
        return None
    m = _FIRST_WORD.search(label.lstrip(' "`'))
    return m.group(0) if m and label.lstrip(' "`').startswith(m.group(0)) else None


def _finish(st: _State) -> None:
    """Apply classes, then give every node its operator type and prompt name."""
    w = st.w
    op_class: dict[str, tuple[str, int, int]] = {}
    for nid, cls, ln, col in st.class_assign:
        node = w.nodes.get(nid)
        if node is None:
            continue  # Mermaid ignores classes on nodes that never appear
        op = cat.resolve(cls)
        if op is None:
            if cls not in node.classes:
                node.classes.append(cls)
            continue
        if nid in op_class and op_class[nid][0] != op:
            st.error("M002", f"node {nid} is given two operator types: {op_class[nid][0]} and {op}", ln, col, nid)
            continue
        op_class[nid] = (op, ln, col)
    for nid, node in w.nodes.items():
        if nid in op_class:
            node.op = op_class[nid][0]
        elif nid in cat.INTERFACE_NODES:
            node.op = cat.INTERFACE
        elif (op := cat.resolve(label_type_word(node.label))) is not None and op != cat.INTERFACE:
            node.op = op
        elif node.shape == "{":
            node.op = cat.DECISION
        if node.label and (m := _ROLE.search(node.label)):
            node.prompt = m.group(1) or None


# ---------------------------------------------------------------------------------------------- printer

def _quote(label: str) -> str:
    return '"' + label.replace('"', "#quot;") + '"'


def _node_text(n: Node) -> str:
    if n.label is None and not n.shape:
        return n.id
    opener = n.shape or "["
    return f"{n.id}{opener}{_quote(n.label or '')}{SHAPES[opener]}"


def to_mermaid(w: Workflow, *, styles: bool = False) -> str:
    """The canonical text: header, prompts, nodes, classes, edges, classDefs (then kept extras).

    ``styles=True`` adds a classDef for every operator that has none, for nicer rendering; the canonical
    form (``styles=False``) adds nothing so that ``parse(to_mermaid(w)) == w``.
    """
    out = [x for x in w.extras if x.startswith("%%{")]
    out.append(f"flowchart {w.direction}")
    for name, text in w.prompts.items():
        out.append(f"    %% @prompt {name}: {_escape(text)}")

    order: list[Node] = []  # nodes in printed order, so class lines are a fixed point too

    def emit(sub: str | None, depth: int) -> None:
        pad = "    " * depth
        for n in w.nodes.values():
            if n.subgraph == sub:
                out.append(pad + _node_text(n))
                order.append(n)
        for s in w.subgraphs.values():
            if s.parent == sub:
                title = f"[{_quote(s.title)}]" if s.title is not None else ""
                out.append(f"{pad}subgraph {s.id}{title}")
                if s.direction:
                    out.append(f"{pad}    direction {s.direction}")
                emit(s.id, depth + 1)
                out.append(f"{pad}end")

    emit(None, 1)
    by_class: dict[str, list[str]] = {}
    for n in order + [n for n in w.nodes.values() if n.subgraph is not None and n.subgraph not in w.subgraphs]:
        for c in ([n.op] if n.op else []) + n.classes:
            by_class.setdefault(c, []).append(n.id)
    for c, ids in by_class.items():
        out.append(f"    class {','.join(ids)} {c}")
    for e in w.edges:
        label = f"|{e.label}|" if e.label else ""
        out.append(f"    {e.src} {e.arrow}{label} {e.dst}")
    defs = dict(w.class_defs)
    if styles:
        for c in by_class:
            if c in cat.CATALOGUE and c not in defs:
                defs[c] = f"fill:{cat.CATALOGUE[c].color},stroke:#5f6368,stroke-width:1px"
    for c, style in defs.items():
        out.append(f"    classDef {c} {style}".rstrip())
    out.extend("    " + x for x in w.extras if not x.startswith("%%{"))
    return "\n".join(out) + "\n"
