"""``aov`` subcommands: metrics, select, render, run, resume (DESIGN §10).

Exit status: 0 ok, 1 invalid input (a cycle, a missing parent, ...) or a failed job, 2 usage or I/O error.
Messages go to stderr, never a traceback. ``--json`` prints one JSON document, or JSON lines for ``run``.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cli import CliError, emit, guarded, read_text
from . import metrics as M
from .execute import EchoAgent, Execution, LLMAgent, ManualAgent, run_sync
from .inspector import LLMInspector, RuleInspector
from .model import AOVError, AOVGraph
from .render import to_mermaid

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


def _backends(args: argparse.Namespace, ws: Any, run_id: str) -> tuple[Any, Any, Any, Any]:
    """(agent, inspector, repair_llm, llm): manual outputs, the configured LLM, or offline stand-ins."""
    if args.manual:
        return ManualAgent(_manual_outputs(args.manual)), RuleInspector(), None, None
    try:
        from ..llm import LLM, LLMSettings
        settings = LLMSettings.from_env()
    except ImportError:
        settings = None
    except ValueError as e:  # a malformed MERMAIDFLOW_* variable
        raise UsageError(str(e)) from None
    if settings is None or not settings.configured:
        print("note: no LLM configured (OPENAI_BASE_URL / OPENAI_API_KEY): offline echo agents and the rule "
              "inspector are used", file=sys.stderr)
        return EchoAgent(), RuleInspector(), None, None
    llm = LLM(settings, workspace=ws, run_id=run_id)
    return LLMAgent(llm), LLMInspector(llm), llm, llm


def _workspace(path: str | None) -> Any:
    if not path:
        return None
    from ..storage import Workspace
    try:
        return Workspace(path)
    except OSError as e:
        raise UsageError(f"{path}: cannot open the database ({e})") from None


async def _drive(ex: Execution, as_json: bool) -> int:
    """Step until done or paused. With ``--json`` stdout holds exactly one JSON line per step; the summary
    and any decision that is needed go to stderr."""
    while not ex.done and ex.status != "paused":
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
        for s in rep.given_up:
            print(f"  gave up on {s}")
    out = sys.stdout if not as_json else sys.stderr
    word = "done" if ex.done else ex.status
    print(f"{word}: {ex.status} after {ex.step_index} step(s); execution {ex.id}", file=out)
    rs = ex.pending_failure
    if ex.status == "paused" and rs is not None:
        for i, p in enumerate(rs.proposals):
            print(f"  proposal {i}: {p.summary}", file=out)
            for line in p.diff.lines(p.graph):
                print(f"      {line}", file=out)
        how = (f"`aov resume {ex.id} --db ... --accept N` or --reject" if ex.store is not None
               else "run again with --auto-repair, or with --db to decide later")
        print(f"subtask {rs.failed!r} failed ({rs.reason}); the repair proposals await a decision: {how}",
              file=sys.stderr)
    elif ex.status == "failed":
        left = [s for s, st in ex.graph.subtasks.items() if st.status != "completed"]
        print(f"error: the execution failed; not completed: {', '.join(left)}", file=sys.stderr)
    return 0 if ex.status == "completed" else 1


def _check_numbers(args: argparse.Namespace) -> None:
    if (args.k is not None and args.k < 1) or (args.max_repairs is not None and args.max_repairs < 0):
        raise UsageError("--k must be at least 1 and --max-repairs at least 0")


def cmd_run(args: argparse.Namespace) -> int:
    _check_numbers(args)
    graph = _load(args.file)
    ws = _workspace(args.db)
    eid = uuid.uuid4().hex[:12]
    agent, inspector, repair_llm, _ = _backends(args, ws, eid)
    store = None
    if ws is not None:
        from .store import ExecutionStore
        store = ExecutionStore(ws)
    ex = Execution(graph, agent, inspector, repair_llm=repair_llm, k=args.k or 3,
                   max_repairs=3 if args.max_repairs is None else args.max_repairs,
                   mode="auto" if args.auto_repair else "interactive", store=store, execution_id=eid)
    return run_sync(_drive(ex, args.json))


def cmd_resume(args: argparse.Namespace) -> int:
    _check_numbers(args)
    if not Path(args.db).exists():
        raise UsageError(f"{args.db}: no such database")
    ws = _workspace(args.db)
    from .store import load_execution
    agent, inspector, repair_llm, _ = _backends(args, ws, args.execution_id)
    ex = load_execution(ws, args.execution_id, agent, inspector, repair_llm)
    if args.auto_repair:
        ex.mode = "auto"
    if args.k is not None:
        ex.k = args.k
    if args.max_repairs is not None:
        ex.max_repairs = args.max_repairs
    if args.accept is not None or args.reject:
        if ex.status != "paused":
            raise AOVError(f"execution {ex.id} is {ex.status}: there is nothing to accept or reject")
        ex.accept(args.accept) if args.accept is not None else ex.reject()
    return run_sync(_drive(ex, args.json))


# ---- wiring -------------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    aov = subparsers.add_parser("aov", help="Flow AOV graphs: metrics, selection and execution")
    sub = aov.add_subparsers(dest="aov_command", metavar="AOV_COMMAND", required=True)
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
        p = sub.add_parser(name, help="execute an AOV graph step by step with the inspector" if name == "run"
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
        p.add_argument("--json", action="store_true", help="one JSON line per step on stdout")
        p.add_argument("--manual", metavar="OUTPUTS.json",
                       help="agents' outputs by hand: {subtask_id: text or [text per attempt]}; no LLM")
        p.add_argument("--auto-repair", action="store_true",
                       help="apply the best repair proposal automatically instead of pausing")
        p.add_argument("--k", type=int, help="repair proposals per failure (default 3)")
        p.add_argument("--max-repairs", type=int, help="repairs per subtask before giving up (default 3)")
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
