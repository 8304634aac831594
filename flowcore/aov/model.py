"""The AOV graph: Flow's subtask records as a validated, JSON round-trippable DAG.

A file is ``{"goal": text, "subtasks": {id: record}, "agents": [{"id", "role"}]}``; each record is
``{id, subtask_requirement, status, data, num_parents_not_completed, parents, child, agent}`` (plus an
optional ``expect`` keyword list used by the rule inspector). Edges may be given on either side
(``parents`` or ``child``); the other side is derived, and two sides that disagree are an error.
``num_parents_not_completed`` is always derived, never trusted.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

STATUSES = ("pending", "running", "completed", "failed")
DEFAULT_AGENT = "agent"  # lenient reading: the agent of records that name none
_RECORD_KEYS = {"id", "subtask_requirement", "status", "data", "num_parents_not_completed", "parents",
                "child", "agent", "expect"}


class AOVError(ValueError):
    """Invalid AOV input; the message names the subtask and field (or the cycle)."""


@dataclass
class Agent:
    id: str
    role: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "role": self.role}


@dataclass(slots=True)  # slots: cheaper to build, 10,000 at a time
class Subtask:
    id: str
    subtask_requirement: str
    agent: str
    status: str = "pending"
    data: Any = ""
    parents: list[str] = field(default_factory=list)
    child: list[str] = field(default_factory=list)
    expect: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # unknown record keys, kept for round trips


def _where(sid: str, fld: str) -> str:
    return f"subtask {sid!r}: field {fld!r}"


def _str_list(value: Any, sid: str, fld: str) -> list[str]:
    if not isinstance(value, list):
        raise AOVError(f"{_where(sid, fld)} must be a list of subtask ids (strings)")
    if not value:
        return []
    if not all(isinstance(v, str) and v for v in value):
        raise AOVError(f"{_where(sid, fld)} must be a list of subtask ids (strings)")
    return list(dict.fromkeys(value))  # drop duplicates, keep order


def cycle_message(g: nx.DiGraph) -> str | None:
    """``"cycle: a -> b -> a"`` when the graph has a cycle, else None. Linear: one acyclicity test; only a
    cyclic graph is searched, inside the strongly connected component of its earliest cyclic subtask."""
    if nx.is_directed_acyclic_graph(g):
        return None
    order = {n: i for i, n in enumerate(g.nodes)}
    cyclic = [c for c in nx.strongly_connected_components(g)
              if len(c) > 1 or any(g.has_edge(n, n) for n in c)]
    comp = min(cyclic, key=lambda c: min(order[n] for n in c))
    first = min(comp, key=order.__getitem__)
    ring = [e[0] for e in nx.find_cycle(g.subgraph(comp), source=first)]
    start = min(range(len(ring)), key=lambda i: order[ring[i]])  # begin at the earliest node in the file
    ring = ring[start:] + ring[:start]
    return "cycle: " + " -> ".join(map(str, ring + ring[:1]))


def _acyclic(subtasks: dict[str, Subtask]) -> bool:
    """Kahn's algorithm on the records as they are: every read of a file runs it, and building a networkx
    graph first (or graphlib, which also searches for a cycle every time) costs two to three times more at
    10,000 subtasks. The cycle itself, when there is one, is found and named with networkx."""
    waiting = {sid: len(st.parents) for sid, st in subtasks.items()}
    free = [sid for sid, n in waiting.items() if n == 0]
    seen = 0
    while free:
        sid = free.pop()
        seen += 1
        for c in subtasks[sid].child:
            waiting[c] -= 1
            if waiting[c] == 0:
                free.append(c)
    return seen == len(subtasks)


MAX_NESTING = 100  # levels of JSON objects/arrays an AOV document may have (real ones have < 10)


def _nesting(doc: Any) -> int:
    """Depth of nested lists/dicts, without recursion (a hostile file may be nested 100,000 deep). Only
    containers go on the stack: a 10,000-subtask file is mostly strings, and visiting each as a node
    doubled the time to read it."""
    if not isinstance(doc, (dict, list)):
        return 0
    deepest, stack = 0, [(doc, 1)]
    containers = (dict, list)
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > MAX_NESTING:
                return deepest
        inner = [v for v in (node.values() if isinstance(node, dict) else node) if isinstance(v, containers)]
        if inner:
            stack.extend((v, depth + 1) for v in inner)
    return deepest


class AOVGraph:
    """Goal, agents and subtasks (in file order, which fixes every tie-break)."""

    def __init__(self, goal: str, subtasks: dict[str, Subtask], agents: list[Agent]) -> None:
        self.goal = goal
        self.subtasks = subtasks
        self.agents = agents

    # ---- reading -------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, doc: Any, lenient: bool = False) -> AOVGraph:
        """Read and validate a document. Without ``agents`` the agents are the names the subtasks use.
        ``lenient`` (for structure-only uses such as metrics) also accepts a bare ``{id: record}`` object
        and records without ``subtask_requirement`` (the id is used) or ``agent`` (a default agent)."""
        if not isinstance(doc, dict):
            raise AOVError("the AOV document must be a JSON object with 'goal', 'subtasks' and 'agents'")
        if lenient and "subtasks" not in doc and doc and all(isinstance(v, dict) for v in doc.values()):
            doc = {"subtasks": doc}
        goal = doc.get("goal", "")
        if not isinstance(goal, str):
            raise AOVError("field 'goal' must be a string")
        raw = doc.get("subtasks")
        if isinstance(raw, list):  # tolerate a list of records carrying their own ids
            listed: dict[str, Any] = {}
            for i, rec in enumerate(raw):
                if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or not rec["id"]:
                    raise AOVError(f"subtasks[{i}]: a record in a list needs a string 'id'")
                if rec["id"] in listed:
                    raise AOVError(f"subtask {rec['id']!r}: declared twice")
                listed[rec["id"]] = rec
            raw = listed
        if not isinstance(raw, dict):
            raise AOVError("field 'subtasks' must be an object mapping ids to records")
        if not raw:
            raise AOVError("field 'subtasks': the graph is empty (no subtasks)")
        if lenient:
            raw = {sid: ({"subtask_requirement": sid, "agent": DEFAULT_AGENT, **rec} if isinstance(rec, dict)
                         else rec) for sid, rec in raw.items()}
        if doc.get("agents") is None:
            names = [r.get("agent") for r in raw.values() if isinstance(r, dict)]
            agents = [Agent(n, n) for n in dict.fromkeys(n for n in names if isinstance(n, str) and n)]
        else:
            agents = _read_agents(doc["agents"])
            if lenient and DEFAULT_AGENT not in [a.id for a in agents] and any(
                    isinstance(r, dict) and r.get("agent") == DEFAULT_AGENT for r in raw.values()):
                agents.append(Agent(DEFAULT_AGENT, DEFAULT_AGENT))
        subtasks: dict[str, Subtask] = {}
        given_parents: dict[str, list[str] | None] = {}
        given_child: dict[str, list[str] | None] = {}
        for sid, rec in raw.items():
            st, parents, child = _read_record(sid, rec)
            subtasks[sid] = st
            given_parents[sid], given_child[sid] = parents, child
        _link(subtasks, given_parents, given_child)
        g = cls(goal, subtasks, agents)
        g._check_agents_and_cycles()  # statuses were read and links made symmetric above
        return g

    @classmethod
    def from_json(cls, text: str, lenient: bool = False) -> AOVGraph:
        try:
            doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as e:
            raise AOVError(f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
        except _DuplicateKey as e:  # json.loads keeps the last one silently: a subtask would vanish
            raise AOVError(_duplicate_message(text, e.key)) from None
        except RecursionError:
            doc = None
        if doc is None and text.strip() != "null" or _nesting(doc) > MAX_NESTING:
            # deeper than any AOV document; later copies and dumps would recurse past Python's limit
            raise AOVError(f"JSON nested too deeply (more than {MAX_NESTING} levels)")
        return cls.from_dict(doc, lenient)

    @classmethod
    def load(cls, path: str | Path, lenient: bool = False) -> AOVGraph:
        """Read a file; OSError propagates (an I/O problem, not invalid input)."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"), lenient)

    # ---- writing -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        subs: dict[str, Any] = {}
        for sid, st in self.subtasks.items():
            rec: dict[str, Any] = {
                "id": sid, "subtask_requirement": st.subtask_requirement, "status": st.status,
                "data": st.data, "num_parents_not_completed": self.num_parents_not_completed(sid),
                "parents": list(st.parents), "child": list(st.child), "agent": st.agent,
            }
            if st.expect:
                rec["expect"] = list(st.expect)
            rec.update(st.extra)
            subs[sid] = rec
        return {"goal": self.goal, "subtasks": subs, "agents": [a.to_dict() for a in self.agents]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def copy(self) -> AOVGraph:
        return AOVGraph(self.goal, copy.deepcopy(self.subtasks), copy.deepcopy(self.agents))

    # ---- queries -------------------------------------------------------------------------------
    def agent_ids(self) -> list[str]:
        return [a.id for a in self.agents]

    def agent(self, agent_id: str) -> Agent:
        for a in self.agents:
            if a.id == agent_id:
                return a
        raise AOVError(f"unknown agent {agent_id!r}")

    def edges(self) -> list[tuple[str, str]]:
        return [(p, sid) for sid, st in self.subtasks.items() for p in st.parents]

    def to_networkx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self.subtasks)
        g.add_edges_from(self.edges())
        return g

    def num_parents_not_completed(self, sid: str) -> int:
        return sum(1 for p in self.subtasks[sid].parents if self.subtasks[p].status != "completed")

    def ready(self) -> list[str]:
        """Pending subtasks whose parents are all completed, in file order."""
        return [sid for sid, st in self.subtasks.items()
                if st.status == "pending" and self.num_parents_not_completed(sid) == 0]

    def validate(self) -> None:
        """Structural checks after edits: links symmetric, ids known, agents known, acyclic. Linear in the
        size of the graph (sets, not list scans: fans are the graphs the selection rule prefers)."""
        if not self.subtasks:
            raise AOVError("field 'subtasks': the graph is empty (no subtasks)")
        subs = self.subtasks
        child_sets = {sid: set(st.child) for sid, st in subs.items()}
        parent_sets = {sid: set(st.parents) for sid, st in subs.items()}
        for sid, st in subs.items():
            if st.status not in STATUSES:
                raise AOVError(f"{_where(sid, 'status')} is {st.status!r}; expected one of "
                               f"{', '.join(STATUSES)}")
            for p in st.parents:
                if p not in subs:
                    raise AOVError(f"{_where(sid, 'parents')}: parent {p!r} does not exist")
                if sid not in child_sets[p]:
                    raise AOVError(f"{_where(p, 'child')} lacks {sid!r}, which lists it as a parent")
            for c in st.child:
                if c not in subs:
                    raise AOVError(f"{_where(sid, 'child')}: child {c!r} does not exist")
                if sid not in parent_sets[c]:
                    raise AOVError(f"{_where(c, 'parents')} lacks {sid!r}, which lists it as a child")
        self._check_agents_and_cycles()

    def _check_agents_and_cycles(self) -> None:
        known = set(self.agent_ids())
        for sid, st in self.subtasks.items():
            if st.agent not in known:
                names = ", ".join(sorted(known)) or "none declared"
                raise AOVError(f"{_where(sid, 'agent')}: unknown agent {st.agent!r} (agents: {names})")
        if not _acyclic(self.subtasks):  # only a cyclic graph is searched further, to name its cycle
            raise AOVError(cycle_message(self.to_networkx()) or "the graph has a cycle")

    # ---- edits (used by repairs; callers validate afterwards) -----------------------------------
    def add_edge(self, parent: str, child: str) -> None:
        if child not in self.subtasks[parent].child:
            self.subtasks[parent].child.append(child)
        if parent not in self.subtasks[child].parents:
            self.subtasks[child].parents.append(parent)

    def remove_edge(self, parent: str, child: str) -> None:
        if child in self.subtasks[parent].child:
            self.subtasks[parent].child.remove(child)
        if parent in self.subtasks[child].parents:
            self.subtasks[child].parents.remove(parent)

    def remove_subtask(self, sid: str) -> None:
        st = self.subtasks[sid]
        for p in list(st.parents):
            self.remove_edge(p, sid)
        for c in list(st.child):
            self.remove_edge(sid, c)
        del self.subtasks[sid]

    def fresh_id(self, base: str) -> str:
        if base not in self.subtasks:
            return base
        n = 2
        while f"{base}_{n}" in self.subtasks:
            n += 1
        return f"{base}_{n}"


class _DuplicateKey(Exception):
    def __init__(self, key: str, start: int = -1) -> None:
        super().__init__(key)
        self.key, self.start = key, start


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return out


def _duplicate_message(text: str, key: str) -> str:
    """Where the key is written twice in one object ("line 2, column 3 and line 5, column 3"). Only on this
    error path: the text is read again with json's pure-Python scanner, which says where each object starts,
    then that object's keys are walked."""
    import json.decoder as jd
    import json.scanner

    dec = json.JSONDecoder()
    plain = jd.JSONObject

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None,  # noqa: ANN001
                     _w=jd.WHITESPACE.match):  # noqa: ANN001, ANN202
        def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            try:
                return _no_duplicate_keys(pairs)
            except _DuplicateKey as e:
                raise _DuplicateKey(e.key, s_and_end[1]) from None
        return plain(s_and_end, strict, scan_once, object_hook, hook, memo, _w)

    dec.parse_object = parse_object  # type: ignore[assignment]
    dec.scan_once = json.scanner.py_make_scanner(dec)
    spots: list[int] = []
    try:
        dec.decode(text)
    except _DuplicateKey as e:
        spots, i = [], e.start
        while len(spots) < 2 and i < len(text):  # the object's members, in order: "key": value,
            i = jd.WHITESPACE.match(text, i).end()
            if text[i] != '"':
                break
            k, j = jd.scanstring(text, i + 1)
            if k == e.key:
                spots.append(i)
            j = jd.WHITESPACE.match(text, jd.WHITESPACE.match(text, j).end() + 1).end()  # past the colon
            _, j = dec.raw_decode(text, j)  # a value's own objects were read (and passed) before this one
            i = jd.WHITESPACE.match(text, j).end() + 1  # past the comma
    except (ValueError, RecursionError, IndexError):
        spots = []
    where = [f"line {text.count(chr(10), 0, i) + 1}, column {i - text.rfind(chr(10), 0, i)}" for i in spots]
    return (f"key {key!r} appears twice in one object" + (f" ({' and '.join(where)})" if len(where) == 2 else "")
            + ": JSON would keep only the last one; subtask ids and record fields must be unique")


def _read_agents(raw: Any) -> list[Agent]:
    if not isinstance(raw, list):
        raise AOVError("field 'agents' must be a list of {\"id\", \"role\"}")
    agents: list[Agent] = []
    seen: set[str] = set()
    for i, a in enumerate(raw):
        if isinstance(a, str) and a:
            a = {"id": a, "role": a}
        if not isinstance(a, dict) or not isinstance(a.get("id"), str) or not a["id"]:
            raise AOVError(f"agents[{i}]: needs a non-empty string 'id'")
        role = a.get("role", a["id"])
        if not isinstance(role, str):
            raise AOVError(f"agents[{i}] ({a['id']!r}): field 'role' must be a string")
        if a["id"] in seen:
            raise AOVError(f"agents[{i}]: agent {a['id']!r} declared twice")
        seen.add(a["id"])
        agents.append(Agent(a["id"], role or a["id"]))
    return agents


def _read_record(sid: Any, rec: Any) -> tuple[Subtask, list[str] | None, list[str] | None]:
    if not isinstance(sid, str) or not sid:
        raise AOVError(f"subtask id {sid!r}: ids must be non-empty strings")
    if not isinstance(rec, dict):
        raise AOVError(f"subtask {sid!r}: the record must be an object")
    get = rec.get
    if "id" in rec and rec["id"] != sid:
        raise AOVError(f"{_where(sid, 'id')} is {rec['id']!r}, but the record is stored under {sid!r}")
    req = get("subtask_requirement")
    if not isinstance(req, str) or not req.strip():
        raise AOVError(f"{_where(sid, 'subtask_requirement')} must be a non-empty string")
    status = get("status", "pending")
    if status not in STATUSES:
        raise AOVError(f"{_where(sid, 'status')} is {status!r}; expected one of {', '.join(STATUSES)}")
    agent = get("agent")
    if not isinstance(agent, str) or not agent:
        raise AOVError(f"{_where(sid, 'agent')} is missing or not a string")
    npnc = get("num_parents_not_completed", 0)
    if type(npnc) is not int or npnc < 0:  # bool is not accepted
        raise AOVError(f"{_where(sid, 'num_parents_not_completed')} must be a non-negative integer")
    expect = get("expect")
    if expect is None:
        expect = []
    else:
        if isinstance(expect, str):
            expect = [expect]
        if not isinstance(expect, list) or not all(isinstance(e, str) for e in expect):
            raise AOVError(f"{_where(sid, 'expect')} must be a keyword or a list of keywords")
        expect = [e for e in expect if e]
    parents, child = get("parents"), get("child")
    parents = None if parents is None else _str_list(parents, sid, "parents")
    child = None if child is None else _str_list(child, sid, "child")
    data = get("data", "")
    unknown = rec.keys() - _RECORD_KEYS
    st = Subtask(sid, req, agent, status, "" if data is None else data, expect=expect,
                 extra={k: rec[k] for k in rec if k in unknown} if unknown else {})
    return st, parents, child


def _link(subtasks: dict[str, Subtask], parents: dict[str, list[str] | None],
          child: dict[str, list[str] | None]) -> None:
    """Build edges from whichever side is given; both sides given and disagreeing is an error. A side that
    was not given is derived from the other. Membership tests use sets: a list scan per edge is quadratic on
    the wide fans Flow prefers."""
    child_sets = {sid: set(cs) for sid, cs in child.items() if cs}
    parent_sets = {sid: set(ps) for sid, ps in parents.items() if ps}
    for sid, st in subtasks.items():  # given sides first, so their order survives a round trip
        st.parents = list(parents[sid] or [])
        st.child = list(child[sid] or [])
    for sid, ps in parents.items():
        for p in ps or ():
            if p == sid:
                raise AOVError(f"cycle: {sid} -> {sid}")
            if p not in subtasks:
                raise AOVError(f"{_where(sid, 'parents')}: parent {p!r} does not exist")
            if child[p] is None:
                subtasks[p].child.append(sid)
            elif sid not in child_sets.get(p, ()):
                raise AOVError(f"{_where(p, 'child')} lacks {sid!r}, but {sid!r} lists {p!r} in 'parents'")
    for sid, cs in child.items():
        for c in cs or ():
            if c == sid:
                raise AOVError(f"cycle: {sid} -> {sid}")
            if c not in subtasks:
                raise AOVError(f"{_where(sid, 'child')}: child {c!r} does not exist")
            if parents[c] is None:
                subtasks[c].parents.append(sid)
            elif sid not in parent_sets.get(c, ()):
                raise AOVError(f"{_where(c, 'parents')} lacks {sid!r}, but {sid!r} lists {c!r} in 'child'")
