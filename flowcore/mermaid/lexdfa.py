"""Mermaid's jison lexer as one lazily built DFA over all its rules (what ``lalr.run`` scans with).

jison tries a start condition's rules in order and takes the first that matches, each with its own (backtracking)
match: exactly what Python's ``re`` does with the rules joined as ``(R0)|(R1)|...`` (the reference lexer,
``grammar._Lexer``). This module compiles the rules' parsed patterns (``re._parser``) into one instruction program
and runs it as RE2 does for leftmost-first matching: a DFA state is the ordered list of the program's threads
(highest priority first); on each character the threads are closed over jumps, splits and assertions, the first
thread to reach a MATCH records a match ending before that character and cuts every thread after it, and the
threads that accept the character go on. The last match recorded when no thread is left is the one the backtracking
matcher finds (same rule, same length). States and transitions are computed when first reached and kept for the
process, so a token costs one table step per character.

Supported, as the flowchart rules need: literals, classes (``re.ASCII`` categories), ``.``, greedy and lazy repeats
whose body cannot match the empty string, groups without flags, alternation, ``\\b``, ``\\B``, ``\\Z`` and
one-character lookaheads (``(?=[...])``, ``(?!x)``, ``(?!)``). Anything else raises :class:`Unsupported` when the
program is built (the reader then runs the reference lexer: same answers, slower); a test builds every condition.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right

# instructions
_CHAR, _SPLIT, _JMP, _MATCH, _ASSERT = range(5)
# assertions (one character of lookahead, and for \b whether the previous character is a word character)
_NEXT_IN, _NEXT_NOT_IN, _AT_EOF, _BOUNDARY, _NOT_BOUNDARY, _FAIL = range(6)

MAX_CHAR = 0x10FFFF
_WIDTH = 128  # classes per transition row (class 0 is the end of the text)
EOF_CLASS = 0
_ASCII_WORD = ((48, 57), (65, 90), (95, 95), (97, 122))
_ASCII_DIGIT = ((48, 57),)
_ASCII_SPACE = ((9, 13), (32, 32))
_MAX_STATES = 20_000  # past this many states the cache is emptied (a pathological text stays linear)


class Unsupported(ValueError):
    """A pattern construct the DFA does not implement."""


def _norm(ranges) -> tuple:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _complement(ranges: tuple) -> tuple:
    out, at = [], 0
    for lo, hi in ranges:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX_CHAR:
        out.append((at, MAX_CHAR))
    return tuple(out)


_CATEGORY = {"CATEGORY_DIGIT": _ASCII_DIGIT, "CATEGORY_WORD": _ASCII_WORD, "CATEGORY_SPACE": _ASCII_SPACE}


def _category(name: str) -> tuple:
    if name in _CATEGORY:
        return _CATEGORY[name]
    if name.startswith("CATEGORY_NOT_") and "CATEGORY_" + name[13:] in _CATEGORY:
        return _complement(_CATEGORY["CATEGORY_" + name[13:]])
    raise Unsupported(f"character category {name}")


def _char_set(name: str, av) -> tuple | None:
    """The characters one single-character item matches (None: not a single-character item)."""
    if name == "LITERAL":
        return ((av, av),)
    if name == "NOT_LITERAL":
        return _complement(((av, av),))
    if name == "ANY":
        return _complement(((10, 10),))
    if name == "CATEGORY":
        return _category(str(av))
    if name == "IN":
        ranges, negate = [], False
        for op, x in av:
            kind = str(op)
            if kind == "NEGATE":
                negate = True
            elif kind == "LITERAL":
                ranges.append((x, x))
            elif kind == "RANGE":
                ranges.append(x)
            elif kind == "CATEGORY":
                ranges.extend(_category(str(x)))
            else:
                raise Unsupported(f"class item {kind}")
        ranges = _norm(ranges)
        return _complement(ranges) if negate else ranges
    return None


class Program:
    """The instructions of every rule (``entry[k]``: where rule k starts; it ends in MATCH k).

    Built from the rules' patterns, or loaded from what ``dump`` wrote (``flow_tables.json`` stores the program of
    its rules: parsing the 122 patterns costs more than the rest of a cold ``check``; a test rebuilds it)."""

    def __init__(self, patterns: list[str] | None = None, stored: dict | None = None):
        self.op: list[int] = []
        self.a: list[int] = []
        self.b: list[int] = []
        self.sets: list[tuple] = []  # set id -> ranges
        self._set_ids: dict[tuple, int] = {}
        self.entry: list[int] = []
        self.bad: dict[int, str] = {}  # rule -> why it cannot be compiled
        if stored is not None:
            self.op, self.a, self.b, self.entry = stored["op"], stored["a"], stored["b"], stored["entry"]
            for flat in stored["sets"]:
                self.set_id(tuple(zip(flat[::2], flat[1::2])))
            self.bad = {int(k): why for k, why in stored["bad"].items()}
            self.word = self.set_id(_ASCII_WORD)
            return
        import re._parser as re_parser  # (only when the program is built from the patterns)

        self._maxrepeat = re_parser.MAXREPEAT
        self.word = self.set_id(_ASCII_WORD)
        for k, p in enumerate(patterns or ()):
            start = len(self.op)
            try:
                self._seq(list(re_parser.parse(p, re.ASCII)))
            except Unsupported as exc:
                del self.op[start:], self.a[start:], self.b[start:]
                self.bad[k] = str(exc)
                self.entry.append(-1)
                continue
            self._emit(_MATCH, k)
            self.entry.append(start)

    def dump(self) -> dict:
        """The program as JSON data (``Program(stored=...)`` reads it back)."""
        return {"op": self.op, "a": self.a, "b": self.b, "entry": self.entry,
                "sets": [[x for r in ranges for x in r] for ranges in self.sets],
                "bad": {str(k): why for k, why in self.bad.items()}}

    # -------------------------------------------------------------------------------------- compiling

    def set_id(self, ranges: tuple) -> int:
        sid = self._set_ids.get(ranges)
        if sid is None:
            sid = self._set_ids[ranges] = len(self.sets)
            self.sets.append(ranges)
        return sid

    def _emit(self, op: int, a: int = 0, b: int = 0) -> int:
        self.op.append(op)
        self.a.append(a)
        self.b.append(b)
        return len(self.op) - 1

    def _seq(self, items) -> None:
        for op, av in items:
            self._item(str(op), av)

    def _item(self, name: str, av) -> None:  # noqa: C901, PLR0912 - one branch per construct
        chars = _char_set(name, av)
        if chars is not None:
            self._emit(_CHAR, self.set_id(chars))
        elif name == "SUBPATTERN":
            _group, add, rem, p = av
            if add or rem:
                raise Unsupported("inline flags")
            self._seq(p)
        elif name == "BRANCH":
            jumps = []
            alts = av[1]
            for i, alt in enumerate(alts):
                if i < len(alts) - 1:
                    split = self._emit(_SPLIT, 0, 0)
                    self.a[split] = split + 1
                    self._seq(alt)
                    jumps.append(self._emit(_JMP))
                    self.b[split] = len(self.op)
                else:
                    self._seq(alt)
            for j in jumps:
                self.a[j] = len(self.op)
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, body = av
            body = list(body)
            if _nullable(body):
                raise Unsupported("a repeat whose body can match the empty string")
            greedy = name == "MAX_REPEAT"
            for _ in range(lo):
                self._seq(body)
            if hi == self._maxrepeat:
                split = self._emit(_SPLIT)
                self._seq(body)
                self._emit(_JMP, split)
                self._branch(split, split + 1, len(self.op), greedy)
            else:
                splits = []
                for _ in range(hi - lo):
                    splits.append(self._emit(_SPLIT))
                    self._seq(body)
                for s in splits:
                    self._branch(s, s + 1, len(self.op), greedy)
        elif name in ("ASSERT", "ASSERT_NOT"):
            direction, p = av
            p = list(p)
            if direction != 1:
                raise Unsupported("lookbehind")
            if not p:
                if name == "ASSERT_NOT":
                    self._emit(_ASSERT, _FAIL)
                return
            chars = _char_set(str(p[0][0]), p[0][1]) if len(p) == 1 else None
            if chars is None:
                raise Unsupported("a lookahead longer than one character")
            self._emit(_ASSERT, _NEXT_IN if name == "ASSERT" else _NEXT_NOT_IN, self.set_id(chars))
        elif name == "AT":
            where = str(av)
            kind = {"AT_END_STRING": _AT_EOF, "AT_BOUNDARY": _BOUNDARY, "AT_NON_BOUNDARY": _NOT_BOUNDARY}.get(where)
            if kind is None:
                raise Unsupported(where)
            self._emit(_ASSERT, kind)
        else:
            raise Unsupported(name)

    def _branch(self, split: int, body: int, out: int, greedy: bool) -> None:
        self.a[split], self.b[split] = (body, out) if greedy else (out, body)


def _nullable(items) -> bool:
    """Whether a parsed sequence can match the empty string (over-approximated: unknown counts as nullable)."""
    for op, av in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"):
            return False
        if name == "SUBPATTERN":
            if not _nullable(av[3]):
                return False
        elif name == "BRANCH":
            if not any(_nullable(alt) for alt in av[1]):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            if av[0] > 0 and not _nullable(av[2]):
                return False
        elif name == "ASSERT_NOT" and not list(av[1]):
            return False  # (?!) never matches, so never matches the empty string either
        elif name not in ("AT", "ASSERT", "ASSERT_NOT"):
            return True  # unknown: may be empty
    return True


class Dfa:
    """The lazily built DFA of a program: states, their transitions (one row of classes each), the character
    classes. ``trans[state * WIDTH + cls]`` is 0 until computed, then ``(next + 2) << 8 | (rule + 1)``: the state
    after the character (-1: none left) and the rule whose match ends before it (-1: none)."""

    WIDTH = _WIDTH

    def __init__(self, program: Program, slots: int = 0):
        self.p = program
        self.states: list[tuple] = []  # state -> (threads, previous character is a word character)
        self.ids: dict[tuple, int] = {}
        self.trans = array("i", bytes(4 * _WIDTH * 64))
        self.capacity = 64
        # classes: sets of characters no set of the program tells apart; bits[cls] has bit s when set s holds them
        self.bits: list[int] = [0]  # class 0: the end of the text
        self._class_of_bits: dict[int, int] = {}
        ascii_bits = [0] * 128  # (each set's ASCII members, rather than 128 x every set)
        for sid, ranges in enumerate(program.sets):
            for lo, hi in ranges:
                if lo >= 128:
                    break
                for c in range(lo, min(hi, 127) + 1):
                    ascii_bits[c] |= 1 << sid
        self.ascii = array("i", [self._class(bits) for bits in ascii_bits])
        self.bmp = array("h", [-1]) * 65536  # BMP characters' classes, filled when first seen
        self._astral: dict[int, int] = {}
        self.starts: dict[tuple, int] = {}
        # the driver's start states by slot (its own numbering of condition and skip-ahead mask), -1 until asked
        self.start_tab = array("i", [-1]) * slots
        self._needs_word: dict[tuple, bool] = {}  # threads -> whether an assertion reached needs the last character
        self._asserts: dict[tuple, tuple] = {}  # threads -> the assertions they reach (``_asserts_of``)
        self._closures: dict[tuple, tuple] = {}  # (threads, what those assertions decide) -> ``_close``
        self.flushes = 0

    # ------------------------------------------------------------------------------------- classes

    def _bits_of(self, ch: int) -> int:
        bits = 0
        for sid, ranges in enumerate(self.p.sets):
            i = bisect_right(ranges, (ch, MAX_CHAR + 1)) - 1
            if i >= 0 and ranges[i][0] <= ch <= ranges[i][1]:
                bits |= 1 << sid
        return bits

    def _class(self, bits: int) -> int:
        cls = self._class_of_bits.get(bits)
        if cls is None:
            cls = len(self.bits)
            if cls >= _WIDTH:
                raise Unsupported("more character classes than a transition row holds")
            self._class_of_bits[bits] = cls
            self.bits.append(bits)
        return cls

    def char_class(self, ch: int) -> int:
        """The class of a character (computed and kept the first time it is seen)."""
        if ch < 128:
            return self.ascii[ch]
        if ch < 65536:
            cls = self.bmp[ch]
            if cls < 0:
                cls = self.bmp[ch] = self._class(self._bits_of(ch))
            return cls
        cls = self._astral.get(ch)
        if cls is None:
            cls = self._astral[ch] = self._class(self._bits_of(ch))
        return cls

    # -------------------------------------------------------------------------------------- states

    def _intern(self, threads: tuple, prev_word: bool) -> int:
        needs = self._needs_word.get(threads)
        if needs is None:
            a = self.p.a
            needs = self._needs_word[threads] = any(a[pc] in (_BOUNDARY, _NOT_BOUNDARY) for pc in self._asserts_of(threads))
        key = (threads, prev_word and needs)
        sid = self.ids.get(key)
        if sid is None:
            sid = len(self.states)
            if sid >= self.capacity:
                self._grow()
            self.ids[key] = sid
            self.states.append(key)
        return sid

    def _grow(self) -> None:
        # a new array (the driver may hold a view of the old one, which cannot be resized while it does)
        more = array("i", bytes(4 * _WIDTH * self.capacity * 2))
        more[:len(self.trans)] = self.trans
        self.trans = more
        self.capacity *= 2

    def _asserts_of(self, threads: tuple) -> tuple:
        """The assertions the threads reach without reading a character (whatever the assertions decide)."""
        found = self._asserts.get(threads)
        if found is None:
            op = self.p.op
            found = self._asserts[threads] = tuple(sorted(pc for pc in self._reach(threads, None)
                                                          if op[pc] == _ASSERT))
        return found

    def _reach(self, threads: tuple, holds: dict | None):
        """The instructions the threads reach without reading a character, in priority order (a split's first
        branch first), each once; an assertion is passed when ``holds`` says it holds (None: whatever it decides)."""
        op, a, b = self.p.op, self.p.a, self.p.b
        seen: set[int] = set()
        for t in threads:
            todo = [t]
            while todo:
                pc = todo.pop()
                if pc in seen:
                    continue
                seen.add(pc)
                yield pc
                o = op[pc]
                if o == _SPLIT:
                    todo += (b[pc], a[pc])  # a first
                elif o == _JMP:
                    todo.append(a[pc])
                elif o == _ASSERT and (holds is None or holds[pc]):
                    todo.append(pc + 1)

    def _close(self, threads: tuple, holds: dict) -> tuple[tuple, int]:
        """(the CHAR instructions the threads reach, in priority order; the rule of the first MATCH reached, -1: none),
        the assertions deciding as ``holds`` says. Every thread after the first match has a lower priority: cut."""
        op, a = self.p.op, self.p.a
        chars: list[int] = []
        for pc in self._reach(threads, holds):
            o = op[pc]
            if o == _CHAR:
                chars.append(pc)
            elif o == _MATCH:
                return tuple(chars), a[pc]
        return tuple(chars), -1

    def start(self, rules: tuple, prev_word: bool) -> int:
        """The state that tries ``rules`` in order (their threads, highest priority first)."""
        key = (rules, prev_word)
        sid = self.starts.get(key)
        if sid is None:
            entry = self.p.entry
            if any(entry[k] < 0 for k in rules):
                bad = next(k for k in rules if entry[k] < 0)
                raise Unsupported(f"lexer rule {bad}: {self.p.bad[bad]}")
            sid = self.starts[key] = self._intern(tuple(entry[k] for k in rules), prev_word)
        return sid

    def step(self, sid: int, cls: int) -> int:
        """Compute (and keep) the transition of state ``sid`` on class ``cls``; return its table entry."""
        threads, prev_word = self.states[sid]
        p = self.p
        a, b = p.a, p.b
        bits = self.bits[cls]
        eof = cls == EOF_CLASS
        next_word = not eof and bool(bits >> p.word & 1)
        # the threads closed over jumps, splits and the assertions (which this character decides): the same for every
        # character that decides the assertions the same way, so worked out once per state and outcome
        asserts = self._asserts_of(threads)
        outcome = tuple(_holds(a[pc], b[pc], bits, eof, prev_word, next_word) for pc in asserts)
        key = (threads, outcome)
        closed = self._closures.get(key)
        if closed is None:
            closed = self._closures[key] = self._close(threads, dict(zip(asserts, outcome)))
        chars, rule = closed
        nxt = -1
        if not eof:
            out: list[int] = []
            taken: set[int] = set()
            for pc in chars:
                if bits >> a[pc] & 1 and pc + 1 not in taken:
                    taken.add(pc + 1)
                    out.append(pc + 1)
            if out:
                if len(self.states) >= _MAX_STATES:
                    self.flush()
                    self.flushes += 1
                nxt = self._intern(tuple(out), next_word)
        entry = (nxt + 2) << 8 | (rule + 1)
        if sid < len(self.states) and self.states[sid] == (threads, prev_word):
            self.trans[sid * _WIDTH + cls] = entry
        return entry

    def flush(self) -> None:
        """Forget every state (the driver asks for start states again after a flush)."""
        self.states.clear()
        self.ids.clear()
        self.starts.clear()
        self._closures.clear()
        self.start_tab = array("i", [-1]) * len(self.start_tab)
        self.trans = array("i", bytes(4 * _WIDTH * 64))
        self.capacity = 64


def _holds(kind: int, sid: int, bits: int, eof: bool, prev_word: bool, next_word: bool) -> bool:
    if kind == _NEXT_IN:
        return not eof and bool(bits >> sid & 1)
    if kind == _NEXT_NOT_IN:
        return eof or not bits >> sid & 1
    if kind == _AT_EOF:
        return eof
    if kind == _BOUNDARY:
        return prev_word != next_word
    if kind == _NOT_BOUNDARY:
        return prev_word == next_word
    return False  # _FAIL


def is_word(ch: int) -> bool:
    """``\\w`` under ``re.ASCII``."""
    return 48 <= ch <= 57 or 65 <= ch <= 90 or 97 <= ch <= 122 or ch == 95


def scan(dfa: Dfa, code: str, pos: int, rules: tuple) -> tuple[int, int]:
    """(end, rule) of the first of ``rules`` that matches ``code`` at ``pos`` (-1, -1: none): the plain loop the
    compiled driver runs inline, kept for the tests."""
    sid = dfa.start(rules, pos > 0 and is_word(ord(code[pos - 1])))
    end = rule = -1
    i, n = pos, len(code)
    while True:
        cls = dfa.char_class(ord(code[i])) if i < n else EOF_CLASS
        e = dfa.trans[sid * _WIDTH + cls]
        if e == 0:
            e = dfa.step(sid, cls)
        if e & 255:
            end, rule = i, (e & 255) - 1
        sid = (e >> 8) - 2
        if sid < 0:
            return end, rule
        i += 1
