"""A task's metric (DESIGN §11): each row's answer gets a score in [0, 1]; the task's score is their mean.

Deterministic metrics (exact, contains, regex, number, choice, f1, json, and the built-in tasks' gsm8k and math)
run here. Two run elsewhere, because what they run is not ours:
- ``python``: the user's ``metric(prediction, row)`` runs in the sandbox (flowcore.tasks.pymetric), never in
  this process: a metric file from a shared workspace is someone else's code.
- ``judge`` (flowcore.tasks.judging): an LLM grades the answer against the reference and a rubric; each grade
  keeps its reason and the name of the model that gave it, and every score it makes is labelled "graded by a
  model".
A metric that raises, times out or returns anything but a number in [0, 1] leaves that row *errored* (no
verdict, left out of the score), never wrong. Not so a regex pattern that times out on an answer, nor JSON nested
too deep: the answer caused those, and it is wrong (tests/tasks/test_pathological_answers.py).
"""
from __future__ import annotations

import functools
import json
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any

from flowcore.tasks.data import DataError

# metric -> {option: (kind, default)}; kinds: bool, number, text, texts (a list of strings)
OPTIONS: dict[str, dict[str, tuple[str, Any]]] = {
    "exact": {"case_sensitive": ("bool", False)},
    "contains": {"case_sensitive": ("bool", False)},
    "regex": {"pattern": ("text", ""), "case_sensitive": ("bool", False)},
    "number": {"tolerance": ("number", 1e-6), "relative": ("number", 0.0)},
    "choice": {"choices": ("texts", None), "case_sensitive": ("bool", False)},
    "f1": {},
    "json": {"fields": ("texts", [])},
    "python": {"file": ("text", None), "function": ("text", "metric")},
    "judge": {"rubric": ("text", "The answer is correct and complete when it agrees with the reference.")},
    "tests": {},  # code tasks: the rows' hidden tests in the sandbox (pass@1, as HumanEval)
    "gsm8k": {},  # the built-in tasks' scorers, usable by any math task
    "math": {},
}
METRICS = tuple(OPTIONS)
FRACTIONAL = frozenset({"f1", "json", "python", "judge"})  # scores between 0 and 1, not only 0/1
BY_MODEL = frozenset({"judge"})
SANDBOXED = frozenset({"python", "tests"})
DESCRIPTIONS = {
    "exact": "the answer equals the reference (trimmed; upper and lower case count as the same unless case sensitive)",
    "contains": "the reference occurs in the answer",
    "regex": "the answer matches the reference as a pattern (or `pattern`, with {reference} in it)",
    "number": "the last number in the answer is within `tolerance` (absolute) or `relative` of the reference",
    "choice": "the first of `choices` named in the answer is the reference",
    "f1": "token F1 between answer and reference (fractional, as SQuAD scores it)",
    "json": "the answer's JSON object has the reference's values at `fields` (fractional)",
    "python": "your function metric(prediction, row) -> bool or float, run in the sandbox",
    "judge": "an LLM grades the answer against the reference and `rubric` (graded by a model)",
    "tests": "the row's `tests` pass against the answer's code in the sandbox (code tasks)",
    "gsm8k": "GSM8K's scorer: the last number (or \\boxed{}) equals the reference",
    "math": "MATH's scorer: the last \\boxed{} equals the reference as text, number or symbolically",
}
REGEX_TIMEOUT = 1.0  # seconds per match: a pattern from a shared workspace cannot stall the app


@dataclass(frozen=True)
class Metric:
    """A metric with its options (defaults filled in); ``source``: a python metric's code."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()
    source: str = ""
    kind: str = "text"

    @property
    def opts(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.options}

    @property
    def fractional(self) -> bool:
        return self.name in FRACTIONAL

    @property
    def deterministic(self) -> bool:
        return self.name not in BY_MODEL


@dataclass
class Grade:
    """One row's grade. ``score`` None: errored (no verdict). ``model``/``reason``: the judge's."""

    score: float | None
    extracted: str | None = None
    detail: str = ""
    model: str | None = None
    reason: str | None = None
    transient: bool = False
    cost: float = 0.0

    @property
    def errored(self) -> bool:
        return self.score is None


def make_metric(name: Any, options: Any, *, where: str, kind: str = "text", source: str = "") -> Metric:
    """The metric with its options checked; DataError naming ``where`` and the metric or option."""
    if not isinstance(name, str) or name not in OPTIONS:
        raise DataError(f"{where}: field 'metric': unknown metric {name!r} (choose from {', '.join(METRICS)})")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise DataError(f"{where}: field 'metric_options' must be a table of options")
    known = OPTIONS[name]
    for key in options:
        if key not in known:
            hint = f"it takes {', '.join(known)}" if known else "it takes no options"
            raise DataError(f"{where}: field 'metric_options.{key}': unknown option of metric '{name}' ({hint})")
    out: dict[str, Any] = {}
    for key, (typ, default) in known.items():
        value = options.get(key, default)
        label = f"{where}: field 'metric_options.{key}'"
        if value is None:
            raise DataError(f"{label}: metric '{name}' needs this option")
        if typ == "bool" and not isinstance(value, bool):
            raise DataError(f"{label} must be true or false, got {value!r}")
        if typ == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or not math.isfinite(value) or value < 0):
            raise DataError(f"{label} must be a number >= 0, got {value!r}")
        if typ == "text" and not isinstance(value, str):
            raise DataError(f"{label} must be a string, got {value!r}")
        if typ == "texts":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
                raise DataError(f"{label} must be a list of non-empty strings, got {value!r}")
            value = tuple(value)
        out[key] = value
    if name == "choice" and not out["choices"]:
        raise DataError(f"{where}: field 'metric_options.choices' is empty: name the answers to choose from")
    if name == "regex" and out["pattern"]:
        _compile(out["pattern"].replace("{reference}", "x"), out["case_sensitive"],
                 f"{where}: field 'metric_options.pattern'")
    if name == "python":
        _check_source(source, out["function"], f"{where}: field 'metric_options.file' ({out['file']})")
    return Metric(name, tuple(sorted(out.items())), source, kind)


def _check_source(source: str, function: str, where: str) -> None:
    """A python metric's file parses and defines the function; it is parsed here, never run here."""
    import ast

    if not source.strip():
        raise DataError(f"{where}: the metric file is empty")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise DataError(f"{where}: line {exc.lineno}: {exc.msg}") from None
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function for n in tree.body):
        raise DataError(f"{where}: defines no function '{function}(prediction, row)'")


def _compile(pattern: str, case_sensitive: bool, where: str) -> Any:
    import regex

    try:
        return regex.compile(pattern, 0 if case_sensitive else regex.IGNORECASE)
    except regex.error as exc:
        raise DataError(f"{where}: not a regular expression ({exc})") from None


# -- what a row's answer is --------------------------------------------------------------------------------------

# One whitespace run per position: `\s*(?:is)?\s*` split a run of spaces every way (quadratic; a 40 KB answer of
# "answer" and spaces held the server's interpreter for 29 s).
_MARKER = re.compile(r"(?:final\s+answer|answer)\s*(?:is\s*)?[:：]\s*", re.IGNORECASE)


def final_answer(prediction: str) -> str:
    """The part of an answer the text metrics compare: the last \\boxed{}, else what follows the last
    "Answer:" / "Final answer:", else the whole answer; trimmed. CoT workflows reason first and end with one."""
    from flowcore.tasks.scoring import last_boxed

    text = prediction or ""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    found = list(_MARKER.finditer(text))
    if found:
        tail = text[found[-1].end():].strip()
        if tail:
            return tail.strip("*").strip()
    return text.strip()


def _norm(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def _number(text: str) -> float | None:
    """The last number of ``text`` as a float (None: none, or not finite). The cache holds only texts of at most
    64 characters: a long answer is cut to its last number first, so 100 KB answers never sit in memory."""
    if len(text) <= 64:
        return _short_number(text)
    from flowcore.tasks.scoring import _NUMBER

    tail = text[-64:].replace("\u2212", "-")  # a long text (GSM8K's worked solutions): its last number is in its tail
    found_all = list(_NUMBER.finditer(tail))
    last = found_all[-1] if found_all else None
    # Only a match whose left neighbour is plainly no part of a number is the one the whole text ends with.
    if last is not None and last.start() > 0 and not re.match(r"[\w.,$\-]", tail[last.start() - 1]):
        return _short_number(tail[last.start():])
    return _parse_number(text)  # rare (a number running into the tail's start, or none there): not cached


@functools.lru_cache(maxsize=65536)  # references are parsed when the task is read, again for every answer
def _short_number(text: str) -> float | None:
    return _parse_number(text)


def _parse_number(text: str) -> float | None:
    from flowcore.tasks.scoring import extract_number

    found = extract_number(text)
    if found is None:
        return None
    try:
        value = float(found)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def _tokens(text: str) -> list[str]:
    return _ARTICLES.sub(" ", text.casefold().translate(_PUNCT)).split()


def f1(prediction: str, reference: str) -> float:
    """SQuAD's token F1: lower case, no punctuation or articles, bag of words."""
    p, r = _tokens(prediction), _tokens(reference)
    if not p or not r:
        return float(p == r)
    same = sum((Counter(p) & Counter(r)).values())
    if not same:
        return 0.0
    precision, recall = same / len(p), same / len(r)
    return 2 * precision * recall / (precision + recall)


def _json_object(text: str) -> Any:
    """The answer's JSON value: the whole text, else the last ```json block that parses (of the last 8), else the last
    top-level {...} that is a JSON object (flowcore.tasks.jsonscan: one linear pass; an object nested in another
    is part of it, never picked alone, and text around the object, a preamble included, is ignored). Nesting too
    deep for the decoder is no JSON: left uncaught it made a wrong answer's row errored."""
    from flowcore.tasks.jsonscan import last_object, load

    text = text.strip()
    whole = load(text)
    if whole is not None:
        return whole
    for block in _last_fenced(text):
        value = load(block)
        if value is not None:
            return value
    found = last_object(text)
    return None if found is None else found[0]


def _last_fenced(text: str, keep: int = 8) -> list[str]:
    """The bodies of the last ``keep`` ```-fenced blocks (a "json" tag dropped), last first. Marks are paired in
    order, in one pass: the regex it replaces backtracked over whitespace (40 KB of newlines after an unclosed
    ```json took 9.6 s)."""
    marks = [m.start() for m in _FENCE.finditer(text)]
    pairs = list(zip(marks[0::2], marks[1::2]))[-keep:]
    out = []
    for a, b in reversed(pairs):
        body = text[a + 3:b]
        out.append(body[4:] if body.startswith("json") else body)
    return out


_FENCE = re.compile("```")


def _json_score(got: Any, reference: str, fields: list[str]) -> Grade:
    ref = _json_object(reference)
    if not isinstance(got, dict):
        return Grade(0.0, None, "no JSON object in the answer")
    keys = fields or list(ref)
    hits = sum(1 for k in keys if k in got and _same_json(got[k], ref.get(k)))
    return Grade(hits / len(keys) if keys else 1.0, json.dumps(got, ensure_ascii=False)[:500],
                 f"{hits} of {len(keys)} fields match")


def _same_json(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return _norm(a, False) == _norm(b, False)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-9
    return a == b


# A number exists in a text exactly when one of these matches (the start of a match of scoring._NUMBER: a digit,
# or ".digit", with no word character or '.' before it), found with a charset scan instead of a lookbehind tried at
# every position (4x faster on GSM8K's worked solutions; tests/tasks/test_metrics.py checks the equivalence).
_NUMBER_AT_START = re.compile(r"\.?\d")
_NUMBER_INSIDE = re.compile(r"[^\w.]\.?\d")
_MAYBE_INFINITE = re.compile(r"[\d,]{309}")  # a number with >= 309 digits may not fit a float


def _has_number(text: str) -> bool:
    """Whether ``_number(text)`` is a number, for the price of two C scans (the reference check at load)."""
    if not (_NUMBER_AT_START.match(text) or _NUMBER_INSIDE.search(text)):
        return False
    return len(text) < 309 or not _MAYBE_INFINITE.search(text) or _number(text) is not None


def reference_check(metric: Metric) -> Any:
    """The check of one reference under this metric, its options read once (a task is read row by row): a
    function giving why the reference cannot be scored (None when it can), or None when the metric can score
    any non-empty reference (exact, contains, f1, regex with a pattern, and those that run elsewhere)."""
    o = metric.opts
    if metric.name == "number":
        return lambda ref: None if _has_number(ref) else "is not a number (metric 'number')"
    if metric.name == "choice":
        cs = o["case_sensitive"]
        known = {_norm(c, cs) for c in o["choices"]}
        listed = ", ".join(o["choices"])
        return lambda ref: None if _norm(ref, cs) in known else f"is not one of the choices ({listed})"
    if metric.name == "regex" and not o["pattern"]:
        def pattern(ref: str) -> str | None:
            try:
                _compile(ref, o["case_sensitive"], "")
            except DataError as exc:
                return str(exc).lstrip(": ")
            return None

        return pattern
    if metric.name == "json":
        fields = o["fields"]

        def obj(ref: str) -> str | None:
            value = _json_object(ref)
            if not isinstance(value, dict):
                return "is not a JSON object (metric 'json')"
            missing = [f for f in fields if f not in value]
            return f"has no field '{missing[0]}' (metric_options.fields)" if missing else None

        return obj
    return None


def check_reference(metric: Metric, reference: str) -> str | None:
    """Why this reference cannot be scored by the metric (None when it can): checked when a task is read."""
    check = reference_check(metric)
    return None if check is None else check(reference)


def grade_text(metric: Metric, prediction: str, reference: str) -> Grade:
    """A deterministic metric's grade (exact, contains, regex, number, choice, f1, json, gsm8k, math)."""
    o = metric.opts
    name = metric.name
    if name in ("gsm8k", "math"):
        from flowcore.tasks.scoring import score

        res = score(name, prediction, reference)
        if res.errored:  # no verdict could be had (MATH: no symbolic worker could run): not a wrong answer
            return Grade(None, res.extracted, res.detail, transient=True)
        return Grade(float(res.correct), res.extracted, res.detail)
    answer = final_answer(prediction)
    if name == "exact":
        return Grade(float(_norm(answer, o["case_sensitive"]) == _norm(reference, o["case_sensitive"])), answer)
    if name == "contains":
        return Grade(float(_norm(reference, o["case_sensitive"]) in _norm(answer, o["case_sensitive"])), answer)
    if name == "regex":
        import regex

        source = o["pattern"].replace("{reference}", regex.escape(reference)) if o["pattern"] else reference
        try:
            pattern = _compile(source, o["case_sensitive"], "the pattern")
            hit = pattern.search(answer, timeout=REGEX_TIMEOUT) is not None
        except DataError as exc:
            return Grade(None, answer, str(exc))
        except TimeoutError:  # not shown to match: wrong. Errored would let an answer built to make the task's
            # pattern backtrack ('a' * 40 + '!' against ^(a|aa)+x$) leave its row out of the score.
            return Grade(0.0, answer, f"the pattern took longer than {REGEX_TIMEOUT:g} s on this answer (not a match)")
        return Grade(float(hit), answer)
    if name == "number":
        got, ref = _number(answer), _number(reference)
        if ref is None:
            return Grade(None, None, "the reference is not a number")
        if got is None:
            return Grade(0.0, None, "no number in the answer")
        ok = abs(got - ref) <= o["tolerance"] or (o["relative"] > 0 and abs(got - ref) <= o["relative"] * abs(ref))
        return Grade(float(ok), f"{got:g}")
    if name == "choice":
        cs = o["case_sensitive"]
        text = answer if cs else answer.casefold()
        spots = []
        for c in o["choices"]:
            m = re.search(rf"(?<!\w){re.escape(c if cs else c.casefold())}(?!\w)", text)
            if m:
                spots.append((m.start(), -len(c), c))
        if not spots:
            return Grade(0.0, None, "no choice named in the answer")
        chosen = min(spots)[2]
        return Grade(float(_norm(chosen, cs) == _norm(reference, cs)), chosen)
    if name == "f1":
        return Grade(f1(answer, reference), answer)
    if name == "json":
        got = _json_object(answer)
        if got is None and answer != prediction.strip():  # the object may hold the "Answer:" the rule cut at
            got = _json_object(prediction)
        return _json_score(got, reference, o["fields"])
    raise ValueError(f"metric '{name}' is not graded as text")


# -- judge (flowcore.tasks.judging): how its scores are labelled ------------------------------------------------

def graded_by_note(models: set[str] | list[str]) -> str:
    """How a judge-made score is labelled everywhere it is shown."""
    names = ", ".join(sorted(m for m in models if m)) or "the judge model"
    return f"graded by a model ({names})"
