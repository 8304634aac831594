"""The graph Mermaid read (FlowDB's vertices and edges) as the workflow model: nodes with their operator type and
prompt, edges with their canonical arrow.

``setup.py`` compiles this file with Cython when it can (``convert.pxd`` types the loops over FlowDB's records);
without the compiled module Python runs this same file (``compiled.load``), and the tests run both. What a node's
classes, label and shape make of it is worked out once per distinct value: a large workflow repeats them.
"""

from __future__ import annotations

import re
from array import array

from flowcore import catalogue as cat
from flowcore.mermaid.text import LazyRegex, decode_entities
from flowcore.model import SHAPE_TYPE, Diagnostic, Edge, Node

# a node's prompt: (role: name) or (instruction: name). As written it is `\(\s*(?:role|instruction)\s*:\s*([^)]*?)\s*\)`
# (the name without the blanks before the ')'); the greedy form below finds the same match, and its group less the
# trailing blanks (str.rstrip strips what \s matches) is the same name, without trying `\s*\)` at every character
# (a test compares the two)
_ROLE = re.compile(r"\(\s*(?:role|instruction)\s*:\s*([^)]*)\)", re.I)
_OPEN_ROLE = LazyRegex(r"\(\s*(?:role|instruction)\s*:\s*([^)]*)$", re.I | re.S)
_ANALYSIS = LazyRegex(r"\(\s*analysis\s*:", re.I)
_FIRST_WORD = LazyRegex(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_OF_TYPE = {t: k for k, t in SHAPE_TYPE.items() if k != "[|"}
_HEAD = {"arrow_point": ">", "arrow_cross": "x", "arrow_circle": "o", "arrow_open": ""}
_TAIL = {"arrow_point": "<", "arrow_cross": "x", "arrow_circle": "o"}


def arrow_text(etype: str | None, stroke: str | None, length: int | None) -> str:
    """The canonical spelling of an edge's head(s), stroke and length (``-->``, ``<==>``, ``-..->``, ``~~~``)."""
    n = max(int(length or 1), 1)
    double = bool(etype and etype.startswith("double_"))
    base = etype[7:] if double else (etype or "arrow_open")
    head = _HEAD.get(base, "")
    tail = _TAIL.get(base, "") if double else ""
    if stroke == "invisible":
        return "~" * (n + 2)
    if stroke == "dotted":
        return f"{tail}-{'.' * n}-{head}"
    ch = "=" if stroke == "thick" else "-"
    return tail + ch * (n + 1) + (head if head else ch)


def label_type_word(label: str | None) -> str | None:
    """The first word of a label, which names the operator when no class does."""
    if not label:
        return None
    m = _FIRST_WORD.search(label.lstrip(' "`'))
    return m.group(0) if m and label.lstrip(' "`').startswith(m.group(0)) else None


def resolve_class(name: str, class_defs: dict[str, str]) -> str | None:
    """The operator a class names. A short alias (Test, Custom) that has its own classDef is a style class,
    as Mermaid draws it; names ending in Op and Interface always name operators."""
    op = cat.resolve(name)
    if op is None:
        return None
    if name in class_defs and not name.lower().endswith("op") and name != cat.INTERFACE:
        return None
    return op


def implied_op(nid: str, label: str | None, shape: str) -> str | None:
    """The operator a node has without any class: from its id, the first word of its label, its shape."""
    if nid in cat.INTERFACE_NODES:
        return cat.INTERFACE
    op = cat.resolve(label_type_word(label))
    if op is not None and op != cat.INTERFACE:
        return op
    if shape == "{":
        return cat.DECISION
    return None


def typed_by_classes(classes: tuple, class_defs: dict[str, str]) -> tuple:
    """(operator, the class that gave it, the other classes, the operators that clash with it) of a node's classes:
    the first operator class wins; another operator is kept as a plain class (so the text still draws the same)."""
    op = op_class = None
    style: list[str] = []
    clashes: list[tuple[str, str]] = []
    for c in classes:
        named = resolve_class(c, class_defs)
        if named is None:
            style.append(c)
        elif op is None or op == named:
            op, op_class = named, op_class or c
        else:
            style.append(c)
            clashes.append((op, named))
    return op, op_class, tuple(style), tuple(clashes)


def minus_clicks(classes: list[str], clicks: int) -> list[str]:
    """The classes less the 'clickable' each click statement adds (the click itself is kept and printed)."""
    out = list(classes)
    for _ in range(clicks):
        if "clickable" in out:
            out.remove("clickable")
    return out


def role_name(label: str) -> str | None:
    """The prompt a label names with (role: name) or (instruction: name), or None."""
    m = _ROLE.search(label)
    return (m.group(1).rstrip() or None) if m else None


def slips(n: Node, diags: list[Diagnostic]) -> None:
    """Warnings for texts Mermaid draws but that do not mean what they look like (M015)."""
    label = n.label or ""
    if n.prompt is None and n.op in cat.CATALOGUE and (m := _OPEN_ROLE.search(label)):
        name = m.group(1).strip().rstrip("]})\"'").strip()
        diags.append(Diagnostic("M015", "warning", f"node {n.id}: '(role: {name}' is never closed with ')', so "
                                "the node has no prompt; close it, e.g. (role: " + (name or "x") + ")",
                                n.line or None, n.column or None, n.id))
    if n.op == "ProgrammerOp" and _ANALYSIS.search(label):
        diags.append(Diagnostic("M015", "warning", f"node {n.id}: a Programmer ignores '(analysis: ...)' in its "
                                "label; feed the analysis through an edge labelled analysis",
                                n.line or None, n.column or None, n.id))


def add_nodes(nodes: dict, verts: list, lines: list, columns: list, click_targets: dict, class_defs: dict,
              own: list) -> None:  # noqa: C901, PLR0912
    """A Node in ``nodes`` for each of FlowDB's vertices (placed at ``lines`` / ``columns``), typed by its classes,
    else by its id, label and shape; its own diagnostics (two operator types, M015) go to ``own`` in node order."""
    by_classes: dict[tuple, tuple] = {}
    implied: dict[tuple, str | None] = {}
    prompts: dict[str, str | None] = {}
    interface_nodes, interface = cat.INTERFACE_NODES, cat.INTERFACE
    for i in range(len(verts)):
        v = verts[i]
        vid = v.id
        vtype = v.type
        if vtype is None:
            shape = ""
        elif vtype == "rect" and v.props:
            shape = "[|"
        else:
            shape = _KEY_OF_TYPE.get(vtype, vtype)
        label = v.text
        if label is not None and "\ufb02" in label:
            label = decode_entities(label)
        if shape == "" and label == vid and v.label_type == "text" and not v.data:
            label = None
        classes = minus_clicks(v.classes, click_targets[vid]) if vid in click_targets else v.classes
        op = op_class = None
        clashes = ()
        if classes:
            key = tuple(classes)
            typed = by_classes.get(key)
            if typed is None:
                typed = by_classes[key] = typed_by_classes(key, class_defs)
            op, op_class, style, clashes = typed
            classes = list(style)
        else:
            classes = []
        if op is None:
            if vid in interface_nodes:
                op = interface
            else:
                key = (label, shape)
                op = implied.get(key, implied)
                if op is implied:
                    op = implied[key] = implied_op(vid, label, shape)
        prompt = None
        bracketed = label is not None and "(" in label
        if bracketed:
            prompt = prompts.get(label, prompts)
            if prompt is prompts:
                prompt = prompts[label] = role_name(label)
        props = {str(k): str(x) for k, x in v.props.items()} if v.props else {}
        line, col = lines[i], columns[i]
        node = nodes[vid] = Node(vid, label, shape, op, prompt, classes, None, line, col,
                                 "markdown" if v.label_type == "markdown" else "text", op_class, props, dict(v.data))
        for a, b in clashes:
            own.append(Diagnostic("M002", "error", f"node {vid} is given two operator types: {a} and {b}",
                                  line or None, col or None, vid))
        if bracketed and (prompt is None or op == "ProgrammerOp"):
            slips(node, own)


def add_edges(out: list, edges: list, lines: list, columns: list, first: int, click_targets: dict) -> None:
    """An Edge in ``out`` for each of FlowDB's edges (placed at ``lines`` / ``columns`` from index ``first``)."""
    arrows: dict[tuple, str] = {}
    for i in range(len(edges)):
        e = edges[i]
        key = (e.type, e.stroke, e.length)
        arrow = arrows.get(key)
        if arrow is None:
            arrow = arrows[key] = "INVALID" if e.type == "INVALID" else arrow_text(e.type, e.stroke, e.length)
        text = e.text
        if text and "\ufb02" in text:
            text = decode_entities(text)
        out.append(Edge(e.start, e.end, text or None, arrow, lines[first + i], columns[first + i],
                        "markdown" if e.label_type == "markdown" else "text", e.id if e.user_id else None,
                        dict(e.data) if e.data else {},
                        minus_clicks(e.classes, click_targets.get(e.id, 0)) if e.classes else []))


def lines_columns(steps: list, starts: list, poss: list, n: int) -> tuple[list, list]:
    """``Prepared.lines_columns`` (1-based lines and columns in the original text of offsets of the parsed code; an
    offset below 0 reads as 0), from the prepared text's rewrite steps, its original line starts and its length
    ``n``: each offset mapped back through the steps, last first, then placed among the lines, by bisection."""
    k = len(poss)
    # (filled item by item: array("q", a_list) converts through the generic sequence protocol, ~10x slower)
    offs = array("q", bytes(8 * k))
    for i in range(k):
        p = poss[i]
        offs[i] = p if p > 0 else 0
    for s in range(len(steps) - 1, -1, -1):
        segs = steps[s]
        m = len(segs)
        new_start = array("q", [seg[0] for seg in segs])
        old_start = array("q", [seg[1] for seg in segs])
        linear = array("b", [1 if seg[2] else 0 for seg in segs])
        for i in range(k):
            p = offs[i]
            lo, hi = 0, m  # the segments whose new start is <= p (a bisection; the first starts at 0)
            while lo < hi:
                mid = (lo + hi) >> 1
                if new_start[mid] <= p:
                    lo = mid + 1
                else:
                    hi = mid
            j = lo - 1 if lo > 0 else 0
            offs[i] = old_start[j] + (p - new_start[j]) if linear[j] else old_start[j]
    nl = len(starts)
    line_start = array("q", bytes(8 * nl))
    for i in range(nl):
        line_start[i] = starts[i]
    lines, columns = [0] * k, [0] * k
    for i in range(k):
        p = offs[i]
        if p > n:
            p = n
        lo, hi = 0, nl  # the line after the last start <= p (a bisection, inline: the compiled loop passes no
        while lo < hi:  # array views to a function)
            mid = (lo + hi) >> 1
            if line_start[mid] <= p:
                lo = mid + 1
            else:
                hi = mid
        lines[i] = lo
        columns[i] = p - line_start[lo - 1] + 1
    return lines, columns
