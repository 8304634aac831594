"""Publishing: check a workflow, find where it came from (the evolution run and round whose text it is) and its
latest validation and test scores in the workspace, and store it as the next immutable version NAME@vN.

The command line, the Editor and History pages and the MCP ``publish`` tool all call ``publish_workflow``.
"""

from __future__ import annotations

from typing import Any

from flowcore import catalogue as cat
from flowcore.checker import bounded
from flowcore.mermaid.reader import WorkflowSyntaxError, parse, to_mermaid
from flowcore.workspace.published import Published, PublishError, publish
from flowcore.workspace.store import Workspace


def _texts(text: str) -> tuple[str, ...]:
    """The text as given and its canonical print (a round stores the printer's text)."""
    try:
        canon = to_mermaid(parse(text))
    except WorkflowSyntaxError:
        return (text,)
    return tuple(dict.fromkeys((text, canon)))


def _marks(texts: tuple[str, ...]) -> str:
    return ",".join("?" * len(texts))


def origin(ws: Workspace, text: str) -> tuple[int | None, int | None]:
    """(run, round) of the latest evolution round whose workflow is this text, else (None, None)."""
    if "evo_rounds" not in ws.tables():
        return None, None
    texts = _texts(text)
    rows = ws.query(f"SELECT run_id, round FROM evo_rounds WHERE workflow_text IN ({_marks(texts)}) "
                    "ORDER BY created DESC LIMIT 1", texts)
    return (int(rows[0]["run_id"]), int(rows[0]["round"])) if rows else (None, None)


def latest_scores(ws: Workspace, text: str, run_id: int | None = None, rnd: int | None = None) -> dict[str, Any]:
    """{"validation": {...} | None, "test": {...} | None}: the latest score of each split, from the round's own
    evaluation, its held-out test re-score, or an evaluation of the same text on the Run page."""
    texts, tables = _texts(text), set(ws.tables())
    found: dict[str, list[dict]] = {"validation": [], "test": []}
    if run_id is not None and rnd is not None and "evo_rounds" in tables:
        for r in ws.query("SELECT score, n, created FROM evo_rounds WHERE run_id=? AND round=? AND score IS NOT NULL",
                          (run_id, rnd)):
            found["validation"].append({"score": r["score"], "n": r["n"], "at": r["created"],
                                        "from": f"run {run_id} round {rnd}"})
    if run_id is not None and rnd is not None and "evo_test_scores" in tables:
        for r in ws.query("SELECT split, score, n, created FROM evo_test_scores WHERE run_id=? AND round=? "
                          "AND score IS NOT NULL", (run_id, rnd)):
            if r["split"] in found:
                found[r["split"]].append({"score": r["score"], "n": r["n"], "at": r["created"],
                                          "from": f"run {run_id} round {rnd} re-scored"})
    if "evaluations" in tables:
        for r in ws.query(f"SELECT id, benchmark, split, score, n, created FROM evaluations WHERE workflow_text IN "
                          f"({_marks(texts)}) AND status='done' AND score IS NOT NULL", texts):
            if r["split"] in found:
                found[r["split"]].append({"score": r["score"], "n": r["n"], "at": r["created"],
                                          "from": f"evaluation {r['id']} ({r['benchmark']})"})
    return {k: (max(v, key=lambda d: d["at"]) if v else None) for k, v in found.items()}


def task_kind(ws: Workspace, task: object) -> str | None:
    """The checker's kind (math, code, text) of a task name: a kind itself, a built-in benchmark or a task saved in
    the workspace; None when it names nothing (before, such a task was published and checked with no task)."""
    if not isinstance(task, str) or not task.strip():
        return None
    if task in cat.TASKS:
        return task
    from flowcore.tasks import kind_of  # the tasks' loaders only when a name is not a kind

    return kind_of(task, ws)


def task_problem(ws: Workspace, task: object) -> str:
    """What is wrong with a task that names nothing, naming what would do."""
    from flowcore.tasks import BUILTIN

    return (f"task must be one of {', '.join(cat.TASKS)}, a built-in benchmark ({', '.join(BUILTIN)}) or a task "
            f"saved in the workspace, got {task!r}")


def publish_workflow(ws: Workspace, name: str, text: str, task: str, *, created_by: str, note: str | None = None,
                     run_id: int | None = None, rnd: int | None = None) -> Published:
    """Check ``text`` for its task and store it as ``name``'s next version. PublishError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise PublishError(f"publish {name!r}: the workflow text is empty")
    if not isinstance(task, str) or not task.strip():
        raise PublishError(f"publish {name!r}: the task is empty; name the task the workflow is for (e.g. math)")
    kind = task_kind(ws, task)
    if kind is None:
        raise PublishError(f"publish {name!r}: {task_problem(ws, task)}")
    # within the checker's time and size budget (a long text in a child process that is stopped), as the pages
    errors = [d for d in bounded.check(text, kind) if d.severity == "error"]
    if errors:
        lines = "\n".join(f"  {d}" for d in errors[:10])
        raise PublishError(f"publish {name!r}: the workflow has {len(errors)} error(s); fix them first:\n{lines}")
    if run_id is None and rnd is None:
        run_id, rnd = origin(ws, text)
    scores = latest_scores(ws, text, run_id, rnd)
    val, test = scores["validation"], scores["test"]
    return publish(ws, name, text, task, created_by=created_by, run_id=run_id, round=rnd, note=note,
                   validation_score=val["score"] if val else None, test_score=test["score"] if test else None,
                   scores=scores)


def describe(p: Published) -> dict[str, Any]:
    """A published version as JSON (the command line, MCP and the pages show the same fields)."""
    return {"model": p.model_id, "name": p.name, "version": p.version, "task": p.task, "created": p.created,
            "created_by": p.created_by, "run": p.run_id, "round": p.round, "note": p.note,
            "validation_score": p.validation_score, "test_score": p.test_score}
