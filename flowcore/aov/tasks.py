"""A task set for Flow with checkable acceptance, and the harness that runs "Flow on" against "one agent".

The tasks (``assets/aov/tasks/*.json``) are the paper's kinds: a game, a website, a LaTeX Beamer deck, a
report. Each names its deliverable files and its acceptance checks (files exist, code runs, tests pass,
the HTML/CSS/LaTeX/Markdown has the required structure); the checks run in the sandbox on the files the
agents wrote (``_acceptance.py``). Agents deliver files as a ``### File: NAME`` line followed by a fenced
block; the goal tells them so. When several subtasks write the same file, the one later in the graph wins.

Both modes go through the same harness: the same LLM, the same event-driven execution, inspector and repairs.
**flow**: K candidate plans generated at once, the rule's choice executed with periodic refinement.
**single**: the whole goal as one subtask for one agent. A run is ``passed`` (every check passes),
``failed``, or ``error`` when the endpoint failed (then it says nothing about the method).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flowcore.aov import metrics as M
from flowcore.aov.execute import Execution, LLMAgent
from flowcore.aov.generate import generate_candidates
from flowcore.aov.inspector import LLMInspector, RuleInspector
from flowcore.aov.model import AOVError, AOVGraph
from flowcore.workspace.files import write_file

TASKS_DIR = Path(__file__).resolve().parents[2] / "assets" / "aov" / "tasks"
CHECK_KINDS = ("files", "python_tests", "runs", "html", "css", "latex", "markdown")
MODES = ("flow", "single")
FILE_NOTE = ("\nDeliver every file in full as a line '### File: NAME' followed by one fenced code block holding "
             "the whole file; a later subtask that improves a file delivers it again in full.")
_CHECKER = Path(__file__).with_name("_acceptance.py")


@dataclass
class FlowTask:
    id: str
    kind: str
    title: str
    goal: str
    deliverables: list[str]
    checks: list[dict[str, Any]]

    @property
    def prompt_goal(self) -> str:
        return self.goal + FILE_NOTE


def read_task(doc: Any, where: str) -> FlowTask:
    """A task from its JSON document; AOVError naming the file and field when it is malformed."""
    if not isinstance(doc, dict):
        raise AOVError(f"{where}: a task must be a JSON object")
    for name in ("id", "kind", "title", "goal"):
        if not isinstance(doc.get(name), str) or not doc[name].strip():
            raise AOVError(f"{where}: field {name!r} must be a non-empty string")
    files = doc.get("deliverables")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) and _safe(f) for f in files):
        raise AOVError(f"{where}: field 'deliverables' must list relative file names")
    checks = doc.get("checks")
    if not isinstance(checks, list) or not checks:
        raise AOVError(f"{where}: field 'checks' must be a non-empty list")
    for i, c in enumerate(checks):
        if not isinstance(c, dict) or c.get("kind") not in CHECK_KINDS:
            raise AOVError(f"{where}: checks[{i}]: 'kind' must be one of {', '.join(CHECK_KINDS)}")
        need = {"files": "files", "python_tests": "tests", "runs": "file"}.get(c["kind"], "file")
        if need not in c:
            raise AOVError(f"{where}: checks[{i}] ({c['kind']}): field {need!r} is missing")
    return FlowTask(doc["id"], doc["kind"], doc["title"], doc["goal"], list(files), checks)


def load_tasks(folder: Path = TASKS_DIR) -> list[FlowTask]:
    """The task files of ``folder``; a folder that is missing or holds none is an error (a mistyped --dir
    would otherwise list nothing and succeed)."""
    if not Path(folder).is_dir():
        raise AOVError(f"{folder}: no such folder of task files")
    files = sorted(Path(folder).glob("*.json"))
    if not files:
        raise AOVError(f"{folder}: no task files (*.json) in this folder")
    tasks = []
    for p in files:
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise AOVError(f"{p}: not valid JSON ({e.msg}, line {e.lineno})") from None
        tasks.append(read_task(doc, str(p)))
    return tasks


def task(task_id: str, folder: Path = TASKS_DIR) -> FlowTask:
    tasks = load_tasks(folder)
    for t in tasks:
        if t.id == task_id:
            return t
    raise AOVError(f"no task {task_id!r} (tasks: {', '.join(t.id for t in tasks)})")


# ---- files from the agents' outputs ---------------------------------------------------------------
_FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([^\n`]*)$")
_NAME_LINE = re.compile(r"^\s*(?:#+\s*)?(?:\*\*)?(?:file(?:name)?\s*[:=]\s*)?`?([\w][\w./-]*\.\w+)`?(?:\*\*)?:?\s*$",
                        re.IGNORECASE)


def _safe(name: str) -> bool:
    return bool(name) and not name.startswith(("/", "\\")) and ".." not in Path(name).parts


def extract_files(text: str) -> dict[str, str]:
    """Files in a reply: a fenced block preceded by a line naming the file (``### File: game.py``,
    ``**index.html**``, ``styles.css:``) or whose info string names it (```` ```python game.py ````)."""
    out: dict[str, str] = {}
    lines = str(text).splitlines()
    i, last_name = 0, None
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            n = _NAME_LINE.match(lines[i])
            last_name = n.group(1) if n else (last_name if not lines[i].strip() else None)
            i += 1
            continue
        fence, info = m.group(1), m.group(2).split()
        named = next((w.split("=", 1)[-1] for w in info if "." in w and _safe(w.split("=", 1)[-1])), None)
        body, i = [], i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        name = named or last_name
        if name and _safe(name):
            out[name] = "\n".join(body) + "\n"
        last_name = None
    return out


def files_from(graph: AOVGraph) -> dict[str, str]:
    """All files the completed subtasks delivered; a subtask later in the graph overrides an earlier one."""
    out: dict[str, str] = {}
    for step in M.steps(graph):
        for sid in step:
            st = graph.subtasks[sid]
            if st.status == "completed":
                out.update(extract_files(st.data if isinstance(st.data, str) else json.dumps(st.data)))
    return out


# ---- acceptance -------------------------------------------------------------------------------------
@dataclass
class CheckResult:
    check: str
    passed: bool
    detail: str


@dataclass
class Acceptance:
    passed: bool
    checks: list[CheckResult]

    @property
    def score(self) -> str:
        return f"{sum(c.passed for c in self.checks)}/{len(self.checks)}"


_CODE_CHECKS = ("python_tests", "runs")  # the kinds that execute the agents' code


def accept(t: FlowTask, files: dict[str, str], timeout: float = 40.0, per_check: int = 8) -> Acceptance:
    """Run the task's checks in the sandbox on ``files`` (each within ``per_check`` seconds, all within
    ``timeout``). SandboxUnavailable propagates: nothing was run.

    The agents' code never shares a process with a verdict: the structural checks (files, HTML, CSS, LaTeX,
    Markdown) read the files as data in a sandbox where none of that code runs; ``python_tests`` judge from a
    sandbox of their own, calling the module in another (``run_untrusted(tests=...)``); ``runs`` runs the
    program alone and its exit status and output are judged here."""
    from flowcore.execution.sandbox import run_untrusted

    files = {k: v for k, v in files.items() if _safe(k)}
    deadline = time.monotonic() + timeout
    structural = [c for c in t.checks if c["kind"] not in _CODE_CHECKS]
    results: dict[int, CheckResult] = {}
    if structural:
        code = (f"FILES = json.loads({json.dumps(json.dumps(files))})\n"
                f"CHECKS = json.loads({json.dumps(json.dumps(structural))})\nPER_CHECK_SECONDS = {int(per_check)}\n")
        res = run_untrusted("import json\n" + code + _CHECKER.read_text(encoding="utf-8"), timeout=timeout,
                            memory_mb=768)
        got = [CheckResult(**json.loads(line[8:])) for line in res.stdout.splitlines()
               if line.startswith("@@CHECK ")]
        why = "the checks did not finish: " + ("time limit" if res.timed_out else (res.error or res.stderr[-300:]
                                                                                    or "no result"))
        got += [CheckResult(c.get("name") or c["kind"], False, why) for c in structural[len(got):]]
        results.update({i: r for i, r in zip([i for i, c in enumerate(t.checks) if c in structural], got)})
    for i, c in enumerate(t.checks):
        if c["kind"] in _CODE_CHECKS:
            left = max(deadline - time.monotonic(), 0.5)
            results[i] = _code_check(c, files, min(float(per_check), left), run_untrusted)
    return Acceptance(all(r.passed for r in results.values()), [results[i] for i in sorted(results)])


def _code_check(c: dict, files: dict[str, str], seconds: float, run_untrusted) -> CheckResult:
    label = c.get("name") or c["kind"]
    # The agents' files, written into the candidate sandbox's scratch dir, which is also its import path.
    setup = (f"import json, os, sys\nfor _n, _t in json.loads({json.dumps(json.dumps(files))}).items():\n"
             "    os.makedirs(os.path.dirname(_n) or '.', exist_ok=True)\n"
             "    open(_n, 'w', encoding='utf-8').write(_t)\nsys.path.insert(0, os.getcwd())\n")
    if c["kind"] == "python_tests":
        if c["module"] + ".py" not in files:
            return CheckResult(label, False, f"file not found: {c['module']}.py")
        res = run_untrusted(setup + f"import {c['module']} as m\n", tests=c["tests"], timeout=seconds,
                            memory_mb=768)
        if res.ok:
            return CheckResult(label, True, "all tests pass")
        return CheckResult(label, False, _why(res, seconds))
    if c["file"] not in files:
        return CheckResult(label, False, f"file not found: {c['file']}")
    res = run_untrusted(setup + f"import runpy\nrunpy.run_path({c['file']!r}, run_name='__main__')\n",
                        stdin=c.get("stdin", ""), timeout=seconds, memory_mb=768)
    if not res.ok:
        return CheckResult(label, False, _why(res, seconds))
    missing = [x for x in c.get("expect_output", []) if x not in res.stdout]
    if missing:
        return CheckResult(label, False, f"the output lacks {missing!r}; it ends with {res.stdout[-200:]!r}")
    return CheckResult(label, True, f"ran to the end ({len(res.stdout)} characters of output)")


def _why(res, seconds: float) -> str:
    if res.timed_out:
        return f"took longer than {seconds:g} s"
    return str(res.error or res.stderr[-300:] or "failed")[:600]


# ---- the harness: flow vs single ------------------------------------------------------------------------
@dataclass
class TaskRun:
    task: str
    mode: str
    repeat: int
    status: str  # passed | failed | error
    checks: str  # "passed/total"
    detail: list[dict[str, Any]] = field(default_factory=list)
    subtasks: int = 0
    files: list[str] = field(default_factory=list)
    calls: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def single_plan(t: FlowTask) -> AOVGraph:
    """The one-agent baseline: the whole goal as one subtask."""
    return AOVGraph.from_dict({"goal": t.prompt_goal, "agents": [{"id": "developer", "role": "does it all"}],
                               "subtasks": {"all": {"subtask_requirement": t.prompt_goal, "agent": "developer"}}})


def _endpoint_failed(ex: Execution) -> str | None:
    for e in ex.events:
        v = e["payload"].get("verdict") if e["kind"] == "result" else None
        if v and v.get("source") == "agent" and "LLM" in v.get("reason", ""):
            return v["reason"]
    return None


async def run_task(t: FlowTask, llm: Any, mode: str, repeat: int = 0, *, k: int = 3, refine_every: int = 3,
                   max_refinements: int = 5, judge: bool = True, out_dir: Path | None = None) -> TaskRun:
    """One run of ``t`` in ``mode`` (flow | single); never raises for what the model did."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    run_llm = llm.child() if hasattr(llm, "child") else llm
    t0 = time.monotonic()
    result = TaskRun(t.id, mode, repeat, "failed", f"0/{len(t.checks)}")
    if mode == "single":
        graph = single_plan(t)
    else:
        cands = await generate_candidates(run_llm, t.prompt_goal, k=k)
        valid = [c for c in cands if c.metrics is not None]
        if not valid:
            failed_calls = all((c.error or "").startswith("LLM call failed") for c in cands)
            result.status = "error" if failed_calls else "failed"
            result.error = "no valid plan: " + "; ".join(str(c.error) for c in cands)[:500]
            return _finish(result, run_llm, t0)
        graph = cands[M.choose([c.metrics for c in cands])].graph
        graph.goal = t.prompt_goal
    ex = Execution(graph, LLMAgent(run_llm), LLMInspector(run_llm) if judge else RuleInspector(),
                   repair_llm=run_llm, mode="auto", k=k, refine_llm=run_llm if mode == "flow" else None,
                   refine_every=refine_every, max_refinements=max_refinements)
    await ex.run()
    result.subtasks = len(ex.graph.subtasks)
    files = files_from(ex.graph)
    result.files = sorted(files)
    if out_dir is not None:
        _write(out_dir / t.id / f"{mode}_{repeat + 1}", files)
    acc = accept(t, files)
    result.checks, result.detail = acc.score, [asdict(c) for c in acc.checks]
    result.status = "passed" if acc.passed else "failed"
    if not acc.passed and ex.status != "completed" and (why := _endpoint_failed(ex)):
        result.status, result.error = "error", why[:500]
    return _finish(result, run_llm, t0)


def _finish(r: TaskRun, llm: Any, t0: float) -> TaskRun:
    usage = getattr(llm, "usage", None)
    r.calls, r.cost = (getattr(usage, "calls", 0), getattr(usage, "cost", 0.0)) if usage else (0, 0.0)
    r.seconds = round(time.monotonic() - t0, 2)
    return r


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        write_file(p, text)


def summary(runs: list[TaskRun]) -> list[dict[str, Any]]:
    """Per task and mode: passed / runs that measured something (errors are left out, and counted)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in runs:
        row = rows.setdefault((r.task, r.mode), {"task": r.task, "mode": r.mode, "passed": 0, "measured": 0,
                                                 "errors": 0, "calls": 0, "cost": 0.0, "seconds": 0.0})
        row["errors" if r.status == "error" else "measured"] += 1
        row["passed"] += r.status == "passed"
        row["calls"] += r.calls
        row["cost"] += r.cost
        row["seconds"] += r.seconds
    for row in rows.values():
        row["success"] = row["passed"] / row["measured"] if row["measured"] else None
    return list(rows.values())
