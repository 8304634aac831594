"""The checker (DESIGN §4): soft checks in pure Python, plus the hard check by the real Mermaid parser.

``check`` never raises: whatever it is given, it answers with diagnostics.
"""

from __future__ import annotations

from collections import deque

from flowcore import catalogue as cat
from flowcore.mermaid.reader import gc_paused, label_type_word, parse_lenient
from flowcore.mermaid.unclosed import relocate
from flowcore.model import Diagnostic, Edge, Node, Workflow

INPUT_INTERFACES = ("PROBLEM", "ENTRY_POINT")


def check(source: str | Workflow, task: str | None = None, *, hard: bool = False) -> list[Diagnostic]:
    """Diagnostics for a workflow text (or model). A workflow is valid when none has severity 'error'."""
    try:
        if isinstance(source, Workflow):
            w, diags = source, []
        else:
            w, diags = parse_lenient(source)
        if task not in (None, *cat.TASKS):
            diags.append(Diagnostic("M011", "warning", f"unknown task '{task}' (use {', '.join(cat.TASKS)}); "
                                    "task restrictions were not checked"))
            task = None
        if not any(d.code == "M001" for d in diags):
            with gc_paused():
                diags.extend(_semantic(w, task))
        if hard and isinstance(source, str):
            diags.extend(_hard(source, diags))
    except Exception as exc:  # the checker must answer, never crash the editor
        return [Diagnostic("M001", "error", f"the checker could not read this text ({type(exc).__name__}: {exc})",
                           1, 1)]
    return sorted(diags, key=lambda d: (d.line or 0, d.column or 0, d.code))


def is_valid(diags: list[Diagnostic]) -> bool:
    return not any(d.severity == "error" for d in diags)


def _hard(text: str, soft: list[Diagnostic]) -> list[Diagnostic]:
    try:
        from flowcore.mermaid.engines.js import parse_check
    except ImportError:  # pragma: no cover - the engine is installed with its requirements
        return [Diagnostic("M001", "warning", "hard check unavailable: mermaidx is not installed")]
    err = parse_check(text)
    if err is None:
        return []
    line, column, message = relocate(text, err.line, err.column, err.message)  # as the soft reader places it
    if any(d.code == "M001" and d.line == line for d in soft):
        return []
    moved = (err.line, err.column) if line != err.line else None
    return [Diagnostic("M001", "error", f"Mermaid 11 cannot parse this: {message}", line, column, mermaid_at=moved)]


class _Ctx:
    """Indexes built once (edges by node, each edge's target port) so every rule is linear."""

    def __init__(self, w: Workflow):
        self.w = w
        self.warnings: list[Diagnostic] = []
        nodes = w.nodes
        self.decisions = {nid for nid, n in nodes.items() if n.op == cat.DECISION}
        ins: dict[str, list[Edge]] = {n: [] for n in nodes}
        outs: dict[str, list[Edge]] = {n: [] for n in nodes}
        fed: dict[str, dict[str, list[Edge]]] = {}
        ports: list[cat.Port | None] = []  # each edge's target port, in edge order
        port_of, decisions, interface = cat.port_of, self.decisions, cat.INTERFACE
        by_label: dict[tuple, cat.Port | None] = {}  # an operator's port depends on the label only
        add_port = ports.append
        for e in w.edges:
            src, dst, label = e.src, e.dst, e.label
            ins[dst].append(e)
            outs[src].append(e)
            op = nodes[dst].op
            if op is None or src in decisions:
                add_port(None)
                continue
            if op == interface:
                port = port_of(op, dst, label)
            else:
                key = (op, label)
                port = by_label.get(key, by_label)
                if port is by_label:
                    port = by_label[key] = port_of(op, dst, label)
            if port is None and src == "PROBLEM" and label is not None:
                port = self._problem_port(op, dst, e)
            add_port(port)
            if port is not None:  # (get before set: setdefault would build a dict and a list every edge)
                by_port = fed.get(dst)
                if by_port is None:
                    by_port = fed[dst] = {}
                feeders = by_port.get(port.name)
                if feeders is None:
                    by_port[port.name] = [e]
                else:
                    feeders.append(e)
        self.ins, self.outs, self.fed, self.ports = ins, outs, fed, ports
        self._types: dict[str, tuple[str, ...] | None] = {}

    def _problem_port(self, op: str, dst: str, e: Edge) -> cat.Port | None:
        """The published MermaidFlow seeds write PROBLEM -->|input| X for every X: when X has one port that
        takes the Problem, read the edge as that port and say the canonical label (a warning, not an error)."""
        candidates = [p for p in cat.inputs_of(op, dst) if cat.PROBLEM in p.types]
        if len(candidates) != 1 or (e.label or "").strip().lower() not in ("input", "inputs"):
            return None
        port = candidates[0]
        self.warnings.append(Diagnostic("M007", "warning", f"edge PROBLEM -> {dst} is labelled '{e.label}', which "
                                        f"is not a port of {op}; read as its problem port (write "
                                        f"'-->|{port.name}|')", e.line or None, e.column or None, dst))
        return port

    def node(self, nid: str) -> Node:
        return self.w.nodes[nid]

    def is_route(self, e: Edge) -> bool:
        return e.src in self.decisions

    def port_edges(self, nid: str) -> dict[str, list[Edge]]:
        return self.fed.get(nid) or {}

    def out_types(self, nid: str, _stack: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
        """The types a node emits (None when unknown); rules such as 'same as solutions' look upstream."""
        if nid in self._types:
            return self._types[nid]
        node = self.node(nid)
        if node.op is None or nid in _stack:
            return None
        if node.op == cat.INTERFACE:
            result: tuple[str, ...] | None = cat.INTERFACE_NODES.get(nid, ((), (), ()))[1]
        else:
            rule = cat.CATALOGUE[node.op].output
            if isinstance(rule, tuple):
                result = rule
            else:
                port = "solutions" if rule == cat.SAME_AS_SOLUTIONS else "solution"
                feeds = self.port_edges(nid).get(port, [])
                srcs = [self.out_types(e.src, _stack | {nid}) for e in feeds]
                result = (cat.CODE,) if srcs and all(s and cat.CODE in s for s in srcs) else (cat.TEXT,)
        self._types[nid] = result
        return result


def _semantic(w: Workflow, task: str | None) -> list[Diagnostic]:
    ctx = _Ctx(w)
    d: list[Diagnostic] = list(ctx.warnings)
    d += _types_known(w)
    d += _interfaces(w)
    if task:
        d += _task_rules(w, task)
    d += _edges(ctx)
    d += _required(ctx)
    d += _return_fan_in(ctx)
    starts = [i for i in INPUT_INTERFACES if i in w.nodes]
    acyclic, fwd = _acyclic_reach(ctx, starts)
    if not acyclic:
        d += _cycles(w)
    d += _reachability(ctx, starts, fwd)
    for n in w.nodes.values():
        if n.prompt and n.prompt not in w.prompts:
            d.append(_at(n, "M013", f"node {n.id} names prompt '{n.prompt}', which this workflow does not define "
                         f"(add '%% @prompt {n.prompt}: ...')", "warning"))
    return d


def _at(n: Node, code: str, msg: str, severity: str = "error") -> Diagnostic:
    return Diagnostic(code, severity, msg, n.line or None, n.column or None, n.id)


def _edge_at(e: Edge, code: str, msg: str, node: str | None = None) -> Diagnostic:
    return Diagnostic(code, "error", msg, e.line or None, e.column or None, node or e.dst)


def _types_known(w: Workflow) -> list[Diagnostic]:
    out = []
    for n in w.nodes.values():
        if n.op == cat.INTERFACE and n.id not in cat.INTERFACE_NODES:
            out.append(_at(n, "M003", f"node {n.id} is an Interface, but interfaces are "
                           f"{', '.join(cat.INTERFACE_NODES)} (rename the node or give it an operator type)"))
        if n.op is not None:
            for c in n.classes:
                if c.lower().endswith("op") and cat.resolve(c) is None:  # meant as an operator type, but unknown
                    hint = cat.suggest(c)
                    out.append(_at(n, "M003", f"unknown operator type '{c}' on node {n.id}"
                                   + (f"; did you mean {hint}?" if hint else "")))
            continue
        word = label_type_word(n.label)
        candidates = [c for c in n.classes if c.lower().endswith("op") or cat.suggest(c)]
        if candidates:
            hint = cat.suggest(candidates[0])
            out.append(_at(n, "M003", f"unknown operator type '{candidates[0]}' on node {n.id}"
                           + (f"; did you mean {hint}?" if hint else "")))
        elif word and (hint := cat.suggest(word)):
            out.append(_at(n, "M003", f"unknown operator type '{word}' on node {n.id}; did you mean {hint}?"))
        else:
            out.append(_at(n, "M014", f"node {n.id} has no operator type: add 'class {n.id} CustomOp' (or another "
                           "operator) or start its label with the operator name"))
    return out


def _interfaces(w: Workflow) -> list[Diagnostic]:
    out = []
    for nid in ("PROBLEM", "RETURN"):
        n = w.nodes.get(nid)
        if n is None:
            out.append(Diagnostic("M004", "error", f"the workflow has no {nid} node "
                                  f"(add {nid}([{nid.title()}]) and 'class {nid} Interface')", 1, 1, None))
    for nid in cat.INTERFACE_NODES:
        n = w.nodes.get(nid)
        if n is not None and n.op not in (cat.INTERFACE, None):
            out.append(_at(n, "M004", f"{nid} must be an Interface node, not {n.op}"))
    return out


def _task_rules(w: Workflow, task: str) -> list[Diagnostic]:
    out = []
    interface, interface_nodes, tasks_of = cat.INTERFACE, cat.INTERFACE_NODES, cat.tasks_of
    tasks_by_op: dict[str, tuple[str, ...]] = {}  # an operator's tasks depend on the node id only for Interface
    for n in w.nodes.values():
        op = n.op
        if op is None:
            continue
        if op == interface:
            if n.id not in interface_nodes:
                continue
            allowed = tasks_of(op, n.id)
        else:
            allowed = tasks_by_op.get(op)
            if allowed is None:
                allowed = tasks_by_op[op] = tasks_of(op, n.id)
        if task not in allowed:
            what = n.id if n.op == cat.INTERFACE else n.op
            out.append(_at(n, "M011", f"{what} (node {n.id}) is not allowed in {task} tasks; "
                           f"it is for {' and '.join(allowed)} tasks"))
    return out


def _edges(ctx: _Ctx) -> list[Diagnostic]:
    out = []
    nodes, types_of, fits = ctx.w.nodes, ctx._types, {}
    decision, interface = cat.DECISION, cat.INTERFACE
    # what an operator with a fixed output emits, whatever feeds it: most sources need no call of out_types
    fixed = {op: spec.output for op, spec in cat.CATALOGUE.items() if op != interface and isinstance(spec.output, tuple)}
    for e, port in zip(ctx.w.edges, ctx.ports, strict=True):
        src, dst = nodes[e.src], nodes[e.dst]
        if src.op is None or dst.op is None:
            continue
        if src.op == decision:
            if (e.label or "").strip().lower() not in ("passed", "failed"):
                got = f"'{e.label}'" if e.label else "no label"
                out.append(_edge_at(e, "M007", f"an edge out of Decision {src.id} must be labelled Passed or "
                                    f"Failed (got {got})"))
            continue
        if src.op == interface and src.id == "RETURN":
            out.append(_edge_at(e, "M008", "RETURN is the workflow's output; nothing can flow out of it", e.src))
            continue
        if port is None:
            names = [p.name for p in cat.inputs_of(dst.op, dst.id)]
            what = f"'{e.label}' is not an input port" if e.label else "an unlabelled edge has no default port"
            takes = f"its inputs are {', '.join(names)}" if names else "it takes no inputs"
            out.append(_edge_at(e, "M007", f"{what} of {dst.id} ({_kind(dst)}); {takes}"))
            continue
        types = types_of.get(src.id) or fixed.get(src.op) or ctx.out_types(src.id)
        if types is None:
            continue
        key = (types, port.types)
        ok = fits.get(key)
        if ok is None:
            ok = fits[key] = cat.compatible(types, port.types)
        if not ok:
            emits = "/".join(types) if types else "nothing"
            out.append(_edge_at(e, "M008", f"type mismatch on {e.src} -> {e.dst}: {e.src} emits {emits}, "
                                f"but port '{port.name}' of {_kind(dst)} takes {'/'.join(port.types)}"))
    return out


def _kind(n: Node) -> str:
    return n.id if n.op == cat.INTERFACE else (n.op or "untyped")


def _required(ctx: _Ctx) -> list[Diagnostic]:
    out = []
    interface, interface_nodes, inputs_of, fed_of = cat.INTERFACE, cat.INTERFACE_NODES, cat.inputs_of, ctx.fed
    for n in ctx.w.nodes.values():
        if n.op is None or (n.op == interface and n.id not in interface_nodes):
            continue
        fed = fed_of.get(n.id) or {}
        for p in inputs_of(n.op, n.id):
            count = len(fed.get(p.name, ()))
            if n.id == "RETURN":
                count += sum(1 for e in ctx.ins[n.id] if ctx.is_route(e))
            if p.min_inputs > 1 and count < p.min_inputs:
                out.append(_at(n, "M010", f"{_kind(n)} {n.id} needs at least {p.min_inputs} solutions, got {count}"))
            elif p.required and count == 0:
                out.append(_at(n, "M009", f"{_kind(n)} {n.id} is missing its required input '{p.name}' "
                               f"({'/'.join(p.types)})"))
    return out


def _gated(ctx: _Ctx, target: str) -> set[str]:
    """Nodes that run only when a route into ``target`` is taken: the target and what it feeds."""
    seen, todo = {target}, deque([target])
    while todo:
        for e in ctx.outs[todo.popleft()]:
            if e.dst not in seen and e.dst != "RETURN":
                seen.add(e.dst)
                todo.append(e.dst)
    return seen


def _return_fan_in(ctx: _Ctx) -> list[Diagnostic]:
    ins = ctx.ins.get("RETURN", [])
    if len(ins) <= 1:
        return []
    decisions = {n.id for n in ctx.w.nodes.values() if n.op == cat.DECISION}
    for did in decisions:
        branches: dict[str, set[str]] = {}
        for r in ctx.outs[did]:
            key = (r.label or "").lower()
            branches.setdefault(key, set()).update({"RETURN"} if r.dst == "RETURN" else _gated(ctx, r.dst))
        used: list[str] = []
        for e in ins:
            src_branch = [b for b, members in branches.items()
                          if (e.src == did and (e.label or "").lower() == b) or (e.src != did and e.src in members)]
            if len(src_branch) != 1:
                break
            used.append(src_branch[0])
        else:
            if len(set(used)) == len(used):
                return []
    e = ins[1]
    srcs = ", ".join(x.src for x in ins)
    return [Diagnostic("M012", "error", f"RETURN is fed by {len(ins)} edges ({srcs}); it takes one answer, unless "
                       "they come from the exclusive Passed/Failed branches of one Decision",
                       e.line or None, e.column or None, "RETURN")]


def _acyclic_reach(ctx: _Ctx, starts: list[str]) -> tuple[bool, set[str] | None]:
    """Kahn's algorithm: cheap proof of acyclicity, so networkx is only needed to name a cycle. On the way it
    finds what ``starts`` reach: a node is taken only after all its predecessors, so it is reached when it is
    a start or a reached predecessor feeds it (saves a separate walk of every edge). With a cycle, the nodes
    on and after it are never taken: the reached set is then None (the caller walks the graph itself)."""
    indeg = {n: len(edges) for n, edges in ctx.ins.items()}
    todo = [n for n, k in indeg.items() if k == 0]
    reached = set(starts)
    outs = ctx.outs
    seen = 0
    while todo:
        n = todo.pop()
        seen += 1
        feeds = n in reached
        for e in outs.get(n, ()):
            dst = e.dst
            left = indeg[dst] - 1
            indeg[dst] = left
            if left == 0:
                todo.append(dst)
            if feeds:
                reached.add(dst)
    if seen < len(indeg):
        return False, None
    return True, reached


def _cycles(w: Workflow) -> list[Diagnostic]:
    """M006 per cycle group, named the same in every process: the groups and their nodes and edges in text order
    (networkx's components are sets, whose order follows the per-process string hash)."""
    import networkx as nx  # only here, when Kahn's check found a cycle: keeps networkx off `check`'s start-up

    g = nx.DiGraph()
    g.add_nodes_from(w.nodes)
    edge_at: dict[tuple[str, str], Edge] = {}
    for e in w.edges:
        g.add_edge(e.src, e.dst)
        edge_at.setdefault((e.src, e.dst), e)
    group: dict[str, int] = {}
    for k, comp in enumerate(nx.strongly_connected_components(g)):
        n = next(iter(comp))
        if len(comp) > 1 or g.has_edge(n, n):
            group.update(dict.fromkeys(comp, k))
    subs: dict[int, nx.DiGraph] = {}
    for n in g:  # text order
        if n in group:
            subs.setdefault(group[n], nx.DiGraph()).add_node(n)
    for a, b in edge_at:
        if a in group and group[a] == group.get(b):
            subs[group[a]].add_edge(a, b)
    out = []
    for sub in subs.values():
        cyc = nx.find_cycle(sub)
        path = " -> ".join([cyc[0][0]] + [b for _, b in cyc])
        last = edge_at[(cyc[-1][0], cyc[-1][1])]
        out.append(_edge_at(last, "M006", f"cycle: {path} (a workflow must be acyclic)", cyc[-1][0]))
    return out


def _reachability(ctx: _Ctx, starts: list[str], fwd: set[str] | None) -> list[Diagnostic]:
    """M005 for nodes PROBLEM/ENTRY_POINT do not reach (``fwd``, when already known) or that do not reach
    RETURN."""
    w = ctx.w

    def reach(starts: list[str], step: dict[str, list[Edge]], forward: bool) -> set[str]:
        seen, todo = set(starts), deque(starts)
        while todo:
            for e in step.get(todo.popleft(), []):
                nxt = e.dst if forward else e.src
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    out = []
    if fwd is None:
        fwd = reach(starts, ctx.outs, True) if starts else set()
    back = reach(["RETURN"], ctx.ins, False) if "RETURN" in w.nodes else None
    for n in w.nodes.values():
        if starts and n.id not in fwd and n.id not in INPUT_INTERFACES:
            out.append(_at(n, "M005", f"node {n.id} is not reachable from PROBLEM"))
        elif back is not None and n.id not in back and n.id != "RETURN":
            out.append(_at(n, "M005", f"node {n.id} cannot reach RETURN (its output is never used)"))
    return out
