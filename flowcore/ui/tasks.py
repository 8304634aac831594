"""What the Tasks page needs, without any layout: read an upload, preview its rows, turn the page's choices into
a task (or the message naming file, row and field), show the metric on a few rows with each reference scored
against itself, and the split sizes. Saving is flowcore.tasks.saved.save: a task is stored whole or not at all."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from flowcore.tasks.data import DataError
from flowcore.tasks.metrics import DESCRIPTIONS, METRICS, OPTIONS, Grade, grade_text
from flowcore.tasks.pymetric import run_python
from flowcore.tasks.rows import MAX_BYTES, Table, cell, read_table
from flowcore.tasks.task import KINDS, Task, build_task

__all__ = ["KINDS", "METRICS", "MAX_MB", "Draft", "default_template", "describe", "draft", "option_specs",
           "parse_option", "preview_frame", "read_upload", "sample_frame", "self_score_text"]

MAX_MB = MAX_BYTES // (1024 * 1024)
EXAMPLE = Path(__file__).resolve().parents[2] / "assets" / "tasks" / "capitals" / "capitals.csv"
PAGE_METRICS = [m for m in METRICS if m not in ("gsm8k", "math")]  # the built-in scorers stay for TOML files


def read_upload(filename: str, data: bytes) -> Table:
    """The uploaded file's rows (DataError naming the file, line and field; capped at 50 MB as it is read)."""
    return read_table(data, filename)


def preview_frame(table: Table, n: int = 10) -> pd.DataFrame:
    """The first rows as the page shows them: the line each came from, then every column as text."""
    rows = [{"line": table.lines[i], **{c: cell(table.rows[i].get(c)) for c in table.columns}}
            for i in range(min(n, len(table.rows)))]
    return pd.DataFrame(rows)


def default_template(table: Table) -> str:
    """A first guess at the problem: a column named like a question, else the first column."""
    for name in ("question", "problem", "prompt", "input", "text", "query"):
        for col in table.columns:
            if col.lower() == name:
                return col
    return table.columns[0]


def default_reference(table: Table) -> str:
    """A first guess at the reference: a column named like an answer, else the second column."""
    for name in ("answer", "reference", "label", "expected", "output", "target", "solution"):
        for col in table.columns:
            if col.lower() == name:
                return col
    return table.columns[1] if len(table.columns) > 1 else table.columns[0]


def describe(metric: str) -> str:
    return DESCRIPTIONS.get(metric, "")


def option_specs(metric: str) -> list[tuple[str, str, Any]]:
    """(option, kind, default) of a metric: kind is bool, number, text or texts (one per line on the page)."""
    return [(k, kind, default) for k, (kind, default) in OPTIONS.get(metric, {}).items()]


def parse_option(kind: str, value: Any) -> Any:
    """A widget's value as the option's type (a list for texts, one per line)."""
    if kind == "texts":
        return [ln.strip() for ln in str(value or "").splitlines() if ln.strip()]
    return value


@dataclass
class Draft:
    """The page's task so far: the task when every row and field reads, else the error naming them."""

    task: Task | None
    error: str | None = None
    samples: list[dict] = field(default_factory=list)


def draft(table: Table, spec: dict[str, Any], *, source: str = "") -> Draft:
    try:
        task = build_task(spec, table, where="the task", source=source)
    except DataError as exc:
        return Draft(None, str(exc))
    return Draft(task)


def sample_frame(task: Task, n: int = 5) -> tuple[pd.DataFrame, list[Grade]]:
    """The metric on the first rows: each row's problem, its reference, and the reference scored against
    itself (python runs in the sandbox; a judge needs the model, so it is not run here)."""
    problems = [task.problem_of(i) for i in range(min(n, len(task.rows)))]
    m = task.metric
    if m.name == "python":
        grades = run_python(m, [(p.reference, p.meta["row"]) for p in problems])
    elif m.name in ("judge", "tests"):
        grades = [Grade(None, None, "graded during an evaluation" if m.name == "judge" else "runs the row's tests")
                  for _ in problems]
    else:
        grades = [grade_text(m, p.reference, p.reference) for p in problems]
    rows = [{"line": p.meta["line"], "problem": p.question, "reference": p.reference,
             "reference vs itself": g.score, "why": g.detail if g.score is None or g.score < 1 else ""}
            for p, g in zip(problems, grades)]
    return pd.DataFrame(rows), grades


def self_score_text(task: Task, grades: list[Grade]) -> tuple[bool, str]:
    """(ok, sentence): the reference scored against itself must be 1; if not, why."""
    m = task.metric
    if m.name == "judge":
        return True, ("A judge is a model: scoring the reference against itself would test the model, not your "
                      "data, so it is not run here. Its scores will be labelled \"graded by a model\".")
    if m.name == "tests":
        return True, "Metric 'tests' runs each row's tests against the answer's code in the sandbox."
    bad = [(g, i) for i, g in enumerate(grades) if g.score is None or g.score < 1]
    if not bad:
        return True, f"The reference scored against itself is 1 on all {len(grades)} rows shown."
    g, i = bad[0]
    why = g.detail or f"it scores {g.score:.2f}"
    hint = (" For 'regex' the reference is a pattern, which need not match its own text." if m.name == "regex" else
            " The text metrics compare what follows the last 'Answer:' (or a \\boxed{}), so a reference holding "
            "one can never be matched." if "answer" in task.problem_of(i).reference.lower() else "")
    return False, (f"The reference scored against itself is not 1 on {len(bad)} of {len(grades)} rows shown "
                   f"({task.where(i)}: {why}).{hint} Check the reference column and the metric's options.")


def run_graded_by(ws: Any, run_id: int) -> list[str]:
    """The judge models whose grades made an evolution run's scores (empty: none was made by a model)."""
    import json

    rows = ws.query("SELECT per_problem_json FROM evo_rounds WHERE run_id = ? AND per_problem_json LIKE ?",
                    (int(run_id), '%"grade"%'))
    models = set()
    for r in rows:
        for x in json.loads(r["per_problem_json"] or "[]"):
            g = x.get("grade") if isinstance(x, dict) else None
            if isinstance(g, dict) and g.get("model"):
                models.add(str(g["model"]))
    return sorted(models)


def graded_caption(models: list[str]) -> str | None:
    """The label every page puts beside a score a judge metric made."""
    from flowcore.tasks.metrics import graded_by_note

    if not models:
        return None
    return (f":material/gavel: Scores {graded_by_note(models)}: the task's judge metric grades each answer "
            "against the reference and its rubric; every grade keeps its reason.")
