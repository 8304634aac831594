"""An independent implementation of the DESIGN §4 rules, for property tests of the evolution operators.

It shares no code with flowcore: its own operator/port table (from DESIGN §3), its own regex reading of the
canonical text that ``flowcore.mermaid.reader.to_mermaid`` prints, and its own graph walk. ``errors(text, task)``
returns the error codes it finds (empty list = valid).
"""

from __future__ import annotations

import re

import networkx as nx

P, E, T, C, V = "Problem", "EntryPoint", "Text", "Code", "Verdict"
MATH, CODE_TASK = "math", "code"

# type -> (ports {name: (accepted types, default, required, min_inputs)}, output types or rule, tasks)
OPS: dict[str, tuple[dict[str, tuple[set[str], bool, bool, int]], object, set[str]]] = {
    "CustomOp": ({"input": ({T, P}, True, True, 0)}, {T}, {MATH, CODE_TASK}),
    "AnswerGenerateOp": ({"input": ({T, P}, True, True, 0)}, {T}, {MATH, CODE_TASK}),
    "ProgrammerOp": ({"problem": ({P}, True, True, 0), "analysis": ({T}, False, False, 0)}, {T}, {MATH}),
    "ScEnsembleOp": ({"solutions": ({T}, True, True, 2), "problem": ({P}, False, False, 0)}, "solutions",
                     {MATH, CODE_TASK}),
    "CustomCodeGenerateOp": ({"problem": ({P}, True, True, 0), "entry_point": ({E}, False, True, 0)}, {C},
                             {CODE_TASK}),
    "TestOp": ({"solution": ({C}, True, True, 0), "problem": ({P}, False, False, 0),
                "entry_point": ({E}, False, False, 0)}, {C, V}, {CODE_TASK}),
    "ReviewOp": ({"solution": ({T}, True, True, 0), "problem": ({P}, False, False, 0)}, {T}, {MATH, CODE_TASK}),
    "ReviseOp": ({"solution": ({T}, True, True, 0), "feedback": ({T}, False, False, 0),
                  "problem": ({P}, False, False, 0)}, "solution", {MATH, CODE_TASK}),
    "FormatOp": ({"solution": ({T}, True, True, 0), "problem": ({P}, False, False, 0)}, {T}, {MATH}),
    "Decision": ({"verdict": ({V}, True, True, 0)}, set(), {CODE_TASK}),
}
INTERFACES = {
    "PROBLEM": ({}, {P}, {MATH, CODE_TASK}),
    "ENTRY_POINT": ({}, {E}, {CODE_TASK}),
    "RETURN": ({"response": ({T}, True, True, 0)}, set(), {MATH, CODE_TASK}),
}
# Alias names accepted as classes or first label words.
ALIASES = {"custom": "CustomOp", "answergenerate": "AnswerGenerateOp", "programmer": "ProgrammerOp",
           "scensemble": "ScEnsembleOp", "ensemble": "ScEnsembleOp", "customcodegenerate": "CustomCodeGenerateOp",
           "codegenerate": "CustomCodeGenerateOp", "test": "TestOp", "review": "ReviewOp", "revise": "ReviseOp",
           "format": "FormatOp", "decision": "Decision", "condition": "Decision", "interface": "Interface"}
PORT_ALIASES = {"inputs": "input", "solution": "solutions", "entrypoint": "entry_point"}


def subtype(t: str) -> set[str]:
    return {C, T} if t == C else {t}


def _canon(name: str) -> str | None:
    key = name.strip().lower()
    key = key[:-2] if key.endswith("op") and key[:-2] in ALIASES else key
    return ALIASES.get(key)


NODE = re.compile(r'^\s*([A-Za-z0-9_]+)(\(\[|\[\[|\(\(|\{\{|\[|\(|\{)"(.*)"(\]\)|\]\]|\)\)|\}\}|\]|\)|\})\s*$')
BARE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*$")
EDGE = re.compile(r"^\s*([A-Za-z0-9_]+)\s+(-->|---|-\.->|==>)(?:\|([^|]*)\|)?\s+([A-Za-z0-9_]+)\s*$")
CLASS = re.compile(r"^\s*class\s+(\S+)\s+(\S+)\s*$")
ROLE = re.compile(r"\((?:role|instruction):\s*([^)]*?)\s*\)")
PROMPT = re.compile(r"^\s*%%\s*@prompt\s+([\w.\-]+)\s*:")


def read(text: str) -> tuple[dict[str, dict], list[tuple[str, str, str | None]], set[str], list[str]]:
    """(nodes {id: {label, type}}, edges [(src, dst, label)], prompt names, syntax errors)."""
    nodes: dict[str, dict] = {}
    edges: list[tuple[str, str, str | None]] = []
    prompts: set[str] = set()
    errs: list[str] = []
    classes: dict[str, list[str]] = {}
    lines = text.splitlines()
    if not lines or not re.match(r"^\s*(%%\{.*)?$|^flowchart (TD|TB|LR|RL|BT)$", lines[0]):
        errs.append("M001")
    for line in lines[1:]:
        s = line.strip()
        if not s:
            continue
        if s.startswith("%%"):
            if m := PROMPT.match(s):
                prompts.add(m.group(1))
            continue
        if s.startswith(("classDef ", "style ", "linkStyle ", "click ", "subgraph ", "direction ")) or s == "end":
            continue
        if m := CLASS.match(s):
            for nid in m.group(1).split(","):
                classes.setdefault(nid, []).append(m.group(2))
        elif m := EDGE.match(s):
            edges.append((m.group(1), m.group(4), m.group(3)))
            for nid in (m.group(1), m.group(4)):
                nodes.setdefault(nid, {"label": None, "shape": ""})
        elif m := NODE.match(s):
            nodes[m.group(1)] = {"label": m.group(3), "shape": m.group(2)}
        elif m := BARE.match(s):
            nodes.setdefault(m.group(1), {"label": None, "shape": ""})
        else:
            errs.append("M001")
    for nid, n in nodes.items():
        kinds = [k for c in classes.get(nid, []) if (k := _canon(c))]
        if len(set(kinds)) > 1:
            errs.append("M002")
        word = re.match(r"[A-Za-z_]\w*", n["label"] or "")
        if kinds:
            n["type"] = kinds[0]
        elif nid in INTERFACES:
            n["type"] = "Interface"
        elif word and _canon(word.group(0)) not in (None, "Interface"):
            n["type"] = _canon(word.group(0))
        elif n["shape"] == "{":
            n["type"] = "Decision"
        else:
            n["type"] = None
        role = ROLE.search(n["label"] or "")
        n["prompt"] = role.group(1) if role else None
    return nodes, edges, prompts, errs


def errors(text: str, task: str) -> list[str]:
    nodes, edges, _prompts, errs = read(text)
    out = list(errs)
    g = nx.MultiDiGraph()
    g.add_nodes_from(nodes)
    for s, d, lab in edges:
        g.add_edge(s, d, label=lab)
    # M003 / M014 / M004
    for nid, n in nodes.items():
        if n["type"] is None:
            out.append("M014")
        elif n["type"] == "Interface" and nid not in INTERFACES:
            out.append("M003")
    for nid in ("PROBLEM", "RETURN"):
        if nid not in nodes:
            out.append("M004")
        elif nodes[nid]["type"] != "Interface":
            out.append("M004")
    if out:
        return sorted(set(out))

    def spec(nid: str):
        return INTERFACES[nid] if nodes[nid]["type"] == "Interface" else OPS[nodes[nid]["type"]]

    # M011 task restrictions
    for nid in nodes:
        if task not in spec(nid)[2]:
            out.append("M011")

    def port(nid: str, label: str | None) -> str | None:
        ports = spec(nid)[0]
        if label is None:
            return next((p for p, (_, default, _, _) in ports.items() if default), None)
        key = label.strip().lower()
        if key in ports:
            return key
        alias = PORT_ALIASES.get(key)
        if alias in ports:
            return alias
        if key in ("input", "inputs") and "solutions" in ports:
            return "solutions"
        return None

    # M006 cycle (before typing: output rules look upstream)
    if not nx.is_directed_acyclic_graph(nx.DiGraph(g)):
        out.append("M006")
        return sorted(set(out))

    types: dict[str, set[str]] = {}
    for nid in nx.topological_sort(nx.DiGraph(g)):
        rule = spec(nid)[1]
        if isinstance(rule, set):
            types[nid] = rule
            continue
        srcs = [s for s, dst, lab in edges if dst == nid and nodes[s]["type"] != "Decision" and port(nid, lab) == rule]
        types[nid] = {C} if srcs and all(C in types[s] for s in srcs) else {T}

    fed: dict[str, dict[str, int]] = {n: {} for n in nodes}
    routes_into: dict[str, int] = {n: 0 for n in nodes}
    for s, d, lab in edges:
        if nodes[s]["type"] == "Decision":
            if lab not in ("Passed", "Failed"):
                out.append("M007")
            routes_into[d] += 1
            continue
        if s == "RETURN":
            out.append("M008")
            continue
        p = port(d, lab)
        if p is None:
            out.append("M007")
            continue
        fed[d][p] = fed[d].get(p, 0) + 1
        accepted = spec(d)[0][p][0]
        if not any(accepted & subtype(t) for t in types[s]):
            out.append("M008")
    # M009 / M010 required inputs
    for nid in nodes:
        for p, (_, _, required, min_inputs) in spec(nid)[0].items():
            count = fed[nid].get(p, 0) + (routes_into[nid] if nid == "RETURN" else 0)
            if min_inputs > 1 and count < min_inputs:
                out.append("M010")
            elif required and count == 0:
                out.append("M009")
    # M012: RETURN takes one answer unless the feeds sit on distinct branches of one Decision
    feeds = [(s, lab) for s, d, lab in edges if d == "RETURN"]
    if len(feeds) > 1 and not _exclusive(nodes, edges, g, feeds):
        out.append("M012")
    # M005 reachability
    starts = [i for i in ("PROBLEM", "ENTRY_POINT") if i in nodes]
    fwd = set(starts).union(*(nx.descendants(g, s) for s in starts))
    back = nx.ancestors(g, "RETURN") | {"RETURN"}
    for nid in nodes:
        if nid not in fwd or (nid != "RETURN" and nid not in back):
            out.append("M005")
    return sorted(set(out))


def _exclusive(nodes: dict, edges: list, g: nx.MultiDiGraph, feeds: list[tuple[str, str | None]]) -> bool:
    for d in (n for n, x in nodes.items() if x["type"] == "Decision"):
        under: dict[str, set[str]] = {}
        for s, t, lab in edges:
            if s == d:
                under.setdefault(lab or "", set()).update({t} | (nx.descendants(g, t) if t != "RETURN" else set()))
        used = []
        for s, lab in feeds:
            branch = [b for b, members in under.items() if (s == d and lab == b) or (s != d and s in members)]
            if len(branch) != 1:
                break
            used.append(branch[0])
        else:
            if len(set(used)) == len(used):
                return True
    return False
