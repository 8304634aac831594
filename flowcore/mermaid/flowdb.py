"""The graph Mermaid 11's flowchart grammar builds: a port of its FlowDB (vertices, edges, subgraphs, classes), with
the node and edge records it holds.

``setup.py`` compiles this file with Cython when it can (``flowdb.pxd`` makes the records and the FlowDB C structs,
so the grammar's actions set fields instead of looking up attributes); without the compiled module Python runs this
same file (``compiled.load``), and the tests run both.
"""

from __future__ import annotations

import json
import re

from flowcore.mermaid.errors import _DbError
from flowcore.mermaid.text import JS_SPACE

TYPE_CHECKING = False  # not typing's: `check` starts without importing typing (~3 ms)
if TYPE_CHECKING:
    from typing import Any

MAX_EDGES = 100_000  # as the hard check configures Mermaid (its default is 500)

# Most records have no classes, styles or data: they share these two empties, replaced by a record's own list or
# dict at its first write (never written into: a large chart's records are 40% fewer objects, and fit the caches)
_NONE_LIST: list = []
_NONE_DICT: dict = {}


class Vertex:
    """A node as FlowDB holds it."""

    __slots__ = ("id", "text", "label_type", "type", "styles", "classes", "props", "data", "pos", "labeled")

    def __init__(self, vid: str, pos: int = -1) -> None:
        self.id = vid
        self.text: str | None = None
        self.label_type = "text"
        self.type: str | None = None  # Mermaid's shape name (square, round, ... or a shape-data name)
        self.styles: list[str] = _NONE_LIST
        self.classes: list[str] = _NONE_LIST
        self.props: dict | None = None
        self.data: dict = _NONE_DICT  # icon, img, form, pos, constraint, w, h from shape data
        self.pos = pos  # offset in the parsed code of the first mention
        self.labeled = False  # a label was written (not the id by default)

    def __repr__(self) -> str:
        return f"Vertex({self.id!r}, text={self.text!r}, type={self.type!r})"


class FlowEdge:
    """An edge as FlowDB holds it."""

    __slots__ = ("start", "end", "type", "stroke", "length", "text", "label_type", "id", "user_id", "classes",
                 "style", "interpolate", "data", "pos")

    def __init__(self, start: str, end: str, etype: str | None, stroke: str | None, interpolate: str | None,
                 pos: int) -> None:
        self.start, self.end, self.type, self.stroke = start, end, etype, stroke
        self.length: int | None = None
        self.text = ""
        self.label_type = "text"
        self.id = ""
        self.user_id = False
        self.classes: list[str] = _NONE_LIST  # (set_class gives an edge a new list each time)
        self.style: list[str] | None = None
        self.interpolate = interpolate
        self.data: dict = _NONE_DICT  # animate, animation, curve from edge data (a new dict at each change)
        self.pos = pos

    def __repr__(self) -> str:
        return f"FlowEdge({self.start!r}, {self.end!r}, id={self.id!r})"


class SubGraph:
    """A subgraph as FlowDB holds it."""

    __slots__ = ("id", "title", "nodes", "dir", "label_type", "classes", "pos")

    def __init__(self, sid: str, title: str, nodes: list[str], direction: str | None, label_type: str,
                 pos: int = -1) -> None:
        self.id, self.title, self.nodes, self.dir, self.label_type = sid, title, nodes, direction, label_type
        self.classes: list[str] = []
        self.pos = pos

    def __repr__(self) -> str:
        return f"SubGraph({self.id!r}, title={self.title!r}, nodes={self.nodes!r})"


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
        if not vid:
            return
        if not isinstance(vid, str) or vid[0].isspace():  # (a str whose first character is not a blank has text)
            if not str(vid).strip():
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
        if data is None and shape_data is not None:  # `null`: Mermaid reads a node's properties of it and throws
            raise _DbError("Cannot read shape data: it is null")
        v = self.vertices.get(vid)
        if v is None:
            v = self.vertices[vid] = Vertex(vid, self.cur_pos)
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
            if v.styles is _NONE_LIST:
                v.styles = []
            v.styles.extend(styles)
        if classes:
            if v.classes is _NONE_LIST:
                v.classes = []
            v.classes.extend(classes)
        if v.props is None:
            v.props = props if props is not None else _NONE_DICT
        elif props:
            if v.props is _NONE_DICT:
                v.props = {}
            v.props.update(props)
        if isinstance(data, dict):  # (a list or text has none of the properties Mermaid reads: no data)
            shape = data.get("shape")
            if shape:
                shape = str(shape)
                if shape != shape.lower() or "_" in shape:
                    raise _DbError(f"No such shape: {shape}. Shape names should be lowercase.")
                if shape not in SHAPE_NAMES:
                    raise _DbError(f"No such shape: {shape}.")
                v.type = shape
            if data.get("label"):
                from flowcore.mermaid.yamldata import js_str  # (data exists: yamldata is loaded)

                v.text = js_str(data["label"])
                lt = data.get("labelType")
                v.label_type = lt if lt in ("markdown", "string", "text") else "markdown"
            if v.data is _NONE_DICT:
                v.data = {}
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
        # the ends as the vertices' own id strings (equal, and now identical): every later lookup of an edge's end
        # (the model's nodes, the checker's indexes) then matches on identity, and the duplicates are freed
        v = self.vertices.get(start)
        if v is not None:
            start = v.id
        v = self.vertices.get(end)
        if v is not None:
            end = v.id
        # (made without __init__: in the compiled build each field is then set in the C struct, no argument tuple)
        e = FlowEdge.__new__(FlowEdge)
        e.start, e.end, e.type, e.stroke = start, end, link.get("type"), link.get("stroke")
        e.text, e.label_type, e.id, e.user_id = "", "text", "", False
        e.classes, e.style, e.interpolate, e.data, e.pos = _NONE_LIST, None, self.default_interpolate, _NONE_DICT, \
            self.cur_pos
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
        n = self._pair_count.get(pair, 0)
        if lid and lid not in self._edge_ids:
            e.id, e.user_id = lid, True
        else:
            e.id = f"L_{start}_{end}_{0 if n == 0 else n + 1}"
        self._pair_count[pair] = n + 1
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
                if v.classes is _NONE_LIST:
                    v.classes = []
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
                      lt if lt in ("markdown", "string", "text") else "markdown", pos)
        self._claimed.update(sg.nodes)
        self.subgraphs.append(sg)
        self.sub_lookup[sid] = sg
        return sid


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

_NO_DOCUMENT = object()  # what load_yaml gives for a text with no YAML document (js-yaml: undefined)


def load_yaml(doc: str) -> Any:
    """Shape or edge data as Mermaid reads it (js-yaml, JSON schema: ``yamldata``); a document js-yaml would
    refuse raises :class:`_DbError` (reported as a syntax problem, never guessed at)."""
    from flowcore.mermaid import yamldata

    try:
        return yamldata.load(doc, empty=_NO_DOCUMENT)
    except yamldata.YamlDataError as exc:
        raise _DbError(f"shape data is not valid YAML: {exc}") from None


