"""What a drawing may show: one sanitiser for every text handed to a Mermaid renderer (the Editor's and every
page's drawing, History's and Evolve's rounds, the AOV graph), so that nothing drawn makes the browser load
anything from anywhere.

Mermaid draws labels as HTML. A node label, a subgraph title or an edge label (``-->|x|`` and ``-- x -->``
alike) holding ``<img src=...>`` is fetched by the browser, strict mode or not (issue 25.7), and so is a style
with ``url(...)``, an image shape's ``img``, or a theme's CSS in the front matter. The drawing therefore gets:

- labels, titles and edge labels with every tag but a ``<br/>`` line break shown as text (``‹img …›``), also
  when it was written with entities (``#lt;``, ``&lt;``, ``&#60;``) that Mermaid would decode, and markdown
  images broken (``! [x](…)`` is at most a link, never loaded);
- styles (``classDef``, ``style``, ``linkStyle``) reduced to declarations of known drawing properties whose
  values are colours, lengths and names: no ``url(``, ``image``, ``@import`` or CSS escapes;
- no front matter, no ``%%{init}`` directives, no ``click`` lines, no image or icon shape data.

The workflow itself is never changed: only the copy that is drawn.

Pages render markdown too (text, captions, alerts, help), and a markdown image is fetched the moment it is
shown. Text an LLM wrote (a rationale, a judge's reason, an endpoint's error), text from a link (``?wf=``,
``task=``, ``v=``) and text a team member typed go through :func:`plain` (shown exactly as typed) or
:func:`markdown` (its emphasis, lists and code kept; images, raw HTML and LaTeX shown as typed), and an id
shown as code through :func:`code`.
"""

from __future__ import annotations

import re

from flowcore.model import Workflow

__all__ = ["code", "display_copy", "markdown", "plain", "safe_label", "safe_style"]

# every tag but <br>, <br/>, <br /> (attributes make it another tag: <br onerror=...> is shown as text)
_TAG = re.compile(r"<(?!br\s*/?>)[^>]*>?", re.I)
# entity spellings of < and > that Mermaid or the browser would turn back into a tag
_LT = re.compile(r"[#&](?:lt|#0*60|0*60|#x0*3c|x0*3c);|&lt", re.I)
_GT = re.compile(r"[#&](?:gt|#0*62|0*62|#x0*3e|x0*3e);|&gt", re.I)
_MD_IMAGE = re.compile(r"!(?=\s*\[)")

# style declarations a drawing needs; values only of colours, numbers with units, names, commas and rgb()/hsl()
_STYLE_PROPS = frozenset({
    "fill", "stroke", "stroke-width", "stroke-dasharray", "stroke-opacity", "fill-opacity", "opacity", "color",
    "font-size", "font-weight", "font-style", "font-family", "text-decoration", "rx", "ry", "padding"})
_STYLE_VALUE = re.compile(r"[#\w\s.,%()\-+'\"]*")
_STYLE_BAD = re.compile(r"url|image|src|@|\\|expression|var\(|attr\(", re.I)
_NODE_DATA = frozenset({"shape", "label", "labelType", "w", "h", "pos", "constraint"})
_EDGE_DATA = frozenset({"animate", "animation", "curve"})
_SAFE_DATA_VALUE = re.compile(r"[\w\s.,\-+]*")
_PICTURE_SHAPES = frozenset({"image", "icon", "iconSquare", "iconCircle", "iconRounded"})  # drawn as boxes


def safe_label(label: str | None) -> str | None:
    """The text with every HTML tag but ``<br/>`` shown as text, entity-written brackets included, and
    markdown images broken: nothing in it can load anything."""
    if label is None:
        return None
    text = _LT.sub("‹", label)
    text = _GT.sub("›", text)
    text = _TAG.sub(lambda m: m.group(0).replace("<", "‹").replace(">", "›"), text)
    return _MD_IMAGE.sub("! ", text)


def safe_style(css: str | None) -> str:
    """The declarations of ``css`` a drawing may keep (comma- or semicolon-separated, as Mermaid writes them):
    known properties with plain values. Anything that could name a resource is dropped."""
    kept = []
    for decl in re.split(r"[,;](?![^()]*\))", css or ""):
        prop, sep, value = decl.partition(":")
        prop, value = prop.strip().lower(), value.strip()
        if (sep and prop in _STYLE_PROPS and _STYLE_VALUE.fullmatch(value) and not _STYLE_BAD.search(value)):
            kept.append(f"{prop}:{value}")
    return ",".join(kept)


def _safe_extra(line: str) -> str | None:
    """A kept statement as it may be drawn: style and linkStyle with safe declarations, accessibility text;
    every other statement (click, directives, comments) is left out of the drawing."""
    m = re.match(r"(style|linkStyle)\s+(\S+)\s+(.*)$", line)
    if m:
        css = safe_style(m[3])
        return f"{m[1]} {m[2]} {css}" if css else None
    m = re.match(r"(accTitle|accDescr)\s*:\s*(.*)$", line)
    if m:
        return f"{m[1]}: {safe_label(m[2])}"
    return None


def display_copy(w: Workflow) -> Workflow:
    """A copy of ``w`` that is safe to draw (see the module docstring); ``w`` is not changed."""
    d = w.copy()
    d.front_matter = None  # config: themeCSS, fontFamily ... would style the drawing with anything
    for n in d.nodes.values():
        n.label = safe_label(n.label)
        if n.shape in _PICTURE_SHAPES:
            n.shape = "["
        n.props = {safe_label(str(k)): safe_label(str(v)) for k, v in n.props.items()}
        n.data = {k: v for k, v in n.data.items() if k in _NODE_DATA
                  and (k == "label" or _SAFE_DATA_VALUE.fullmatch(str(v)))}
        if "label" in n.data:
            n.data["label"] = safe_label(str(n.data["label"]))
    for e in d.edges:
        e.label = safe_label(e.label)
        e.data = {k: v for k, v in e.data.items() if k in _EDGE_DATA and _SAFE_DATA_VALUE.fullmatch(str(v))}
    for s in d.subgraphs.values():
        s.title = safe_label(s.title)
    d.class_defs = {name: safe_style(css) for name, css in d.class_defs.items()}
    d.extras = [x for x in (_safe_extra(x) for x in d.extras) if x]
    return d


# -- markdown on pages -------------------------------------------------------------------------------------------

_SPECIAL = frozenset("\\`*_[]<>$~#|!&")  # `&`: an entity would be read (``&lt;`` shown as ``<``)
# a colon before a name starts a Streamlit directive (``:red`` vanishes, ``:red[x]`` colours) or an emoji
# shortcode (``:smile:``, found by both its colons); escaped, it is a colon
_NAME_COLON = re.compile(r":(?=[\w+\-])")
_SHORTCODE_END = re.compile(r"(\\:[\w+\-]+):")
_JOIN = "\u2060"  # WORD JOINER: invisible, and it stops a renderer from finding a URL or address in the text
# (an address stays: mailto loads nothing); Streamlit finds ``:material/icon:`` in the text, escaped or not
_AUTOLINK = re.compile(r"(?<=:)(?=//|material/)|(?<=www)(?=\.)", re.I)


def plain(text: object) -> str:
    """``text`` for st.markdown shown exactly as it is: every markdown character escaped, and no URL or ``www.``
    name made into a link (GitHub-flavoured markdown links them in plain text, escapes or not)."""
    escaped = "".join("\\" + c if c in _SPECIAL else c for c in _AUTOLINK.sub(_JOIN, str(text)))
    return _SHORTCODE_END.sub(r"\1\\:", _NAME_COLON.sub(r"\\:", escaped))


def table(rows: list[dict]) -> str:
    """``rows`` (dicts with the same keys) as a markdown table whose header and cells are :func:`plain` text on
    one line each: a few static rows drawn with the page's markdown, not with the data grid's 1.2 MB of scripts
    (Arrow, its formatters) that ``st.table`` loads."""
    if not rows:
        return ""
    cols = list(rows[0])

    def cell(v: object) -> str:
        return plain(" ".join(str("" if v is None else v).split())) or " "

    lines = ["| " + " | ".join(cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def markdown(text: object) -> str:
    """``text`` for st.markdown with its formatting but nothing that loads or runs: images, raw HTML and LaTeX
    are shown as typed. Brackets and dollars become entities and an image's ``[`` is escaped, so no backslash
    the text holds can undo the escape (``\\![x](u)`` stays text)."""
    s = str(text).replace("<", "&lt;").replace(">", "&gt;").replace("$", "&#36;")
    return s.replace("![", "!\\[")


def code(text: object) -> str:
    """``text`` as inline code: nothing inside a code span is interpreted, once it holds no backtick or line
    break of its own."""
    return "`" + " ".join(str(text).replace("`", "'").split()) + "`"
