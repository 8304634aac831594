"""The lexer's DFA (flowcore/mermaid/lexdfa.py) finds, in every start condition, the rule and the match Python's re
finds with the condition's rules joined in jison's order (the reference lexer, grammar._Lexer): the same rule first,
the same length."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcore.mermaid import grammar, lexdfa

G = grammar.grammar()
PATTERNS = G.condition_res._rules
# what the rules tell apart: brackets, arrows, quotes, keywords, blanks JS counts (and Python does not), non-ASCII
PIECES = list("AB \n\t\r-->|[](){}\"@:;&x.o=~`#%\\/_09^<>*!?,'v") + [
    "\u00e9", "\u2028", "\u00a0", "\u4e00", "\ufeff", "\x1c", "\U0001f600", "direction TB", "direction  LR", "class ",
    "classDef ", "end", "@{", "subgraph ", "style ", "linkStyle ", "click ", "call ", "href ", "accTitle:",
    "accDescr{", "accDescr :", "_self", "_blank", "LR", "graph", "flowchart", "flowchart-elk", "default",
    "interpolate", "-->", "==>", "-.->", "~~~", "x--x", "<-->", "-.", "==", "((", "))", "[[", "]]", "[(", ")]", "[/",
    "/]", "[\\", "\\]", "(-", "-)", "]]", "}}", "{{", "|", ":::", "&", "\n\n", "  \n"]


def _reference(name: str, code: str, pos: int) -> tuple[int, int]:
    m = G.condition_res[name].match(code, pos)
    return (m.end(), int(m.lastgroup[1:])) if m else (-1, -1)


def _dfa() -> lexdfa.Dfa:
    return lexdfa.Dfa(lexdfa.Program(PATTERNS))


def test_every_rule_compiles_and_the_stored_program_is_the_built_one():
    program = lexdfa.Program(PATTERNS)
    assert program.bad == {}
    assert all(program.entry[k] >= 0 for k in range(len(PATTERNS)))
    assert lexdfa.Program(stored=program.dump()).dump() == program.dump() == G.lexer


def test_the_dfa_finds_what_re_finds_in_every_condition():
    dfa = _dfa()
    rng = random.Random(7)
    for name, rules in G.condition_rules.items():
        rules = tuple(rules)
        for _ in range(1500):
            code = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 10)))
            pos = rng.randint(0, len(code))
            assert lexdfa.scan(dfa, code, pos, rules) == _reference(name, code, pos), (name, code, pos)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(G.condition_rules)), st.lists(st.sampled_from(PIECES), max_size=14),
       st.integers(min_value=0, max_value=40))
def test_any_text_lexes_as_re_lexes_it(name, pieces, at):
    code = "".join(pieces)
    pos = min(at, len(code))
    assert lexdfa.scan(_DFA, code, pos, tuple(G.condition_rules[name])) == _reference(name, code, pos)


_DFA = _dfa()


def test_a_word_boundary_looks_at_the_character_before_the_token():
    dfa = lexdfa.Dfa(lexdfa.Program([r"(?:end\b)", r"(?:\bx)", r"(?:[a-z]+)"]))
    for code, pos in (("end", 0), ("ends", 0), ("end-", 0), ("ax", 1), ("-x", 1), ("x", 0), ("endx", 0)):
        want = re.compile(r"(end\b)|(\bx)|([a-z]+)", re.ASCII).match(code, pos)
        assert lexdfa.scan(dfa, code, pos, (0, 1, 2)) == (want.end(), want.lastindex - 1), (code, pos)


@pytest.mark.parametrize("pattern, why", [
    (r"(?<=a)b", "lookbehind"), (r"(a)\1", "GROUPREF"), (r"(?i:a)", "inline flags"), (r"(a*)*", "empty string"),
    (r"a(?=bc)", "longer than one character"), (r"^a", "AT_BEGINNING"),
])
def test_constructs_the_dfa_does_not_implement_are_refused(pattern, why):
    program = lexdfa.Program([pattern, "b"])
    assert program.entry[0] == -1 and why in program.bad[0] and program.entry[1] >= 0
    with pytest.raises(lexdfa.Unsupported, match=why):
        lexdfa.Dfa(program).start((0, 1), False)


def test_an_emptied_cache_gives_the_same_answers(monkeypatch):
    """Past _MAX_STATES states the DFA forgets them all (a pathological text stays linear in memory and time)."""
    monkeypatch.setattr(lexdfa, "_MAX_STATES", 3)
    dfa = _dfa()
    rng = random.Random(11)
    name = "INITIAL"
    for _ in range(800):
        code = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 10)))
        pos = rng.randint(0, len(code))
        assert lexdfa.scan(dfa, code, pos, tuple(G.condition_rules[name])) == _reference(name, code, pos), code
    assert dfa.flushes > 0 and len(dfa.states) <= 3


def test_characters_outside_ascii_get_the_class_of_the_sets_that_hold_them():
    dfa = _dfa()
    for ch in ("\u00a0", "\u2028", "\u3000", "\ufeff", "\u4e00", "\u00e9", "\x85", "\U0001f600", "\U0010ffff"):
        cls = dfa.char_class(ord(ch))
        assert cls == dfa.char_class(ord(ch))  # kept
        bits = dfa.bits[cls]
        for sid, ranges in enumerate(dfa.p.sets):
            held = any(lo <= ord(ch) <= hi for lo, hi in ranges)
            assert bool(bits >> sid & 1) == held, (hex(ord(ch)), sid)
