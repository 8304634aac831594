"""Mermaid 11's text preparation, replayed in Python with every character's original offset.

Before the flowchart grammar sees a text, Mermaid (``preprocessDiagram``, ``Diagram.fromText`` and the
flowchart parser's wrapper) rewrites it: line breaks, HTML attribute quotes, YAML front matter,
``%%{...}%%`` directives, ``%%`` comment lines, leading blanks, entity codes (``#quot;``), a trailing
``;`` on style lines, blanks after ``}``. Line numbers Mermaid reports are lines of the rewritten text;
:class:`Prepared` maps them back to the text the user wrote. Both the soft reader (which parses the
rewritten text with the same grammar) and the hard check (which maps Mermaid's own errors) use it.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import accumulate, repeat

# JavaScript's \s (ECMAScript WhiteSpace + LineTerminator); Python's differs (it has \x1c-\x1f, \x85, no \ufeff).
JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_S = f"[{JS_SPACE}]"
_NS = f"[^{JS_SPACE}]"


class LazyRegex:
    """``re.compile(pattern, flags)`` when first used: most of the reader's patterns are for texts with a '\\r', a
    directive, an entity or an error, and compiling them all cost ~3 ms of every start."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern | None = None

    def __getattr__(self, name: str):  # noqa: ANN204 - a re.Pattern attribute
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(*self._args)
        return getattr(compiled, name)


_CRLF = LazyRegex(r"\r\n?")
# Only tags with an attribute in double quotes change (cleanupText rewrites them to single quotes).
_HTML_TAG = LazyRegex(r'<([A-Za-z0-9_]+)([^>]*="[^>]*)>')
_ATTR_QUOTE = LazyRegex(r'="([^"]*)"')
_INDENT = "[\t\v\f \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"  # JS [^\S\n\r]
_FRONT_MATTER = re.compile(r"^(" + _INDENT + r"*)-{3}" + _S + r"*[\n\r](.*?)[\n\r]\1-{3}" + _S + r"*[\n\r]+", re.S)
_DIRECTIVE = LazyRegex(r"%{2}{" + _S + r"*(?:(\w+)" + _S + r"*:|(\w+))" + _S
                       + r"*(?:(\w+)|((?:(?!}%{2})[^\n\r\u2028\u2029]|\r?\n)*))?" + _S + r"*(?:}%{2})?",
                       re.I | re.ASCII)
_COMMENT = LazyRegex(r"^" + _S + r"*%%(?!{)[^\n]+\n?", re.M)
_JS_SPACE_CHARS = frozenset("\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
                            + "".join(map(chr, range(0x2000, 0x200B))))


class _CommentFinder:
    """``_COMMENT.finditer`` without trying the pattern at every line start (most of the preparation time on
    a large text): jump from one '%%' to the next and run the pattern only at the line start before it."""

    @staticmethod
    def finditer(s: str):
        find, match, space = s.find, _COMMENT.match, _JS_SPACE_CHARS
        last_end = 0
        idx = find("%%")
        while idx >= 0:
            nxt = s[idx + 2:idx + 3]
            if nxt and nxt not in "{\n":
                j = idx
                while j > last_end and s[j - 1] in space:
                    j -= 1
                if j > 0 and s[j - 1] != "\n":  # blanks after other text: the line start is after a break
                    nl = s.find("\n", j, idx)
                    j = nl + 1 if nl >= 0 else -1
                m = match(s, j) if j >= 0 else None
                if m is not None:
                    yield m
                    last_end = m.end()
                    idx = find("%%", max(last_end, idx + 1))
                    continue
            idx = find("%%", idx + 1)


_STYLE_SEMI = LazyRegex(r"style[^\n\r\u2028\u2029]*:" + _NS + r"*#[^\n\r\u2028\u2029]*;")
_CLASSDEF_SEMI = LazyRegex(r"classDef[^\n\r\u2028\u2029]*:" + _NS + r"*#[^\n\r\u2028\u2029]*;")
_ENTITY = LazyRegex(r"#[A-Za-z0-9_]+;")
_BRACE_BLANKS = LazyRegex(r"}" + _S + r"*\n")
# What the entity encoding turns '#name;' into, and back (Mermaid decodes at drawing time).
ENTITY_NUM, ENTITY_NAME, ENTITY_END = "\ufb02\u00b0\u00b0", "\ufb02\u00b0", "\u00b6\u00df"


def decode_entities(text: str) -> str:
    """Undo Mermaid's entity encoding, giving back the '#name;' the user wrote."""
    if ENTITY_NAME not in text:
        return text
    return text.replace(ENTITY_NUM, "#").replace(ENTITY_NAME, "#").replace(ENTITY_END, ";")


def _encode_entity(m: re.Match) -> str:
    name = m.group(0)[1:-1]
    prefix = ENTITY_NUM if re.fullmatch(r"\+?\d+", name) else ENTITY_NAME
    return prefix + name + ENTITY_END


class Prepared:
    """The text the flowchart grammar parses (``code``), and the way back to offsets of ``original``."""

    def __init__(self, text: str):
        self.original = text
        self._steps: list[list[tuple[int, int, bool]]] = []  # per rewrite: (new start, old start, linear)
        self.front_matter: str | None = None
        self.front_matters: list[tuple[str, int]] = []  # each one Mermaid loads: (YAML, its offset in original)
        self.front_matter_spans: list[tuple[int, int]] = []  # where they are in original, '---' lines included
        self.directives: list[str] = []
        s = text
        # mermaid.parse preprocesses, then getDiagramFromText preprocesses the result again (so a front
        # matter hidden behind a byte-order mark is removed the second time). Each rewrite runs only when the
        # text holds a string its pattern must match (a '\r', '="', ';', '}'): `in` finds that far faster
        # than the regex engine scans a large text for nothing (a 1,000-node workflow has a '<br/>' a line).
        for _ in range(2):
            if "\r" in s:
                s = self._sub(_CRLF, "\n", s)
            if '="' in s:
                s = self._sub(_HTML_TAG, lambda m: "<" + m.group(1) + _ATTR_QUOTE.sub(r"='\1'", m.group(2)) + ">",
                              s)
            fm = _FRONT_MATTER.match(s)
            if fm:
                self.front_matter = fm.group(2)
                self.front_matters.append((fm.group(2), self.offset(fm.start(2))))
                self.front_matter_spans.append((self.offset(fm.start()), self.offset(fm.end() - 1) + 1))
                s = self._sub(_FRONT_MATTER, "", s, count=1)
            if "%%{" in s:  # (the scan costs more than everything else here on a large text)
                self.directives += [m.group(0) for m in _DIRECTIVE.finditer(s)]
                s = self._sub(_DIRECTIVE, "", s)
            if "%%" in s:
                s = self._sub(_CommentFinder, "", s)
            lead = _js_trim_start(s)
            if lead:
                s = s[lead:]
                self._steps.append([(0, lead, True)])
        self.detect_text = s  # what Mermaid's diagram-type detection looks at
        if ";" in s:  # all three end with ';'
            s = self._sub(_STYLE_SEMI, lambda m: m.group(0)[:-1], s)
            s = self._sub(_CLASSDEF_SEMI, lambda m: m.group(0)[:-1], s)
            s = self._sub(_ENTITY, _encode_entity, s)
        s += "\n"
        if "}" in s:
            s = self._sub(_BRACE_BLANKS, "}\n", s)
        self.code = s
        self._line_starts: list[int] | None = None
        self._orig_starts: list[int] | None = None

    def _sub(self, pattern, repl, s: str, count: int = 0) -> str:
        """``pattern.sub`` that records how positions of the result map to positions of ``s``."""
        parts: list[str] = []
        segs: list[tuple[int, int, bool]] = []
        pos = new_pos = 0
        changed = False
        for n, m in enumerate(pattern.finditer(s)):
            if count and n >= count:
                break
            new = repl if isinstance(repl, str) else repl(m)
            if new == m.group(0):
                continue
            changed = True
            keep = s[pos:m.start()]
            segs.append((new_pos, pos, True))
            parts.append(keep)
            new_pos += len(keep)
            if new:
                segs.append((new_pos, m.start(), False))
                parts.append(new)
                new_pos += len(new)
            pos = m.end()
        if not changed:
            return s
        segs.append((new_pos, pos, True))
        parts.append(s[pos:])
        self._steps.append(segs)
        return "".join(parts)

    # ----------------------------------------------------------------------------------- positions
    def offset(self, pos: int) -> int:
        """Offset in ``original`` of offset ``pos`` of ``code``."""
        for segs in reversed(self._steps):
            k = bisect.bisect_right(segs, (pos, float("inf"), True)) - 1
            new_start, old_start, linear = segs[max(k, 0)]
            pos = old_start + (pos - new_start) if linear else old_start
        return min(max(pos, 0), len(self.original))

    def positions(self, poss: list[int]) -> list[tuple[int, int]]:
        """``position`` of many offsets at once (an offset below 0 reads as 0)."""
        return list(zip(*self.lines_columns(poss))) if poss else []

    def lines_columns(self, poss: list[int]) -> tuple[list[int], list[int]]:
        """The 1-based lines and columns in ``original`` of offsets of ``code`` (an offset below 0 reads as 0).

        Each lookup is ``offset``'s and ``position``'s bisection, run by ``map`` over the whole list (in C, no
        sort, no Python loop stepping through segments and lines): the reader places every vertex and edge of a
        workflow, and this is still ~9% of a 1,000-node soft check."""
        vals = poss if not poss or min(poss) >= 0 else [p if p > 0 else 0 for p in poss]
        bisect_right = bisect.bisect_right
        for segs in reversed(self._steps):
            last_start, last_old, last_linear = segs[-1]
            if vals and last_linear and min(vals) >= last_start:
                # all in the last segment (as after the prompt comments at the top): one shift for all, in C
                vals = list(map((last_old - last_start).__add__, vals))
                continue
            # the segment holding p: the last whose new start is <= p (the first segment starts at 0)
            where = map(bisect_right, repeat([s[0] for s in segs]), vals)
            if all(lin for _, _, lin in segs):  # only text removed (comments, \r): each segment is a shift
                shifts = [0, *(os_ - ns for ns, os_, _ in segs)]  # (bisect_right counts from 1)
                vals = [p + d for p, d in zip(vals, map(shifts.__getitem__, where))]
            else:
                vals = [os_ + (p - ns) if lin else os_
                        for p, (ns, os_, lin) in zip(vals, map(segs.__getitem__, map((-1).__add__, where)))]
        n = len(self.original)
        offs = vals if not vals or max(vals) <= n else [off if off < n else n for off in vals]
        starts = self.original_line_starts()
        lines = list(map(bisect_right, repeat(starts), offs))  # the line after the last start <= offset
        return lines, [off - starts[k - 1] + 1 for k, off in zip(lines, offs)]

    def original_line_starts(self) -> list[int]:
        """Offsets in ``original`` where its lines start (after \\r\\n, \\r or \\n)."""
        starts = self._orig_starts
        if starts is None:
            text = self.original
            if "\r" in text:
                starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
            else:  # line lengths (+1 for the break) added up, all in C
                starts = list(accumulate(map((1).__add__, map(len, text.split("\n"))), initial=0))[:-1]
            self._orig_starts = starts
        return starts

    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            starts = [0]
            code = self.code
            i = code.find("\n")
            while i >= 0:
                starts.append(i + 1)
                i = code.find("\n", i + 1)
            self._line_starts = starts
        return self._line_starts

    def position(self, pos: int) -> tuple[int, int]:
        """1-based (line, column) in the original text of offset ``pos`` of ``code``."""
        off = self.offset(pos)
        starts = self.original_line_starts()
        k = bisect.bisect_right(starts, off) - 1
        return k + 1, off - starts[k] + 1

    def code_line_col(self, pos: int) -> tuple[int, int]:
        """jison's (first_line 1-based, first_column 0-based) of offset ``pos`` of ``code``."""
        starts = self.line_starts()
        k = bisect.bisect_right(starts, pos) - 1
        return k + 1, pos - starts[k]

    def original_position(self, line: int, column0: int, token_text: str) -> tuple[int, int]:
        """(line, column), 1-based in the original text, of jison's ``line``/``column0`` in ``code``."""
        lines = self.code.split("\n")
        last = max((k + 1 for k, t in enumerate(lines) if t.strip()), default=1)
        if line > last:  # at the end of the text: point at the end of the last line that has something on it
            line, column0 = last, len(lines[last - 1].rstrip())
        start = sum(len(t) + 1 for t in lines[: line - 1])
        row = lines[line - 1]
        token = token_text.strip()
        if token:  # jison's column is often the blank before the token; prefer where the token starts
            found = row.find(token, max(0, column0 - 1))
            if found >= 0:
                column0 = found
        column0 = min(max(column0, 0), len(row))
        return self.position(start + column0)


def _js_trim_start(s: str) -> int:
    i = 0
    while i < len(s) and (s[i] in " \t\n\v\f\r\u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
                          or "\u2000" <= s[i] <= "\u200a"):
        i += 1
    return i


_LINE_BREAK = LazyRegex(r"\r\n|\r|\n")
_LINE_KEEP = LazyRegex(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+\Z")


def lines(text: str, keepends: bool = False) -> list[str]:
    """The lines of ``text`` as Mermaid 11, the diagnostics and the Editor count them: cut at '\\r\\n', '\\r' and
    '\\n' only (Mermaid turns the first two into '\\n'; a '%%' comment runs to the '\\n'). Not ``str.splitlines``:
    it also cuts at U+2028, U+2029, U+0085, '\\v', '\\f' and '\\x1c'-'\\x1e', which are characters of a line here.
    As ``splitlines``, no empty last line after a final line break."""
    if "\r" not in text:  # (a large text: split in C)
        rows = text.split("\n")
        last = rows.pop()
        if keepends:
            rows = [row + "\n" for row in rows]
        return rows + [last] if last else rows
    if keepends:
        return _LINE_KEEP.findall(text)
    rows = _LINE_BREAK.split(text)
    return rows[:-1] if rows and not rows[-1] else rows


def line_col(text: str, offset: int) -> tuple[int, int]:
    line, line_start = 1, 0
    for m in _LINE_BREAK.finditer(text, 0, offset):
        line, line_start = line + 1, m.end()
    return line, offset - line_start + 1


_HEADER_DETECT = re.compile(r"^[" + JS_SPACE + r"]*(flowchart-elk|flowchart|graph|swimlane-beta)")
_DETECT_CLEAN = LazyRegex(r"[" + JS_SPACE + r"]*%%[^\n\r\u2028\u2029]*\n", re.M)


def diagram_kind(prepared: Prepared) -> str | None:
    """The header word when Mermaid would treat the text as a flowchart, else None."""
    text = prepared.detect_text[:4000]  # only the start decides
    # (each rewrite only where its pattern can match: the regexes try every position of the 4,000 characters)
    fm = _FRONT_MATTER.match(text)  # anchored at the start (no re.M): its first match can only be there
    if fm:
        text = text[fm.end():]
    if "%%{" in text:
        text = _DIRECTIVE.sub("", text)
    if "%%" in text:
        text = _DETECT_CLEAN.sub("\n", text)
    m = _HEADER_DETECT.match(text)
    return m.group(1) if m else None


# ------------------------------------------------------------------------------------------------ errors

@dataclass
class MermaidError:
    """Why Mermaid rejected a text. `line`/`column` are 1-based in the text that was checked."""

    message: str  # for people: "line 3: expected ']' ... found the end of the text"
    line: int | None
    column: int | None
    raw: str  # Mermaid's own message, unchanged


def to_error(text: str, out: dict) -> MermaidError:
    """Mermaid's error (``name``, ``message``, jison ``hash``) with its line/column in ``text`` and in words."""
    raw = out.get("message") or "unknown Mermaid error"
    hash_ = out.get("hash") or {}
    line = column = None
    if out.get("name") == "UnknownDiagramError":
        line = _first_content_line(text)
    else:
        loc = hash_.get("loc") or {}
        pre = Prepared(text)
        if loc.get("first_line"):
            line, column = pre.original_position(int(loc["first_line"]), int(loc.get("first_column") or 0),
                                                 hash_.get("text") or "")
        else:
            m = re.search(r"on line (\d+)", raw)
            if m:
                line, column = pre.original_position(int(m.group(1)), 0, "")
                column = None
        if _is_eof(hash_.get("token")) and "end" in _expected_names(hash_):
            line, column = _unclosed_subgraph_line(text) or line, None
    message = humanize(raw, line=line, found=hash_.get("text"),
                       unknown_diagram=out.get("name") == "UnknownDiagramError")
    return MermaidError(message, line, column, raw)


def _first_content_line(text: str) -> int:
    for n, row in enumerate(_LINE_BREAK.split(text), 1):
        stripped = row.strip()
        if stripped and not stripped.startswith("%%"):
            return n
    return 1


def _unclosed_subgraph_line(text: str) -> int | None:
    stack: list[int] = []
    for n, row in enumerate(_LINE_BREAK.split(text), 1):
        word = row.strip().split(" ", 1)[0].rstrip(";").lower()
        if word == "subgraph":
            stack.append(n)
        elif word == "end" and stack:
            stack.pop()
    return stack[-1] if stack else None


def _is_eof(token) -> bool:
    return token in (1, "1", "EOF", "$end")


def _expected_names(hash_: dict) -> list[str]:
    return [str(t).strip("'") for t in hash_.get("expected") or []]


# ------------------------------------------------------------------------------------------------ wording

# What jison's token names stand for, in the flowchart grammar (and a few shared ones).
_TOKEN_WORDS = {
    "1": "the end of the text", "EOF": "the end of the text", "$end": "the end of the text",
    "SEMI": "';'", "NEWLINE": "a line break", "SPACE": "a space", "GRAPH": "'flowchart'",
    "NODIR": "a direction (TD, LR, ...)", "DIR": "a direction (TD, LR, ...)", "subgraph": "'subgraph'",
    "end": "'end'", "SQS": "'['", "SQE": "']'", "PS": "'('", "PE": "')'", "DIAMOND_START": "'{'",
    "DIAMOND_STOP": "'}'", "DOUBLECIRCLESTART": "'((('", "DOUBLECIRCLEEND": "')))'",
    "(-": "'(-'", "-)": "'-)'",
    "STADIUMSTART": "'(['", "STADIUMEND": "'])'", "SUBROUTINESTART": "'[['", "SUBROUTINEEND": "']]'",
    "CYLINDERSTART": "'[('", "CYLINDEREND": "')]'", "TRAPSTART": "'[/'", "TRAPEND": "'\\]'",
    "INVTRAPSTART": "'[\\'", "INVTRAPEND": "'/]'", "VERTEX_WITH_PROPS_START": "'[|'", "TAGSTART": "'<'",
    "TAGEND": "'>'", "PIPE": "'|'", "AMP": "'&'", "COLON": "':'", "COMMA": "','", "STYLE_SEPARATOR": "':::'",
    "SHAPE_DATA": "shape data '@{ ... }'", "START_LINK": "an arrow with a label ('-- text -->')",
    "LINK": "an arrow such as '-->'", "LINK_ID": "an edge id ('e1@')", "EDGE_TEXT": "the arrow's label",
    "STR": "a quoted string", "MD_STR": "a markdown string", "TEXT": "text", "UNICODE_TEXT": "text",
    "TESTSTR": "text", "NODE_STRING": "a node id or word", "NUM": "a number", "UNIT": "a unit",
    "BRKT": "'#'", "PCT": "'%'", "MINUS": "'-'", "MULT": "'*'", "DOWN": "'v'", "UP": "'^'",
    "STYLE": "'style'", "LINKSTYLE": "'linkStyle'", "CLASSDEF": "'classDef'", "CLASS": "'class'",
    "CLICK": "'click'", "DEFAULT": "'default'", "INTERPOLATE": "'interpolate'", "HREF": "'href'",
    "CALLBACKNAME": "a callback name", "CALLBACKARGS": "callback arguments", "LINK_TARGET": "a link target",
    "acc_title": "'accTitle'", "acc_descr": "'accDescr'", "acc_title_value": "a title",
    "acc_descr_value": "a description", "acc_descr_multiline_value": "a description", "error": "an error",
}
_CLOSERS = ("SQE", "PE", "DIAMOND_STOP", "STADIUMEND", "SUBROUTINEEND", "CYLINDEREND", "DOUBLECIRCLEEND",
            "TRAPEND", "INVTRAPEND", "-)")
_EXPECTING = LazyRegex(r"Expecting (.+), got '([^']*)'", re.S)
_UNEXPECTED = LazyRegex(r"Unexpected (end of input|'([^']*)')")
_LINE_IN_RAW = LazyRegex(r"(?:Parse|Lexical) error on line (\d+)")


def _word(token: str) -> str:
    if token in _TOKEN_WORDS:
        return _TOKEN_WORDS[token]
    base = token.split("[", 1)[0]
    if base.startswith("direction_"):
        return "'direction'"
    if base.startswith(("idString", "NODE_STRING")):
        return "a node id or word"
    if base.startswith("STR"):
        return "a quoted string"
    return f"'{token}'" if not token.isupper() else token.lower().replace("_", " ")


def _join_or(words: list[str]) -> str:
    uniq = list(dict.fromkeys(words))
    if len(uniq) > 6:
        uniq = uniq[:5] + ["something else"]
    return uniq[0] if len(uniq) == 1 else ", ".join(uniq[:-1]) + " or " + uniq[-1]


def humanize(raw_message: str, line: int | None = None, *, found: str | None = None,
             unknown_diagram: bool = False) -> str:
    """Mermaid's parser message in words a person understands, prefixed with `line N:`.

    `line` overrides the line number in `raw_message` (Mermaid counts after dropping comments and front
    matter; `parse_check` passes the line of the original text); `found` is the offending text if known."""
    raw = (raw_message or "").strip()
    if line is None:
        m = _LINE_IN_RAW.search(raw)
        line = int(m.group(1)) if m else None
    desc = _describe(raw, unknown_diagram, (found or "").strip())
    return f"line {line}: {desc}" if line is not None else desc[:1].upper() + desc[1:]


def _describe(raw: str, unknown_diagram: bool, found_text: str) -> str:
    if unknown_diagram or raw.startswith("No diagram type detected"):
        if not raw.split("for text:", 1)[-1].strip():
            return "the diagram is empty; it must start with a header such as 'flowchart TD'"
        return ("the text does not start with a diagram type Mermaid knows; "
                "write a header such as 'flowchart TD'")
    if raw.startswith("Lexical error"):
        return "Mermaid cannot read the characters here (check quotes and brackets)"
    m = _EXPECTING.search(raw)
    if m:
        expected = [t.strip().strip("'") for t in m.group(1).split(",")]
        got = m.group(2)
    else:
        u = _UNEXPECTED.search(raw)
        if not u:  # not a grammar error (a limit, a semantic error): Mermaid's first line, as is
            first = raw.splitlines()[0] if raw else "unknown error"
            return re.sub(r"^(Error|UnknownDiagramError):\s*", "", first)
        expected, got = [], "EOF" if u.group(1) == "end of input" else (u.group(2) or "")
    found = f"'{found_text}'" if found_text and not _is_eof(got) and len(found_text) < 40 else _word(got)
    closers = [_TOKEN_WORDS[t] for t in _CLOSERS if t in expected]
    if closers:
        brackets = _join_or(closers[:2]) + (" (or another closing bracket)" if len(closers) > 2 else "")
        if _is_eof(got):
            return f"a node label is not closed: expected {brackets} before the end of the text"
        return f"expected {brackets} to close the node label, found {found}"
    if _is_eof(got) and "end" in expected:
        return "a 'subgraph' is not closed: add a line 'end' after its nodes"
    if (_is_eof(got) or got == "NEWLINE") and "end" not in expected and ("NODE_STRING" in expected or expected == ["SPACE"]):
        # an arrow or '&' with nothing after it on the line
        return "expected a node id, found 'end of line'" + (" (after '&', leave a space and name a node)"
                                                           if expected == ["SPACE"] else "")
    if got == "end":
        return "found 'end' but no 'subgraph' is open here"
    if got in ("SQE", "PE", "DIAMOND_STOP") or got.endswith(("END", "STOP")):
        return f"found {found} that closes nothing; a bracket is unbalanced or a label needs quotes"
    if {"LINK", "START_LINK"} & set(expected) and got not in ("LINK", "START_LINK"):
        return (f"expected an arrow such as '-->' or the end of the statement, "
                f"found {found} (not a valid arrow?)")
    if not expected:
        return f"unexpected {found}"
    return f"expected {_join_or([_word(t) for t in expected])}, found {found}"


# Characters of YAML (front matter, node and edge data) read so far in the text being read: the per-text bound of
# flowcore.mermaid.yamldata.load. Kept here, not there, so that a text with no YAML never imports the YAML reader.
YAML_READ: ContextVar[list[int] | None] = ContextVar("yaml_chars_read", default=None)


@contextlib.contextmanager
def text_budget() -> Iterator[None]:
    """Within it, the YAML documents yamldata.load reads count against its MAX_TEXT_CHARS together (the reader
    opens one per text: a text of 128 nodes of 8 KB data each cost 26 s)."""
    token = YAML_READ.set([0])
    try:
        yield
    finally:
        YAML_READ.reset(token)
