"""Command line of the evolution engine: ``mutate``, ``crossover`` and ``evolve`` (DESIGN §10).

Exit status: 0 ok, 1 invalid input or failed job, 2 usage or I/O error (raised as CliError / JobFailed and
turned into messages by ``flowcore.cli.main.main``).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import threading
from collections import Counter
from pathlib import Path

from flowcore import catalogue as cat
from flowcore.cli.common import (
    CliError,
    JobFailed,
    add_task_args,
    emit,
    load_workflow,
    nonnegative,
    positive,
    resolve_task,
)
from flowcore.evolution import ops
from flowcore.execution.sandbox import require_sandbox
from flowcore.mermaid.reader import to_mermaid
from flowcore.model import Workflow
from flowcore.workspace.files import write_file


def _out_dir(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"{path}: cannot create the output directory ({exc.strerror or exc})") from None
    return out


def _write(out: Path, name: str, text: str) -> Path:
    path = out / name
    try:
        write_file(path, text)
    except OSError as exc:
        raise CliError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return path


def _children(parents: list[Workflow], names: list[str], task: str, n: int, seed: int,
              orient: bool) -> tuple[list[tuple[ops.Child, list[int]]], Counter]:
    """Up to n distinct valid children; ``orient``: crossover may use either parent as the base."""
    rng = random.Random(seed)
    seen = {to_mermaid(w) for w in parents}
    out: list[tuple[ops.Child, list[int]]] = []
    declined: Counter = Counter()
    for _ in range(n * 10):
        if len(out) >= n:
            break
        name = rng.choice(names)
        order = [1, 0] if orient and rng.random() < 0.5 else list(range(len(parents)))
        res = ops.apply(name, [parents[i] for i in order], task, rng)
        if isinstance(res, ops.Declined):
            declined[res.reason] += 1
            continue
        if res.text in seen:
            continue
        seen.add(res.text)
        out.append((res, [order[i] for i in res.parents]))
    return out, declined


def _report(files: list[str], children: list[tuple[ops.Child, list[int]]], stem: str, out: Path,
            declined: Counter) -> int:
    if not children:
        why = "; ".join(f"{r} (x{c})" for r, c in declined.most_common(3)) or "every child repeated a parent"
        raise JobFailed(f"no valid child could be made: {why}")
    for i, (child, parents) in enumerate(children, start=1):
        path = _write(out, f"{stem}_{i:03d}_{child.operator}.mmd", child.text)
        emit({"file": str(path), "operator": child.operator, "detail": child.detail,
              "parents": [files[p] for p in parents]})
    return 0


def _cmd_mutate(args: argparse.Namespace) -> int:
    try:
        names = ops.parse_operator_list(args.operators) if args.operators else list(ops.MUTATIONS)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if "crossover" in names:
        raise CliError("crossover needs two parents: use 'python -m flowcore crossover A B'")
    w = load_workflow(args.file, args.task)
    out = _out_dir(args.out)
    children, declined = _children([w], names, args.task, args.n, args.seed, orient=False)
    return _report([args.file], children, Path(args.file).stem, out, declined)


def _cmd_crossover(args: argparse.Namespace) -> int:
    a, b = load_workflow(args.a, args.task), load_workflow(args.b, args.task)
    out = _out_dir(args.out)
    children, declined = _children([a, b], ["crossover"], args.task, args.n, args.seed, orient=True)
    stem = f"{Path(args.a).stem}_x_{Path(args.b).stem}"
    return _report([args.a, args.b], children, stem, out, declined)


def _human(rec: dict) -> str:
    score = "—" if rec["score"] is None else f"{100 * rec['score']:.1f}%"
    if rec["score"] is not None and rec.get("ci_low") is not None:
        score += f" [{100 * rec['ci_low']:.1f}, {100 * rec['ci_high']:.1f}]"
    tail = f" ({rec['detail']})" if rec.get("detail") else ""
    why = f" — {rec['reason']}" if rec["status"] == "failed" else ""
    return (f"round {rec['round']:>3}  {rec['status']:<14} score {score:<20} cost ${rec['cost']:.4f}  "
            f"{rec.get('operator') or ''}{tail}{why}")


def _cmd_evolve(args: argparse.Namespace) -> int:
    from flowcore.evolution.loop import Evolution, EvolutionConfig, load_seed
    from flowcore.workspace.store import Workspace

    try:
        ws = Workspace(args.db) if args.db else Workspace()
    except OSError as exc:
        raise CliError(f"{args.db or 'workspace'}: {exc}") from None
    own = resolve_task(args, ws)
    if args.task_file:  # saved with the run's workspace: a worker, a resume and History find the same rows
        from flowcore.tasks import DataError
        from flowcore.tasks.saved import save

        try:
            save(ws, own)
        except DataError as exc:
            raise JobFailed(str(exc)) from None
    task = own.kind
    for opt, path in (("--data", args.data), ("--test-data", args.test_data), ("--split-file", args.split_file)):
        if path and not Path(path).is_file():
            raise CliError(f"{path}: no such file ({opt})")
    for opt, given in (("--test-limit", args.test_limit), ("--test-data", args.test_data)):
        if given is not None and not args.test_top:  # it would be ignored without a word
            raise CliError(f"{opt} applies to the test re-scoring: add --test-top N (the N best rounds)")
    if args.budget is not None and not args.budget > 0:  # 0 is "none" on the Evolve page; here it stopped the run
        raise CliError(f"--budget must be above 0 USD, got {args.budget:g} (leave it out for no cap)")
    if args.split_file and args.data:
        raise CliError("--split-file chooses problems of the bundled data; it cannot be used with --data")
    workflow = None
    if args.workflow:
        load_workflow(args.workflow, task)  # unreadable -> exit 2, invalid -> exit 1, with the file named
        workflow = load_seed(args.workflow, task)
    try:
        operators = ops.parse_operator_list(args.operators)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    config = EvolutionConfig(
        benchmark=args.benchmark, rounds=args.rounds, candidates=args.candidates, seed=args.seed,
        workflow=workflow, alpha=args.alpha, lam=args.lam, top_k=args.top_k, operators=operators,
        budget=args.budget, data_path=str(Path(args.data).resolve()) if args.data else None, limit=args.limit,
        mode=args.mode, concurrency=args.concurrency, offline=args.offline,
        validation_rounds=args.validation_rounds, test_top=args.test_top, test_limit=args.test_limit,
        test_data=str(Path(args.test_data).resolve()) if args.test_data else None,
        split_file=str(Path(args.split_file).resolve()) if args.split_file else None, search=args.search,
        remeasure=args.remeasure)
    from flowcore.evolution.lease import RunBusy

    try:
        printer = (lambda rec: emit(rec)) if args.json else (lambda rec: print(_human(rec), flush=True))
        evo = Evolution(ws, config, progress=printer, cancel=threading.Event())
        if not evo.config.offline:
            require_sandbox()  # candidates may run code (Programmer/Test, hidden tests): refuse before starting
        if config.test_top and not evo.config.offline:  # no test split: say so before a run is stored
            from flowcore.evolution.testsplit import held_out_problems

            held_out_problems(evo.config.to_dict(), limit=config.test_limit)
        done_run = None if args.new_run else evo.history.find_finished(evo.config.key())
        resumed = None if args.new_run else evo.find_resumable()
        if resumed is None and done_run is not None:  # the same command again: say so, never repeat the run
            info = evo.history.run(done_run)
            print(f"run {done_run} with these settings is already finished ({evo.history.last_round(done_run)} "
                  f"round(s), {info.status}); add --rounds N with N > {args.rounds} to extend it, or --new-run to "
                  "start another run", file=_stderr(), flush=True)
            if args.json:
                emit({"run_id": done_run, "status": info.status, "already_finished": True})
            return 0
        finished_before = resumed is not None and evo.history.run(resumed).status == "finished"
        run_id = evo.start(resume=not args.new_run)
        evo.prepare()
    except RunBusy as exc:  # the same run in another process: joining it would repeat its calls and rounds
        raise CliError(f"{exc}; wait for it to finish (or stop it), or start a separate run with another "
                       "--seed or --db") from None
    except ValueError as exc:  # bad settings or options (usage); a bad data file is invalid input
        raise (JobFailed if type(exc).__name__ == "DataError" else CliError)(str(exc)) from None
    except OSError as exc:
        raise CliError(f"{args.db or 'workspace'}: {exc}") from None
    done = evo.history.last_round(run_id)
    mode = "structure-only (no LLM endpoint: scores stay empty)" if evo.config.offline else evo.config.mode
    if finished_before:
        print(f"continuing finished run {run_id} after round {done} up to round {args.rounds} ({mode})",
              file=_stderr(), flush=True)
    elif resumed is not None:
        where = f"after round {done}" if done >= 0 else "from its seed round (no round was stored)"
        print(f"resuming run {run_id} {where} ({mode})", file=_stderr(), flush=True)
    else:
        print(f"run {run_id}: {args.rounds} round(s) on {args.benchmark}, {mode}", file=_stderr(), flush=True)
    result = evo.run()
    if result["status"] == "lost":  # paused, then overtaken by another process: it carries the run on
        raise JobFailed(f"run {run_id}: {result['reason']}")
    rows = evo.history.summaries(run_id)  # light columns: no round's JSON decoded
    try:
        if config.test_top and not evo.config.offline:
            _print_test_scores(evo.ws, run_id, args.json)
        if not evo.config.offline:
            _print_outcome(evo.ws, run_id, args.json)
    except sqlite3.Error:  # the workspace failed (a full disk stopped the run): the reason below says so
        if result["status"] != "stopped":
            raise
    evolved = [r for r in rows if r["round"] > 0]
    if result["status"] == "stopped":
        raise JobFailed(f"run {run_id} stopped: {result['reason']}")
    if result["status"] == "cancelled":
        raise JobFailed(f"run {run_id} cancelled after round {evo.history.last_round(run_id)}")
    if evolved and all(r["status"] == "failed" for r in evolved):
        raise JobFailed(f"run {run_id}: every round failed (last: {evolved[-1]['reason']})")
    return 0


def _print_test_scores(ws: object, run_id: int, as_json: bool) -> None:
    """Validation and test side by side, for the rounds re-scored on the test split."""
    from flowcore.evolution.testsplit import stored_test_scores, validation_vs_test

    frame = validation_vs_test(ws, run_id)  # type: ignore[arg-type]
    splits = {t["round"]: t["split_info"] for t in stored_test_scores(ws, run_id)}  # type: ignore[arg-type]
    for r in frame.to_dict("records"):
        if as_json:
            emit({"test": {k: (None if v != v else v) for k, v in r.items()}, "split": splits.get(r["round"])})
            continue
        val = "—" if r["validation"] is None else (f"{100 * r['validation']:.1f}% [{100 * r['val_low']:.1f}, "
                                                   f"{100 * r['val_high']:.1f}]")
        print(f"round {r['round']:>3}  validation {val}  test {100 * r['test']:.1f}% [{100 * r['test_low']:.1f}, "
              f"{100 * r['test_high']:.1f}] on {r['test_n']} problems ({r['split']})", flush=True)


def _print_outcome(ws: object, run_id: int, as_json: bool) -> None:
    """The last line: the round the run offers, its gain over the seed and whether that gain is within noise
    (on stderr with --json, whose stdout keeps one JSON line per round)."""
    from flowcore.evolution.outcome import outcome

    found = outcome(ws, run_id)  # type: ignore[arg-type]
    if found is not None:
        print(found.sentence(), file=_stderr() if as_json else None, flush=True)


def _stderr():  # noqa: ANN202 - indirection so tests may capture it
    import sys

    return sys.stderr


def register(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("mutate", help="write up to N valid children of a workflow")
    m.add_argument("file")
    m.add_argument("--task", choices=cat.TASKS, required=True)
    m.add_argument("--n", type=positive, default=4)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", required=True, help="directory for the children (created if missing)")
    m.add_argument("--operators", help=f"comma-separated subset of {', '.join(ops.MUTATIONS)}")
    m.set_defaults(func=_cmd_mutate)

    c = sub.add_parser("crossover", help="write up to N valid crossover children of two workflows")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--task", choices=cat.TASKS, required=True)
    c.add_argument("--n", type=positive, default=4)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", required=True)
    c.set_defaults(func=_cmd_crossover)

    e = sub.add_parser("evolve", help="evolve a workflow on a benchmark (resumable with the same --db)")
    add_task_args(e)
    e.add_argument("--rounds", type=positive, required=True)
    e.add_argument("--candidates", type=positive, default=4)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--workflow", help="seed workflow (default: the task's seed example)")
    src = e.add_mutually_exclusive_group()
    src.add_argument("--data", help="JSONL in the benchmark's own format, used instead of the validation split")
    src.add_argument("--limit", type=positive, help="first N problems of the validation split")
    e.add_argument("--db", help="workspace database (default: $MERMAIDFLOW_DB or workspace.db)")
    e.add_argument("--json", action="store_true", help="a JSON line per round")
    e.add_argument("--offline", action="store_true", help="structure-only: never call an LLM, store no scores")
    e.add_argument("--mode", choices=("llm", "programmatic"), default="llm",
                   help="who proposes candidates when an LLM is configured (default: llm)")
    e.add_argument("--operators", help=f"comma-separated subset of {', '.join(ops.OPERATORS)}")
    e.add_argument("--budget", type=float, help="USD cap for the whole run")
    e.add_argument("--alpha", type=float, default=0.2)
    e.add_argument("--lambda", dest="lam", type=float, default=0.3)
    e.add_argument("--new-run", action="store_true",
                   help="start a new run even when one with these settings exists (finished or not)")
    e.add_argument("--top-k", dest="top_k", type=positive, default=4)
    e.add_argument("--concurrency", type=positive, default=8)
    e.add_argument("--validation-rounds", type=positive, default=1,
                   help="evaluate each round's workflow R times, cache bypassed (AFlow's validation_rounds)")
    e.add_argument("--search", choices=("guided", "paper"), default="guided",
                   help="guided (default): the paper's loop plus per-candidate parents and operators, the history's "
                        "evidence in the rule judge, and re-measured close calls; paper: DESIGN §5 as written")
    e.add_argument("--remeasure", type=nonnegative, default=2, metavar="N",
                   help="guided: measure a round that reaches the best score so far up to N more times (fresh samples)")
    e.add_argument("--test-top", type=nonnegative, default=0, metavar="N",
                   help="at the end, re-score the N best rounds (by validation score) on the held-out test split")
    e.add_argument("--test-limit", type=positive, help="first N problems of the test split")
    e.add_argument("--test-data", help="test rows (the benchmark's format) for a run evolved on --data")
    e.add_argument("--split-file", help='your own split: JSON {"validation": [ids], "test": [ids]}')
    e.set_defaults(func=_cmd_evolve)

