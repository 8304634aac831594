"""A grammar-based generator of Mermaid flowchart texts, for differential tests against Mermaid 11.

It covers the whole flowchart syntax (headers, front matter, directives, comments, every bracket shape,
shape data, ids with punctuation, every arrow and its text forms, chains and & groups, edge ids and edge
data, subgraphs with ids/titles/directions, classDef/class/:::, style, linkStyle, click, accTitle/accDescr,
markdown and multi-line labels, entity codes, ; separators) and, with ``broken=True``, near-misses made by
small edits that Mermaid often rejects. One generator, two drivers: ``text_from_random(random.Random)`` for
the benchmark and ``flowchart_texts()`` (a hypothesis strategy that shrinks) for the test suite.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import strategies as st

Pick = Callable[[list], object]

IDS = ["A", "B", "C", "D", "n1", "n2", "x1", "o1", "Step_2", "a-b", "c.d", "PROBLEM", "RETURN", "C1", "C2",
       "T1", "node", "é1", "1", "42", "A&B", "v1", "id#1", "ENSEMBLE", "dir", "ends", "x", "o", "sub1", "S1"]
WORDS = ["Custom", "Programmer", "ScEnsemble", "Test", "solve it", "Go", "a b", "x", "Review", "yes", "no",
         "step 1", "Problem", "Return", "42", "ok!", "a-b", "a.b", "é", "1 + 2", "x_y", "Done?"]
QUOTED_BITS = ["<br/>", "(role: solver)", "[x]", "{y}", "a|b", "#quot;", "#35;", "<b>bold</b>", " ", "(x)",
               "line\nbreak", "a;b", "50%", "x & y", "<img src='a.png'/>", "#9829;", "end", "--", "~~"]
SHAPES = [("[", "]"), ("(", ")"), ("([", "])"), ("[[", "]]"), ("[(", ")]"), ("((", "))"), ("(((", ")))"),
          ("{", "}"), ("{{", "}}"), (">", "]"), ("[/", "/]"), ("[\\", "\\]"), ("[/", "\\]"), ("[\\", "/]"),
          ("(-", "-)")]
DATA_SHAPES = ["rect", "rounded", "stadium", "cloud", "circle", "diamond", "hex", "lean-r", "trap-t", "doc",
               "cyl", "fork", "bolt", "text", "notch-rect", "sm-circ", "flag", "tri"]
ARROWS = ["-->", "--->", "---", "----", "-.->", "-..->", "-.-", "==>", "===", "===>", "--x", "--o", "x--x",
          "o--o", "<-->", "<==>", "<-.->", "~~~", "~~~~", ".->", "<--->", "==x", "-.-o", "=====>"]
TEXT_ARROWS = [("--", "-->"), ("--", "---"), ("==", "==>"), ("-.", ".->"), ("-.", ".-"), ("<--", "-->"),
               ("--", "--x"), ("x--", "--x"), ("o--", "--o"), ("==", "==="), ("<==", "==>"), ("<-.", ".->")]
CLASSES = ["CustomOp", "ScEnSembleOp", "ProgrammerOp", "Interface", "hot", "Test", "DecisionOp", "cold_1"]
STYLES = ["fill:#f9f", "stroke:#333,stroke-width:2px", "color:red", "fill:#d0e1f9,stroke:#4378a2;"]
BROKEN_EDITS = ["drop", "dup", "insert"]
INSERTS = ["[", "]", "(", ")", "{", "}", '"', "|", "-", ">", ";", "&", ":::", " end ", "\n", "@", "`", "%%", "x"]


class _Gen:
    def __init__(self, pick: Pick, integer: Callable[[int, int], int]):
        self.pick, self.int = pick, integer
        self.edges = 0

    def maybe(self, p_tenths: int = 5) -> bool:
        return self.int(0, 9) < p_tenths

    def ident(self) -> str:
        return str(self.pick(IDS))

    def quoted(self) -> str:
        parts = [str(self.pick(WORDS + QUOTED_BITS)) for _ in range(self.int(1, 3))]
        return "".join(parts).replace('"', "")

    def label(self, shape_open: str) -> str:
        kind = self.int(0, 9)
        if kind < 4:  # plain words, unquoted
            return str(self.pick(WORDS))
        if kind < 8:
            return '"' + self.quoted() + '"'
        if kind == 8:
            return '"`' + str(self.pick(["**bold** text", "_it_", "a\nb", "plain"])) + '`"'
        return str(self.pick(["", " ", "a(b)", "x]y"]))  # often invalid: Mermaid decides

    def node(self, allow_shape: bool = True) -> str:
        nid = self.ident()
        out = nid
        k = self.int(0, 9)
        if allow_shape and k < 5:
            o, c = self.pick(SHAPES)
            out += f"{o}{self.label(o)}{c}"
        elif allow_shape and k == 5:
            fields = [f"shape: {self.pick(DATA_SHAPES)}"] if self.maybe(7) else []
            if self.maybe(6):
                fields.append(f'label: "{self.pick(WORDS)}"')
            if self.maybe(1):
                fields.append("icon: fa:fa-user")
            out += "@{ " + ", ".join(fields) + " }"
        elif allow_shape and k == 6:
            out += f'[|borders:tb|"{self.pick(WORDS)}"]'
        if self.maybe(1):
            out += ":::" + str(self.pick(CLASSES))
        return out

    def group(self) -> str:
        nodes = [self.node()]
        while self.maybe(2) and len(nodes) < 3:
            nodes.append(self.node())
        return " & ".join(nodes)

    def link(self) -> str:
        eid = f"e{self.int(1, 3)}@" if self.maybe(1) else ""
        k = self.int(0, 9)
        sp = self.pick(["", " ", " ", "  "])
        if k < 6:
            arrow = str(self.pick(ARROWS))
            label = ""
            if self.maybe(4):
                label = "|" + str(self.pick([self.pick(WORDS), '"' + self.quoted() + '"', "input", "solutions",
                                               "Passed", "a (b)"])) + "|"
            return f"{sp}{eid}{arrow}{label}{sp or ' '}"
        start, end = self.pick(TEXT_ARROWS)
        text = str(self.pick(WORDS + ['"quoted()"', "yes", "x"]))
        return f" {eid}{start} {text} {end} "

    def statement(self, depth: int) -> list[str]:
        k = self.int(0, 29)
        if k < 8:
            return [self.node()]
        if k < 18:
            chain = self.group()
            for _ in range(self.int(1, 3)):
                chain += self.link() + self.group()
                self.edges += 1
            return [chain]
        if k < 20 and depth < 3:
            head = str(self.pick(["", " S1", " sub1", " S2[Title here]", ' "Some Title"', " S3 [\"x y\"]",
                                  " sg-1", " A", ' "T"']))
            body = [f"subgraph{head}"]
            if self.maybe(2):
                body.append("  direction " + str(self.pick(["LR", "TB", "RL", "BT"])))
            for _ in range(self.int(0, 3)):
                body += ["  " + line for line in self.statement(depth + 1)]
            return body + ["end"]
        if k == 20:
            return [f"classDef {self.pick(CLASSES)} {self.pick(STYLES)}"]
        if k == 21:
            return [f"class {self.ident()},{self.ident()} {self.pick(CLASSES)}"]
        if k == 22:
            return [f"style {self.ident()} {self.pick(STYLES)}"]
        if k == 23 and self.edges:
            return [f"linkStyle {self.int(0, self.edges - 1)} stroke:#f00"]
        if k == 24:
            return [str(self.pick([f"click {self.ident()} callback", f'click {self.ident()} "https://x.org" "tip"',
                                   f'click {self.ident()} href "https://x.org"']))]
        if k == 25:
            return [str(self.pick(["accTitle: My chart", "accDescr: about it", "accDescr {\n  two\n  lines\n}"]))]
        if k == 26:
            return [f"%% {self.pick(['a comment', '@prompt solver: Solve it.', 'x --> y'])}"]
        if k == 27:
            return [f"e{self.int(1, 3)}@{{ animate: true }}"]
        if k == 28:
            return [self.node() + "; " + self.node()]
        return [""]

    def text(self, broken: bool = False) -> str:
        lines: list[str] = []
        if self.maybe(1):
            lines += ["---", "title: A chart", "---"]
        if self.maybe(1):
            lines.append("%%{init: {\"flowchart\": {\"curve\": \"basis\"}}}%%")
        header = str(self.pick(["flowchart", "flowchart", "graph", "flowchart-elk"]))
        direction = str(self.pick(["TD", "TB", "LR", "RL", "BT", "TD", "LR"]))
        lines.append(f"{header} {direction}" + str(self.pick(["", "", ";"])))
        for _ in range(self.int(1, 8)):
            indent = str(self.pick(["", "  ", "    ", "\t"]))
            lines += [indent + line for line in self.statement(0)]
        text = "\n".join(lines) + str(self.pick(["\n", "", "\n\n"]))
        if broken:
            text = self._break(text)
        return text

    def _break(self, text: str) -> str:
        if not text:
            return text
        i = self.int(0, len(text) - 1)
        edit = self.pick(BROKEN_EDITS)
        if edit == "drop":
            return text[:i] + text[i + 1:]
        if edit == "dup":
            return text[:i] + text[i] + text[i:]
        return text[:i] + str(self.pick(INSERTS)) + text[i:]


def text_from_random(rng: random.Random, broken: bool = False) -> str:
    return _Gen(lambda xs: rng.choice(xs), rng.randint).text(broken)


@st.composite
def flowchart_texts(draw, broken: bool | None = None) -> str:
    if broken is None:
        broken = draw(st.integers(0, 3)) == 0
    gen = _Gen(lambda xs: draw(st.sampled_from(xs)), lambda a, b: draw(st.integers(a, b)))
    return gen.text(bool(broken))
