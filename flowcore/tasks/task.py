"""A task (DESIGN §11): rows of data, how a row becomes the problem text, the expected answer and a metric.

GSM8K, MATH, HumanEval and MBPP are four built-in tasks (``BUILTIN``), recorded with the same fields as a user's
task; their rows are read by their own loaders (flowcore.tasks.data). A user's task comes from a TOML file
(``read_task``, with the standard library's tomllib) or from the Tasks page (``build_task`` over an uploaded
table), and is saved in the workspace (flowcore.tasks.saved). Every error is a DataError naming the file, the
row (line) and the field; a task is either built whole or not at all.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowcore.tasks.data import DataError
from flowcore.tasks.metrics import Grade, Metric, grade_text, make_metric, reference_check
from flowcore.tasks.problem import Problem
from flowcore.tasks.pymetric import run_python
from flowcore.tasks.rows import MAX_BYTES, Table, cell, read_table

KINDS = ("math", "code", "text")
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
FIELDS = ("name", "kind", "data", "problem", "reference", "metric", "metric_options", "split", "id",
          "description")
SOURCE_LIMIT = 1024 * 1024  # a python metric's file


@dataclass(eq=False)
class Task:
    name: str
    kind: str
    problem: str  # a template over the row's fields, or one field's name
    reference: str  # the field holding the expected answer
    metric: Metric
    data: str = ""  # the data file's name
    validation: float = 0.2  # the share evolution may look at; the rest is the held-out test
    seed: int = 42
    id_field: str | None = None
    description: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    unit: str = "line"
    builtin: bool = False

    def spec(self) -> dict[str, Any]:
        """The task's definition as its TOML file writes it (what is saved beside the rows)."""
        opts = {k: v for k, v in self.metric.opts.items() if not (k == "file" and self.metric.name != "python")}
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "data": self.data, "problem": self.problem,
                               "reference": self.reference, "metric": self.metric.name, "metric_options": opts,
                               "split": {"validation": self.validation, "seed": self.seed}}
        if self.id_field:
            out["id"] = self.id_field
        if self.description:
            out["description"] = self.description
        return out

    @property
    def digest(self) -> str:
        """What identifies this task's content: a changed row, field or metric is another task."""
        h = hashlib.sha256(json.dumps(self.spec(), sort_keys=True).encode())
        h.update(self.metric.source.encode())
        h.update(json.dumps(self.rows, sort_keys=True, default=str, ensure_ascii=False).encode())
        return h.hexdigest()[:32]

    def fields(self) -> list[str]:
        """The row fields the problem template names ([the field] when ``problem`` is one field's name)."""
        return template_fields(self.problem, set(self.columns()))

    def columns(self) -> list[str]:
        return list(dict.fromkeys(k for r in self.rows for k in r))

    def where(self, i: int) -> str:
        return f"{self.data}: {self.unit} {self.lines[i]}"

    def ids(self) -> list[str]:
        if self.id_field:
            return [f"{self.name}/{cell(r.get(self.id_field))}" for r in self.rows]
        return [f"{self.name}/{i + 1}" for i in range(len(self.rows))]

    def problem_of(self, i: int, pid: str | None = None) -> Problem:
        row = self.rows[i]
        code = self.kind == "code"
        return Problem(id=pid or self.ids()[i], benchmark=self.name, question=render(self.problem, row),
                       reference=cell(row.get(self.reference)),
                       entry_point=(cell(row.get("entry_point")).strip() or None) if code else None,
                       tests=cell(row.get("tests")) if code else "",
                       meta={"row": row, "line": self.lines[i]}, metric=self.metric)

    def problems(self) -> list[Problem]:
        """Every row as a Problem (what ``problem_of`` makes, written out: it runs once a row on every load)."""
        code, metric, name, ref_field = self.kind == "code", self.metric, self.name, self.reference
        field_only = self.problem if "{" not in self.problem else None  # render()'s shortcut, decided once
        out = []
        for row, line, pid in zip(self.rows, self.lines, self.ids()):
            if code:
                out.append(self.problem_of(len(out), pid))
                continue
            question = cell(row[field_only]) if field_only is not None and field_only in row else render(self.problem, row)
            value = row.get(ref_field)
            out.append(Problem(id=pid, benchmark=name, question=question,
                               reference=value if type(value) is str else cell(value),
                               meta={"row": row, "line": line}, metric=metric))
        return out

    def split(self) -> tuple[list[str], list[str]]:
        """(validation ids, test ids): a seeded shuffle, ``validation`` of the rows (at least one each side)."""
        ids = self.ids()
        return split_share(ids, self.validation, self.seed)

    def sizes(self) -> dict[str, int]:
        val, test = self.split()
        return {"rows": len(self.rows), "validation": len(val), "test": len(test)}


def split_share(ids: list[str], share: float, seed: int) -> tuple[list[str], list[str]]:
    n = len(ids)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    k = min(max(round(n * share), 1), n - 1) if n > 1 else n
    val = set(order[:k])
    return [ids[i] for i in range(n) if i in val], [ids[i] for i in range(n) if i not in val]


# -- the built-in tasks --------------------------------------------------------------------------------------------

def _builtin(name: str, kind: str, data: str, problem: str, reference: str, metric: str) -> Task:
    return Task(name, kind, problem, reference, Metric(metric, kind=kind), data=data, builtin=True)


BUILTIN: dict[str, Task] = {t.name: t for t in (
    _builtin("gsm8k", "math", "gsm8k_test.jsonl", "question", "answer", "gsm8k"),
    _builtin("math", "math", "math_test_level5_cp_nt_prealg_precalc.jsonl", "problem", "solution", "math"),
    _builtin("humaneval", "code", "HumanEval.jsonl.gz", "prompt", "canonical_solution", "tests"),
    _builtin("mbpp", "code", "mbpp_sanitized.json", "prompt", "code", "tests"),
)}


# -- templates -----------------------------------------------------------------------------------------------------

def template_fields(problem: str, columns: set[str]) -> list[str]:
    """Fields a problem template names; a bare column name is that one field. ValueError says what is wrong."""
    if problem in columns:
        return [problem]
    try:
        parts = list(string.Formatter().parse(problem))
    except ValueError as exc:
        raise ValueError(f"is not a template ({exc}; write {{{{ and }}}} for literal braces)") from None
    names = []
    for _, name, spec, conv in parts:
        if name is None:
            continue
        if not name or spec or conv or not re.fullmatch(r"[^.\[\]{}!:]+", name):
            raise ValueError(f"uses {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}: write plain "
                             "field names such as {question}")
        names.append(name)
    if not names:
        raise ValueError("is neither a column of the data nor a template naming one, e.g. 'Question: {question}'")
    return list(dict.fromkeys(names))


def render(problem: str, row: dict[str, Any]) -> str:
    if problem in row and "{" not in problem:
        return cell(row[problem])
    out = []
    for literal, name, _, _ in string.Formatter().parse(problem):
        out.append(literal)
        if name is not None:
            out.append(cell(row.get(name)))
    return "".join(out)


# -- building and reading ------------------------------------------------------------------------------------------

def build_task(spec: dict[str, Any], table: Table, *, where: str, source: str = "") -> Task:
    """A whole task from its definition and its rows, or a DataError naming file, row and field.

    ``where`` names the definition (the TOML file, or "the task" on the page); ``source`` is a python metric's
    code."""
    unknown = [k for k in spec if k not in FIELDS]
    if unknown:
        raise DataError(f"{where}: unknown field '{unknown[0]}' (a task has {', '.join(FIELDS)})")
    for key in ("name", "kind", "problem", "reference", "metric"):
        if not isinstance(spec.get(key), str) or not spec[key].strip():
            raise DataError(f"{where}: field '{key}' is missing (a non-empty string)")
    name = spec["name"].strip()
    if not NAME.fullmatch(name):
        raise DataError(f"{where}: field 'name': '{name}' may use only letters, digits, '-' and '_' (1 to 64)")
    if name in BUILTIN:
        raise DataError(f"{where}: field 'name': '{name}' is a built-in task; choose another name")
    kind = spec["kind"]
    if kind not in KINDS:
        raise DataError(f"{where}: field 'kind': '{kind}' is not one of {', '.join(KINDS)}")
    metric = make_metric(spec["metric"], spec.get("metric_options"), where=where, kind=kind, source=source)
    if metric.name == "tests" and kind != "code":
        raise DataError(f"{where}: field 'metric': 'tests' scores code: set kind = \"code\"")
    split = spec.get("split") or {}
    if not isinstance(split, dict) or [k for k in split if k not in ("validation", "seed")]:
        raise DataError(f"{where}: field 'split' takes validation (a share) and seed")
    share, seed = split.get("validation", 0.2), split.get("seed", 42)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise DataError(f"{where}: field 'split.validation' must be a share between 0 and 1, got {share!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DataError(f"{where}: field 'split.seed' must be a whole number, got {seed!r}")
    columns = set(table.columns)
    problem, reference = spec["problem"], spec["reference"].strip()
    try:
        used = template_fields(problem, columns)
    except ValueError as exc:
        raise DataError(f"{where}: field 'problem': '{problem}' {exc}") from None
    for f in [*used, reference]:
        if f not in columns:
            which = "reference" if f == reference and f not in used else "problem"
            raise DataError(f"{where}: field '{which}' names '{f}', which {table.name} lacks (its columns: "
                            f"{', '.join(table.columns)})")
    id_field = spec.get("id")
    if id_field is not None and (not isinstance(id_field, str) or id_field not in columns):
        raise DataError(f"{where}: field 'id' names {id_field!r}, which {table.name} lacks")
    _check_rows(table, used, reference, metric, kind, id_field)
    if len(table.rows) < 2:
        raise DataError(f"{table.name}: {len(table.rows)} row: a task needs at least 2 (validation and test)")
    desc = spec.get("description") or ""
    return Task(name, kind, problem, reference, metric, table.name, float(share), int(seed), id_field,
                str(desc), list(table.rows), list(table.lines), table.unit)


def _check_rows(table: Table, used: list[str], reference: str, metric: Metric, kind: str,
                id_field: str | None) -> None:
    """Every row has the fields the template uses and a reference the metric can score, or a DataError naming
    the row. The whole check runs on every read, so it is kept to what costs little per row (the metric's
    reference check is built once, the row's place is spelled out only for an error): issue 26's load target."""
    seen: dict[str, int] = {}
    tests = metric.name == "tests"
    check = None if metric.name in ("python", "judge", "tests", "gsm8k", "math") else reference_check(metric)
    for i, row in enumerate(table.rows):
        for f in used:
            if row.get(f) is None:
                raise DataError(f"{table.where(i)}: field '{f}' is missing (the problem template uses it)")
        value = row.get(reference)
        ref = value if type(value) is str else cell(value)
        if not ref.strip():
            if not tests:
                raise DataError(f"{table.where(i)}: field '{reference}' is empty (the reference answer)")
        elif check is not None:
            why = check(ref)
            if why:
                raise DataError(f"{table.where(i)}: field '{reference}': '{ref[:80]}' {why}")
        if tests and not cell(row.get("tests")).strip():
            raise DataError(f"{table.where(i)}: field 'tests' is empty (metric 'tests' runs each row's tests)")
        if id_field is not None:
            key = cell(row.get(id_field))
            if key in seen:
                raise DataError(f"{table.where(i)}: field '{id_field}': id '{key}' is also on {table.unit} "
                                f"{seen[key]}")
            seen[key] = table.lines[i]


def read_task(path: str | Path, *, cap: int = MAX_BYTES) -> Task:
    """A task from its TOML file (data and metric files relative to it)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        spec = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path}: not TOML: {exc}") from None
    data = spec.get("data")
    if not isinstance(data, str) or not data.strip():
        raise DataError(f"{path}: field 'data' is missing (the .csv, .jsonl or .json file of rows)")
    table = read_table(path.parent / data, cap=cap)
    table.name = data
    source = ""
    opts = spec.get("metric_options")
    if spec.get("metric") == "python" and isinstance(opts, dict) and isinstance(opts.get("file"), str):
        source = _read_source(path.parent / opts["file"], f"{path}: field 'metric_options.file'")
    return build_task({k: v for k, v in spec.items() if k != "data"}, table, where=str(path), source=source)


def _read_source(path: Path, where: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{where}: {path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > SOURCE_LIMIT:
        raise DataError(f"{where}: {path}: larger than 1 MB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{where}: {path}: not UTF-8 text") from None


def upload_task(spec: dict[str, Any], filename: str, data: bytes, *, source: str = "") -> Task:
    """A task from the Tasks page: the uploaded file's bytes and the choices made on the page."""
    table = read_table(data, filename)
    return build_task(spec, table, where="the task", source=source)


# -- the reference scored against itself -------------------------------------------------------------------------

@dataclass
class SelfScore:
    score: float | None  # mean over the rows scored; None: not computed (a judge needs the LLM)
    n: int
    failures: list[str]  # "where: why" for rows whose reference does not score 1 against itself
    note: str = ""


def self_score(task: Task, limit: int | None = None) -> SelfScore:
    """Each row's reference scored as if it were the answer: 1 for every deterministic metric on good data.
    Not computed for ``judge`` (a model's grade is no check of the data). Python metrics run in the sandbox."""
    m = task.metric
    idx = list(range(len(task.rows)))[:limit]
    if m.name == "judge":
        return SelfScore(None, 0, [], "not computed: the judge is a model, so its self-score is no check")
    problems = [task.problem_of(i) for i in idx]
    if m.name == "python":
        grades = []
        for start in range(0, len(problems), 250):
            chunk = problems[start:start + 250]
            grades += run_python(m, [(p.reference, p.meta["row"]) for p in chunk], rows=[p.id for p in chunk])
    elif m.name == "tests":
        from flowcore.tasks.scoring import score

        grades = []
        for p in problems[:limit or 20]:
            res = score("mbpp", p.reference, p)
            grades.append(Grade(None, None, res.detail) if res.errored else Grade(float(res.correct), None, res.detail))
        idx = idx[:len(grades)]
    else:
        grades = [grade_text(m, p.reference, p.reference) for p in problems]
    failures = []
    for i, g in zip(idx, grades):
        if g.score is None or g.score < 1:
            why = g.detail or (f"scores {g.score:.2f}" if g.score is not None else "errored")
            failures.append(f"{task.where(i)}: the reference scored against itself {why if g.score is None else why}"
                            f"{'' if g.score is None else f' (score {g.score:.2f})'}")
    scored = [g.score for g in grades if g.score is not None]
    mean = sum(scored) / len(scored) if scored else 0.0
    note = "" if not failures else (
        "the reference does not score 1 against itself on some rows: "
        + ("for metric 'regex' the reference is a pattern, which need not match its own text; " if m.name == "regex"
           else "") + "check the metric and its options")
    return SelfScore(mean, len(grades), failures, note)
