"""Shape and edge data (``A@{ shape: rect, label: "x" }``) and the front matter read as Mermaid reads them:
js-yaml's ``load`` with its JSON schema, here PyYAML's safe loader narrowed to the same schema.

What the narrowing changes from PyYAML's YAML 1.1 defaults, each as js-yaml's JSON_SCHEMA does it: only
``true``/``false`` (three spellings each) are booleans and only ``null``/``~``/empty is null (``yes``, ``on`` stay
text); no timestamps, sexagesimal numbers, ``<<`` merges or ``=`` values; integers in decimal (``_`` allowed),
``0b``, ``0o`` and ``0x``; a key written twice is an error; keys are JavaScript object keys (text); only the
JSON schema's tags (``!!str``, ``!!seq``, ``!!map``, ``!!null``, ``!!bool``, ``!!int``, ``!!float``) are known, and
an explicit one must fit its value (``!!bool yes`` is an error). PyYAML is imported only when a text has YAML.

Aliases share one object in both loaders, but a value read as text (a label, a title) is written out in full, so
a few lines of nested aliases ("billion laughs") would cost time and memory beyond any drawing: a document whose
nodes, each alias counted as what it stands for, number over ``MAX_NODES`` is refused before it is built.

PyYAML's loader is pure Python (~25 us a character of `[1,1,...]`, so 400 KB of front matter was 9-17 s of the
server's CPU per check) and its scanner grows quadratic with nesting (10 KB of `[[[...]]]`: 1.4 s before Python's
recursion limit). So a document is bounded before it is loaded: ``MAX_DATA_CHARS`` for a node's or edge's data,
``MAX_FRONT_MATTER_CHARS`` for the front matter, ``MAX_TEXT_CHARS`` for all the YAML of one text (within
:func:`flowcore.mermaid.text.text_budget`, which the reader opens per text), and ``MAX_DEPTH`` levels of nesting (flow and block
together), refused as the scanner reaches them. Mermaid itself reads any size; real data and configs are a few
hundred characters (docs/mermaid.md, "Limits").
"""

from __future__ import annotations

import re

from flowcore.mermaid.text import YAML_READ

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_NULL = re.compile(r"~|null|Null|NULL|")
_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_INT = re.compile(r"[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)")
_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_LOADER = None
MAX_NODES = 100_000  # a real label or front matter has tens; a 10-level alias bomb has 10**10
MAX_DATA_CHARS = 8_192  # one node's or edge's `@{ ... }` data (a real one: `shape: rect, label: "..."`)
MAX_FRONT_MATTER_CHARS = 16_384  # the front matter (a real config, themeVariables and all, is under 2 KB)
MAX_TEXT_CHARS = 32_768  # all the YAML one text holds: ~0.8 s of loading at worst
MAX_DEPTH = 64  # levels of nesting, flow ([ {) and block (indents) together


class YamlDataError(ValueError):
    """The text is not YAML js-yaml would load (or it is an alias bomb); ``line``/``column`` are 1-based, in
    the document, when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None, *,
                 bound: bool = False):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column
        self.bound = bound  # refused for its size or depth (read by Mermaid, past what is read here)


def js_str(v: Any, _open: frozenset = frozenset()) -> str:
    """``String(v)`` in JavaScript, for a value js-yaml loaded (a list joins its items with ',', null in a list is
    empty, and so is a list inside itself: an alias back to an open collection)."""
    if isinstance(v, list):
        if id(v) in _open:
            return ""
        inner = _open | {id(v)}
        return ",".join("" if x is None else js_str(x, inner) for x in v)
    if isinstance(v, dict):
        return "[object Object]"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        if v.is_integer():
            return str(int(v))
    return str(v)


def _js_key(k: Any) -> str:
    """The property name JavaScript makes of a key js-yaml loaded (``String(k)``)."""
    if isinstance(k, (list, dict)):
        return js_str(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, float) and k.is_integer():
        return str(int(k))
    return str(k)


_BLANK_END = "\0 \t\r\n\x85\u2028\u2029"
_FLOW = ",[]{}"


class _Yaml12Syntax:
    """PyYAML's scanner and parser (YAML 1.1) moved to what js-yaml (YAML 1.2) reads, where Mermaid's texts meet
    the difference (each found by fuzzing against Mermaid 11, each a case in tests/mermaid/test_yaml_data.py):

    - tabs separate tokens (after '|' too) and sit inside plain text (``title: A<tab>B``); in the indentation
      only on a blank line;
    - in a flow collection a plain scalar may hold '?' and start with ':' or '?' (``{a: :x}``); a key may be empty
      (``{: 1}``: key ``null``); a value is never a pair of its own (``{a: b: c}`` is refused);
    - an anchor's name runs to a blank or a flow indicator (``&a:`` names ``a:``);
    - a block mapping's first key carries no anchor or tag on its line (``&x b: 1`` is refused);
    - a document that is one plain text continues on lines indented at least as its first; a block scalar given
      as a mapping value on the next line is indented more than its key.
    """

    def fetch_flow_collection_start(self, TokenClass):  # noqa: N803 - PyYAML's name
        self._deeper()
        return super().fetch_flow_collection_start(TokenClass)

    def add_indent(self, column: int) -> bool:
        if self.indent < column:
            self._deeper()
        return super().add_indent(column)

    def _deeper(self) -> None:
        """One more level of nesting: past MAX_DEPTH the document is refused here, as the scanner reaches it
        (PyYAML's scanner is quadratic in the depth, and its composer recursive)."""
        if self.flow_level + len(self.indents) >= MAX_DEPTH:
            from yaml.scanner import ScannerError

            raise ScannerError(None, None, f"nested deeper than {MAX_DEPTH} levels; at most {MAX_DEPTH} are read",
                               self.get_mark())

    def scan_to_next_token(self) -> None:
        if self.index == 0 and self.peek() == "\uFEFF":
            self.forward()
        while True:
            while self.peek() == " " or (self.peek() == "\t" and (self.flow_level or not self._in_indent()
                                                                    or self._rest_blank())):
                self.forward()
            if self.peek() == "#":
                while self.peek() not in "\0\r\n\x85\u2028\u2029":
                    self.forward()
            if not self.scan_line_break():
                return
            if not self.flow_level:
                self.allow_simple_key = True

    def _in_indent(self) -> bool:
        return not self.buffer[self.pointer - self.column:self.pointer].strip(" ")

    def _rest_blank(self) -> bool:
        """Only blanks (or a comment) from here to the line's end: a tab there is no indentation."""
        i, buf = self.pointer, self.buffer
        while buf[i] in " \t":
            i += 1
        return buf[i] in "#\0\r\n\x85\u2028\u2029"

    def check_key(self) -> bool:
        return self.peek(1) in _BLANK_END  # ('?x' is plain text in a flow collection too)

    def check_value(self) -> bool:
        nxt = self.peek(1)
        if not self.flow_level or nxt in _BLANK_END or nxt in _FLOW:
            return nxt in _BLANK_END or bool(self.flow_level)
        i, buf = self.pointer - 1, self.buffer  # (a walk back, not a copy of all before: linear in the text)
        while i >= 0 and buf[i] in " \t\r\n":
            i -= 1
        return i < 0 or buf[i] not in "{[,:?"  # else a plain scalar starts here (':x')

    def check_plain(self) -> bool:
        ch, nxt = self.peek(), self.peek(1)
        if ch not in "\0 \t\r\n\x85\u2028\u2029-?:,[]{}#&*!|>'\"%@`":
            return True
        return ch in "-?:" and nxt not in _BLANK_END and not (self.flow_level and nxt in _FLOW)

    def scan_plain(self):
        from yaml.tokens import ScalarToken

        chunks: list[str] = []
        start_mark = end_mark = self.get_mark()
        indent = self.indent + 1
        if indent == 0 and not self.flow_level:  # js-yaml: a document's text continues indented as its first line
            line = self.buffer[self.pointer - self.column:self.pointer]
            indent = len(line) - len(line.lstrip(" "))
        spaces: list[str] | None = []
        while True:
            length = 0
            if self.peek() == "#":
                break
            while True:
                ch = self.peek(length)
                if ch in _BLANK_END or (ch == ":" and self.peek(length + 1) in _BLANK_END
                                        + (_FLOW if self.flow_level else "")) or (self.flow_level and ch in _FLOW):
                    break
                length += 1
            if length == 0:
                break
            self.allow_simple_key = False
            chunks.extend(spaces or ())
            chunks.append(self.prefix(length))
            self.forward(length)
            end_mark = self.get_mark()
            spaces = self.scan_plain_spaces(indent, start_mark)
            if not spaces or self.peek() == "#" or (not self.flow_level and self.column < indent):
                break
        return ScalarToken("".join(chunks), True, start_mark, end_mark)

    def scan_plain_spaces(self, indent, start_mark):
        chunks: list[str] = []
        length = 0
        while self.peek(length) in " \t":
            length += 1
        whitespaces = self.prefix(length)
        self.forward(length)
        if self.peek() in "\r\n\x85\u2028\u2029":
            line_break = self.scan_line_break()
            self.allow_simple_key = True
            if self.prefix(3) in ("---", "...") and self.peek(3) in _BLANK_END:
                return None
            breaks = []
            while self.peek() in " \r\n\x85\u2028\u2029":  # (a tab in the indentation is an error)
                if self.peek() == " ":
                    self.forward()
                else:
                    breaks.append(self.scan_line_break())
                    if self.prefix(3) in ("---", "...") and self.peek(3) in _BLANK_END:
                        return None
            if line_break != "\n":
                chunks.append(line_break)
            elif not breaks:
                chunks.append(" ")
            chunks.extend(breaks)
        elif whitespaces:
            chunks.append(whitespaces)
        return chunks

    def scan_block_scalar_indicators(self, start_mark):
        from yaml.scanner import ScannerError

        chomping = increment = None
        for _ in range(2):  # '+' or '-', and a digit 1-9, in either order
            ch = self.peek()
            if ch in "+-" and chomping is None:
                chomping = ch == "+"
            elif ch in "0123456789" and increment is None:
                if ch == "0":
                    raise ScannerError("while scanning a block scalar", start_mark,
                                       "expected indentation indicator in the range 1-9, but found 0", self.get_mark())
                increment = int(ch)
            else:
                break
            self.forward()
        if self.peek() not in _BLANK_END:  # (a tab may follow: '|\t')
            raise ScannerError("while scanning a block scalar", start_mark,
                               f"expected chomping or indentation indicators, but found {self.peek()!r}",
                               self.get_mark())
        return chomping, increment

    def scan_block_scalar_ignored_line(self, start_mark):
        while self.peek() in " \t":
            self.forward()
        super().scan_block_scalar_ignored_line(start_mark)

    def scan_anchor(self, token_class):
        from yaml.scanner import ScannerError

        start_mark = self.get_mark()
        kind = "alias" if self.peek() == "*" else "anchor"
        self.forward()
        length = 0
        while self.peek(length) not in _BLANK_END and self.peek(length) not in _FLOW:
            length += 1
        if not length:
            raise ScannerError(f"while scanning an {kind}", start_mark, "expected its name", self.get_mark())
        value = self.prefix(length)
        self.forward(length)
        return token_class(value, start_mark, self.get_mark())

    def parse_flow_mapping_key(self, first=False):
        from yaml.tokens import FlowEntryToken, ValueToken

        if not first and self.check_token(FlowEntryToken):
            self.get_token()
            first = True
        if first and self.check_token(ValueToken):  # an empty key: js-yaml reads it as null
            self.state = self.parse_flow_mapping_value
            return self.process_empty_scalar(self.peek_token().start_mark)
        return super().parse_flow_mapping_key(first)

    def parse_block_mapping_first_key(self):
        from yaml.parser import ParserError
        from yaml.tokens import AnchorToken, KeyToken, TagToken

        queued = self.tokens
        if len(queued) > 2 and isinstance(queued[1], KeyToken) and isinstance(queued[2], (AnchorToken, TagToken)) \
                and queued[1].start_mark.index == queued[2].start_mark.index:
            # `&x b: 1` opening a block mapping: js-yaml gives the anchor or tag to the mapping, which then starts
            # at the key's column and is refused ("bad indentation"); a later key may carry one
            raise ParserError("while parsing a block mapping", queued[0].start_mark,
                              "its first key cannot carry an anchor or a tag on the same line (js-yaml: bad "
                              "indentation of a mapping entry)", queued[2].start_mark)
        return super().parse_block_mapping_first_key()

    def parse_flow_mapping_value(self):
        from yaml.parser import ParserError
        from yaml.tokens import FlowEntryToken, FlowMappingEndToken, KeyToken, ValueToken

        if not self.check_token(ValueToken):
            return super().parse_flow_mapping_value()
        token = self.get_token()
        if self.check_token(KeyToken):  # `{a: b: c}`: a value is never a pair of its own in js-yaml
            raise ParserError("while parsing a flow mapping", self.marks[-1],
                              "missed comma between flow collection entries", self.peek_token().start_mark)
        if self.check_token(FlowEntryToken, FlowMappingEndToken):
            self.state = self.parse_flow_mapping_key
            return self.process_empty_scalar(token.end_mark)
        self.states.append(self.parse_flow_mapping_key)
        return self.parse_flow_node()

    def parse_block_mapping_value(self):
        from yaml.parser import ParserError
        from yaml.tokens import BlockEndToken, KeyToken, ScalarToken, ValueToken

        if not self.check_token(ValueToken):
            return super().parse_block_mapping_value()
        token = self.get_token()
        if self.check_token(KeyToken, ValueToken, BlockEndToken):
            self.state = self.parse_block_mapping_key
            return self.process_empty_scalar(token.end_mark)
        nxt = self.peek_token()
        if isinstance(nxt, ScalarToken) and nxt.style in ("|", ">") and nxt.start_mark.line > token.start_mark.line \
                and nxt.start_mark.column <= self.marks[-1].column:  # '|' under its key: js-yaml refuses it
            raise ParserError("while parsing a block mapping", self.marks[-1],
                              "a value on the next line must be indented more than its key", nxt.start_mark)
        self.states.append(self.parse_block_mapping_key)
        return self.parse_block_node_or_indentless_sequence()


def _loader():
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    SafeLoader = yaml.SafeLoader  # (not libyaml: its scanner cannot be brought nearer js-yaml)

    class JsonSchemaLoader(_Yaml12Syntax, SafeLoader):  # type: ignore[valid-type,misc]
        pass

    JsonSchemaLoader.yaml_implicit_resolvers = {}
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(f"^(?:{_NULL.pattern})$"),
                                           ["~", "n", "N", ""])
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                           re.compile(f"^(?:{_BOOL.pattern})$"), list("tTfF"))
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(f"^(?:{_INT.pattern})$"),
                                           list("-+0123456789"))
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(f"^(?:{_FLOAT.pattern})$"),
                                           list("-+0123456789."))

    def fits(node, pattern: re.Pattern, tag: str) -> str:
        raw = loader_scalar(node)
        if not pattern.fullmatch(raw):  # only an explicit tag gets here with a value its type cannot read
            raise yaml.constructor.ConstructorError(None, None, f"cannot read {raw!r} as !!{tag}", node.start_mark)
        return raw

    def loader_scalar(node) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(None, None, f"expected a scalar, found a {node.id}",
                                                    node.start_mark)
        return node.value

    def construct_null(loader, node) -> None:
        fits(node, _NULL, "null")

    def construct_bool(loader, node) -> bool:
        return fits(node, _BOOL, "bool").lower() == "true"

    def construct_int(loader, node) -> int:
        raw = fits(node, _INT, "int")
        if raw.endswith("_"):
            return raw  # js-yaml: not an integer
        sign = -1 if raw.startswith("-") else 1
        body = raw.lstrip("+-").replace("_", "")
        for prefix, base in (("0b", 2), ("0o", 8), ("0x", 16)):
            if body.startswith(prefix):
                return sign * int(body[2:], base)
        return sign * int(body)

    def construct_float(loader, node) -> float:
        raw = fits(node, _FLOAT, "float").replace("_", "")
        low = raw.lower()
        if low.endswith(".inf"):
            return float("-inf") if raw.startswith("-") else float("inf")
        if low == ".nan":
            return float("nan")
        return float(raw)

    def construct_mapping(loader, node, deep=False) -> dict:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, "expected a mapping", node.start_mark)
        out: dict = {}
        for key_node, value_node in node.value:
            key = _js_key(loader.construct_object(key_node, deep=True))
            if key in out:
                raise yaml.constructor.ConstructorError(None, None, f"duplicated mapping key '{key}'",
                                                        key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=deep)
        return out

    def construct_map(loader, node):
        data: dict = {}
        yield data
        data.update(construct_mapping(loader, node))

    def unknown(loader, node):
        raise yaml.constructor.ConstructorError(None, None, f"unknown tag {node.tag}", node.start_mark)

    # the JSON schema's types only (no !!binary, !!timestamp, !!set, !!omap ...)
    JsonSchemaLoader.yaml_constructors = {t: SafeLoader.yaml_constructors[t] for t in (
        "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq")}
    JsonSchemaLoader.add_constructor(None, unknown)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:null", construct_null)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:bool", construct_bool)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:map", construct_map)
    JsonSchemaLoader.construct_mapping = construct_mapping
    _LOADER = JsonSchemaLoader
    return _LOADER


def expanded_size(root: Any, limit: int = MAX_NODES) -> int:
    """How many nodes the composed document has when each alias is counted as the nodes it stands for (an alias
    back to a collection still open counts 1: JavaScript writes a cycle out as nothing). Stops past ``limit``."""
    memo: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in open_:
            return 1
        total = 1
        if not isinstance(node.value, str):
            open_.add(key)
            for item in node.value:
                for child in item if isinstance(item, tuple) else (item,):
                    total += size(child)
                    if total > limit:
                        break
                if total > limit:
                    break
            open_.discard(key)
        memo[key] = total
        return total

    return size(root) if root is not None else 0


def load(doc: str, empty: Any = None, *, limit: int = MAX_DATA_CHARS) -> Any:
    """The document as js-yaml's ``load(doc, {schema: JSON_SCHEMA})`` gives it (``empty`` for a text with no
    document, where js-yaml gives undefined, not null); YamlDataError when it would throw, when it is over
    ``limit`` characters or the text's budget (``text_budget``), nested deeper than ``MAX_DEPTH``, or when
    its aliases stand for more than ``MAX_NODES`` nodes. The sizes are checked before anything is read."""
    if len(doc) > limit:
        raise YamlDataError(f"it is {len(doc):,} characters; at most {limit:,} are read (real ones are a few "
                            "hundred)", 1, 1, bound=True)
    spent = YAML_READ.get()
    if spent is not None:
        spent[0] += len(doc)
        if spent[0] > MAX_TEXT_CHARS:
            raise YamlDataError(f"the text's YAML (front matter and node data) comes to {spent[0]:,} characters "
                                f"with this one; at most {MAX_TEXT_CHARS:,} are read in one text", 1, 1, bound=True)
    loader_cls = _loader()
    import yaml

    try:
        loader = loader_cls(doc)  # (PyYAML's reader checks every character here, before anything is parsed)
    except yaml.reader.ReaderError as exc:  # '\v', '\f', '\x1c'... : js-yaml refuses them too; was a traceback
        at = exc.position if isinstance(exc.position, int) and 0 <= exc.position < len(doc) else None
        if at is None:
            raise YamlDataError("the stream contains non-printable characters") from None
        line = doc.count("\n", 0, at) + 1
        raise YamlDataError(f"the stream contains non-printable characters (U+{ord(doc[at]):04X})", line,
                            at - (doc.rfind("\n", 0, at) + 1) + 1) from None
    try:
        node = loader.get_single_node()
        if expanded_size(node) > MAX_NODES:
            raise YamlDataError(f"its aliases stand for more than {MAX_NODES:,} values (refused: an alias bomb)")
        return loader.construct_document(node) if node is not None else empty
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "not YAML"
        raise YamlDataError(problem, mark.line + 1 if mark else None, mark.column + 1 if mark else None,
                            bound=problem.startswith("nested deeper than")) from None
    except yaml.YAMLError as exc:
        raise YamlDataError(str(exc).splitlines()[0]) from None
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, YamlDataError):
            raise
        raise YamlDataError(str(exc)[:200]) from None
    finally:
        loader.dispose()
