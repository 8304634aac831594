"""Commands for a team on one shared workspace (PostgreSQL via MERMAIDFLOW_DB or --db) and a Ray cluster:

    python -m flowcore submit --benchmark gsm8k --rounds 20 [--ray]   store a run; queue it (or hand it to Ray)
    python -m flowcore submit --resume RUN [--ray] [--wait]           hand a stopped run on again
    python -m flowcore worker [--once]                                claim queued runs and evolve them
    python -m flowcore queue                                          what is queued, running, done
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from flowcore.cli.common import CliError, JobFailed, emit, positive


def _workspace(args: argparse.Namespace, existing: bool = False):  # noqa: ANN202
    """The workspace of --db (else $MERMAIDFLOW_DB); ``existing``: a SQLite file must be there already (a worker
    or a listing on a mistyped path would otherwise make a new empty workspace and wait on it forever)."""
    import os

    from flowcore.workspace.store import DatabaseError, Workspace, default_target, is_postgres, redact

    target = args.db or default_target()
    if existing and not is_postgres(target) and not os.path.exists(target):
        raise CliError(f"{target}: no such workspace database (`submit` creates it; give the --db or "
                       "MERMAIDFLOW_DB the app and `submit` use)")
    try:
        ws = Workspace(args.db) if args.db else Workspace()
        ws.query("SELECT 1")  # reach the database now: a bad URL or file is a usage error, said plainly
    except (OSError, DatabaseError) as exc:
        where = redact(args.db or "$MERMAIDFLOW_DB")
        raise CliError(str(exc) if where in str(exc) else f"cannot open the workspace {where}: {exc}") from None
    return ws


def _config(args: argparse.Namespace):  # noqa: ANN202
    from flowcore.evolution import ops
    from flowcore.evolution.loop import EvolutionConfig

    try:
        operators = ops.parse_operator_list(args.operators) if args.operators else list(ops.OPERATORS)
    except ValueError as exc:
        raise CliError(f"--operators: {exc}") from None
    cfg = EvolutionConfig(benchmark=args.benchmark, rounds=args.rounds, candidates=args.candidates, seed=args.seed,
                          limit=args.limit, mode=args.mode, offline=args.offline, operators=operators)
    try:
        cfg.validate()
    except ValueError as exc:
        raise JobFailed(str(exc)) from None
    return cfg


def _settings(ws, offline: bool):  # noqa: ANN001, ANN202
    """The LLM settings the worker or actor will use: said now, not after the run is queued."""
    from flowcore.workspace.settings import effective_llm_settings

    if offline:
        return None
    settings, problems = effective_llm_settings(ws)
    if not settings.configured and problems:  # set, but unreadable: say which and why
        raise CliError("; ".join(problems) + " (fix it, or add --offline for a structure-only run)")
    if not settings.configured:
        raise CliError("this run needs an LLM and none is configured: set OPENAI_BASE_URL (and OPENAI_API_KEY) "
                       "here and for the workers, or save the endpoint on the Settings page of this workspace; "
                       "or add --offline for a structure-only run")
    return settings


def _cmd_submit(args: argparse.Namespace) -> int:
    from flowcore.cli.common import resolve_task

    if args.wait and not args.ray:
        raise CliError("--wait is for --ray (a queued run is followed with `queue` or on the History page)")
    ws = _workspace(args)
    if args.resume is not None:
        return _resume(ws, args)
    if args.rounds is None:
        raise CliError("--rounds is required (or --resume RUN to hand a stored run on)")
    own = resolve_task(args, ws)
    if args.task_file:  # the workers read the task from the shared workspace
        from flowcore.tasks import DataError
        from flowcore.tasks.saved import save

        try:
            save(ws, own)
        except DataError as exc:
            raise JobFailed(str(exc)) from None
    cfg = _config(args)
    if not own.builtin:
        cfg.task_digest = own.digest
    settings = _settings(ws, args.offline)
    ref = None
    try:
        if args.ray:
            from flowcore.evolution.remote import submit_evolution

            run_id, ref = submit_evolution(ws, cfg, settings)
            out = {"run_id": run_id, "where": f"ray actor mermaidflow-evolve-{run_id}"}
        else:
            from flowcore.evolution.queued import submit_evolution

            run_id, item = submit_evolution(ws, cfg)
            out = {"run_id": run_id, "item": item, "where": "work queue"}
    except ValueError as exc:
        raise JobFailed(str(exc)) from None
    except RuntimeError as exc:  # ClusterError: Ray missing or unreachable
        raise CliError(str(exc)) from None
    return _submitted(ws, args, out, ref)


def _resume(ws, args: argparse.Namespace) -> int:  # noqa: ANN001
    """``submit --resume RUN``: a stored run handed on again (to a new Ray actor, or to the work queue)."""
    from flowcore.evolution.history import History
    from flowcore.evolution.lease import RunBusy

    try:
        info = History(ws).run(args.resume)
    except KeyError:
        raise CliError(f"no evolution run {args.resume} in {ws.path}") from None
    settings = _settings(ws, info.offline)
    ref = None
    try:
        if args.ray:
            from flowcore.evolution.remote import actor_name, resume_evolution

            ref = resume_evolution(ws, args.resume, settings)
            out = {"run_id": args.resume, "where": f"ray actor {actor_name(args.resume)}"}
        else:
            from flowcore.workspace import queue as workqueue

            if info.status == "finished":
                raise JobFailed(f"run {args.resume} is finished: nothing to resume")
            out = {"run_id": args.resume, "item": workqueue.submit(ws, "evolve", {"run_id": args.resume}),
                   "where": "work queue"}
    except (ValueError, RunBusy) as exc:
        raise JobFailed(str(exc)) from None
    except RuntimeError as exc:  # ClusterError
        raise CliError(str(exc)) from None
    return _submitted(ws, args, out, ref)


def _submitted(ws, args: argparse.Namespace, out: dict, ref) -> int:  # noqa: ANN001
    """Say where the run went; with --wait, follow the Ray actor to its end and say how it ended (a run whose
    actor died for good, or whose cluster went away, is recorded stopped with the command that resumes it)."""
    if args.json:
        emit(out)
    else:
        print(f"run {out['run_id']} submitted to the {out['where']}; follow it on the History page", flush=True)
    if not args.wait or ref is None:
        return 0
    from flowcore.evolution.remote import wait

    end = wait(ws, out["run_id"], ref)
    if args.json:
        emit({"run_id": end["run_id"], "status": end["status"], "reason": end.get("reason")})
    else:
        print(f"run {end['run_id']} {end['status']}" + (f": {end['reason']}" if end.get("reason") else ""))
    return 0 if end["status"] == "finished" else 1


def _cmd_worker(args: argparse.Namespace) -> int:
    import flowcore.evolution.queued  # noqa: F401 - registers the "evolve" handler
    from flowcore.workspace import queue as workqueue

    ws = _workspace(args, existing=True)
    name = args.name or workqueue.worker_name()
    if not args.once:  # otherwise a waiting worker says nothing at all
        print(f"{name}: waiting for queued runs in {ws.path} (Ctrl-C to stop)", file=sys.stderr, flush=True)

    def said(item: workqueue.Item) -> None:
        msg = {"worker": name, "item": item.id, "kind": item.kind, "attempt": item.attempts, **item.payload,
               "outcome": item.outcome, **({"detail": item.detail} if item.detail else {})}
        if args.json:
            emit(msg)
        elif item.outcome == "lost":  # paused or cut off, and another worker carries it on: nothing finished here
            print(f"{name}: gave up item {item.id} ({item.kind} {item.payload}, attempt {item.attempts}): "
                  f"{item.detail}", flush=True)
        elif item.outcome == "failed":
            print(f"{name}: item {item.id} failed ({item.kind} {item.payload}, attempt {item.attempts}): "
                  f"{item.detail}", flush=True)
        else:
            print(f"{name}: finished item {item.id} ({item.kind} {item.payload}, attempt {item.attempts})",
                  flush=True)

    stop = threading.Event()
    try:
        n = workqueue.run_worker(ws, worker=name, once=args.once, poll=args.poll, stale_after=args.stale_after,
                                 stop=stop, on_item=said)
    except KeyboardInterrupt:
        stop.set()
        return 1
    if not args.json:
        print(f"{name}: {n} item(s) done; the queue is empty" if args.once else f"{name}: stopped")
    return 0


def _cmd_queue(args: argparse.Namespace) -> int:
    from flowcore.evolution import remote
    from flowcore.workspace import queue as workqueue

    ws = _workspace(args, existing=True)
    rows = workqueue.items(ws)
    ray_runs: list[dict] = []
    if "evo_runs" in ws.tables():
        remote.reconcile(ws)  # a Ray run no actor evolves any more is recorded stopped, with its resume command
        ray_runs = remote.runs(ws)
    if args.json:
        emit({"items": rows, "ray": ray_runs})
        return 0
    if not rows:
        print("the work queue is empty")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))
        print(f"#{r['id']} {r['kind']} {r['payload_json']} · {r['status']} · attempts {r['attempts']} · "
              f"{r['worker'] or '—'} · {when}" + (f" · {r['error']}" if r["error"] else ""))
    for r in ray_runs:
        print(f"run {r['run_id']} · Ray actor {r['actor']} ({r['cluster']}) · {r['status']} · started "
              f"{r['starts']} time(s)" + (f" · {r['reason']}" if r["reason"] else ""))
    return 0


def _seconds(v: str) -> float:
    try:
        n = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {v!r}") from None
    if not n > 0 or n == float("inf"):  # 0 would make an idle worker spin on the CPU
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {v}")
    return n


def register(sub: argparse._SubParsersAction) -> None:
    from flowcore.cli.common import add_task_args

    s = sub.add_parser("submit", help="store an evolution run and queue it for workers (or --ray: a Ray job)")
    add_task_args(s).add_argument("--resume", type=positive, metavar="RUN",
                                  help="hand the stored run RUN on again (its own settings), after its last round")
    s.add_argument("--rounds", type=positive)
    s.add_argument("--candidates", type=positive, default=4)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--limit", type=positive, help="first N problems of the validation split")
    s.add_argument("--mode", choices=("llm", "programmatic"), default="llm")
    s.add_argument("--operators", help="comma-separated subset of the graph operators")
    s.add_argument("--offline", action="store_true", help="structure-only: never call an LLM, store no scores")
    s.add_argument("--ray", action="store_true", help="run it in a detached Ray actor ($MERMAIDFLOW_RAY)")
    s.add_argument("--wait", action="store_true",
                   help="with --ray: follow the actor to the run's end (needed with MERMAIDFLOW_RAY=local)")
    s.add_argument("--db", help="workspace (file or postgresql:// URL; default: $MERMAIDFLOW_DB)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_submit)

    w = sub.add_parser("worker", help="claim queued evolution runs from the workspace and evolve them")
    w.add_argument("--db", help="workspace (file or postgresql:// URL; default: $MERMAIDFLOW_DB)")
    w.add_argument("--once", action="store_true", help="stop when the queue is empty")
    w.add_argument("--poll", type=_seconds, default=1.0, help="seconds between looks at an empty queue")
    w.add_argument("--stale-after", type=_seconds, default=30.0,
                   help="seconds without a heartbeat after which another worker's item is taken over")
    w.add_argument("--name", help="worker name in the queue (default: host:pid)")
    w.add_argument("--json", action="store_true")
    w.set_defaults(func=_cmd_worker)

    q = sub.add_parser("queue", help="list the work queue")
    q.add_argument("--db", help="workspace (file or postgresql:// URL; default: $MERMAIDFLOW_DB)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_queue)
