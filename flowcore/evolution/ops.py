"""Safety-constrained evolution operators (DESIGN §5, MermaidFlow §4.1).

Each operator takes parent workflow(s), the task and a ``random.Random`` and returns a :class:`Child` or
raises :class:`Declined`. Edits are built from the catalogue's port types (only compatible substitutions,
insertions on edges whose types fit, ...), and every result is printed, re-parsed and checked before it is
returned, so no operator can hand back an invalid workflow. Operators try several sites in random order
before declining; the same seed always gives the same child.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from flowcore import catalogue as cat
from flowcore.checker.check import check
from flowcore.evolution import prompts as lib
from flowcore.mermaid.reader import parse_lenient, to_mermaid
from flowcore.model import Edge, Node, Workflow

MAX_TRIES = 12  # sites tried per operator call before declining
MAX_NODES = 40  # children larger than this are declined (bloat)
PREFIX = {"CustomOp": "C", "AnswerGenerateOp": "A", "ProgrammerOp": "P", "ScEnsembleOp": "E",
          "CustomCodeGenerateOp": "G", "TestOp": "T", "ReviewOp": "R", "ReviseOp": "V", "FormatOp": "F",
          cat.DECISION: "D"}
# Substitutions that keep a node's role (a generator stays a generator, a refiner a refiner); ports are
# remapped from the catalogue and the checker confirms the result.
SUBSTITUTES = {
    "CustomOp": ("AnswerGenerateOp", "ProgrammerOp", "FormatOp"),
    "AnswerGenerateOp": ("CustomOp", "ProgrammerOp"),
    "ProgrammerOp": ("CustomOp", "AnswerGenerateOp"),
    "FormatOp": ("CustomOp",),
    "ReviewOp": ("CustomOp",),
    "ReviseOp": ("CustomOp",),
}
_ROLE = re.compile(r"\(\s*(role|instruction)\s*:\s*[^)]*?\s*\)", re.IGNORECASE)


@dataclass
class Child:
    workflow: Workflow
    operator: str
    detail: str
    parents: tuple[int, ...] = (0,)  # indexes of the parents it came from

    @property
    def text(self) -> str:
        return to_mermaid(self.workflow)


class Declined(Exception):
    """The operator cannot produce a valid, different child from these parents."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ------------------------------------------------------------------------------------------- graph helpers

def clone(w: Workflow) -> Workflow:
    """A copy that operators may edit freely (much faster than ``Workflow.copy``'s deepcopy)."""
    return replace(w, nodes={k: replace(n, classes=list(n.classes)) for k, n in w.nodes.items()},
                   edges=[replace(e) for e in w.edges], prompts=dict(w.prompts), class_defs=dict(w.class_defs),
                   subgraphs={k: replace(s) for k, s in w.subgraphs.items()}, extras=list(w.extras))


def short(op: str) -> str:
    return op.removesuffix("Op")


def make_label(op: str, prompt: str | None = None, note: str | None = None) -> str:
    """'Custom<br/>(role: solver)' style labels: the first word names the operator, as in the examples."""
    parts = [short(op)]
    if prompt:
        parts.append(f"({'instruction' if op == 'CustomCodeGenerateOp' else 'role'}: {prompt})")
    elif note:
        parts.append(note)
    return "<br/>".join(parts)


def add_node(w: Workflow, op: str, prompt: str | None = None, note: str | None = None) -> str:
    nid = w.new_id(PREFIX.get(op, "N"))
    w.nodes[nid] = Node(nid, make_label(op, prompt, note), "{" if op == cat.DECISION else "[", op, prompt)
    return nid


def set_prompt(node: Node, name: str | None) -> None:
    """Point a node at another prompt name, keeping the rest of its label."""
    node.prompt = name
    label = node.label or short(node.op or "")
    if name is None:
        label = _ROLE.sub("", label).replace("<br/><br/>", "<br/>").removesuffix("<br/>")
    elif _ROLE.search(label):
        label = _ROLE.sub(lambda m: f"({m.group(1)}: {name})", label, count=1)
    else:
        label = make_label(node.op or "CustomOp", name)
    node.label = label


def add_prompt(w: Workflow, base: str, text: str) -> str:
    """Define a prompt (reusing a name that already holds this exact text) and return its name."""
    for name, t in w.prompts.items():
        if t == text:
            return name
    name, i = base, 2
    while name in w.prompts:
        name, i = f"{base}_{i}", i + 1
    w.prompts[name] = text
    return name


def new_prompt(w: Workflow, task: str, kind: str, rng: random.Random) -> str:
    """Define a library instruction of this kind that the workflow does not use yet; return its name."""
    return add_prompt(w, lib.NAMES[kind], lib.instruction(task, kind, rng, tuple(w.prompts.values())))


def connect(w: Workflow, src: str, dst: str, label: str | None) -> None:
    w.edges.append(Edge(src, dst, label))


def is_route(w: Workflow, e: Edge) -> bool:
    return w.nodes[e.src].op == cat.DECISION


def edge_port(w: Workflow, e: Edge) -> cat.Port | None:
    dst = w.nodes[e.dst]
    if is_route(w, e) or dst.op is None:
        return None
    return cat.port_of(dst.op, dst.id, e.label)


def out_types(w: Workflow, nid: str, _seen: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """What a node emits, following the catalogue's 'same as its solution(s)' rules upstream."""
    n = w.nodes[nid]
    if n.op is None or n.op == cat.DECISION or nid in _seen:
        return ()
    if n.op == cat.INTERFACE:
        return cat.INTERFACE_NODES.get(nid, ((), (), ()))[1]
    rule = cat.CATALOGUE[n.op].output
    if isinstance(rule, tuple):
        return rule
    port = "solutions" if rule == cat.SAME_AS_SOLUTIONS else "solution"
    srcs = [e.src for e in w.in_edges(nid) if (p := edge_port(w, e)) is not None and p.name == port]
    kinds = [out_types(w, s, _seen | {nid}) for s in srcs]
    return (cat.CODE,) if kinds and all(cat.CODE in k for k in kinds) else (cat.TEXT,)


def fits(w: Workflow, src: str, types: tuple[str, ...]) -> bool:
    return any(cat.is_assignable(t, types) for t in out_types(w, src))


def emits_code(w: Workflow, nid: str) -> bool:
    return cat.CODE in out_types(w, nid)


def descendants(w: Workflow, nid: str) -> set[str]:
    return _walk(w, [nid], forward=True) - {nid}


def ancestors(w: Workflow, nid: str) -> set[str]:
    return _walk(w, [nid], forward=False) - {nid}


def _walk(w: Workflow, starts: list[str], forward: bool, skip: str | None = None) -> set[str]:
    nxt: dict[str, list[str]] = {}
    for e in w.edges:
        a, b = (e.src, e.dst) if forward else (e.dst, e.src)
        nxt.setdefault(a, []).append(b)
    seen, todo = set(starts), deque(starts)
    while todo:
        for m in nxt.get(todo.popleft(), []):
            if m not in seen and m != skip:
                seen.add(m)
                todo.append(m)
    return seen


def exclusive_region(w: Workflow, a: str) -> set[str]:
    """``a`` and the non-interface ancestors that reach RETURN only through ``a``."""
    other = _walk(w, ["RETURN"], forward=False, skip=a)
    return {a} | {x for x in ancestors(w, a) if x not in other and not w.nodes[x].is_interface}


def gated(w: Workflow, nid: str) -> bool:
    """True when the node runs only on one branch of a Decision (a route leads into it or its ancestors)."""
    return any(w.nodes[x].op == cat.DECISION for x in ancestors(w, nid))


def remove_nodes(w: Workflow, ids: set[str]) -> None:
    for nid in ids:
        w.nodes.pop(nid, None)
    w.edges = [e for e in w.edges if e.src not in ids and e.dst not in ids]


def prune(w: Workflow) -> set[str]:
    """Remove non-interface nodes that can no longer reach RETURN (what a deletion left dangling)."""
    gone: set[str] = set()
    while True:
        alive = _walk(w, ["RETURN"], forward=False) if "RETURN" in w.nodes else set()
        dead = {n for n, node in w.nodes.items() if n not in alive and not node.is_interface}
        if not dead:
            return gone
        remove_nodes(w, dead)
        gone |= dead


def prompt_kind(w: Workflow, nid: str, task: str) -> str:
    """Which library variant fits a node: code generation, refining an earlier answer, or solving."""
    node = w.nodes[nid]
    if node.op == "CustomCodeGenerateOp":
        return "generate"
    fed_text = any(not w.nodes[e.src].is_interface and not is_route(w, e) for e in w.in_edges(nid))
    return "refine" if fed_text else "solve"


def _tidy(parent: Workflow, w: Workflow) -> None:
    """Drop what an edit made stale: prompts no node uses any more, styles of removed nodes, link styles
    (their edge indexes shift), empty subgraphs."""
    used = {n.prompt for n in w.nodes.values() if n.prompt}
    was_used = {n.prompt for n in parent.nodes.values() if n.prompt}
    for name in list(w.prompts):
        if name in was_used and name not in used:
            del w.prompts[name]
    keep = []
    for x in w.extras:
        words = x.split()
        if words and words[0] == "linkStyle" and len(w.edges) != len(parent.edges):
            continue
        if words and words[0] in ("style", "click") and len(words) > 1 and words[1] not in w.nodes:
            continue
        keep.append(x)
    w.extras = keep
    for sid in list(w.subgraphs):
        has = any(n.subgraph == sid for n in w.nodes.values()) or \
            any(s.parent == sid for s in w.subgraphs.values())
        if not has:
            del w.subgraphs[sid]


def finish(parent: Workflow, w: Workflow, task: str, operator: str, detail: str,
           parents: tuple[int, ...] = (0,)) -> Child:
    """Print, re-parse and check the edit; decline unless it is a valid workflow different from the parent."""
    _tidy(parent, w)
    if sum(1 for n in w.nodes.values() if not n.is_interface) > MAX_NODES:
        raise Declined(f"{operator}: the child would have more than {MAX_NODES} nodes")
    errors = [d for d in check(w, task) if d.severity == "error"]  # cheap early rejection on the model
    if not errors:
        text = to_mermaid(w)
        if text == to_mermaid(parent):
            raise Declined(f"{operator}: the edit changes nothing")
        child, diags = parse_lenient(text)  # the text is what travels: check what it reads back as
        errors = [d for d in diags if d.severity == "error"]
        if not errors and child != w:
            errors = [d for d in check(child, task) if d.severity == "error"]
    if errors:
        raise Declined(f"{operator}: the result would be invalid ({errors[0].code}: {errors[0].message})")
    return Child(child, operator, detail, parents)


def _first(sites: list[Callable[[], Child]], rng: random.Random, operator: str, none_reason: str) -> Child:
    """Try sites in random order; the first valid child wins, otherwise decline with the last reason."""
    if not sites:
        raise Declined(f"{operator}: {none_reason}")
    rng.shuffle(sites)
    reason = none_reason
    for site in sites[:MAX_TRIES]:
        try:
            return site()
        except Declined as d:
            reason = d.reason
    raise Declined(reason if len(sites) == 1 else f"{operator}: no site gave a valid child (last: {reason})")


def _llm_nodes(w: Workflow) -> list[str]:
    return [n.id for n in w.nodes.values() if n.op in cat.CATALOGUE and n.op != cat.INTERFACE]


def _new_generator(w: Workflow, task: str, rng: random.Random, code: bool) -> tuple[str, str]:
    """Add a fresh parallel generator fed by the interfaces; returns (node id, description). Code tasks get
    a code generator even beside a Text answer (a Code is also a Text)."""
    if code or (task == "code" and "ENTRY_POINT" in w.nodes):
        name = new_prompt(w, "code", "generate", rng)
        g = add_node(w, "CustomCodeGenerateOp", name)
        connect(w, "PROBLEM", g, "problem")
        connect(w, "ENTRY_POINT", g, "entry_point")
        return g, f"CustomCodeGenerate {g} ({name})"
    kinds = ["CustomOp", "CustomOp", "AnswerGenerateOp"] + (["ProgrammerOp"] if task == "math" else [])
    op = rng.choice(kinds)
    if op == "CustomOp":
        name = new_prompt(w, task, "solve", rng)
        g = add_node(w, op, name)
        connect(w, "PROBLEM", g, "input")
        return g, f"Custom {g} ({name})"
    g = add_node(w, op)
    connect(w, "PROBLEM", g, "problem" if op == "ProgrammerOp" else "input")
    return g, f"{short(op)} {g}"


# --------------------------------------------------------------------------------------------- operators

def substitute(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Change one node's type to a compatible one, remapping its input edges onto the new type's ports."""
    allowed = set(cat.operators_for(task))
    sites = [(nid, new) for nid in _llm_nodes(parent) for new in SUBSTITUTES.get(parent.nodes[nid].op or "", ())
             if new in allowed]

    def make(nid: str, new: str) -> Callable[[], Child]:
        def site() -> Child:
            w = clone(parent)
            node, old = w.nodes[nid], w.nodes[nid].op or ""
            ports = cat.CATALOGUE[new].inputs
            for e in w.in_edges(nid):
                if is_route(w, e):
                    continue
                old_port = edge_port(w, e)
                fitting = [p for p in ports if fits(w, e.src, p.types)]
                if not fitting:
                    raise Declined(f"substitute: {new} has no port for {e.src} -> {nid}")
                same = [p for p in fitting if old_port and p.name == old_port.name]
                e.label = (same or [p for p in fitting if p.default] or fitting)[0].name
            for p in ports:  # a required Problem port can always be fed from PROBLEM
                fed = any(e.label == p.name for e in w.in_edges(nid))
                if p.required and cat.PROBLEM in p.types and not fed:
                    connect(w, "PROBLEM", nid, p.name)
            node.op = new
            prompt = None
            if cat.CATALOGUE[new].uses_prompt:
                prompt = node.prompt if node.prompt in w.prompts else \
                    new_prompt(w, task, prompt_kind(w, nid, task), rng)
            node.prompt, node.label, node.shape = prompt, make_label(new, prompt), "["
            return finish(parent, w, task, "substitute", f"{nid}: {short(old)} -> {short(new)}")
        return site

    return _first([make(n, t) for n, t in sites], rng, "substitute", "no node has a compatible substitute")


def prompt_rewrite(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Replace a prompt node's instruction by a library variant, or add a modifier sentence to it."""
    nodes = [n.id for n in parent.nodes.values() if n.op in cat.CATALOGUE and cat.CATALOGUE[n.op].uses_prompt]

    def make(nid: str) -> Callable[[], Child]:
        def site() -> Child:
            w = clone(parent)
            node = w.nodes[nid]
            kind = prompt_kind(w, nid, task)
            old = w.prompts.get(node.prompt or "", "")
            flavour = "mutate" if old and rng.random() < 0.4 else "replace"
            new = lib.mutate(old, task, rng) if flavour == "mutate" else None
            if new is None:
                flavour, new = "replace", lib.instruction(task, kind, rng, (old,))
            if new == old:
                raise Declined(f"prompt: no new {kind} instruction for {nid}")
            users = [n for n in w.nodes.values() if n.prompt and n.prompt == node.prompt]
            if node.prompt and len(users) == 1:
                w.prompts[node.prompt] = new  # only this node uses it: rewrite in place
                name = node.prompt
            else:
                name = add_prompt(w, node.prompt or lib.NAMES[kind], new)
                set_prompt(node, name)
            return finish(parent, w, task, "prompt", f"{nid} prompt '{name}' {flavour}d: {new[:60]}")
        return site

    return _first([make(n) for n in nodes], rng, "prompt", "no node has a prompt to rewrite")


def insert(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Insert a node on an edge (Review+Revise, a Custom refine, Format in math, Test on a Code edge in code)
    or a new ensemble branch (a generator into an existing ScEnsemble, or a new ScEnsemble over an answer)."""
    sites: list[Callable[[], Child]] = []
    for i, e in enumerate(parent.edges):
        src = parent.nodes[e.src]
        if is_route(parent, e) or src.is_interface or edge_port(parent, e) is None:
            continue
        sites.append(_insert_on_edge(parent, task, rng, i, "review_revise"))
        if cat.is_assignable(cat.TEXT, edge_port(parent, e).types):  # a Custom emits Text, not Code
            sites.append(_insert_on_edge(parent, task, rng, i, "refine"))
        if task == "math" and e.dst == "RETURN" and src.op != "FormatOp":
            sites.append(_insert_on_edge(parent, task, rng, i, "format"))
        code_edge = "ENTRY_POINT" in parent.nodes and emits_code(parent, e.src)
        if task == "code" and code_edge and src.op != "TestOp":
            sites.append(_insert_on_edge(parent, task, rng, i, "test"))
        if parent.nodes[e.dst].op != "ScEnsembleOp":
            sites.append(_insert_on_edge(parent, task, rng, i, "new_ensemble"))
    for n in parent.nodes.values():
        if n.op == "ScEnsembleOp" and not gated(parent, n.id):
            sites += [_ensemble_branch(parent, task, rng, n.id)] * 2  # weight: the paper's favourite motif
    return _first(sites, rng, "insert", "no edge to insert on")


def _insert_on_edge(parent: Workflow, task: str, rng: random.Random, index: int,
                    kind: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        e = w.edges.pop(index)
        u, v, label = e.src, e.dst, e.label
        if kind == "review_revise":
            r, x = add_node(w, "ReviewOp"), add_node(w, "ReviseOp")
            connect(w, u, r, "solution")
            connect(w, "PROBLEM", r, "problem")
            connect(w, u, x, "solution")
            connect(w, r, x, "feedback")
            connect(w, "PROBLEM", x, "problem")
            what = f"Review {r} + Revise {x}"
        elif kind == "refine":
            name = new_prompt(w, task, "refine", rng)
            x = add_node(w, "CustomOp", name)
            connect(w, u, x, "input")
            connect(w, "PROBLEM", x, "input")
            what = f"Custom {x} ({name})"
        elif kind in ("format", "test"):
            x = add_node(w, "FormatOp" if kind == "format" else "TestOp")
            connect(w, u, x, "solution")
            connect(w, "PROBLEM", x, "problem")
            if kind == "test":
                connect(w, "ENTRY_POINT", x, "entry_point")
            what = f"{short(w.nodes[x].op or '')} {x}"
        else:  # new_ensemble: the current answer and a new parallel generator, ensembled
            g, gdesc = _new_generator(w, task, rng, code=emits_code(w, u))
            x = add_node(w, "ScEnsembleOp")
            connect(w, u, x, "solutions")
            connect(w, g, x, "solutions")
            connect(w, "PROBLEM", x, "problem")
            what = f"ScEnsemble {x} over {u} and new {gdesc}"
        connect(w, x, v, label)
        return finish(parent, w, task, "insert", f"{kind}: {what} on {u} -> {v}")
    return site


def _ensemble_branch(parent: Workflow, task: str, rng: random.Random, eid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        g, gdesc = _new_generator(w, task, rng, code=emits_code(w, eid))
        connect(w, g, eid, "solutions")
        return finish(parent, w, task, "insert", f"ensemble_branch: new {gdesc} into {eid}")
    return site


def rewire(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Move one edge's source to another compatible upstream node (no cycle, no node left unused)."""
    sites = []
    for i, e in enumerate(parent.edges):
        port = edge_port(parent, e)
        if port is None:
            continue
        if len({x.dst for x in parent.out_edges(e.src)}) < 2:
            continue  # moving its only use would strand the old source
        below = descendants(parent, e.dst) | {e.dst}
        existing = {(x.src, x.label) for x in parent.in_edges(e.dst)}
        for s, node in parent.nodes.items():
            if (s == e.src or s in below or s == "RETURN" or node.op in (None, cat.DECISION)
                    or (s, e.label) in existing or not fits(parent, s, port.types)):
                continue
            sites.append((i, s))

    def make(i: int, s: str) -> Callable[[], Child]:
        def site() -> Child:
            w = clone(parent)
            e = w.edges[i]
            old, e.src = e.src, s
            return finish(parent, w, task, "rewire", f"{old} -> {e.dst} ({e.label or 'default'}) now from {s}")
        return site

    return _first([make(i, s) for i, s in sites], rng, "rewire", "no edge has another compatible source")


def delete(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Remove a node, reconnect its inputs to its consumers where the types allow, prune what dangles."""
    nodes = [n for n in _llm_nodes(parent) if parent.nodes[n].op != cat.DECISION]

    def make(nid: str) -> Callable[[], Child]:
        def site() -> Child:
            w = clone(parent)
            # the main data flow (the default port's feeds) is what may take the node's place
            ins = [e for e in w.in_edges(nid) if not is_route(w, e) and (p := edge_port(w, e)) and p.default]
            routes = [e for e in w.in_edges(nid) if is_route(w, e)]
            links = []
            for out in w.out_edges(nid):
                port = edge_port(w, out)
                have = {(x.src, x.label) for x in w.in_edges(out.dst)}
                if port is None:  # not a port edge (only in an invalid parent)
                    continue
                src = next((e.src for e in ins
                            if fits(w, e.src, port.types) and (e.src, out.label) not in have), None)
                if src is not None:
                    links.append(Edge(src, out.dst, out.label))
                elif out.dst == "RETURN" or (port.required and sum(
                        1 for x in w.in_edges(out.dst) if edge_port(w, x) == port) == 1):
                    raise Declined(f"delete: removing {nid} would leave {out.dst} without its "
                                   f"'{port.name}' input")
            if routes and not links:
                raise Declined(f"delete: {nid} is a Decision branch with nothing to take its place")
            remove_nodes(w, {nid})
            w.edges.extend(links)
            for r in routes:  # the branch now starts at what replaced the node
                for link in links:
                    if not w.nodes[link.src].is_interface:
                        w.edges.append(Edge(r.src, link.src, r.label))
            pruned = prune(w)
            extra = f"; pruned {', '.join(sorted(pruned))}" if pruned else ""
            rewired = ", ".join(f"{x.src} -> {x.dst}" for x in links) or "no reconnection"
            return finish(parent, w, task, "delete", f"{nid} ({short(parent.nodes[nid].op or '')}) removed; "
                          f"{rewired}{extra}")
        return site

    return _first([make(n) for n in nodes], rng, "delete", "no deletable node")


def subgraph(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Replace a single-entry/single-exit region by another with the same interface: one generator <-> an
    ensemble of 2-3 generators, or a solver -> a plan-then-solve chain."""
    sites: list[Callable[[], Child]] = []
    for n in parent.nodes.values():
        if gated(parent, n.id) or any(is_route(parent, e) for e in parent.in_edges(n.id)):
            continue
        if n.op in ("CustomOp", "AnswerGenerateOp", "ProgrammerOp", "CustomCodeGenerateOp"):
            sites.append(_expand(parent, task, rng, n.id))
        if n.op in ("CustomOp", "AnswerGenerateOp"):
            sites.append(_chain(parent, task, rng, n.id))
        if n.op == "ScEnsembleOp":
            sites.append(_collapse(parent, task, rng, n.id))
    return _first(sites, rng, "subgraph", "no region to mutate")


def _expand(parent: Workflow, task: str, rng: random.Random, nid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        node = w.nodes[nid]
        outs = w.out_edges(nid)
        copies = []
        for _ in range(rng.choice((1, 2))):
            prompt = None
            if node.op and cat.CATALOGUE[node.op].uses_prompt:
                kind = prompt_kind(w, nid, task)
                prompt = new_prompt(w, task, kind, rng)
            c = add_node(w, node.op or "CustomOp", prompt)
            copies.append(c)
            for e in w.in_edges(nid):
                if e.src not in copies:
                    connect(w, e.src, c, e.label)
        e_id = add_node(w, "ScEnsembleOp")
        w.edges = [e for e in w.edges if e.src != nid]
        for x in [nid, *copies]:
            connect(w, x, e_id, "solutions")
        connect(w, "PROBLEM", e_id, "problem")
        for o in outs:
            connect(w, e_id, o.dst, o.label)
        members = ", ".join([nid, *copies])
        return finish(parent, w, task, "subgraph", f"expand: {nid} -> ensemble {e_id} of {members}")
    return site


def _chain(parent: Workflow, task: str, rng: random.Random, nid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        name = add_prompt(w, lib.NAMES["plan"], lib.instruction(task, "plan", rng))
        p = add_node(w, "CustomOp", name)
        for e in list(w.in_edges(nid)):
            connect(w, e.src, p, "input")
        connect(w, p, nid, "input")
        return finish(parent, w, task, "subgraph", f"chain: planner {p} ({name}) now feeds {nid}")
    return site


def _collapse(parent: Workflow, task: str, rng: random.Random, eid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        sols = [e.src for e in w.in_edges(eid) if (p := edge_port(w, e)) is not None and p.name == "solutions"]
        want_code = emits_code(w, eid)
        keepers = [s for s in sols if emits_code(w, s) == want_code and not w.nodes[s].is_interface]
        if not keepers:
            raise Declined(f"subgraph: no branch of {eid} can replace it")
        keep = rng.choice(keepers)
        outs = w.out_edges(eid)
        remove_nodes(w, {eid})
        for o in outs:
            if (keep, o.label) not in {(x.src, x.label) for x in w.in_edges(o.dst)}:
                connect(w, keep, o.dst, o.label)
        pruned = prune(w)
        dropped = f"; dropped {', '.join(sorted(pruned))}" if pruned else ""
        return finish(parent, w, task, "subgraph", f"collapse: ensemble {eid} -> its branch {keep}{dropped}")
    return site


# ---------------------------------------------------------------------------------------------- crossover

def _branch(w: Workflow, b: str) -> set[str] | None:
    """``b`` and its non-interface ancestors: a subgraph hanging off the interface nodes (None if it holds a
    Decision, whose other route would be lost)."""
    nodes = {b} | {x for x in ancestors(w, b) if not w.nodes[x].is_interface}
    return None if any(w.nodes[x].op == cat.DECISION for x in nodes) else nodes


def graft(dst: Workflow, src: Workflow, nodes: set[str]) -> dict[str, str]:
    """Copy ``nodes`` of ``src`` (and their edges from interfaces or each other) into ``dst`` under fresh ids;
    prompts are merged (same text -> same name, a clash -> renamed). Returns old id -> new id."""
    mapping: dict[str, str] = {}
    for nid in src.nodes:  # keep source order so ids are deterministic
        if nid not in nodes:
            continue
        old = src.nodes[nid]
        new_id = dst.new_id(re.sub(r"\d+$", "", nid) or PREFIX.get(old.op or "", "N"))
        node = Node(new_id, old.label, old.shape or "[", old.op, old.prompt, list(old.classes))
        dst.nodes[new_id] = node
        mapping[nid] = new_id
        if old.prompt and old.prompt in src.prompts:
            name = add_prompt(dst, old.prompt, src.prompts[old.prompt])
            if name != old.prompt:
                set_prompt(node, name)
    for e in src.edges:
        if e.dst in mapping and (e.src in mapping or src.nodes[e.src].is_interface):
            s = mapping.get(e.src, e.src)
            if s not in dst.nodes:
                raise Declined(f"crossover: the branch needs {s}, which the other parent lacks")
            dst.edges.append(Edge(s, mapping[e.dst], e.label, e.arrow))
    for c in {c for n in mapping.values() for c in dst.nodes[n].classes}:
        if c in src.class_defs:
            dst.class_defs.setdefault(c, src.class_defs[c])
    return mapping


def crossover(a: Workflow, b: Workflow, task: str, rng: random.Random) -> Child:
    """Combine two parents at a shared interface: graft B's branch into A's ensemble, ensemble A's answer
    with B's branch, or swap the region that feeds one of A's nodes for B's branch."""
    donors = [n for n in b.nodes.values() if n.op in cat.CATALOGUE and n.op not in (cat.INTERFACE, cat.DECISION)
              and _branch(b, n.id) is not None and set(out_types(b, n.id)) & {cat.TEXT, cat.CODE}]
    ensembles = [n.id for n in a.nodes.values() if n.op == "ScEnsembleOp" and not gated(a, n.id)]
    answer = [e for e in a.in_edges("RETURN") if not is_route(a, e)] if "RETURN" in a.nodes else []
    targets = [n.id for n in a.nodes.values() if n.op in cat.CATALOGUE
               and n.op not in (cat.INTERFACE, cat.DECISION) and not gated(a, n.id)]
    sites: list[Callable[[], Child]] = []
    for d in donors:
        sites += [_graft_branch(a, b, task, d.id, e) for e in ensembles]
        if len(answer) == 1 and not ensembles:
            sites.append(_graft_ensemble(a, b, task, d.id))
        sites += [_swap(a, b, task, t, d.id) for t in targets]
    return _first(sites, rng, "crossover", "the parents share no compatible branch")


def _nodes(n: int) -> str:
    return f"{n} node{'s' * (n != 1)}"  # '1 node', '3 nodes'


def _graft_branch(a: Workflow, b: Workflow, task: str, donor: str, eid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(a)
        m = graft(w, b, _branch(b, donor) or set())
        connect(w, m[donor], eid, "solutions")
        return finish(a, w, task, "crossover", f"graft_branch: B's {donor} branch ({_nodes(len(m))}) as "
                      f"{m[donor]} into A's {eid}", (0, 1))
    return site


def _graft_ensemble(a: Workflow, b: Workflow, task: str, donor: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(a)
        feed = next(e for e in w.in_edges("RETURN") if not is_route(w, e))
        m = graft(w, b, _branch(b, donor) or set())
        x = add_node(w, "ScEnsembleOp")
        w.edges.remove(feed)
        connect(w, feed.src, x, "solutions")
        connect(w, m[donor], x, "solutions")
        connect(w, "PROBLEM", x, "problem")
        connect(w, x, "RETURN", feed.label)
        return finish(a, w, task, "crossover", f"graft_ensemble: ScEnsemble {x} over A's {feed.src} and B's "
                      f"{donor} branch ({m[donor]})", (0, 1))
    return site


def _swap(a: Workflow, b: Workflow, task: str, target: str, donor: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(a)
        region = exclusive_region(w, target)
        outs = [e for e in w.out_edges(target) if e.dst not in region]
        remove_nodes(w, region)
        m = graft(w, b, _branch(b, donor) or set())
        for o in outs:
            connect(w, m[donor], o.dst, o.label)
        prune(w)
        gone = ", ".join(sorted(region))
        return finish(a, w, task, "crossover", f"swap: A's {target} region ({gone}) replaced by B's {donor} "
                      f"branch ({_nodes(len(m))})", (0, 1))
    return site


# ----------------------------------------------------------------------------------------- macro-operators
# Whole motifs from the papers' case studies, each one edit: the landscape is deceptive step by step (a 2-sample
# vote is no better than one sample, so single-node inserts get no reward until the third sample arrives).

SAMPLERS = ("CustomOp", "AnswerGenerateOp", "ProgrammerOp", "CustomCodeGenerateOp")  # sample at temperature > 0
ENSEMBLE_SIZES = (3, 5)  # CoT-SC samples five; three is the smallest vote that beats one sample
RETRY_PROMPT = ("The previous solution failed its tests. Write an improved, fully correct function with the same "
                "name, handling every case the problem describes.")


def _copy_node(w: Workflow, nid: str) -> str:
    """A new node of the same operator, prompt and inputs: another sample of the same call."""
    node = w.nodes[nid]
    new = w.new_id(PREFIX.get(node.op or "", "N"))
    w.nodes[new] = Node(new, node.label, node.shape or "[", node.op, node.prompt, list(node.classes))
    for e in w.in_edges(nid):
        if not is_route(w, e):
            connect(w, e.src, new, e.label)
    return new


def _voted(w: Workflow, nid: str) -> bool:
    """Whether every use of the node is as a solution of an ensemble (it is already one of several samples)."""
    outs = w.out_edges(nid)
    return bool(outs) and all(w.nodes[e.dst].op == "ScEnsembleOp" and (p := edge_port(w, e)) is not None
                              and p.name == "solutions" for e in outs)


def ensemble(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Add a k-sample ensemble (CoT-SC): a sampling node becomes k samples of itself (same operator, prompt and
    inputs: each call samples anew) voted by a new ScEnsemble; an existing ensemble gets more samples of one of
    its sampling branches until it has k."""
    sites: list[Callable[[], Child]] = []
    for n in parent.nodes.values():
        if gated(parent, n.id) or any(is_route(parent, e) for e in parent.in_edges(n.id)):
            continue
        if n.op in SAMPLERS and not _voted(parent, n.id):
            sites.append(_sample_k(parent, task, rng, n.id))
        elif n.op == "ScEnsembleOp":
            sites.append(_grow(parent, task, rng, n.id))
    return _first(sites, rng, "ensemble", "no sampling node or ensemble to grow")


def _sample_k(parent: Workflow, task: str, rng: random.Random, nid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        k = rng.choice(ENSEMBLE_SIZES)
        outs = w.out_edges(nid)
        copies = [_copy_node(w, nid) for _ in range(k - 1)]
        e_id = add_node(w, "ScEnsembleOp")
        w.edges = [e for e in w.edges if e.src != nid]
        for x in [nid, *copies]:
            connect(w, x, e_id, "solutions")
        connect(w, "PROBLEM", e_id, "problem")
        for o in outs:
            connect(w, e_id, o.dst, o.label)
        return finish(parent, w, task, "ensemble", f"{k}-sample ensemble {e_id} of {nid} "
                      f"({short(w.nodes[nid].op or '')}) and its copies {', '.join(copies)}")
    return site


def _grow(parent: Workflow, task: str, rng: random.Random, eid: str) -> Callable[[], Child]:
    def site() -> Child:
        w = clone(parent)
        sols = [e.src for e in w.in_edges(eid) if (p := edge_port(w, e)) is not None and p.name == "solutions"]
        bigger = [k for k in ENSEMBLE_SIZES if k > len(sols)] or [len(sols) + 2]
        k = rng.choice(bigger)
        samplers = [s for s in sols if w.nodes[s].op in SAMPLERS and not gated(w, s)]
        added = []
        for _ in range(k - len(sols)):
            if samplers:
                added.append(_copy_node(w, rng.choice(samplers)))
            else:
                added.append(_new_generator(w, task, rng, code=emits_code(w, eid))[0])
            connect(w, added[-1], eid, "solutions")
        return finish(parent, w, task, "ensemble", f"ensemble {eid} grown from {len(sols)} to {k} samples "
                      f"(new {', '.join(added)})")
    return site


def _answer_edge(w: Workflow) -> Edge | None:
    """The one plain (non-route) edge into RETURN, if the answer has a single source."""
    feeds = [e for e in w.in_edges("RETURN") if not is_route(w, e)] if "RETURN" in w.nodes else []
    return feeds[0] if len(feeds) == 1 and not any(is_route(w, e) for e in w.in_edges("RETURN")) else None


def test_retry(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Add test + retry (the HumanEval case study): the answer's code is tested on the problem's public
    examples (the Test asks for fixes itself); a Decision returns it when it passes and otherwise has a fresh
    generator write an improved version, which is tested in turn."""
    feed = _answer_edge(parent)
    if task != "code" or feed is None or "ENTRY_POINT" not in parent.nodes or not emits_code(parent, feed.src):
        raise Declined("test_retry: the answer is not a single code output (code tasks only)")

    def site() -> Child:
        w = clone(parent)
        e = next(x for x in w.edges if x.src == feed.src and x.dst == "RETURN")
        w.edges.remove(e)
        tested, what = feed.src, f"Decision on {feed.src}'s verdict"
        if w.nodes[tested].op != "TestOp":
            t = add_node(w, "TestOp")
            connect(w, tested, t, "solution")
            connect(w, "PROBLEM", t, "problem")
            connect(w, "ENTRY_POINT", t, "entry_point")
            tested, what = t, f"Test {t} on {feed.src}'s code"
        d = add_node(w, cat.DECISION, note="tests passed?")
        connect(w, tested, d, "verdict")
        connect(w, d, "RETURN", "Passed")
        g = add_node(w, "CustomCodeGenerateOp", add_prompt(w, "improve", RETRY_PROMPT))
        connect(w, d, g, "Failed")
        connect(w, "PROBLEM", g, "problem")
        connect(w, "ENTRY_POINT", g, "entry_point")
        t2 = add_node(w, "TestOp")
        connect(w, g, t2, "solution")
        connect(w, "PROBLEM", t2, "problem")
        connect(w, "ENTRY_POINT", t2, "entry_point")
        connect(w, t2, "RETURN", None)
        return finish(parent, w, task, "test_retry", f"{what}, Decision {d}: passed -> RETURN, failed -> new "
                      f"CustomCodeGenerate {g} tested by {t2}")

    return _first([site], rng, "test_retry", "no code answer to test")


def review_revise(parent: Workflow, task: str, rng: random.Random) -> Child:
    """Add review + revise (Self-Refine) on the answer: a Review of the final answer and a Revise that uses it."""
    feed = _answer_edge(parent)
    if feed is None or parent.nodes[feed.src].is_interface:
        raise Declined("review_revise: the answer has no single source to review")
    index = parent.edges.index(feed)
    child = _insert_on_edge(parent, task, rng, index, "review_revise")()
    return replace(child, operator="review_revise", detail=child.detail.removeprefix("review_revise: "))


MACROS: dict[str, Callable[[Workflow, str, random.Random], Child]] = {
    "ensemble": ensemble, "test_retry": test_retry, "review_revise": review_revise,
}
MACRO_TASKS = {"test_retry": ("code",)}  # the macros that only one kind of task can use


# ------------------------------------------------------------------------------------------------ registry

MUTATIONS: dict[str, Callable[[Workflow, str, random.Random], Child]] = {
    "substitute": substitute, "insert": insert, "rewire": rewire, "delete": delete,
    "subgraph": subgraph, "prompt": prompt_rewrite, **MACROS,
}
OPERATORS = (*MUTATIONS, "crossover")
PAPER_OPERATORS = ("substitute", "insert", "rewire", "delete", "subgraph", "prompt", "crossover")  # §4.1's own


def operators_for(task: str, names: list[str] | tuple[str, ...] = OPERATORS) -> list[str]:
    """The operators of ``names`` that can apply to this kind of task."""
    return [n for n in names if task in MACRO_TASKS.get(n, (task,))]


def apply(name: str, parents: list[Workflow], task: str, rng: random.Random) -> Child | Declined:
    """Run one operator by name; a decline is returned, not raised. Crossover needs two parents."""
    if name not in OPERATORS:
        raise ValueError(f"unknown operator '{name}' (known: {', '.join(OPERATORS)})")
    try:
        if name == "crossover":
            if len(parents) < 2:
                return Declined("crossover: needs two parents")
            return crossover(parents[0], parents[1], task, rng)
        return MUTATIONS[name](parents[0], task, rng)
    except Declined as d:
        return d


def parse_operator_list(text: str | None) -> list[str]:
    """'insert,delete' -> ['insert', 'delete']; ValueError naming an unknown operator."""
    if not text:
        return list(OPERATORS)
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in OPERATORS]
    if bad or not names:
        raise ValueError(f"unknown operator(s) {', '.join(bad) or '(none given)'}; "
                         f"known: {', '.join(OPERATORS)}")
    return names
