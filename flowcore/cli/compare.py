"""Subcommands ``compare`` and ``split`` of ``python -m flowcore`` (the evaluation protocol, see flowcore.evaluation.compare).

    python -m flowcore compare baseline:cot baseline:cot_sc my.mmd --benchmark gsm8k --split test --repeats 3
    python -m flowcore split --benchmark math -o math_split.json     # our split, to inspect or edit
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

from flowcore.cli.common import (
    CliError,
    JobFailed,
    add_task_args,
    emit,
    load_problems,
    load_workflow,
    positive,
    read_text,
    resolve_task,
)
from flowcore.cli.run import _llm, _progress, _stop_on_signals, seconds

DEFAULT_MAX_ERROR_RATE = 0.1




def register(sub: Any) -> None:
    c = sub.add_parser("compare", help="evaluate workflows on the same problems; table and paired tests")
    c.add_argument("workflows", nargs="+", metavar="WORKFLOW",
                   help="a .mmd file, or baseline:NAME for a bundled baseline (io, cot, cot_sc, self_refine, "
                        "multipersona, medprompt)")
    add_task_args(c)
    src = c.add_mutually_exclusive_group()
    src.add_argument("--split", choices=("validation", "test"), default=None, help="default: test")
    src.add_argument("--data", help="a JSONL/JSON file of rows in the benchmark's own format (all rows used)")
    c.add_argument("--split-file", help='your own split: JSON {"validation": [ids], "test": [ids]}')
    c.add_argument("--limit", type=positive, help="only the first N problems")
    c.add_argument("--repeats", type=positive, default=1, help="runs per problem, cache bypassed (default 1)")
    c.add_argument("--concurrency", type=positive, default=8)
    c.add_argument("--timeout", type=seconds, help="seconds per problem")
    c.add_argument("--max-error-rate", type=float, default=DEFAULT_MAX_ERROR_RATE,
                   help="exit 1 when a workflow errored on more than this fraction of its runs (default 0.1)")
    c.add_argument("--db", help="also store the comparison in this workspace (the Compare page shows it)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_compare)

    s = sub.add_parser("split", help="write our validation/test split of a benchmark as a split file")
    add_task_args(s)
    s.add_argument("--db", help="the workspace a task named by --benchmark is saved in")
    s.add_argument("-o", "--out", required=True, help="the JSON file to write")
    s.add_argument("--seed", type=int, default=42)
    s.add_argument("--force", action="store_true", help="replace OUT if it exists")
    s.set_defaults(func=_cmd_split)


def resolve_workflow(spec: str, task: str) -> tuple[str, str]:
    """(name, text) of a file or of ``baseline:NAME``; unknown names and unreadable or invalid files are
    reported with what exists."""
    from flowcore.evaluation.compare import BASELINES_DIR, baselines

    if spec.startswith("baseline:"):
        kind = spec.split(":", 1)[1]
        path = BASELINES_DIR / f"{task}_{kind}.mmd"
        if not path.is_file():
            known = ", ".join(n.partition("_")[2] for n, _, _ in baselines(task))
            raise CliError(f"{spec}: no such {task} baseline (known: {known})")
        load_workflow(str(path), task)
        return f"baseline:{kind}", path.read_text(encoding="utf-8")
    load_workflow(spec, task)  # unreadable: exit 2; invalid for the task: exit 1, with the line named
    return Path(spec).stem, read_text(spec)


def _cmd_compare(args: argparse.Namespace) -> int:
    from flowcore.evaluation.compare import run_compare, save_comparison

    if not 0 <= args.max_error_rate <= 1:
        raise CliError(f"--max-error-rate must be in [0, 1], got {args.max_error_rate}")
    if args.data and args.split_file:
        raise CliError("--split-file chooses problems of the bundled data; it cannot be used with --data")
    task = resolve_task(args).kind
    if len(args.workflows) < 2:
        raise CliError("compare needs at least two workflows")
    entries = [resolve_workflow(w, task) for w in args.workflows]
    split = args.split or "test"
    problems, info = load_problems(args, split)
    ws = None
    if args.db:  # an unusable workspace is said before anything is measured, not after
        from flowcore.evaluation.compare import _schema
        from flowcore.workspace.store import Workspace

        ws = Workspace(args.db)
        _schema(ws)
    llm = _llm(args.concurrency)
    show = None if args.json or not sys.stderr.isatty() else (lambda name, d, t, r: _progress(d, t, r))
    cancel = threading.Event()
    with _stop_on_signals(cancel):  # Ctrl-C / SIGTERM: the workflows measured in full are still reported
        result = run_compare(entries, args.benchmark, problems, llm=llm, split=info, repeats=args.repeats,
                             concurrency=args.concurrency, progress=show, timeout=args.timeout, cancel=cancel)
    interrupted = len(result.measurements) < len(entries)
    doc = result.to_json()
    if interrupted:
        doc["interrupted"] = (f"stopped: {len(result.measurements)} of {len(entries)} workflows measured in full "
                              "(a workflow measured on only part of the problems is left out)")
    unsaved = None
    if ws is not None and result.measurements:
        try:
            doc["stored_as"] = save_comparison(ws, result, "cancelled" if interrupted else "done")
        except (OSError, sqlite3.Error) as exc:  # the measurements are still printed: nothing paid for is lost
            unsaved = f"{args.db}: the comparison could not be stored ({exc}); its results are printed above"
    if args.json:
        emit(doc)
    elif result.measurements:
        print(format_table(doc))
        if doc.get("graded_by"):
            from flowcore.tasks.metrics import graded_by_note

            print(f"scores {graded_by_note(doc['graded_by'])}")
    if unsaved:
        raise CliError(unsaved)
    if interrupted:
        raise JobFailed(f"interrupted: {doc['interrupted']}")
    bad = [(r["workflow"], r["errors"], r["error_rate"]) for r in doc["table"] if r["error_rate"] > args.max_error_rate]
    if bad:
        name, errors, rate = bad[0]
        raise JobFailed(f"{name}: {errors} runs errored ({100 * rate:.0f}%: endpoint failures, left out of the score, "
                        f"not wrong answers); the comparison is not trustworthy above --max-error-rate "
                        f"{args.max_error_rate:g}")
    return 0


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def format_table(doc: dict) -> str:
    """The stakeholder table as text: scores in percent, differences against the best in points."""
    s = doc["split"]
    head = f"{doc['benchmark']} · {s.get('split')} split"
    if s.get("test_n") is not None:
        head += f" ({s['validation_n']} validation / {s['test_n']} test; {s['source']})"
    else:
        head += f" ({s.get('source')})"
    if s.get("papers"):
        head += f"; the papers' files: {s['papers']['validation_n']} / {s['papers']['test_n']}"
    rows = doc["table"]
    n = len({r["id"] for w in doc.get("workflows") or [] for r in w.get("results") or []})  # asked, not scored
    lines = [head, f"{n} problems × {doc['repeats']} repeat(s); differences are against the best on the same "
                   "problems (paired)", ""]
    cols = ["workflow", "score %", "95% CI", "sd", "cost/problem $", "tokens", "calls", "errors",
            "Δ vs best (pts) [95% CI]",
            "p (test)" if any(r.get("test") == "Wilcoxon" for r in doc["table"]) else "McNemar p"]
    table = []
    for r in rows:
        sd = "—" if r["sd"] is None else f"{100 * r['sd']:.1f}"
        delta = "best" if r["best"] else "—" if r["diff_vs_best"] is None else (
            f"{100 * r['diff_vs_best']:+.1f} [{100 * r['diff_low']:+.1f}, {100 * r['diff_high']:+.1f}]")
        p = "—" if r.get("p_value") is None else f"{r['p_value']:.4g}" + (
            " (Wilcoxon)" if r.get("test") == "Wilcoxon" else "")
        table.append([r["workflow"] + (" *" if r["pareto"] else ""), _pct(r["score"]),
                      "no problem scored" if r["score"] is None else f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]", sd, f"{r['cost_per_problem']:.6f}",
                      str(r["tokens"]), str(r["calls"]), str(r["errors"]), delta, p])
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(cols)]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)) for t in table]
    lines += ["", "* on the score-vs-cost Pareto front", f"split: {s.get('note', '')}"]
    return "\n".join(lines)


def _cmd_split(args: argparse.Namespace) -> int:
    from flowcore.tasks import write_split_file

    task = resolve_task(args)
    if Path(args.out).exists() and not args.force:  # likely a split the user edited: never replaced unasked
        raise CliError(f"{args.out} already exists (a split you edited would be lost): choose another -o, or add "
                       "--force to replace it")
    try:
        if not task.builtin:  # a task of your own: its own seeded split (its TOML's [split])
            import json

            from flowcore.workspace.files import write_file

            val, test = task.split()
            doc = {"benchmark": task.name, "seed": task.seed, "validation": val, "test": test}
            write_file(args.out, json.dumps(doc, indent=1) + "\n")
        else:
            doc = write_split_file(args.benchmark, args.out, seed=args.seed)
    except OSError as exc:
        raise CliError(f"{args.out}: cannot write ({exc.strerror or exc})") from None
    print(f"wrote {args.out}: {len(doc['validation'])} validation, {len(doc['test'])} test problems",
          file=sys.stderr)
    return 0
