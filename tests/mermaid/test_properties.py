"""Property tests: the printer round-trips every workflow the parser accepts; the checker never raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore import check, parse, parse_lenient, to_mermaid
from flowcore.catalogue import CATALOGUE

KEYWORDS = {"end", "subgraph", "class", "classDef", "style", "linkStyle", "click", "graph", "flowchart",
            "direction"}
ids = st.builds(lambda a, b: a + b, st.sampled_from(["A", "B", "C", "n", "x_", "Node", "PROBLEM", "RETURN",
                                                   "ENTRY_POINT", "T", "end"]),
                st.sampled_from(["", "1", "2", "3", "10", "_a"])).filter(lambda s: s not in KEYWORDS)
VOCAB = ["solve", "check", "the", "Problem", "x=1", "a.b", "it's", "&", "+", "sum:", "go!", "why?", "1,2", "a-b", "a/b"]
words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4).map(" ".join)
op_names = st.sampled_from(sorted({a for op in CATALOGUE.values() for a in (op.name, *op.aliases)}))
shapes = st.sampled_from([("[", "]"), ("(", ")"), ("([", "])"), ("[[", "]]"), ("((", "))"), ("{", "}"),
                          ("{{", "}}"), ("[(", ")]"), (">", "]")])
arrows = st.sampled_from(["-->", "--->", "---", "-.->", "-.-", "==>", "===", "--x", "--o"])


@st.composite
def labels(draw):
    first = draw(st.one_of(op_names, words))
    extra = draw(st.one_of(st.just(""), words.map(lambda w: "<br/>" + w),
                           ids.map(lambda r: f"<br/>(role: {r})")))
    return first + extra


@st.composite
def node_refs(draw):
    nid = draw(ids)
    if draw(st.booleans()):
        return nid
    o, c = draw(shapes)
    lab = draw(labels())
    cls = draw(st.one_of(st.just(""), op_names.map(lambda n: ":::" + n)))
    return f'{nid}{o}"{lab}"{c}{cls}'


@st.composite
def edge_statements(draw):
    parts = [draw(st.lists(node_refs(), min_size=1, max_size=2).map(" & ".join))]
    for _ in range(draw(st.integers(1, 3))):
        arrow = draw(arrows)
        label = draw(st.one_of(st.none(), st.sampled_from(["input", "problem", "solutions", "x", "Passed"])))
        if label and draw(st.booleans()) and arrow in ("-->", "---"):
            link = f"-- {label} {arrow}"
        else:
            link = arrow + (f"|{label}|" if label else "")
        parts.append(link)
        parts.append(draw(st.lists(node_refs(), min_size=1, max_size=2).map(" & ".join)))
    return " ".join(parts)


@st.composite
def workflows(draw):
    lines = [f"{draw(st.sampled_from(['flowchart', 'graph']))} {draw(st.sampled_from(['TD', 'LR', 'BT', 'RL']))}"]
    for _ in range(draw(st.integers(0, 3))):
        text = draw(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x0b\x0c\x1c\x1d"
                                          "\x1e\x85\u2028\u2029"), max_size=40))
        lines.append(f"%% @prompt {draw(ids)}: {text.replace(chr(10), chr(92) + 'n')}")
    depth = 0
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["edge", "edge", "node", "class", "sub", "end", "classDef"]))
        if kind == "edge":
            lines.append(draw(edge_statements()))
        elif kind == "node":
            lines.append(draw(node_refs()))
        elif kind == "class":
            lines.append(f"class {','.join(draw(st.lists(ids, min_size=1, max_size=3)))} {draw(op_names)}")
        elif kind == "classDef":
            lines.append(f"classDef {draw(ids)} fill:#fff,stroke:#000")
        elif kind == "sub" and depth < 2:
            lines.append(f'subgraph {draw(ids)}["{draw(words)}"]')
            depth += 1
        elif kind == "end" and depth:
            lines.append("end")
            depth -= 1
    lines += ["end"] * depth
    sep = draw(st.sampled_from(["\n", "\n    ", ";\n"]))
    return sep.join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(workflows())
def test_printer_round_trips_every_accepted_workflow(text):
    w, diags = parse_lenient(text)
    if any(d.severity == "error" for d in diags):
        return  # e.g. a node declared twice with different labels: not an accepted workflow
    printed = to_mermaid(w)
    assert parse(printed) == w
    assert to_mermaid(parse(printed)) == printed


MERMAIDISH = st.text(alphabet=st.one_of(st.sampled_from(list("ABC12 \n\t-.=>|&;:[](){}\"'%@/<>xo")), st.characters()),
                     max_size=200)


@settings(max_examples=400, deadline=None)
@given(st.one_of(MERMAIDISH, MERMAIDISH.map(lambda s: "flowchart TD\n" + s), workflows()),
       st.sampled_from([None, "math", "code"]))
def test_checker_never_raises(text, task):
    diags = check(text, task)
    assert all(d.code.startswith("M") and d.severity in ("error", "warning") for d in diags)
    assert not any("could not read" in d.message for d in diags), diags
