"""Results that explain themselves (the Run and History pages; no Streamlit here).

- a per-problem table with the verdict, the extracted answer, the reference and the error, filterable to the
  failures;
- a score's interval that says n, and an exact one when every problem had the same outcome (the bootstrap
  of 0/10 is "0-0%", which says nothing);
- whether an evaluation's answers came from the LLM cache (then it cost $0 and repeated an earlier
  measurement), from the call log;
- one problem's trace again (the workflow re-run on it: free and identical when its calls are cached), and
  the verdict of a single run whose problem has a reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from flowcore.evaluation.store import EvalRecord, run_problem
from flowcore.llm.client import LLMSettings, run_usage
from flowcore.tasks import Problem, kind_of, load, score
from flowcore.workspace.store import Workspace

__all__ = ["FILTERS", "CacheUse", "Verdict", "cache_use", "find_problem", "fresh", "interval_text",
           "judge_answer", "money", "past_rows", "pct", "result_rows", "single_verdict", "trace_caption",
           "trace_problem", "trace_rows", "verdict_of"]

FILTERS = {"all": "All problems", "failures": "Failures (wrong or error)", "wrong": "Wrong answers",
           "errors": "Errors"}
ALPHA = 0.05


def money(x: float | None, estimated: int = 0) -> str:
    """'$0.0123'; '~$0.0123' when ``estimated`` of the calls behind it had no token counts from the endpoint."""
    x = x or 0.0
    text = f"${x:.6f}" if 0 < x < 0.01 else f"${x:.4f}"  # fractions of a cent still show
    return "~" + text if estimated else text


def estimate_note(estimated: int) -> str:
    """What the '~' before a cost means, for its tooltip ('' when nothing was estimated)."""
    if not estimated:
        return ""
    return (f"~: an estimate. The endpoint reported no (usable) token counts for {estimated} paid "
            f"call{'s' if estimated != 1 else ''}; those are counted about 4 characters a token (docs/settings.md).")


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def past_rows(past: list[EvalRecord]) -> list[dict]:
    import time

    return [{"id": r.id, "when": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)),
             "workflow": r.workflow_name, "benchmark": r.benchmark, "split": r.split, "n": f"{r.n}/{r.total}",
             "score": r.score, "ci_low": r.ci_low, "ci_high": r.ci_high, "cost": r.cost, "status": r.status}
            for r in past]


def verdict_of(r: dict) -> str:
    """'error' for a problem with no verdict (errored); a workflow's own failure (its timeout, a node it left
    empty) keeps its reason in ``error`` but is 'wrong'. Older records have no ``errored``: any error was one."""
    if r.get("errored", bool(r.get("error"))):
        return "error"
    return "correct" if r.get("correct") else "wrong"


def result_rows(rec: EvalRecord, which: str = "all", problems: dict[str, Problem] | None = None) -> list[dict]:
    """One row per problem: verdict, extracted answer, reference, error, cost, latency and the start of the
    model's text. ``which``: a key of FILTERS. References come from the stored results, else from
    ``problems`` (older evaluations did not store them)."""
    if which not in FILTERS:
        raise ValueError(f"unknown filter {which!r}: use one of {', '.join(FILTERS)}")
    rows = []
    for r in rec.results:
        v = verdict_of(r)
        if which == "failures" and v == "correct" or which == "wrong" and v != "wrong" or \
                which == "errors" and v != "error":
            continue
        ref = r.get("reference")
        if ref is None and problems and r.get("id") in problems:
            ref = problems[r["id"]].reference
        code = kind_of(rec.benchmark) == "code"
        rows.append({"id": r.get("id"), "verdict": v, **({"score": r["score"]} if r.get("score") is not None else {}),
                     "extracted": r.get("extracted") or "",
                     "reference": ("hidden tests" if code else (ref or "")), "error": r.get("error") or "",
                     "cost": float(r.get("cost") or 0.0), "latency": r.get("latency"),
                     "answer": _first_line(r.get("prediction") or "")})
    return rows


def _first_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def interval_text(rec: EvalRecord) -> str:
    """'95% interval 12–48% (n = 10)'; with every problem solved or every one failed the bootstrap has no
    spread, so the exact (Clopper-Pearson) interval is given and named."""
    n = rec.n
    if not n:
        return "no problem finished"
    values = [r["score"] if r.get("score") is not None else float(bool(r.get("correct")))
              for r in rec.results if not r.get("errored")]
    fractional = any(v not in (0, 1) for v in values)
    solved = sum(v == 1 for v in values) if rec.results else round((rec.score or 0) * n)
    if solved in (0, n) and not fractional:
        edge = 1 - (ALPHA / 2) ** (1 / n)  # the exact bound when k = 0 (mirrored for k = n)
        lo, hi = (0.0, edge) if solved == 0 else (1 - edge, 1.0)
        return f"95% interval {100 * lo:.0f}–{100 * hi:.0f}% (exact, n = {n}: all {n} {'failed' if solved == 0 else 'solved'})"
    if rec.ci_low is None:
        return f"n = {n}"
    return f"95% interval {100 * rec.ci_low:.0f}–{100 * rec.ci_high:.0f}% (bootstrap, n = {n})"


@dataclass(frozen=True)
class CacheUse:
    calls: int
    cached: int
    estimated: int = 0  # paid calls whose cost is an estimate (the endpoint reported no usage)

    @property
    def all_cached(self) -> bool:
        return self.calls > 0 and self.cached == self.calls

    def text(self) -> str:
        if not self.calls:
            return "No LLM call was logged for this evaluation."
        if self.all_cached:
            return (f"All {self.calls} LLM answers came from the cache ($0): this repeats an earlier "
                    "measurement rather than making a new one.")
        if self.cached:
            return f"{self.cached} of {self.calls} LLM answers came from the cache (those cost $0)."
        return f"All {self.calls} LLM answers are fresh (none from the cache)."


def cache_use(ws: Workspace, eval_id: int) -> CacheUse:
    u = run_usage(ws, f"eval-{eval_id}")
    return CacheUse(int(u.calls), int(u.cached), int(u.estimated))


def fresh(settings: LLMSettings) -> LLMSettings:
    """Settings that bypass the cache (a new measurement; its answers are not cached either)."""
    return replace(settings, cache=False)


def find_problem(rec: EvalRecord, problem_id: str) -> Problem | None:
    """The benchmark problem behind a result row (None for an uploaded file, which is not kept)."""
    split = rec.split or "validation"
    if split.startswith("file:"):
        return None
    try:
        return next((p for p in load(rec.benchmark, split) if p.id == problem_id), None)
    except (ValueError, OSError):
        return None


@dataclass(frozen=True)
class Verdict:
    correct: bool
    extracted: str | None
    reference: str

    def text(self) -> str:
        got = self.extracted if self.extracted is not None else "no answer found"
        return (f"{'Correct' if self.correct else 'Wrong'}: extracted answer `{got}`, reference "
                f"`{self.reference}`.")


def judge_answer(benchmark: str, answer: str, reference: str | Problem) -> Verdict:
    """Score a single run's answer against a reference (the expected answer, or the benchmark problem)."""
    if kind_of(benchmark) is not None and benchmark not in ("gsm8k", "math", "humaneval", "mbpp"):
        return _task_verdict(benchmark, answer, reference)
    res = score(benchmark, answer, reference)
    ref = reference.reference if isinstance(reference, Problem) else str(reference)
    if isinstance(reference, Problem) and kind_of(benchmark) == "code":
        ref = "the problem's hidden tests"
    return Verdict(bool(res.correct), res.extracted, ref)


def _task_verdict(name: str, answer: str, reference: str | Problem) -> Verdict:
    """A task's own metric on one answer (a judge grades only inside evaluations, where its grade is kept)."""
    from flowcore.tasks import get
    from flowcore.tasks.metrics import grade_text
    from flowcore.tasks.pymetric import run_python

    metric = get(name).metric
    ref = reference.reference if isinstance(reference, Problem) else str(reference)
    row = reference.meta.get("row", {}) if isinstance(reference, Problem) else {}
    if metric.name == "python":
        g = run_python(metric, [(answer, row)], references=[ref])[0]
    elif metric.name in ("judge", "tests"):
        return Verdict(False, None, f"{ref} (metric '{metric.name}' grades inside evaluations only)")
    else:
        g = grade_text(metric, answer, ref)
    return Verdict(bool(g.score is not None and g.score >= 1), g.extracted if g.score is not None else g.detail, ref)


def single_verdict(benchmark: str, answer: str, problem_text: str, reference: str = "",
                   sample: dict | None = None) -> Verdict | None:
    """The verdict of a single run: scored by the benchmark's own scorer when the problem is the sample that
    was filled in (``sample``: {"benchmark", "id", "question"}), else against the typed ``reference``; None
    when there is nothing to compare with."""
    if sample and sample.get("question") == problem_text and sample.get("benchmark") == benchmark:
        problem = next((p for p in load(benchmark, "validation") if p.id == sample.get("id")), None)
        if problem is not None:
            return judge_answer(benchmark, answer, problem)
    if reference.strip():
        return judge_answer(benchmark, answer, reference.strip())
    return None


TRACE_COLUMNS = ["node", "operator", "calls", "answered by", "cost", "latency", "skipped", "output"]


def trace_rows(trace: list[dict]) -> list[dict]:
    """A run's per-node trace for people: who answered each node's calls (the endpoint, or this workspace's
    cache), and for a cached call what it cost and took when it was first made (see tracing.run.mark_cached)."""
    out = []
    for r in trace:
        calls, hits = int(r.get("calls") or 0), int(r.get("cached") or 0)
        by = ("—" if not calls else "endpoint" if not hits else
              ("cached" if hits >= calls else f"cached ({hits} of {calls} calls)")
              + ("" if r.get("first_known", True) else ", first cost not recorded"))
        if calls and r.get("estimated"):  # no token counts from the endpoint: the cost is counted from the text
            by += ", cost estimated"
        op = r.get("op") or ""
        out.append({"node": r.get("node"), "operator": op[:-2] if op.endswith("Op") else op, "calls": calls, "answered by": by,
                    "cost": r.get("cost"), "latency": r.get("latency"), "skipped": bool(r.get("skipped")),
                    "output": r.get("output")})
    return out


def trace_caption(trace: list[dict]) -> str:
    """One line above a trace: what its cost and latency columns mean when the cache answered some calls."""
    if not any(r.get("cached") for r in trace):
        return "Per-node trace (in execution order)"
    return ("Per-node trace (in execution order). Calls answered from this workspace's cache cost nothing now: "
            "their rows show what they cost and took when they were first made.")


def trace_problem(settings: LLMSettings, ws: Workspace, rec: EvalRecord, problem: Problem) -> Any:
    """Run the evaluated workflow on one of its problems again and return the RunResult (its per-node trace).
    With the cache on, every call the evaluation made is answered from it: no cost, the same answer."""
    return run_problem(settings, ws, rec.workflow_text, kind_of(rec.benchmark, ws), problem.question,
                       problem.entry_point, problem.public_tests)
