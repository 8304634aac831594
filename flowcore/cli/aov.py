"""``aov`` subcommands: generate, metrics, select, render, run, resume, and the task set: tasks, accept,
bench (DESIGN §10).

The whole Flow path is scriptable: ``aov generate "task" --k K --out DIR`` (K candidate graphs from the LLM,
requested concurrently), ``aov select DIR/*.json``, ``aov run DIR/candidate_N.json``.

Exit status: 0 ok, 1 invalid input (a cycle, a missing parent, ...) or a failed job, 2 usage or I/O error.
Messages go to stderr, never a traceback. ``--json`` prints one JSON document, or JSON lines for ``run``
(event-driven: one line per event as it happens; ``--schedule steps``: one line per step) and ``generate``.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowcore.aov import metrics as M
from flowcore.aov.execute import SCHEDULES, EchoAgent, Execution, LLMAgent, ManualAgent, run_sync
from flowcore.aov.generate import generate_candidates
from flowcore.aov.inspector import LLMInspector, RuleInspector
from flowcore.aov.model import AOVError, AOVGraph
from flowcore.aov.render import to_mermaid
from flowcore.aov.settings import FlowSettings
from flowcore.cli.common import CliError, emit, guarded, read_text
from flowcore.workspace.files import write_file

# One file reader and one JSON emitter for the whole command line; a usage/I-O problem exits 2 everywhere.
UsageError = CliError
_read = read_text


def _load(path: str, lenient: bool = False) -> AOVGraph:
    try:
        return AOVGraph.from_json(_read(path), lenient)
    except AOVError as e:
        raise AOVError(f"{path}: {e}") from None


_emit = emit


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The command line's own exit-code mapping, with an invalid AOV graph as the 'exit 1' failure."""
    return guarded(fn, failures=(AOVError,))


# ---- handlers -----------------------------------------------------------------------------------
def cmd_metrics(args: argparse.Namespace) -> int:
    m = M.compute(_load(args.file, lenient=True))
    if args.json:
        _emit(m.to_dict())
    else:
        print(f"P_avg: {m.P_avg:.6g}\nC_dependency: {m.C_dependency:.6g}\nsteps (T={m.T}):")
        for i, s in enumerate(m.steps, 1):
            print(f"  {i}: {', '.join(s)}")
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    ms = [M.compute(_load(f, lenient=True)) for f in args.files]
    chosen = M.choose(ms)
    if args.json:
        _emit({"chosen": chosen, "candidates": [{"file": f, "P_avg": m.P_avg, "C_dependency": m.C_dependency}
                                                for f, m in zip(args.files, ms, strict=True)]})
    else:
        for i, (f, m) in enumerate(zip(args.files, ms, strict=True)):
            mark = "*" if i == chosen else " "
            print(f"{mark} {i} {f}  P_avg={m.P_avg:.6g}  C_dependency={m.C_dependency:.6g}  T={m.T}")
        print(f"chosen: {chosen} ({args.files[chosen]})")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    sys.stdout.write(to_mermaid(_load(args.file)))
    return 0


def _manual_outputs(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(_read(path))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    ok = isinstance(doc, dict) and all(isinstance(v, str) or (isinstance(v, list) and v and all(
        isinstance(x, str) for x in v)) for v in doc.values())
    if not ok:
        raise UsageError(f"{path}: expected an object mapping subtask ids to a text or a list of texts")
    return doc


def _note_unknown_outputs(path: str | None, graph: AOVGraph) -> None:
    """A --manual file naming a subtask the graph lacks is most likely a typo: say so before the run (the
    subtask meant would otherwise fail with "no manual output" and go through repairs). Only a note: a file
    may hold outputs for subtasks a repair adds later."""
    if not path:
        return
    import difflib
    for sid in _manual_outputs(path):
        if sid not in graph.subtasks:
            near = difflib.get_close_matches(sid, list(graph.subtasks), n=1)
            print(f"note: {path}: no subtask {sid!r} in the graph" + (f" (did you mean {near[0]!r}?)" if near
                  else f" (subtasks: {', '.join(graph.subtasks)})"), file=sys.stderr)


def _llm(ws: Any, run_id: str) -> Any:
    """The configured LLM client, or None (no endpoint); a malformed variable is a usage error."""
    try:
        from flowcore.llm.client import LLM, LLMSettings
        settings = LLMSettings.from_env()
    except ImportError:
        return None
    except ValueError as e:  # a malformed MERMAIDFLOW_* variable
        raise UsageError(str(e)) from None
    return LLM(settings, workspace=ws, run_id=run_id) if settings.configured else None


def _backends(args: argparse.Namespace, ws: Any, run_id: str) -> tuple[Any, Any, Any, Any]:
    """(agent, inspector, repair_llm, llm): manual outputs, the configured LLM, or offline stand-ins."""
    if args.manual:
        return ManualAgent(_manual_outputs(args.manual)), RuleInspector(), None, None
    llm = _llm(ws, run_id)
    if llm is None:
        print("note: no LLM configured (OPENAI_BASE_URL / OPENAI_API_KEY): offline echo agents and the rule "
              "inspector are used; no periodic refinement", file=sys.stderr)
        return EchoAgent(), RuleInspector(), None, None
    return LLMAgent(llm), LLMInspector(llm), llm, llm


def _flow_settings() -> FlowSettings:
    try:
        return FlowSettings.from_env()
    except ValueError as e:
        raise UsageError(str(e)) from None


def cmd_generate(args: argparse.Namespace) -> int:
    fs = _flow_settings()
    try:
        k = fs.check_k(fs.k if args.k is None else args.k, "--k")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not args.task.strip():
        raise UsageError("the task is empty: describe what the team of agents should do")
    agents = None
    if args.agents:
        agents = [a.strip() for a in args.agents.split(",") if a.strip()]
        if not agents:
            raise UsageError("--agents: give agent ids separated by commas")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{out}: cannot create the directory ({e})") from None
    llm = _llm(None, uuid.uuid4().hex[:12])
    if llm is None:
        raise UsageError("no LLM configured: set OPENAI_BASE_URL (any OpenAI-compatible server) and/or "
                         "OPENAI_API_KEY to generate candidate graphs")
    cands = run_sync(generate_candidates(llm, args.task, k=k, agents=agents))
    rows = []
    for c in cands:
        name = f"candidate_{c.index + 1}"
        path = out / (f"{name}.json" if c.graph is not None else f"{name}.invalid.txt")
        try:  # an invalid reply is kept as it came, for reading; it is never a candidate
            write_file(path, c.graph.to_json() + "\n" if c.graph is not None else c.raw or (c.error or ""))
        except OSError as e:
            raise UsageError(f"{path}: cannot write ({e.strerror or e})") from None
        row = {"file": str(path), "valid": c.valid, "error": c.error, "repairs": c.repairs}
        if c.metrics is not None:
            row.update(P_avg=c.metrics.P_avg, C_dependency=c.metrics.C_dependency, T=c.metrics.T)
        rows.append(row)
    valid = [i for i, c in enumerate(cands) if c.metrics is not None]
    chosen = M.choose([c.metrics for c in cands]) if valid else None
    for i, row in enumerate(rows):
        if args.json:
            _emit({"event": "candidate", **row, "chosen": i == chosen})
        else:
            mark = "*" if i == chosen else " "
            what = (f"P_avg={row['P_avg']:.6g}  C_dependency={row['C_dependency']:.6g}  T={row['T']}"
                    if row["valid"] else f"invalid: {row['error']}")
            print(f"{mark} {row['file']}  {what}")
    if chosen is None:
        raise AOVError(f"none of the {k} candidates is a valid AOV graph (the replies are in {out})")
    if args.json:
        _emit({"event": "chosen", "index": chosen, "file": rows[chosen]["file"]})
    else:
        print(f"chosen by the rule: {rows[chosen]['file']}  (run it: python -m flowcore aov run "
              f"{rows[chosen]['file']})")
    return 0


def _workspace(path: str | None) -> Any:
    if not path:
        return None
    from flowcore.workspace.store import DatabaseError, Workspace, WorkspaceError, redact
    try:
        ws = Workspace(path)
        ws.query("SELECT 1")  # reach it now: an unreachable server or a file that is no database, said plainly
    except WorkspaceError:
        raise  # the command line's own "PATH: not usable as the workspace database (...)"
    except (OSError, DatabaseError) as e:
        where = redact(path)
        raise UsageError(str(e) if where in str(e) else f"{where}: cannot open the database ({e})") from None
    return ws


def _print_event(ex: Execution, e: dict[str, Any], as_json: bool) -> None:
    """Event-driven runs report as things happen: one line per subtask start, result, repair, refinement."""
    kind, p, n = e["kind"], e["payload"], e["step"]
    if kind not in ("subtask_start", "result", "repair", "refine", "give_up", "proposals", "refine_proposals"):
        return
    if as_json:
        _emit({"event": kind, "step": n, "execution_id": ex.id, **p})
        return
    if kind == "subtask_start":
        print(f"[step {n}] start {p['subtask']} ({p['agent']}, attempt {p['attempt']})", flush=True)
    elif kind == "result":
        v = p["verdict"]
        print(f"[step {n}] {p['subtask']} {'ok' if v['passed'] else 'FAILED (' + v['reason'] + ')'}", flush=True)
    elif kind in ("repair", "refine"):
        what = "repair of " + p["subtask"] if kind == "repair" else f"refinement {p['number']}"
        print(f"  {what} ({p['how']}): {p['summary']}", flush=True)
    elif kind == "give_up":
        print(f"  gave up on {p['subtask']} ({p['reason']})", flush=True)


async def _drive(ex: Execution, as_json: bool) -> int:
    """Run until done or paused. Event-driven: a line per event as it happens; lock-step: with ``--json``
    stdout holds exactly one JSON line per step. The summary and any decision needed go to stderr."""
    if ex.schedule == "event":
        ex.on_event = lambda e: _print_event(ex, e, as_json)
        await ex.run()
    while ex.schedule == "steps" and not ex.done and ex.status != "paused":
        rep = await ex.step()
        if rep is None:
            break
        if as_json:
            _emit({"event": "step", **rep.to_dict(), "execution_id": ex.id,
                   "statuses": {s: st.status for s, st in ex.graph.subtasks.items()}})
            continue
        verdicts = ", ".join(f"{s} {'ok' if v.passed else 'FAILED (' + v.reason + ')'}"
                             for s, v in rep.verdicts.items())
        clones = "".join(f" [clone {c['clone']} for {c['subtask']}]" for c in rep.clones)
        print(f"step {rep.index}: {verdicts}{clones}")
        for r in rep.repairs:
            print(f"  repair of {r['subtask']}: {r['summary']}")
        for r in rep.refinements:
            print(f"  refinement {r['number']}: {r['summary']}")
        for s in rep.given_up:
            print(f"  gave up on {s}")
    out = sys.stdout if not as_json else sys.stderr
    word = f"done: {ex.status}" if ex.done else ex.status
    print(f"{word} after {ex.step_index} step(s); execution {ex.id}", file=out)
    rs = ex.pending_failure
    if ex.status == "paused" and rs is not None:
        for i, p in enumerate(rs.proposals):
            print(f"  proposal {i}: {p.summary}", file=out)
            for line in p.diff.lines(p.graph):
                print(f"      {line}", file=out)
        about = rs.failed or "refinement"
        how = (f"`aov resume {ex.id} --db ... --for {about} --accept N` or --reject" if ex.store is not None
               else "run again with --auto-repair, or with --db to decide later")
        what = (f"subtask {rs.failed!r} failed ({rs.reason}); the repair proposals" if rs.kind == "repair"
                else f"{rs.reason}: the updates of the plan")
        print(f"{what} await a decision: {how}", file=sys.stderr)
    elif ex.status == "failed":
        left = [s for s, st in ex.graph.subtasks.items() if st.status != "completed"]
        print(f"error: the execution failed; not completed: {', '.join(left)}", file=sys.stderr)
    return 0 if ex.status == "completed" else 1


def _check_numbers(args: argparse.Namespace) -> FlowSettings:
    fs = _flow_settings()
    try:
        if args.k is not None:
            fs.check_k(args.k, "--k")
    except ValueError as e:
        raise UsageError(str(e)) from None
    for name in ("max_repairs", "refine_every", "max_refinements"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 0")
    return fs


def cmd_run(args: argparse.Namespace) -> int:
    fs = _check_numbers(args)
    graph = _load(args.file)
    _note_unknown_outputs(args.manual, graph)
    ws = _workspace(args.db)
    eid = uuid.uuid4().hex[:12]
    agent, inspector, repair_llm, llm = _backends(args, ws, eid)
    store = None
    if ws is not None:
        from flowcore.aov.store import ExecutionStore
        store = ExecutionStore(ws)
    ex = Execution(graph, agent, inspector, repair_llm=repair_llm, k=args.k or fs.k,
                   max_repairs=3 if args.max_repairs is None else args.max_repairs,
                   mode="auto" if args.auto_repair else "interactive", store=store, execution_id=eid,
                   schedule=args.schedule or "event", refine_llm=llm,
                   refine_every=fs.refine_every if args.refine_every is None else args.refine_every,
                   max_refinements=fs.max_refinements if args.max_refinements is None else args.max_refinements,
                   context_chars=fs.context_chars)
    return run_sync(_drive(ex, args.json))


def cmd_resume(args: argparse.Namespace) -> int:
    _check_numbers(args)
    from flowcore.workspace.store import is_postgres
    if not is_postgres(args.db) and not Path(args.db).exists():  # a URL is checked by connecting
        raise UsageError(f"{args.db}: no such database")
    ws = _workspace(args.db)
    from flowcore.aov.store import load_execution
    agent, inspector, repair_llm, llm = _backends(args, ws, args.execution_id)
    ex = load_execution(ws, args.execution_id, agent, inspector, repair_llm, refine_llm=llm)
    _note_unknown_outputs(args.manual, ex.graph)
    if args.auto_repair:
        ex.mode = "auto"
    if args.k is not None:
        ex.k = args.k
    if args.max_repairs is not None:
        ex.max_repairs = args.max_repairs
    if args.schedule is not None:
        ex.schedule = args.schedule
    if args.refine_every is not None:
        ex.refine_every = args.refine_every
    if args.max_refinements is not None:
        ex.max_refinements = args.max_refinements
    if args.accept is not None or args.reject:
        if ex.status != "paused":
            raise AOVError(f"execution {ex.id} is {ex.status}: there is nothing to accept or reject")
        rs = ex.pending_failure
        about = rs.failed or "refinement" if rs is not None else ""
        if args.for_ is not None and args.for_ != about:  # e.g. the same command typed twice
            raise AOVError(f"the decision awaited now is about {about!r}, not {args.for_!r} (that one was "
                           f"already taken): nothing was applied; read the proposals with `aov resume {ex.id} "
                           "--db ...` first")
        ex.accept(args.accept) if args.accept is not None else ex.reject()
        print(f"{'accepted proposal ' + str(args.accept) if args.accept is not None else 'rejected the proposals'}"
              f" for {about}", file=sys.stderr)
    return run_sync(_drive(ex, args.json))


def cmd_tasks(args: argparse.Namespace) -> int:
    from flowcore.aov.tasks import load_tasks
    tasks = load_tasks(Path(args.dir)) if args.dir else load_tasks()
    for t in tasks:
        if args.json:
            _emit({"id": t.id, "kind": t.kind, "title": t.title, "deliverables": t.deliverables,
                   "checks": [c.get("name") or c["kind"] for c in t.checks]})
        else:
            print(f"{t.id:<10} {t.kind:<8} {t.title}  (files: {', '.join(t.deliverables)}; "
                  f"{len(t.checks)} checks)")
    return 0


def _sandbox_ready() -> None:
    from flowcore.execution.sandbox import sandbox_status
    ok, msg = sandbox_status()
    if not ok:
        raise UsageError(f"the acceptance checks run in the sandbox, which is not available: {msg}")


def cmd_accept(args: argparse.Namespace) -> int:
    from flowcore.aov.tasks import accept, task
    t = task(args.task, Path(args.tasks_dir)) if args.tasks_dir else task(args.task)
    folder = Path(args.dir)
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such directory")
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            try:
                files[str(p.relative_to(folder))] = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # not a text deliverable
    _sandbox_ready()
    acc = accept(t, files)
    if args.json:
        _emit({"task": t.id, "passed": acc.passed, "checks": [vars(c) for c in acc.checks]})
    else:
        for c in acc.checks:
            print(f"{'ok  ' if c.passed else 'FAIL'} {c.check}: {c.detail}")
        print(f"{t.id}: {'accepted' if acc.passed else 'not accepted'} ({acc.score} checks)")
    return 0 if acc.passed else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from flowcore.aov.tasks import MODES, load_tasks, run_task, summary
    fs = _flow_settings()
    try:
        k = fs.check_k(fs.k if args.k is None else args.k, "--k")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    tasks = load_tasks(Path(args.tasks_dir)) if args.tasks_dir else load_tasks()
    if args.tasks:
        wanted = [x.strip() for x in args.tasks.split(",") if x.strip()]
        unknown = [w for w in wanted if w not in {t.id for t in tasks}]
        if unknown:
            raise UsageError(f"--tasks: unknown task(s) {', '.join(unknown)} (tasks: "
                             f"{', '.join(t.id for t in tasks)})")
        tasks = [t for t in tasks if t.id in wanted]
    modes = MODES if args.mode == "both" else (args.mode,)
    llm = _llm(_workspace(args.db), uuid.uuid4().hex[:12])
    if llm is None:
        raise UsageError("no LLM configured: set OPENAI_BASE_URL and/or OPENAI_API_KEY to run the task set")
    _sandbox_ready()
    runs = []
    for t in tasks:
        for rep in range(args.repeats):
            for mode in modes:
                r = run_sync(run_task(t, llm, mode, rep, k=k, refine_every=fs.refine_every,
                                      max_refinements=fs.max_refinements, judge=not args.rule_inspector,
                                      out_dir=Path(args.out) if args.out else None))
                runs.append(r)
                if args.json:
                    _emit({"event": "run", **r.to_dict()})
                else:
                    print(f"{t.id:<10} {mode:<6} #{rep + 1}: {r.status:<6} checks {r.checks}  "
                          f"{r.subtasks} subtask(s), {r.calls} calls, {r.seconds:.1f} s"
                          + (f"  ({r.error})" if r.error else ""), flush=True)
    rows = summary(runs)
    if args.json:
        for row in rows:
            _emit({"event": "summary", **row})
    else:
        print(f"\n{'task':<10} {'mode':<6} {'success':>8} {'passed':>7} {'errors':>7} {'calls':>6} {'cost $':>8}")
        for row in rows:
            rate = "—" if row["success"] is None else f"{100 * row['success']:.0f}%"
            print(f"{row['task']:<10} {row['mode']:<6} {rate:>8} {row['passed']:>3}/{row['measured']:<3} "
                  f"{row['errors']:>7} {row['calls']:>6} {row['cost']:>8.4f}")
    return 0


# ---- wiring -------------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    aov = subparsers.add_parser("aov", help="Flow AOV graphs: metrics, selection and execution")
    sub = aov.add_subparsers(dest="aov_command", metavar="AOV_COMMAND", required=True)
    p = sub.add_parser("generate", help="K candidate AOV graphs for a task from the LLM (requested concurrently)")
    p.add_argument("task", help="what the team of agents should do")
    p.add_argument("--k", type=int, help="how many candidates (default: the K setting, MERMAIDFLOW_AOV_K)")
    p.add_argument("--out", required=True, metavar="DIR", help="write DIR/candidate_N.json (one per candidate)")
    p.add_argument("--agents", metavar="ID,ID,...", help="the agents the graphs may use (default: planner, "
                   "worker, reviewer)")
    p.add_argument("--json", action="store_true", help="one JSON line per candidate, then the choice")
    p.set_defaults(func=_guard(cmd_generate))
    p = sub.add_parser("tasks", help="the Flow task set (a game, a website, a Beamer deck, a report)")
    p.add_argument("--dir", help="a folder of task files (default: assets/aov/tasks)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(cmd_tasks))
    p = sub.add_parser("accept", help="run a task's acceptance checks (in the sandbox) on a folder of files")
    p.add_argument("task", help="the task id (see `aov tasks`)")
    p.add_argument("dir", metavar="DIR", help="the folder holding the deliverables")
    p.add_argument("--tasks-dir", help="a folder of task files (default: assets/aov/tasks)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(cmd_accept))
    p = sub.add_parser("bench", help="the task set, 'Flow on' vs 'one agent', in one harness (LLM)")
    p.add_argument("--mode", choices=("flow", "single", "both"), default="both")
    p.add_argument("--tasks", metavar="ID,ID,...", help="only these tasks (default: all)")
    p.add_argument("--tasks-dir", help="a folder of task files (default: assets/aov/tasks)")
    p.add_argument("--repeats", type=int, default=1, help="runs per task and mode (default 1)")
    p.add_argument("--k", type=int, help="candidate plans, repair proposals, refinement updates")
    p.add_argument("--rule-inspector", action="store_true", help="the rule inspector instead of the LLM judge")
    p.add_argument("--out", metavar="DIR", help="keep every run's files in DIR/TASK/MODE_N/")
    p.add_argument("--db", metavar="PATH", help="workspace for the LLM call log and cache")
    p.add_argument("--json", action="store_true", help="a JSON line per run, then per task and mode")
    p.set_defaults(func=_guard(cmd_bench))
    p = sub.add_parser("metrics", help="P_avg, C_dependency and the steps of an AOV graph")
    p.add_argument("file", metavar="FILE.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(cmd_metrics))
    p = sub.add_parser("select", help="choose among AOV graphs: highest P_avg, then lowest C_dependency")
    p.add_argument("files", nargs="+", metavar="FILE.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(cmd_select))
    p = sub.add_parser("render", help="the graph as a Mermaid flowchart coloured by status")
    p.add_argument("file", metavar="FILE.json")
    p.set_defaults(func=_guard(cmd_render))
    for name in ("run", "resume"):
        p = sub.add_parser(name, help="execute an AOV graph with the inspector, repairs and refinement"
                           if name == "run"
                           else "continue a saved execution (optionally deciding on pending proposals)")
        if name == "run":
            p.add_argument("file", metavar="FILE.json")
            p.add_argument("--db", metavar="PATH", help="save the execution in this workspace database")
        else:
            p.add_argument("execution_id")
            p.add_argument("--db", metavar="PATH", required=True)
            g = p.add_mutually_exclusive_group()
            g.add_argument("--accept", type=int, metavar="N", help="accept proposal N of the pending failure")
            g.add_argument("--reject", action="store_true",
                           help="reject the proposals (the subtask stays failed)")
            p.add_argument("--for", dest="for_", metavar="SUBTASK", help="the subtask the decision is about, "
                           "as printed ('refinement' for a refinement): nothing is applied when the decision "
                           "awaited now is another one")
        p.add_argument("--json", action="store_true", help="one JSON line per step on stdout")
        p.add_argument("--manual", metavar="OUTPUTS.json",
                       help="agents' outputs by hand: {subtask_id: text or [text per attempt]}; no LLM")
        p.add_argument("--auto-repair", action="store_true",
                       help="apply the best repair proposal automatically instead of pausing")
        p.add_argument("--k", type=int, help="repair proposals per failure and updates per refinement "
                       "(default: the K setting)")
        p.add_argument("--max-repairs", type=int, help="repairs per subtask before giving up (default 3)")
        p.add_argument("--schedule", choices=SCHEDULES, help="event: each subtask starts when its last parent "
                       "completes (default); steps: lock-step, one step at a time")
        p.add_argument("--refine-every", type=int, metavar="M", help="with an LLM: re-plan the pending part "
                       "after every M completed subtasks (default 3; 0 = never)")
        p.add_argument("--max-refinements", type=int, metavar="N", help="at most N refinements (default 5)")
        p.set_defaults(func=_guard(cmd_run if name == "run" else cmd_resume))


def main(argv: list[str] | None = None) -> int:
    """``aov ...`` on its own (tests; the top-level CLI calls ``register``)."""
    parser = argparse.ArgumentParser(prog="python -m flowcore")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    try:
        args = parser.parse_args(["aov", *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as e:  # argparse has printed the usage message
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
