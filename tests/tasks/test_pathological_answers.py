"""Answers built to blow up the MATH scorer's text handling (issue 25): each is scored within a small CPU bound at
the 1 MB reply cap, and extraction and normalisation give exactly what the former (quadratic) code gave on
ordinary answers: that code is kept below as the reference."""
from __future__ import annotations

import json
import random
import re
import time

import pytest

from flowcore.tasks import scoring
from flowcore.tasks.data import DEFAULT_FILES, datasets_dir

MB = 1 << 20
CPU_BOUND = 2.0  # CPU seconds for one 1 MB answer; the former code took from seconds (28 KB) to hours (1 MB)


# ---------------------------------------------------------------- the former implementation, as the reference

def _old_group(text: str, i: int) -> tuple[str, int] | None:
    """The brace group opening at text[i] == '{' -> (content, index after '}'); None if unbalanced.
    Escaped braces (\\{ \\}) are content, not grouping."""
    depth, j = 0, i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j], j + 1
        j += 1
    return None


def old_last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...} (balanced braces at any depth); also `\\boxed 5`."""
    if not isinstance(text, str):
        return None
    starts = sorted(m.end() for m in re.finditer(r"\\(?:boxed|fbox)(?![a-zA-Z])", text))
    for start in reversed(starts):
        i = start
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            got = _old_group(text, i)
            if got is not None:
                return got[0].strip()
        elif i > start:  # `\boxed 5`: up to the next $ or whitespace
            m = re.match(r"[^\s$]+", text[i:])
            if m:
                return m.group(0)
    return None


_OLD_PMATRIX = re.compile(r"\\begin\{[pbv]?matrix\}(.*?)\\end\{[pbv]?matrix\}", re.DOTALL)
_OLD_UNWRAP = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")


def _old_fix_fracs(s: str) -> str:
    # \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \sqrt3 -> \sqrt{3}
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", s)
    return re.sub(r"\\sqrt\s*(\d)", r"\\sqrt{\1}", s)


def _old_drop_spaces(s: str) -> str:
    """Remove whitespace, except one space after a command followed by a letter (`\\pi r` is not `\\pir`)."""
    out = ""
    for piece in s.split():
        if out and re.search(r"\\[A-Za-z]+$", out) and piece[0].isalpha():
            out += " "
        out += piece
    return out


def old_normalize(s: str) -> str:
    s = str(s).strip().replace("\n", " ")
    s = re.sub(r"(?<=\d),\\!(?=\d{3})", "", s)  # MATH writes 14,\!400 for 14400
    s = _OLD_PMATRIX.sub(lambda m: "(" + ",".join(re.split(r"\\\\|&", m.group(1))) + ")", s)
    s = s.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\:", "").replace("\\ ", "")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s).replace("°", "").replace("\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = s.replace("{,}", "")
    s = s.strip()
    # a trailing unit: 5\text{ cm}^2, 10 \mbox{inches}
    unit = re.sub(r"\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(\^\{?\d\}?)?\s*$", "", s)
    if unit.strip():
        s = unit
    s = _OLD_UNWRAP.sub(r"\1", s)
    s = s.strip().rstrip(".").strip()
    # `x = 5` / `k=5`: keep the value (a short variable on the left only)
    parts = s.split("=")
    if len(parts) == 2 and re.fullmatch(r"\s*[A-Za-z](_\{?\w+\}?)?\s*", parts[0]):
        s = parts[1]
    s = _old_fix_fracs(s)
    s = _old_drop_spaces(s)
    if s.startswith("."):
        s = "0" + s
    s = re.sub(r"(?<![\d.])\.(\d)", r"0.\1", s)
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    return s


# ---------------------------------------------------------------- the same answers as before on ordinary text

def _math_texts() -> list[str]:
    rows = [json.loads(line) for line in (datasets_dir() / DEFAULT_FILES["math"]).read_text().splitlines()]
    texts = [r["solution"] for r in rows] + [r["problem"] for r in rows]
    assert len(texts) > 1000
    return texts


_PIECES = ["\\boxed", "\\fbox", "\\boxed ", "{", "}", "{", "}", "\\", "\\{", "\\}", " ", "  ", "a", "12", "x",
           "\\begin{pmatrix}", "\\end{pmatrix}", "\\begin{bmatrix}", "\\end{vmatrix}", "&", "\\\\", "\\pi",
           "\\text{ cm}", "\\mbox{in}", "^\\circ", "^{ \\circ }", "^ ", "\\frac", "\\frac 1 2", "\\sqrt3", "$",
           "=", ".5", "\\!", "\\,", "\\left(", "\\right)", "\n", "é", "\\a", "b", "\\text{", "^2"]


def _generated(n: int, seed: int = 25) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def test_extraction_and_normalisation_agree_with_the_former_code_on_real_math_solutions():
    texts = _math_texts()
    boxed = 0
    for text in texts:
        got = scoring.last_boxed(text)
        assert got == old_last_boxed(text), text
        boxed += got is not None
        for piece in {text, got or "", text[-200:]}:
            assert scoring.normalize(piece) == old_normalize(piece), piece
    assert boxed > 500  # the solutions end in \boxed{}: the comparison saw real answers


def test_extraction_and_normalisation_agree_with_the_former_code_on_generated_latex():
    for text in _generated(20_000):
        assert scoring.last_boxed(text) == old_last_boxed(text), repr(text)
        assert scoring.normalize(text) == old_normalize(text), repr(text)


# ---------------------------------------------------------------- pathological answers at the reply cap

def _fill(unit: str, prefix: str = "", suffix: str = "", size: int = MB) -> str:
    return prefix + unit * ((size - len(prefix) - len(suffix)) // len(unit)) + suffix


PATHOLOGICAL = {
    "unclosed \\boxed{": _fill("\\boxed{"),
    "unclosed \\begin{pmatrix}": _fill("\\begin{pmatrix}", "\\boxed{", "}"),
    "spaces after ^": _fill(" ", "\\boxed{^", "x}"),
    "spaces before a non-unit": _fill(" ", "\\boxed{1", "x}"),
    "spaced commands": _fill("\\a ", "\\boxed{", "}"),
    "spaced words": _fill("a ", "\\boxed{", "}"),
    "\\text{ runs": _fill("\\text{ a", "\\boxed{1", "}"),
    "\\frac 1 spaced": _fill("\\frac 1 ", "\\boxed{", "}"),
    "many commands": _fill("\\pi", "\\boxed{", "}"),
    "answer line": _fill("a ", "The answer is: "),
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_a_pathological_answer_at_the_reply_cap_is_scored_within_a_small_cpu_bound(name):
    answer = PATHOLOGICAL[name]
    assert MB - 64 <= len(answer) <= MB
    start = time.process_time()
    res = scoring.score("math", answer, "7")
    spent = time.process_time() - start
    assert res.correct is False and res.errored is False
    assert spent < CPU_BOUND, f"{name}: {spent:.1f} s of CPU"


def test_the_former_code_was_quadratic_on_these_answers():
    """At 1/16 of the cap the former code already spends more than the bound on the worst of them."""
    answer = _fill("\\a ", "\\boxed{", "}", MB // 16)
    start = time.process_time()
    old_normalize(old_last_boxed(answer))
    old = time.process_time() - start
    start = time.process_time()
    scoring.normalize(scoring.last_boxed(answer))
    new = time.process_time() - start
    assert old > 10 * new and new < 0.5, (old, new)


@pytest.mark.parametrize("answer", ['{"answer": ' * 5000 + "1" + "}" * 5000, '{"answer": [' * 5000])
def test_json_nested_too_deep_is_a_wrong_answer_not_an_errored_row(answer):
    """The decoder's RecursionError escaped the json metric: the row was errored (left out of the score)."""
    from flowcore.tasks.metrics import grade_text, make_metric

    g = grade_text(make_metric("json", {}, where="t"), answer, '{"answer": 2}')
    assert g.score == 0.0 and not g.errored


def test_an_answer_that_makes_the_pattern_backtrack_is_wrong_not_errored():
    """A wrong answer built against a backtracking-prone pattern used to time out into an errored row."""
    from flowcore.tasks.metrics import REGEX_TIMEOUT, grade_text, make_metric

    metric = make_metric("regex", {"pattern": "^(a|aa)+{reference}$"}, where="t")
    assert grade_text(metric, "aaaQ", "Q").score == 1.0
    start = time.process_time()
    g = grade_text(metric, "a" * 40 + "!", "Q")
    assert g.score == 0.0 and not g.errored and "took longer" in g.detail
    assert time.process_time() - start < REGEX_TIMEOUT + 1.0
