"""Subcommands ``compile``, ``run``, ``evaluate`` and ``score`` of ``python -m flowcore`` (DESIGN §10)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flowcore import catalogue as cat
from flowcore.cli.common import (
    CliError,
    JobFailed,
    add_task_args,
    emit,
    load_problems,
    load_workflow,
    read_text,
    resolve_task,
)
from flowcore.workspace.files import write_file

# The engine (openai client, networkx, sympy) is imported inside the commands, so registering them keeps
# `check` and `fmt` quick to start.
BENCHMARKS = ("gsm8k", "math", "humaneval", "mbpp")

NOT_CONFIGURED = ("no LLM endpoint configured: set OPENAI_BASE_URL to an OpenAI-compatible server (e.g. "
                  "http://127.0.0.1:8000/v1 for vLLM, Ollama or llama.cpp) and/or OPENAI_API_KEY; optionally "
                  "OPENAI_MODEL or MERMAIDFLOW_MODEL_EXECUTOR for the model")


def register(sub: Any) -> None:
    c = sub.add_parser("compile", help="compile a workflow into a standalone Python module")
    c.add_argument("file")
    c.add_argument("--task", choices=cat.TASKS)
    c.add_argument("-o", "--out", help="output file (default or '-': standard output)")
    c.set_defaults(func=_cmd_compile)

    r = sub.add_parser("run", help="run a workflow once on one problem")
    r.add_argument("file")
    r.add_argument("--task", choices=cat.TASKS)
    r.add_argument("--problem", required=True, help="the problem text, or @FILE to read it from a file")
    r.add_argument("--entry-point", help="function name (code tasks; default: guessed from the problem)")
    r.add_argument("--public-tests", default="",
                   help="assert lines a TestOp may run, or @FILE (default: the examples in the problem text)")
    r.add_argument("--json", action="store_true",
                   help='print {"answer", "cost", "calls", "tokens", "price_known", "trace"}')
    r.add_argument("--db", help="workspace database: every LLM call is logged and cached there (default: none)")
    r.set_defaults(func=_cmd_run)

    e = sub.add_parser("evaluate", help="evaluate a workflow on a benchmark")
    e.add_argument("file")
    add_task_args(e)
    src = e.add_mutually_exclusive_group()
    src.add_argument("--split", choices=("validation", "test"), default=None,
                     help="split of the bundled data (default: validation)")
    src.add_argument("--data", help="a file of rows in the benchmark's own format, or the task's columns (all rows "
                                    "used)")
    e.add_argument("--split-file", help='your own split: JSON {"validation": [ids], "test": [ids]}')
    e.add_argument("--limit", type=int, help="only the first N problems")
    e.add_argument("--repeats", type=int, default=1,
                   help="run every problem R times with the response cache bypassed: mean ± sd over the repeats "
                        "and the pooled interval (default 1)")
    e.add_argument("--concurrency", type=int, default=8, help="problems run at once (default 8)")
    e.add_argument("--timeout", type=seconds, help="seconds per problem (default: none)")
    e.add_argument("--max-error-rate", type=float, default=0.1,
                   help="exit 1 when more than this share of problems could not be run because the LLM endpoint "
                        "failed (they are never counted as wrong answers; default 0.1)")
    e.add_argument("--json", action="store_true")
    e.add_argument("--db", help="workspace database: every LLM call is logged and cached there (default: none)")
    e.set_defaults(func=_cmd_evaluate)

    s = sub.add_parser("score", help="score one prediction against a reference")
    add_task_args(s)
    s.add_argument("--db", help="the workspace a task named by --benchmark is saved in")
    s.add_argument("--prediction", required=True, help="the answer text, or @FILE")
    s.add_argument("--reference", required=True,
                   help="gold answer (gsm8k/math) or test code (humaneval/mbpp), or @FILE")
    s.add_argument("--entry-point", help="function the tests call (humaneval)")
    s.add_argument("--prompt", help="humaneval: the problem's prompt (its imports and signature), or @FILE; a "
                                    "prediction that is only the function body or lacks the imports then runs")
    s.add_argument("--json", action="store_true", help="(the output is always JSON)")
    s.set_defaults(func=_cmd_score)


# -- helpers -------------------------------------------------------------------------------------------------

def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (a negative or nan timeout failed every problem
    at once, and those timeouts were scored as wrong answers)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return v


def _text_arg(value: str) -> str:
    return read_text(value[1:]) if value.startswith("@") else value


def _llm(concurrency: int | None = None, db: str | None = None, run_id: str | None = None) -> Any:
    from flowcore.llm.client import LLM, LLMSettings

    try:
        settings = LLMSettings.from_env()
    except (TypeError, ValueError) as exc:
        raise CliError(f"bad LLM setting in the environment: {exc}") from None
    if not settings.configured:
        raise JobFailed(NOT_CONFIGURED)
    if concurrency and not (os.environ.get("MERMAIDFLOW_CONCURRENCY") or "").strip():
        # N problems at once need N calls in flight; an explicit MERMAIDFLOW_CONCURRENCY still caps it.
        settings.concurrency = max(settings.concurrency, concurrency)
    if not db:
        return LLM(settings)
    from flowcore.workspace.store import Workspace

    try:
        return LLM(settings, Workspace(db), run_id=run_id)  # the workspace's cache and call log
    except (OSError, sqlite3.DatabaseError) as exc:  # not writable, not a database
        raise CliError(f"{db}: cannot open the workspace ({exc})") from None


# -- commands ------------------------------------------------------------------------------------------------

def _cmd_compile(args: argparse.Namespace) -> int:
    from flowcore.execution.compiler import CompileError, compile_workflow

    w = load_workflow(args.file, args.task)
    try:
        source = compile_workflow(w, args.task)
    except CompileError as exc:
        raise JobFailed(f"{args.file}: {exc}") from None
    if not args.out or args.out == "-":  # "-" is standard output, as for most tools (not a file named "-")
        sys.stdout.write(source)
        return 0
    out = Path(args.out)
    if out.exists() and out.resolve() == Path(args.file).resolve():  # `-o my.mmd` would replace the workflow
        raise CliError(f"{args.out}: is the workflow file itself; choose another output file (e.g. workflow.py)")
    try:
        write_file(out, source)
    except OSError as exc:
        raise CliError(f"{args.out}: cannot write ({exc.strerror or exc})") from None
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from flowcore.execution.runtime import NodeError, run_workflow
    from flowcore.llm.client import LLMError

    w = load_workflow(args.file, args.task)
    problem, tests = _text_arg(args.problem), _text_arg(args.public_tests)
    if not problem.strip():
        raise CliError(f"--problem is empty{f' ({args.problem[1:]} holds no text)' if args.problem[:1] == '@' else ''}: "
                       "give the problem text or @FILE")
    llm = _llm(db=args.db, run_id=f"run-cli:{Path(args.file).name}")
    try:
        res = asyncio.run(run_workflow(w, problem, entry_point=args.entry_point, llm=llm, public_tests=tests,
                                       task=args.task))
    except (NodeError, LLMError) as exc:
        raise JobFailed(str(exc)) from None
    known = llm.settings.price_known(llm.settings.model_for("executor"))
    if args.json:
        emit({"answer": res.answer, "cost": res.cost, "calls": res.calls, "tokens": _tokens(llm),
              "price_known": known, "trace": res.trace})
    else:
        print(res.answer)
        rate = llm.usage.tokens_per_s
        speed = f", {rate:.1f} tokens/s" if rate else ""
        print(f"{_cost_text(llm, res.cost)}, LLM calls: {res.calls}{speed}", file=sys.stderr)
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from flowcore.evaluation.evaluate import evaluate_workflow

    if args.limit is not None and args.limit < 1:  # 0 problems would print a score of nothing
        raise CliError(f"--limit must be at least 1, got {args.limit}")
    if args.concurrency < 1:
        raise CliError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.repeats < 1:
        raise CliError(f"--repeats must be >= 1, got {args.repeats}")
    if not 0 <= args.max_error_rate <= 1:  # false for nan too: it would never fail the command
        raise CliError(f"--max-error-rate must be in [0, 1], got {args.max_error_rate}")
    if args.data and args.split_file:
        raise CliError("--split-file chooses problems of the bundled data; it cannot be used with --data")
    task = resolve_task(args)
    w = load_workflow(args.file, task.kind)
    split = args.split or "validation"
    problems, info = load_problems(args, split)
    llm = _llm(args.concurrency, db=args.db, run_id=f"evaluate:{Path(args.file).name}:{args.benchmark}")
    show = None if args.json or not sys.stderr.isatty() else _progress
    if args.repeats > 1:
        return _evaluate_repeated(args, w, problems, llm, info, show)
    cancel = threading.Event()
    with _stop_on_signals(cancel):  # SIGTERM / Ctrl-C: no new problem starts, the partial report is printed
        report = asyncio.run(evaluate_workflow(w, args.benchmark, problems, llm=llm, concurrency=args.concurrency,
                                               progress=show, timeout=args.timeout, cancel=cancel))
    out = report.to_json()
    out["cost"] = llm.usage.cost  # everything paid for, failed problems included
    out["tokens"] = _tokens(llm)
    out["price_known"] = llm.settings.price_known(llm.settings.model_for("executor"))
    out["split"] = info  # whose split these problems are (ours is not the papers' files)
    if report.cancelled:
        out["interrupted"] = f"stopped after {len(report.results)} of {len(problems)} problems"
    if not report.n:  # nothing was scored (every problem errored, or none finished): no score, not 0%
        out["score"] = out["ci"] = None
    if args.json:
        emit(out)
    else:
        for r in report.results:
            mark = "ok  " if r.correct else ("ERR " if r.errored else ("fail" if not r.error else "FAIL"))
            shown = r.error if r.error else (r.extracted if r.extracted is not None else r.prediction)
            print(f"{mark} {r.id}  {_one_line(str(shown))}")
        solved = sum(r.correct for r in report.results)
        from flowcore.tasks.harness import not_run_text

        errs = f", {not_run_text(report.errors)}" if report.errors else ""
        scored = (f"score {report.score:.3f} ({solved}/{report.n}){errs}, 95% CI [{report.ci_low:.3f}, "
                  f"{report.ci_high:.3f}]") if report.n else f"no score: no problem was scored{errs}"
        if report.graded_by:
            from flowcore.tasks.metrics import graded_by_note

            print(f"scores {graded_by_note(report.graded_by)}")
        print(f"{args.benchmark}: {scored}, {_cost_text(llm, out['cost'])}, "
              f"{out['tokens']['prompt']}+{out['tokens']['completion']} tokens")
        if report.cancelled:
            print(f"interrupted: {out['interrupted']} (a partial report)")
    errored = [r for r in report.results if r.errored]
    if report.cancelled:
        print(f"error: interrupted: {out['interrupted']}", file=sys.stderr)
        return 1
    if errored and report.error_rate > args.max_error_rate:
        print(f"error: {len(errored)} of {len(report.results)} problems could not be run because the LLM endpoint "
              f"failed (above --max-error-rate {args.max_error_rate:g}); they are left out of the score. "
              f"The first: {errored[0].error}", file=sys.stderr)
        return 1
    errors = [r for r in report.results if r.error]
    if report.results and len(errors) == len(report.results):
        print(f"error: every problem failed; the first: {errors[0].error}", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _stop_on_signals(cancel: threading.Event) -> Iterator[None]:
    """While evaluating: the first SIGTERM or SIGINT sets ``cancel`` (running problems finish, the partial
    report is printed); a second SIGINT interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: Any) -> None:
        if cancel.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        cancel.set()
        print(f"\n{signal.Signals(signum).name}: finishing the problems in flight, then reporting",
              file=sys.stderr, flush=True)

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _tokens(llm: Any) -> dict:
    u = llm.usage
    return {"prompt": u.prompt_tokens, "completion": u.completion_tokens, "calls": u.calls, "cached": u.cached,
            "errors": u.errors, "estimated": u.estimated}


def _cost_text(llm: Any, cost: float) -> str:
    model = llm.settings.model_for("executor")
    if not llm.settings.price_known(model):
        return f"cost: price unknown for {model!r} (set it in Settings or MERMAIDFLOW_PRICES)"
    guessed = llm.usage.estimated
    if guessed:  # the endpoint did not say what it billed for these (flowcore.llm.client._billed)
        return (f"cost ~${cost:.6f} (estimated: the endpoint reported no token counts for {guessed} "
                f"call{'s' * (guessed != 1)})")
    return f"cost ${cost:.6f}"


def _evaluate_repeated(args: argparse.Namespace, w: Any, problems: list, llm: Any, info: dict, show: Any) -> int:
    """``evaluate --repeats R``: R runs per problem with the cache bypassed (flowcore.evaluation.compare.measure)."""
    from flowcore.evaluation.compare import measure

    cancel = threading.Event()
    with _stop_on_signals(cancel):  # as without repeats: Ctrl-C ends with the partial report, not a bare exit
        m = asyncio.run(measure(w, args.benchmark, problems, llm=llm, repeats=args.repeats,
                                name=Path(args.file).stem, concurrency=args.concurrency, progress=show,
                                timeout=args.timeout, cancel=cancel))
    doc = m.to_json()
    doc.pop("text")
    doc.update(benchmark=args.benchmark, cost=llm.usage.cost, split=info)
    if not m.pooled.n:  # every run errored (or none finished): no score, not 0%
        doc.update(score=None, ci=None, mean=None)
    if args.json:
        emit(doc)
    else:
        for i, score in enumerate(m.pooled.scores, 1):
            print(f"repeat {i}: score {score:.3f}")
        sd = "—" if m.pooled.sd is None else f"{m.pooled.sd:.3f}"
        scored = (f"mean {m.pooled.mean:.3f} ± {sd} (sd across repeats), pooled 95% CI [{m.pooled.ci_low:.3f}, "
                  f"{m.pooled.ci_high:.3f}]") if m.pooled.n else \
            f"no score: no problem was scored, {m.pooled.errors} runs not made (endpoint errors)"
        print(f"{args.benchmark}: {m.pooled.n} problems × {m.repeats} repeats, {scored}, {m.calls} calls, "
              f"cost ${llm.usage.cost:.6f}")
    if m.pooled.cancelled:
        print(f"error: interrupted after {len(m.pooled.results)} of {len(problems) * args.repeats} runs "
              "(a partial report)", file=sys.stderr)
        return 1
    errored = [r for r in m.pooled.results if r.errored]
    if errored and m.pooled.error_rate > args.max_error_rate:
        print(f"error: {len(errored)} of {len(m.pooled.results)} runs could not be made because the LLM endpoint "
              f"failed (above --max-error-rate {args.max_error_rate:g}); they are left out of the score. "
              f"The first: {errored[0].error}", file=sys.stderr)
        return 1
    return 0


def _cmd_score(args: argparse.Namespace) -> int:
    from flowcore.tasks import score

    task = resolve_task(args)
    prediction, reference = _text_arg(args.prediction), _text_arg(args.reference)
    if not reference.strip():  # an empty gold answer or test file would score every prediction as wrong
        raise CliError(f"--reference is empty{f' ({args.reference[1:]} holds no text)' if args.reference[:1] == '@' else ''}")
    if not task.builtin:
        return _score_task(task, prediction, reference)
    target: Any = reference
    if args.prompt:
        from flowcore.tasks import Problem

        if args.benchmark not in ("humaneval", "mbpp"):
            raise CliError("--prompt applies to code benchmarks (humaneval, mbpp)")
        target = Problem("cli", args.benchmark, _text_arg(args.prompt), "", entry_point=args.entry_point,
                         tests=reference)
    try:
        res = score(args.benchmark, prediction, target, entry_point=args.entry_point)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    out: dict[str, Any] = {"correct": bool(res.correct), "extracted": res.extracted}
    if getattr(res, "detail", None):
        out["detail"] = res.detail
    emit(out)
    return 0


def _score_task(task: Any, prediction: str, reference: str) -> int:
    """``score --task-file``: the task's metric on one answer ({"score", "correct", "extracted", "detail"})."""
    from flowcore.tasks.metrics import grade_text
    from flowcore.tasks.pymetric import run_python

    m = task.metric
    if m.name in ("judge", "tests"):
        raise CliError(f"metric '{m.name}' grades inside an evaluation (it needs {'the LLM' if m.name == 'judge' else 'the row'}"
                       "'s context): use evaluate")
    g = run_python(m, [(prediction, {task.reference: reference})], references=[reference])[0] if m.name == "python" else \
        grade_text(m, prediction, reference)
    if g.score is None:
        raise JobFailed(f"the metric gave no score: {g.detail}")
    out: dict[str, Any] = {"score": g.score, "correct": g.score >= 1, "extracted": g.extracted}
    if g.detail:
        out["detail"] = g.detail
    emit(out)
    return 0


def _one_line(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _progress(done: int, total: int, result: Any) -> None:
    print(f"\r{done}/{total} problems", end="" if done < total else "\n", file=sys.stderr, flush=True)
