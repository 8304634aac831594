"""Scorers: GSM8K (last number), MATH (last \\boxed{}, string/numeric/sympy equality), HumanEval/MBPP (pass@1
with the hidden tests in the sandbox). No scorer raises on bad predictions; they return correct=False."""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowcore.execution._standalone_ops import (
    extract_code,  # one implementation, shared with compiled workflows
)
from flowcore.tasks import symbolic

if TYPE_CHECKING:
    from flowcore.tasks.problem import Problem

CODE_TIMEOUT = 15.0  # seconds per hidden-test run
SYMPY_TIMEOUT = symbolic.CPU_SECONDS  # CPU seconds per symbolic comparison (in a child process: symbolic.py)
_TOL = 1e-6


@dataclass
class ScoreResult:
    correct: bool
    extracted: str | None
    detail: str = ""
    errored: bool = False  # no verdict could be had (the sandbox timed out under load): not a wrong answer


# ---------------------------------------------------------------- GSM8K

_NUMBER = re.compile(r"(?<![\w.])(-)?\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?|(?<![\w.])(-)?(\.\d+)")


def extract_number(text: str) -> str | None:
    """Last number in the text with thousands commas removed: 'costs $1,234.50' -> '1234.50', 'x = -3' -> '-3'.
    A hyphen right after a word or digit is not a sign ('3-4' -> '4')."""
    if not isinstance(text, str):
        return None
    text = text.replace("\u2212", "-")  # unicode minus
    last = None
    for m in _NUMBER.finditer(text):
        last = m
    if last is None:
        return None
    if last.group(5):
        return ("-" if last.group(4) else "") + "0" + last.group(5)
    return (last.group(1) or "") + last.group(2).replace(",", "") + (last.group(3) or "")


def _gsm8k(prediction: str, reference: str) -> ScoreResult:
    ref = extract_number(reference.rsplit("####", 1)[-1])
    if ref is None:
        return ScoreResult(False, None, "reference has no number")
    if "####" in prediction:  # GSM8K's own format: the number right after the marker
        m = _NUMBER.search(prediction.rsplit("####", 1)[-1].replace("\u2212", "-"))
        pred = extract_number(m.group(0)) if m else None
    else:
        boxed = last_boxed(prediction)
        pred = extract_number(prediction if boxed is None else boxed)
    if pred is None:
        return ScoreResult(False, None, "no number in the prediction")
    return ScoreResult(abs(float(pred) - float(ref)) <= _TOL, pred)


# ---------------------------------------------------------------- MATH: extraction

def _group(text: str, i: int) -> tuple[str, int] | None:
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


_BOXED = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BARE = re.compile(r"[^\s$]+")
_BRACES = re.compile(r"\\.|[{}]", re.DOTALL)  # an escape pair (skipped, as _group skips it) or a brace


def _closing_braces(text: str) -> dict[int, int]:
    """{index of '{': index of its '}'} for the whole text in one pass: the pairs _group finds one at a time.
    A '{' that _group would start at is never an escape's second character (it follows \\boxed or a space)."""
    closes: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACES.finditer(text):
        ch = m.group()
        if ch == "{":
            stack.append(m.start())
        elif ch == "}" and stack:
            closes[stack.pop()] = m.start()
    return closes


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...} (balanced braces at any depth); also `\\boxed 5`.

    Linear in the text: the braces are paired once for all the \\boxed in it. Trying each \\boxed{ with a scan to
    its closing brace was quadratic: 28 KB of unclosed `\\boxed{` took 4.2 s of the scorer's CPU, a 1 MB reply
    (the reply cap) about an hour (tests/tasks/test_pathological_answers.py)."""
    if not isinstance(text, str):
        return None
    starts = [m.end() for m in _BOXED.finditer(text)]
    closes: dict[int, int] | None = None
    for start in reversed(starts):
        i = start
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            if closes is None:
                closes = _closing_braces(text)
            j = closes.get(i)
            if j is not None:
                return text[i + 1:j].strip()
        elif i > start:  # `\\boxed 5`: up to the next $ or whitespace
            m = _BARE.match(text, i)
            if m:
                return m.group(0)
    return None


def _math_prediction(text: str) -> str | None:
    """The one answer a MATH prediction is scored on: the last \\boxed{}, else its last line (the text after
    "answer is"/"answer:", else the line itself when it reads as math, else the line's last number)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    last = lines[-1]
    m = re.search(r"(?:final answer|answer)\s*(?:is|:)\s*(.+)$", last, re.IGNORECASE)
    if m:
        return m.group(1).strip().strip("$").rstrip(".").strip("$ ")
    candidate = last.strip("$ ").rstrip(".")
    if not re.search(r"[A-Za-z]{4,}", re.sub(r"\\[A-Za-z]+", "", candidate)):  # looks like math, not prose
        return candidate
    return extract_number(last)


# ---------------------------------------------------------------- MATH: normalisation

_BEGIN_MATRIX = re.compile(r"\\begin\{[pbv]?matrix\}")
_END_MATRIX = re.compile(r"\\end\{[pbv]?matrix\}")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_UNWRAP = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")


def _fix_fracs(s: str) -> str:
    # \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \sqrt3 -> \sqrt{3}
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", s)
    return re.sub(r"\\sqrt\s*(\d)", r"\\sqrt{\1}", s)


def _drop_spaces(s: str) -> str:
    """Remove whitespace, except one space after a command followed by a letter (`\\pi r` is not `\\pir`).

    Whether the text so far ends in a command is kept as it grows (the length of its trailing run of ASCII
    letters, and whether a backslash precedes that run): searching the whole text again for each piece was
    quadratic (160 KB of `\\a ` took 22 s)."""
    out: list[str] = []
    run, slash, last = 0, False, ""  # trailing ASCII-letter run of the text so far, '\\' before it, last char
    for piece in s.split():
        if out and run and slash and piece[0].isalpha():
            out.append(" ")
            run, slash, last = 0, False, " "
        out.append(piece)
        tail = len(piece) - len(piece.rstrip(_LETTERS))
        if tail == len(piece):
            if run == 0:
                slash = last == "\\"
            run += tail
        else:
            run, slash = tail, piece[len(piece) - tail - 1] == "\\"
        last = piece[-1]
    return "".join(out)


def _matrices(s: str) -> str:
    """Each \\begin{matrix}...\\end{matrix} as a tuple "(a,b,...)". The same as re.sub with a lazy
    `\\begin{..}(.*?)\\end{..}`, which rescanned the rest of the text from every \\begin when no \\end followed
    (112 KB of them: 5.6 s); once a \\begin has no \\end after it, no later one has."""
    out, pos = [], 0
    while (b := _BEGIN_MATRIX.search(s, pos)) is not None:
        e = _END_MATRIX.search(s, b.end())
        if e is None:
            break
        out += [s[pos:b.start()], "(" + ",".join(re.split(r"\\\\|&", s[b.end():e.start()])) + ")"]
        pos = e.end()
    return "".join(out) + s[pos:] if out else s


def normalize(s: str) -> str:
    s = str(s).strip().replace("\n", " ")
    s = re.sub(r"(?<=\d),\\!(?=\d{3})", "", s)  # MATH writes 14,\!400 for 14400
    s = _matrices(s)
    s = s.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\:", "").replace("\\ ", "")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    # possessive runs of spaces: backtracking between them made 1 MB of spaces after a ^ take hours
    s = re.sub(r"\^\s*+\{?\s*+\\circ\s*\}?", "", s).replace("°", "").replace("\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = s.replace("{,}", "")
    s = s.strip()
    # a trailing unit: 5\text{ cm}^2, 10 \mbox{inches}
    # (?<!\s): tried from the first space of a run only, not again from each of its spaces (quadratic)
    unit = re.sub(r"(?<!\s)\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}(\^\{?\d\}?)?\s*$", "", s)
    if unit.strip():
        s = unit
    s = _UNWRAP.sub(r"\1", s)
    s = s.strip().rstrip(".").strip()
    # `x = 5` / `k=5`: keep the value (a short variable on the left only)
    parts = s.split("=")
    if len(parts) == 2 and re.fullmatch(r"\s*[A-Za-z](_\{?\w+\}?)?\s*", parts[0]):
        s = parts[1]
    s = _fix_fracs(s)
    s = _drop_spaces(s)
    if s.startswith("."):
        s = "0" + s
    s = re.sub(r"(?<![\d.])\.(\d)", r"0.\1", s)
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    return s


def _to_float(s: str) -> float | None:
    s = s.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s) else s
    try:
        value = float(s)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------- MATH: LaTeX -> sympy text

class _Unsupported(ValueError):
    pass


_COMMANDS = {"cdot": "*", "times": "*", "div": "/", "pi": "pi", "infty": "oo", "ln": "log", "log": "log",
             "sin": "sin", "cos": "cos", "tan": "tan", "exp": "exp", "sec": "sec", "csc": "csc", "cot": "cot"}
_NAMES = {"sqrt", "pi", "oo", "log", "sin", "cos", "tan", "exp", "sec", "csc", "cot"}


def _arg(s: str, i: int) -> tuple[str, int]:
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise _Unsupported("missing argument")
    if s[i] == "{":
        got = _group(s, i)
        if got is None:
            raise _Unsupported("unbalanced braces")
        return got
    if s[i] == "\\":
        m = re.match(r"\\[A-Za-z]+", s[i:])
        if m:
            return m.group(0), i + m.end()
    return s[i], i + 1


def _latex_to_py(s: str, depth: int = 0) -> str:
    if depth > 20:
        raise _Unsupported("too deep")
    out, i = [], 0
    while i < len(s):
        ch = s[i]
        if s.startswith("\\frac", i):
            a, i = _arg(s, i + 5)
            b, i = _arg(s, i)
            out.append(f"(({_latex_to_py(a, depth + 1)})/({_latex_to_py(b, depth + 1)}))")
        elif s.startswith("\\sqrt", i):
            i += 5
            root = None
            if s[i:i + 1] == "[":
                j = s.find("]", i)
                if j < 0:
                    raise _Unsupported("unclosed root index")
                root, i = s[i + 1:j], j + 1
            a, i = _arg(s, i)
            body = _latex_to_py(a, depth + 1)
            out.append(f"sqrt({body})" if root is None else f"(({body})**(1/({_latex_to_py(root, depth + 1)})))")
        elif ch == "^":
            a, i = _arg(s, i + 1)
            out.append(f"**({_latex_to_py(a, depth + 1)})")
        elif ch == "\\":
            m = re.match(r"\\([A-Za-z]+)", s[i:])
            if not m or m.group(1) not in _COMMANDS:
                raise _Unsupported(f"unsupported LaTeX {s[i:i + 12]!r}")
            out.append(f" {_COMMANDS[m.group(1)]} ")
            i += m.end()
        elif ch == "{":
            a, i = _arg(s, i)
            out.append(f"({_latex_to_py(a, depth + 1)})")
        else:
            out.append(ch)
            i += 1
    py = "".join(out)
    if not re.fullmatch(r"[0-9A-Za-z+\-*/(). ]*", py):
        raise _Unsupported("unsupported characters")
    for name in re.findall(r"[A-Za-z]+", py):
        if len(name) > 1 and name not in _NAMES:
            raise _Unsupported(f"unknown name {name!r}")
    return py


# A LaTeX text longer than this gives Python longer than _safe_size's 400 characters (no command shrinks by more
# than half: \\times -> " * "); refusing it first keeps _latex_to_py's per-command slicing off 1 MB answers.
_LATEX_MAX = 1000


def _safe_size(py: str) -> bool:
    """Refuse inputs whose evaluation could run for ever inside one C call (huge powers, long numbers)."""
    if len(py) > 400 or py.count("**") > 6 or re.search(r"\d{40,}", py):
        return False
    for m in re.finditer(r"\*\*\s*\(*\s*(\d+(?:\.\d+)?)", py):
        if float(m.group(1)) > 500:
            return False
    return not re.search(r"\*\*\s*\(*[^*]*\*\*", py)  # no tower a**b**c


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def math_equal(pred: str, ref: str, *, timeout: float = SYMPY_TIMEOUT) -> bool:
    """pred == ref as strings after normalisation, else as numbers (|Δ| <= 1e-6), else symbolically
    (sympy.simplify(a - b) == 0 in a child process bounded by `timeout` CPU seconds and symbolic.MEMORY_MB; out
    of budget is "not shown equal"). Never raises on any answer; symbolic.Unavailable when no worker process could
    compare them (the machine's failure, not the answer's: no verdict)."""
    try:
        if pred is None or ref is None:
            return False
        a, b = normalize(pred), normalize(ref)
        if not a or not b:
            return False
        if a == b:
            return True
        fa, fb = _to_float(a), _to_float(b)
        if fa is not None and fb is not None:
            return abs(fa - fb) <= _TOL
        # tuples, intervals, lists: same brackets, element-wise
        if len(a) > 1 and len(b) > 1 and a[0] + a[-1] == b[0] + b[-1] and a[0] in "([" and a[-1] in ")]":
            ea, eb = _split_top(a[1:-1]), _split_top(b[1:-1])
            if len(ea) > 1 or len(eb) > 1:
                return len(ea) == len(eb) and all(math_equal(x, y, timeout=timeout) for x, y in zip(ea, eb))
        if "," in a or "," in b:
            ea, eb = _split_top(a), _split_top(b)
            if len(ea) > 1 and len(ea) == len(eb):
                return all(math_equal(x, y, timeout=timeout) for x, y in zip(ea, eb))
            if len(ea) > 1 or len(eb) > 1:
                return False
        if len(a) > _LATEX_MAX or len(b) > _LATEX_MAX:  # its Python would fail _safe_size (> 400 characters)
            return False
        try:
            pa, pb = _latex_to_py(a), _latex_to_py(b)
        except _Unsupported:
            return False
        if not (_safe_size(pa) and _safe_size(pb)):
            return False
        return symbolic.equal(pa, pb, cpu_seconds=timeout) is True
    except symbolic.Unavailable:
        raise
    except Exception:  # noqa: BLE001 - a scorer must never raise on model output
        return False


def _math(prediction: str, reference: str) -> ScoreResult:
    ref = last_boxed(reference)
    ref = reference.strip() if ref is None else ref
    # One extraction, one comparison, as the MermaidFlow/AFlow scorer does: a second guess (say, the last number
    # when the last line did not match) would score `1/2 + 0*7` right against both 1/2 and 7.
    pred = _math_prediction(prediction)
    if pred is None:
        return ScoreResult(False, None, "no answer in the prediction")
    try:
        return ScoreResult(math_equal(pred, ref), pred)
    except symbolic.Unavailable as e:  # no verdict: an errored row, never a wrong answer
        return ScoreResult(False, pred, f"no symbolic verdict: {e}", errored=True)


# ---------------------------------------------------------------- code

def humaneval_program(prompt: str, code: str) -> str:
    """The prompt (imports, helper functions, the stub) followed by the answer: a full function redefines the
    stub; a bare body completes it, as in the original HumanEval harness."""
    future = re.findall(r"^from __future__ import .*$", code, re.MULTILINE)
    code = re.sub(r"^from __future__ import .*$\n?", "", code, flags=re.MULTILINE)
    head = "\n".join(future) + "\n" if future else ""
    if re.search(r"^(def|class|import|from|async\s+def)\s", code, re.MULTILINE):
        try:
            ast.parse(prompt)  # a stub with only a docstring is valid Python; a bare `def f():` is not
        except SyntaxError:
            return f"{head}{code}\n"
        return f"{head}{prompt.rstrip()}\n\n\n{code}\n"
    return f"{head}{prompt}{code}\n"


def _code(benchmark: str, prediction: str, problem: Problem | None, tests: str, entry: str | None,
          timeout: float) -> ScoreResult:
    from flowcore.execution import sandbox

    code = extract_code(prediction, entry)
    if not code.strip():
        return ScoreResult(False, None, "empty program")
    program, context = code, None
    if benchmark == "humaneval" and problem is not None:
        program = humaneval_program(problem.question, code)
        try:  # the prompt's helpers and imports, for the tests: the judge runs its own copy, not the answer's
            ast.parse(problem.question)
            context = problem.question
        except SyntaxError:
            pass
    # The judge calls check(entry) when the tests define `check` (HumanEval); plain-assert tests (MBPP) call
    # the entry point by name, even one that shadows a builtin (mbpp/126 defines `sum`).
    if entry is None and re.search(r"^def\s+check\s*\(", tests, re.MULTILINE):
        m = re.search(r"^def\s+([A-Za-z_]\w*)\s*\(", code, re.MULTILINE)
        entry = m.group(1) if m else None
    # The tests judge from a sandbox of their own, calling the answer's functions in another (raises if no bwrap)
    res = sandbox.run_untrusted(program, tests=tests, entry_point=entry, timeout=timeout, context=context)
    if res.ok:
        return ScoreResult(True, code)
    if getattr(res, "overloaded", False):
        return ScoreResult(False, code, str(res.error), errored=True)
    detail = "timed out" if res.timed_out else (res.error or "tests failed")
    return ScoreResult(False, code, str(detail)[-2000:])


# ---------------------------------------------------------------- entry point

def score(benchmark: str, prediction: str, reference: str | Problem, *, timeout: float = CODE_TIMEOUT,
          entry_point: str | None = None) -> ScoreResult:
    """Score one prediction. reference: a Problem (preferred) or, for gsm8k/math, the gold answer or solution
    text; for humaneval/mbpp a string reference is the test code (entry_point names the function)."""
    from flowcore.tasks.problem import BENCHMARKS, Problem

    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark '{benchmark}' (choose from {', '.join(BENCHMARKS)})")
    prediction = "" if prediction is None else str(prediction)
    problem = reference if isinstance(reference, Problem) else None
    if benchmark == "gsm8k":
        return _gsm8k(prediction, problem.reference if problem else str(reference))
    if benchmark == "math":
        return _math(prediction, problem.reference if problem else str(reference))
    if problem is not None:
        return _code(benchmark, prediction, problem, problem.tests, problem.entry_point, timeout)
    return _code(benchmark, prediction, None, str(reference), entry_point, timeout)
