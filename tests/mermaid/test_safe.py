"""The one drawing sanitiser (flowcore.mermaid.safe, issue 25.7): labels, subgraph titles, both edge-label forms,
styles, shape data and front matter can make Mermaid's drawing load nothing. Checked on the text handed to a
renderer and on the SVG Mermaid 11 itself draws from it."""

from __future__ import annotations

import re

import pytest

from flowcore import parse_lenient
from flowcore.aov.model import AOVGraph
from flowcore.aov.render import to_mermaid as aov_mermaid
from flowcore.export.bundle import drawing_text
from flowcore.mermaid.reader import to_mermaid
from flowcore.mermaid.safe import code, display_copy, markdown, plain, safe_label, safe_style
from flowcore.ui import view

EVIL = "203.0.113.9"  # TEST-NET-3: never routed
ATTACK = f"""---
config:
  themeCSS: ".node rect {{ fill: url(http://{EVIL}/fm.svg) }}"
---
flowchart TD
    subgraph S1["<img src='http://{EVIL}/title.png'>"]
        A["a<img src=http://{EVIL}/node.png>"]
    end
    A -->|"<img src='http://{EVIL}/pipe.png'>"| B
    A -- "<img src='http://{EVIL}/dash.png'>" --> C
    C --> D["#lt;img src=http://{EVIL}/ent.png#gt;"]
    D --> E["&lt;img src=http://{EVIL}/html.png&gt;"]
    E --> F["`![x](http://{EVIL}/md.png)`"]
    click A "http://{EVIL}/click"
    classDef k fill:#f9f,stroke:#333
    class A k
"""


def _remote(text: str) -> list[str]:
    """Every tag but a line break, and every CSS url(, in ``text``: what could make a browser load something."""
    return re.findall(r"<(?!br\s*/?>)/?[a-z][^>]*>?|url\([^)]*\)", text, re.I)


def test_the_attack_workflow_is_read_with_every_vector_in_place():
    w, _ = parse_lenient(ATTACK)  # the test attacks what the reader keeps, not what it already dropped
    assert "<img" in w.subgraphs["S1"].title
    assert [e.label for e in w.edges][:2] == [f"<img src='http://{EVIL}/pipe.png'>",
                                              f"<img src='http://{EVIL}/dash.png'>"]
    assert w.front_matter and "url(" in w.front_matter
    assert len(_remote(to_mermaid(w, styles=True))) >= 3


@pytest.mark.parametrize("label, shown", [
    ("a<img src=x>b", "a‹img src=x›b"),
    ("<br/>kept<br>and<br />", "<br/>kept<br>and<br />"),
    ("<br onerror=x>", "‹br onerror=x›"),
    ("#lt;img src=x#gt;", "‹img src=x›"),
    ("#60;img#62;", "‹img›"),
    ("&lt;img&gt; &#60;img&#62; &#x3C;img&#x3e;", "‹img› ‹img› ‹img›"),
    ("<img src=x", "‹img src=x"),  # unclosed: the browser would close it
    ("![x](http://h/p.png)", "! [x](http://h/p.png)"),
    ("issue #60 and a < b", "issue #60 and a ‹ b"),
    (None, None),
])
def test_safe_label(label, shown):
    assert safe_label(label) == shown


@pytest.mark.parametrize("css, kept", [
    ("fill:#f9f,stroke:#333,stroke-width:2px", "fill:#f9f,stroke:#333,stroke-width:2px"),
    ("fill:url(http://h/x.svg),stroke:#333", "stroke:#333"),
    ("background-image:linear-gradient(red,blue)", ""),
    ("fill:u\\72l(http://h/x)", ""),  # a CSS escape spelling url(
    ("color:rgb(1, 2, 3)", "color:rgb(1, 2, 3)"),
    ("fill:var(--x)", ""),
    ("font-family:Inter,stroke-dasharray:5 3", "font-family:Inter,stroke-dasharray:5 3"),  # commas separate, as in Mermaid
])
def test_safe_style(css, kept):
    assert safe_style(css) == kept


def test_the_drawing_text_names_no_remote_resource_and_the_workflow_is_unchanged():
    w, _ = parse_lenient(ATTACK)
    before = to_mermaid(w)
    for drawn in (view.diagram_code(w), drawing_text(w)):
        assert _remote(drawn) == [], _remote(drawn)
        assert "click" not in drawn and "themeCSS" not in drawn
        assert "‹img src='http://203.0.113.9/title.png'›" in drawn  # the title is still there, as text
        assert "‹img src='http://203.0.113.9/pipe.png'›" in drawn and "‹img src='http://203.0.113.9/dash.png'›" in drawn
    assert to_mermaid(w) == before  # only the drawn copy changed


def test_image_and_icon_shapes_are_drawn_as_boxes_without_their_picture():
    w, _ = parse_lenient("flowchart TD\n    A --> B\n")
    w.nodes["B"].shape, w.nodes["B"].data = "image", {"img": f"http://{EVIL}/i.png", "w": 60}
    w.nodes["A"].data = {"icon": "fa:fa-user", "label": "<img src=x>"}
    d = display_copy(w)
    assert d.nodes["B"].shape == "[" and d.nodes["B"].data == {"w": 60}
    assert d.nodes["A"].data == {"label": "‹img src=x›"}


def test_kept_statements_are_styles_without_resources_and_accessibility_text():
    w, _ = parse_lenient("flowchart TD\n    A --> B\n")
    w.extras += [f"style A fill:#f9f,background:url(http://{EVIL}/s.png)", "linkStyle 0 stroke:#ff3",
                 f'click B "http://{EVIL}"', "accTitle: <b>t</b>", "%%early %% a note"]
    assert display_copy(w).extras == ["style A fill:#f9f", "linkStyle 0 stroke:#ff3", "accTitle: ‹b›t‹/b›"]


def test_aov_drawings_go_through_the_same_sanitiser():
    g = AOVGraph.from_dict({"goal": "g", "agents": [{"id": "a1", "role": "x"}], "subtasks": {
        "s1": {"id": "s1", "subtask_requirement": f"<img src=http://{EVIL}/aov.png> #lt;img#gt;",
               "agent": "a1", "parents": [], "child": []}}})
    code = aov_mermaid(g)
    assert "<img" not in code and "#lt;img" not in code and "‹img src=http://203.0.113.9/aov.png›" in code


@pytest.mark.slow
def test_mermaid_11_draws_the_attack_with_no_remote_reference():
    """The SVG Mermaid 11 itself draws from the sanitised text: the titles and labels are there, as text, and
    no element or style names the evil host."""
    from flowcore.mermaid.engines import js as mermaid_js

    w, _ = parse_lenient(ATTACK)
    bare = w.copy()  # Mermaid 11 in V8 draws the title and both edge forms as <img> tags, unsanitised
    bare.front_matter, bare.nodes["A"].label = None, "a"  # (an <img> in a node label stops its layout in V8)
    raw = mermaid_js.render_svg(to_mermaid(bare, styles=True))
    assert len(re.findall(r"<img[^>]*203\.0\.113\.9", raw)) == 3
    svg = mermaid_js.render_svg(drawing_text(w))
    assert not re.search(r"<img|url\(\s*['\"]?http|(?:src|href)=\"http", svg)
    assert "title.png" in svg and "pipe.png" in svg and "dash.png" in svg  # shown as text


@pytest.mark.parametrize("written, shown", [
    ("**why** it works", "**why** it works"),  # formatting kept
    ("see ![x](http://h/a.png)", "see !\\[x](http://h/a.png)"),  # an image becomes text
    ("\\![x](http://h/a.png)", "\\!\\[x](http://h/a.png)"),  # the text's own backslash cannot undo the escape
    ("[![x](http://h/a.png)](http://h)", "[!\\[x](http://h/a.png)](http://h)"),  # an image inside a link
    ("<img src=http://h/a.png>", "&lt;img src=http://h/a.png&gt;"),
    ("$\\href{http://h}{x}$", "&#36;\\href{http://h}{x}&#36;"),  # no LaTeX
])
def test_markdown_from_an_llm_keeps_formatting_but_loads_nothing(written, shown):
    assert markdown(written) == shown


def test_plain_and_code_show_link_and_member_text_as_typed():
    shown = plain("**x** ![i](http://h.io) <b> www.h.io a@h.io")
    assert shown == "\\*\\*x\\*\\* \\!\\[i\\](http:\u2060//h.io) \\<b\\> www\u2060.h.io a@h.io"
    assert shown.replace("\\", "").replace("\u2060", "") == "**x** ![i](http://h.io) <b> www.h.io a@h.io"
    assert code("a` ![i](http://h)\n`b") == "`a' ![i](http://h) 'b`"  # one code span: nothing inside is read


def test_a_markdown_table_keeps_one_line_per_row_and_every_cell_plain():
    from flowcore.mermaid.safe import plain, table
    from tests.helpers.markdown import cells  # the unescaped pipes are the only column breaks

    rows = [{"name": "a|b", "note": "two\nlines", "link": "[x](http://evil.example/i.png)"},
            {"name": "<img src=http://evil.example/x>", "note": None, "link": "www.evil.example"}]
    lines = table(rows).split("\n")
    assert len(lines) == 2 + len(rows)  # header, rule, a line per row: no cell breaks a row
    assert lines[0] == "| name | note | link |" and lines[1] == "|---|---|---|"
    for line, row in zip(lines[2:], rows):
        assert cells(line) == [plain(" ".join(str(row[k] or "").split())) or "" for k in row]
    out = table(rows)
    assert "http://" not in out and not re.search(r"(?<!\\)[<\[]", out)  # no address to link, no tag or link
    assert table([]) == ""
