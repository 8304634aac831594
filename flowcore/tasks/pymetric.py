"""The ``python`` metric (DESIGN §11): the user's ``metric(prediction, row)`` runs in the sandbox
(flowcore.execution.sandbox), as generated code does, never in this process: a metric file from a shared
workspace is someone else's code. Rows are batched into one sandbox run (``PythonBatcher``), so 1,000 rows are a
handful of sandbox starts.

The answer is untrusted data handed to the metric, and no answer can dodge or inflate its verdict:
- the driver streams one result line per row to a private copy of standard output, and whatever the metric
  prints goes to standard error: an answer that makes the metric print megabytes cannot push the results out;
- each row gets ``ROW_CPU`` seconds of CPU (a Python-level timer, then a kernel one that ends the run when the
  metric is stuck in C, e.g. a regular expression);
- when a run ends early (the metric crashed the interpreter, ran out of memory or time), the rows it finished keep
  their results, the row it was on is run alone and the rest run again, so only the rows that break the metric
  themselves are touched;
- a row whose metric failed (raised, timed out, crashed the run, returned no number in [0, 1]) is graded again with
  its *reference* as the answer (the control). Control fine: this answer broke the metric, so it is wrong (0.0).
  Control failing too: the metric's own bug on that row, *errored* with a message naming the file, the function
  and the row. A metric file that cannot even load errors every row, saying so; a machine too busy to give the
  run a CPU (the sandbox's verdict) errors the rows it left unfinished, transiently.
Tests: tests/tasks/test_python_metric_hostile.py.
"""
from __future__ import annotations

import asyncio
import json
import math
import secrets
from dataclasses import dataclass, field

from flowcore.tasks.metrics import Grade, Metric

PYTHON_BATCH = 250  # rows per sandbox run (one result line each keeps the output under the sandbox's 64 KB)
ROW_CPU = 5.0  # CPU seconds one row's metric call may take
BATCH_BYTES = 8 << 20  # answers' characters per sandbox run

_DRIVER = '''

def __mf_run():
    import json, os, signal, sys
    out = os.dup(1)  # the results' own channel: what the metric prints goes to standard error
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    class Late(BaseException):
        pass

    def late(*_):
        raise Late()

    signal.signal(signal.SIGPROF, late)
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # stuck in C past the Python timer: the run ends

    def emit(i, r):
        os.write(out, ("{nonce}" + str(i) + " " + json.dumps(r, ensure_ascii=False) + "\\n").encode("utf-8"))

    def grade(fn, item):
        try:
            value = fn(item["prediction"], item["row"])
        except Late:
            raise
        except BaseException as exc:
            line = None
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == "<metric>":
                    line = tb.tb_lineno
                tb = tb.tb_next
            return {{"error": (type(exc).__name__ + ": " + str(exc))[:120], "line": line}}
        if isinstance(value, bool) or type(value) in (int, float):
            return {{"value": float(value)}}
        return {{"bad": type(value).__name__}}

    fn = globals().get({function!r})
    emit(-1, {{}})  # loaded
    items = json.loads(sys.stdin.read())
    for i, item in enumerate(items):
        try:
            signal.setitimer(signal.ITIMER_VIRTUAL, {row_cpu} + 1.0)
            signal.setitimer(signal.ITIMER_PROF, {row_cpu})
            try:
                r = grade(fn, item)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        except Late:
            r = {{"timeout": {row_cpu}}}
        emit(i, r)


__mf_run()
'''


def python_program(metric: Metric, nonce: str) -> str:
    """The sandboxed program: the user's file (compiled as "<metric>", so errors name its lines), then a
    driver that reads the rows from standard input and writes one result line per row after ``nonce``."""
    body = f"exec(compile({metric.source!r}, '<metric>', 'exec'), globals())\n"
    return body + _DRIVER.format(function=metric.opts["function"], nonce=nonce, row_cpu=ROW_CPU)


@dataclass
class _Run:
    """One sandbox run's outcome: a result dict per row (None: the run ended before it), whether the file
    loaded, why the run ended early, and whether the machine was too busy (not the metric's fault)."""

    results: list[dict | None]
    loaded: bool
    why: str
    busy: bool = False
    row_timer: bool = False  # the kernel's per-row CPU timer ended it: the row it was on is at fault, alone


def _run_once(metric: Metric, items: list[tuple[str, dict]], timeout: float | None) -> _Run:
    from flowcore.execution.sandbox import run_untrusted

    nonce = f"@@mf{secrets.token_hex(8)}@@"
    payload = json.dumps([{"prediction": p, "row": r} for p, r in items], ensure_ascii=False, default=str)
    limit = timeout if timeout is not None else min(300.0, 10.0 + 0.5 * len(items))
    res = run_untrusted(python_program(metric, nonce), stdin=payload, timeout=limit)  # raises SandboxUnavailable
    results: list[dict | None] = [None] * len(items)
    loaded = False
    for line in (res.stdout or "").split("\n"):
        if not line.startswith(nonce):
            continue
        index, _, text = line[len(nonce):].partition(" ")
        try:
            i, value = int(index), json.loads(text)
        except ValueError:
            continue
        if i == -1:
            loaded = True
        elif 0 <= i < len(items) and isinstance(value, dict):
            results[i] = value
    if res.timed_out:
        why = f"took longer than {limit:g} s"
    elif res.memory_exceeded:
        why = "ran out of memory"
    else:
        why = _last_line(res.error or res.stderr) or f"ended with exit code {res.returncode}"
    row_timer = "SIGVTALRM" in why
    if row_timer:
        why = f"took more than {ROW_CPU:g} s of CPU"
    return _Run(results, loaded, why, bool(res.overloaded), row_timer)


def _outcomes(metric: Metric, items: list[tuple[str, dict]], timeout: float | None) -> list[dict]:
    """A result per row: {"value"}, {"error", "line"}, {"bad"}, {"timeout"}, {"crash": why} (the run ended on
    this row, alone), {"busy": why} or {"unloaded": why}. A run that ends early is resumed: the row it was on runs
    alone, the rest run again."""
    out: list[dict] = []
    start = 0
    while start < len(items):
        rest = items[start:_chunk_end(items, start)]
        run = _run_once(metric, rest, timeout)
        if not run.loaded and not run.busy:
            return out + [{"unloaded": run.why}] * (len(items) - start)
        done = next((k for k, r in enumerate(run.results) if r is None), len(rest))
        out += run.results[:done]  # type: ignore[arg-type]
        if done == len(rest):
            start += done
            continue
        if run.busy:  # the machine's fault: the unfinished rows have no verdict, and may have one later
            return out + [{"busy": run.why}] * (len(items) - start - done)
        if run.row_timer:
            out.append({"timeout": ROW_CPU})
        elif len(rest) == 1:
            out.append({"crash": run.why})
        else:
            alone = _run_once(metric, [rest[done]], timeout)
            r = alone.results[0]
            if r is None:
                r = {"busy": alone.why} if alone.busy else {"crash": alone.why}
            out.append(r)
        start += done + 1
    return out


def _chunk_end(items: list[tuple[str, dict]], start: int) -> int:
    """Where the run starting at ``start`` ends: at most ``BATCH_BYTES`` of answers (one row at least), so 250
    answers of 1 MB each are not one run's input to be read, and run out of memory, again at every resume."""
    size, end = 0, start
    while end < len(items):
        size += len(items[end][0])
        if end > start and size > BATCH_BYTES:
            break
        end += 1
    return end


def _failure(r: dict) -> str | None:
    """Why this result gives no grade, or None when it is a number in [0, 1]."""
    if "value" in r:
        v = r["value"]
        if isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1:
            return None
        return f"returned {v!r}, not a number from 0 to 1"
    if "error" in r:
        at = f" at line {r['line']}" if isinstance(r.get("line"), int) else ""
        return f"raised {r['error']}{at}"
    if "bad" in r:
        return f"returned a {r['bad']}, not a number"
    if "timeout" in r:
        return f"took more than {ROW_CPU:g} s of CPU"
    return f"crashed the run ({r.get('crash', 'no result')})"


def run_python(metric: Metric, items: list[tuple[str, dict]], *, timeout: float | None = None,
               references: list[str] | None = None, rows: list[str] | None = None) -> list[Grade]:
    """Grade (prediction, row) pairs with the user's function in the sandbox (raises SandboxUnavailable).

    ``references``: each row's reference, the control a failed row is graded with again (see the module's
    docstring); without them a failed row is errored. ``rows``: names of the rows for messages."""
    if not items:
        return []
    o = metric.opts
    fn = f"{o['file']}: {o['function']}()"
    outcomes = _outcomes(metric, items, timeout)
    failed = [i for i, r in enumerate(outcomes) if "busy" not in r and "unloaded" not in r and _failure(r)]
    controls: dict[int, dict] = {}
    if references is not None and failed:
        checked = _outcomes(metric, [(references[i], items[i][1]) for i in failed], timeout)
        controls = dict(zip(failed, checked))
    grades = []
    for i, r in enumerate(outcomes):
        where = f"row {rows[i]}" if rows else f"row {i + 1}"
        if "busy" in r:
            grades.append(Grade(None, None, f"{o['file']}: the machine was too busy to run the metric", transient=True))
            continue
        if "unloaded" in r:
            grades.append(Grade(None, None, f"{fn} could not be loaded ({r['unloaded']}): fix the metric file"))
            continue
        why = _failure(r)
        if why is None:
            grades.append(Grade(float(r["value"])))
            continue
        control = controls.get(i)
        if control is not None and "busy" not in control and _failure(control) is None:
            grades.append(Grade(0.0, None, f"this answer made {fn} fail ({why}), while the reference did not: "
                                           f"graded wrong"))
        elif control is not None and "busy" in control:
            grades.append(Grade(None, None, f"{fn} {why} on {where}; the machine was too busy to check it with "
                                            f"the reference", transient=True))
        else:
            with_ref = " (and with the reference as the answer too: the metric's own error)" if control else ""
            grades.append(Grade(None, None, f"{fn} {why} on {where}{with_ref}"))
    return grades


def _last_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1].strip()[:200] if lines else ""


@dataclass
class PythonBatcher:
    """Collects rows graded by one python metric and runs them together: while one sandbox run is going, the
    rows that finish meanwhile wait for the next, so N rows cost about N / concurrency-sized batches at most
    and far fewer when answers come quickly (a cached evaluation: one run per ``PYTHON_BATCH`` rows)."""

    metric: Metric
    pending: list[tuple[str, dict, str | None, str, asyncio.Future]] = field(default_factory=list)
    runs: int = 0
    _task: asyncio.Task | None = None

    async def grade(self, prediction: str, row: dict, reference: str | None = None, name: str = "") -> Grade:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((prediction, row, reference, name, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        await asyncio.sleep(0.05)  # let the rows finishing together join this run
        while self.pending:
            batch, self.pending = self.pending[:PYTHON_BATCH], self.pending[PYTHON_BATCH:]
            self.runs += 1
            refs = [b[2] for b in batch]
            try:
                grades = await asyncio.to_thread(
                    run_python, self.metric, [(p, r) for p, r, *_ in batch],
                    references=None if any(x is None for x in refs) else refs,  # type: ignore[arg-type]
                    rows=[b[3] or str(k + 1) for k, b in enumerate(batch)])
            except BaseException as exc:  # SandboxUnavailable: every waiting row hears it
                for *_, fut in batch + self.pending:
                    if not fut.done():
                        fut.set_exception(exc)
                self.pending = []
                return
            for (*_, fut), g in zip(batch, grades):
                if not fut.done():
                    fut.set_result(g)
