"""Ray for the heavy fan-out, optional: ``MERMAIDFLOW_RAY`` unset changes nothing (ray is never imported).

    MERMAIDFLOW_RAY=local           start a Ray instance inside this process (one machine, all its cores)
    MERMAIDFLOW_RAY=auto            join the Ray cluster running on this machine (`ray start --head ...`)
    MERMAIDFLOW_RAY=ray://host:port join a remote cluster through Ray Client

With it set, an evaluation runs each problem as a Ray task: the workflow's LLM calls AND the scoring (the
sandboxed test run of HumanEval/MBPP) happen on a worker, and the driver assembles the same report as a local
run (``harness._solve`` is the one per-problem function both use). Workers reach the LLM endpoint with the
driver's settings and share its workspace (its LLM cache and call log) when that is a PostgreSQL URL or a file
they can open. Evolution runs as a detached Ray actor are
flowcore.evolution.remote's.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "MERMAIDFLOW_RAY"
RETRIES = 3  # times Ray runs a problem again after its worker process died
RESTARTS = 3  # times Ray restarts an evolution actor whose process died (it resumes the run after its last round)
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray binds 127.0.0.1 only (its single-machine mode)
_lock = threading.Lock()
_remote: dict[str, Any] = {}


class ClusterError(RuntimeError):
    """Ray is asked for but cannot be used (not installed, cluster unreachable)."""


def address() -> str | None:
    """The configured Ray address ('local', 'auto', 'ray://…'), or None when Ray is not used."""
    value = (os.environ.get(ENV) or "").strip()
    if not value or value.lower() in ("0", "off", "no", "false"):
        return None
    if value not in ("local", "auto") and not value.startswith("ray://"):
        raise ClusterError(f"{ENV} must be 'local', 'auto' or ray://host:port, got {value!r}")
    return value


def enabled() -> bool:
    return address() is not None


def connect(where: str | None = None, **init: Any) -> Any:
    """``ray`` connected to ``where`` (default: $MERMAIDFLOW_RAY), initialising it once per process."""
    where = where or address() or "local"
    try:
        import ray
    except ModuleNotFoundError:
        raise ClusterError(f"{ENV}={where} but Ray is not installed (pip install ray==2.60.0)") from None
    with _lock:
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **init}
            if where == "local":  # workers import flowcore from this checkout
                root = str(Path(__file__).resolve().parents[2])
                path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
                kw.setdefault("runtime_env", {"env_vars": {"PYTHONPATH": path}})
                # A Ray inside the app is for this machine alone: on loopback only. On Linux Ray binds every
                # interface (and names the external address) unless its cluster mode is off and the node's address
                # is 127.0.0.1 (tests/execution/test_cluster.py checks what it listens on with `ss`).
                os.environ.setdefault(LOOPBACK_ENV, "0")  # read by the processes Ray starts
                kw.setdefault("_node_ip_address", "127.0.0.1")
                if os.environ[LOOPBACK_ENV] == "0":
                    try:  # and by this one, which read it when ray was imported (a private constant of Ray's)
                        from ray._private import ray_constants

                        ray_constants.ENABLE_RAY_CLUSTER = False
                    except (ImportError, AttributeError):
                        pass
            try:
                ray.init(address=None if where == "local" else where, **kw)
            except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, …: say which cluster
                raise ClusterError(f"cannot start or reach the Ray cluster {where!r}: {exc}") from None
    return ray


def _remote_fn(name: str, fn: Callable, **options: Any) -> Any:
    ray = connect()
    if name not in _remote:
        _remote[name] = ray.remote(**options)(fn) if options else ray.remote(fn)
    return _remote[name]


# -- evaluation -------------------------------------------------------------------------------------------------

def solve_problem(workflow_text: str, benchmark: str, problem: Any, settings: dict, api_key: str | None,
                  workspace: str | None, timeout: float | None, salt: str = "", run_id: str | None = None) -> Any:
    """One problem, run and scored: the body of a Ray task (also callable locally, which the tests compare).
    ``salt``: the driver's cache salt (a served owner's), so the worker reads and fills the same cache; ``run_id``:
    the driver's call-log name, so the worker's paid calls are logged as the run's (an evolution run's budget
    counts them from the log after a crash: History.logged)."""
    from flowcore.execution.runner import make_runner
    from flowcore.execution.runtime import prepare
    from flowcore.llm.client import LLM, LLMSettings
    from flowcore.mermaid.reader import parse
    from flowcore.tasks import kind_of_problem
    from flowcore.tasks.harness import Scorer, _solve
    from flowcore.workspace.store import Workspace

    plan = prepare(parse(workflow_text), kind_of_problem(problem))
    ws = Workspace(workspace) if workspace else None
    llm = LLM(LLMSettings.from_public_dict(settings, api_key=api_key), ws, run_id=run_id)
    llm.salt = salt
    try:
        return asyncio.run(_solve(make_runner(plan, llm), problem, timeout, Scorer(llm)))
    finally:
        if ws is not None:
            ws.close_all()


def _workspace_target(ws: Any) -> str | None:
    if ws is None:
        return None
    return ws.url if getattr(ws, "is_postgres", False) else str(ws.path)


async def evaluate(workflow_text: str, benchmark: str, problems: list, *, llm: Any, concurrency: int = 8,
                   progress: Callable[[int, int, Any], None] | None = None, cancel: threading.Event | None = None,
                   timeout: float | None = None) -> Any:
    """``evaluate_workflow`` with each problem a Ray task; same report, problems in order. ``concurrency``
    bounds the tasks in flight (Ray places them on the cluster's CPUs). The tasks' costs are added to ``llm``'s
    usage, so budgets and run costs count them as they count local calls."""
    from flowcore.tasks.harness import report_of

    ray = connect()
    # A worker process that dies (killed, out of memory, its node lost) is Ray's to retry: the problem runs again
    # elsewhere, its finished LLM calls come from the cache, and the result is the one an undisturbed run gets.
    # An exception inside the task is never retried: it is the problem's result (errored).
    task = _remote_fn("solve", solve_problem, num_cpus=1, max_retries=RETRIES)
    settings = llm.settings.to_public_dict()
    target = _workspace_target(getattr(llm, "workspace", None))
    total, results, pending, nxt = len(problems), {}, {}, 0
    cancelled = False
    while nxt < total or pending:
        while nxt < total and len(pending) < concurrency and not (cancel is not None and cancel.is_set()):
            # Each task's client gets what is left of the budget now (its own usage starts at 0): given the settings
            # the run started with, every task had the whole budget and a round paid for all its problems past it.
            left = {**settings, "budget_usd": _budget_left(llm)}
            ref = task.remote(workflow_text, benchmark, problems[nxt], left, llm.settings.api_key, target,
                              timeout, str(getattr(llm, "salt", "") or ""), getattr(llm, "run_id", None))
            pending[ref] = nxt
            nxt += 1
        if cancel is not None and cancel.is_set() and nxt < total:
            cancelled = True
            nxt = total  # start nothing more; the running ones finish
        if not pending:
            break
        done, _ = await asyncio.to_thread(ray.wait, list(pending), num_returns=1)
        for ref in done:
            i = pending.pop(ref)
            try:
                res = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # a crash outside the harness's own handling
                cause = getattr(exc, "cause", None) or exc
                from flowcore.execution.sandbox import SandboxUnavailable
                from flowcore.tasks.harness import ProblemResult

                if isinstance(cause, SandboxUnavailable):
                    for ref_left in pending:
                        ray.cancel(ref_left)
                    raise cause from None  # as locally: the whole evaluation stops, no wrong answer recorded

                res = ProblemResult(problems[i].id, False, "", None, 0.0, 0.0,
                                    f"{type(cause).__name__}: {cause}", True)  # no answer: errored, not wrong
            except ray.exceptions.RayError as exc:  # its worker died more often than Ray retries: no answer
                from flowcore.tasks.harness import ProblemResult

                res = ProblemResult(problems[i].id, False, "", None, 0.0, 0.0,
                                    f"the Ray worker running it died ({type(exc).__name__})", True, True)
            results[i] = res
            _account(llm, res.cost)
            if progress is not None:
                progress(len(results), total, res)
    return report_of(problems[0].benchmark if problems else benchmark, [results[i] for i in sorted(results)],
                     cancelled=cancelled)


def _budget_left(llm: Any) -> float | None:
    """The least any of ``llm``'s budgets has left (its own, and those of the clients it counts under), or None."""
    accounts = llm._accounts() if hasattr(llm, "_accounts") else [llm]
    with getattr(getattr(llm, "_shared", None), "lock", None) or threading.Lock():
        left = [a.settings.budget_usd - a.usage.cost for a in accounts if a.settings.budget_usd is not None]
    return max(0.0, min(left)) if left else None


def _account(llm: Any, cost: float) -> None:
    """Add a remote problem's cost to the driver's LLM usage (and its parents'), as a local call would."""
    node = llm
    lock = getattr(getattr(llm, "_shared", None), "lock", None) or threading.Lock()
    with lock:
        while node is not None:
            usage = getattr(node, "usage", None)
            if usage is not None:
                usage.cost += float(cost or 0.0)
            node = getattr(node, "_parent", None)
