"""An evolution run as a detached Ray actor: it keeps evolving after the browser session or the app process that
started it is gone (on a cluster started with `ray start`); its rounds land in the workspace as usual.

An actor whose process dies is restarted by Ray (``cluster.RESTARTS`` times) and resumes after the last stored
round. When the restarts are used up, or the Ray cluster itself went away, nothing on the cluster is left to say
so: the run would stay "running". ``wait`` (``submit --ray --wait``) records it "stopped" as soon as Ray reports
the actor dead, and ``reconcile`` (the History and Evolve pages, ``queue``) does when nothing has evolved a Ray
run for ``grace()`` seconds; both name the command that resumes it (``resume_command``). Either first takes the
run's lease, so a live actor's run is never touched.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import time
from typing import Any

from flowcore.execution import cluster

ANSWER_GRACE = 5.0  # seconds a finished actor stays for its answer to reach the driver before it leaves
GRACE_ENV = "MERMAIDFLOW_RAY_GRACE"
GRACE = 120.0  # seconds without an actor on a Ray run before a reader records it stopped (a restart takes seconds)
DDL = """
CREATE TABLE IF NOT EXISTS evo_remote(
    run_id INTEGER PRIMARY KEY, actor TEXT NOT NULL, cluster TEXT NOT NULL, submitted REAL NOT NULL,
    starts INTEGER NOT NULL DEFAULT 0, seen REAL NOT NULL);
"""


class _Evolver:
    """A detached actor evolving one stored run (resuming after its last stored round)."""

    def run(self, workspace: str, run_id: int, settings: dict | None, api_key: str | None) -> dict:
        import time
        from dataclasses import replace

        from flowcore.evolution.history import run_tag
        from flowcore.evolution.lease import STALE_AFTER, RunBusy
        from flowcore.evolution.loop import Evolution, run_budget
        from flowcore.llm.client import LLM, LLMSettings
        from flowcore.workspace.store import Workspace

        ws = Workspace(workspace)
        _started(ws, run_id)
        llm = None
        if settings is not None:
            llm = LLM(LLMSettings.from_public_dict(settings, api_key=api_key), ws, run_id=run_tag(run_id))
        try:
            evo = Evolution.resume(ws, run_id, llm=llm)
            deadline = time.monotonic() + STALE_AFTER + 10
            while True:  # restarted after its process died: the dead one's lease frees itself (at once on one machine)
                try:
                    evo.start()
                    break
                except RunBusy:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
            budget = None if llm is None else run_budget(evo.config, llm.settings)
            if budget is not None:  # as the foreground run's client: capped call by call by what is left of the
                # run's budget (read under its lease, after any earlier actor's calls)
                llm.settings = replace(llm.settings, budget_usd=max(0.0, budget - evo.history.spent(run_id)))
            out = evo.run()
        finally:
            ws.close_all()
        import threading
        import time

        import ray

        # Leave once this answer is out, for good (no restart): asked here, not by the driver right after submitting
        # (a restarted actor is sent the driver's queued calls again, so an early terminate ended it unfinished).
        me = ray.get_runtime_context().current_actor
        threading.Thread(target=lambda: (time.sleep(ANSWER_GRACE), ray.kill(me, no_restart=True)), daemon=True).start()
        return out


def submit_evolution(ws: Any, config: Any, settings: Any | None = None) -> tuple[int, Any]:
    """Store a new evolution run and hand it to a detached Ray actor named ``mermaidflow-evolve-<run>``.
    Returns (run id, the ObjectRef of its result). The run's rounds land in the workspace as usual, so every
    app process on that workspace shows its progress; the driver may exit."""
    from flowcore.evolution.loop import Evolution

    target = cluster._workspace_target(ws)
    if target is None or target == ":memory:":
        raise cluster.ClusterError("a Ray evolution job needs a workspace the cluster can open (a file or postgresql://)")
    from flowcore.llm.client import LLM

    cluster.connect()  # Ray missing or unreachable: said before anything is stored
    llm = None if settings is None else LLM(settings, ws)
    evo = Evolution(ws, config, llm=llm)  # validates the config before anything is stored
    evo.prepare()  # a bad data file is reported here, not on the cluster
    run_id = evo.start(resume=False)
    evo.release()  # the actor takes the run's lease
    return run_id, _hand_over(ws, run_id, target, settings)


def resume_evolution(ws: Any, run_id: int, settings: Any | None = None) -> Any:
    """Hand a stored run (stopped, or stranded by a dead actor) to a new actor: the ObjectRef of its result.
    ValueError when the run is unknown or finished."""
    from flowcore.evolution.history import History
    from flowcore.evolution.lease import RunBusy, holder

    target = cluster._workspace_target(ws)
    if target is None or target == ":memory:":
        raise cluster.ClusterError("a Ray evolution job needs a workspace the cluster can open (a file or postgresql://)")
    try:
        info = History(ws).run(run_id)
    except KeyError as exc:
        raise ValueError(str(exc).strip("'\"")) from None
    if info.status == "finished":
        raise ValueError(f"run {run_id} is finished: nothing to resume")
    busy = holder(ws, run_id)
    if busy is not None:
        raise RunBusy(busy.describe())
    cluster.connect()
    return _hand_over(ws, run_id, target, settings)


def _hand_over(ws: Any, run_id: int, target: str, settings: Any | None) -> Any:
    schema(ws)
    now, where = time.time(), cluster.address() or "local"
    with ws.transaction() as c:  # a reader knows this run is a Ray actor's (reconcile) and where to resume it
        c.execute("DELETE FROM evo_remote WHERE run_id = ?", (run_id,))
        c.execute("INSERT INTO evo_remote(run_id, actor, cluster, submitted, starts, seen) VALUES (?,?,?,?,0,?)",
                  (run_id, actor_name(run_id), where, now, now))
    try:  # a dead actor of an earlier hand-over keeps its name until Ray forgets it
        import ray

        ray.kill(ray.get_actor(actor_name(run_id), namespace="mermaidflow"), no_restart=True)
    except Exception:  # noqa: BLE001 - none (the usual case)
        pass
    actor_cls = cluster._remote_fn("evolver", _Evolver, num_cpus=1)
    # A process that dies (killed, out of memory) is restarted by Ray and its run() task sent again: it resumes the
    # run after its last stored round, as the same command would (Ray's max_restarts / max_task_retries).
    actor = actor_cls.options(name=actor_name(run_id), namespace="mermaidflow", lifetime="detached",
                              max_restarts=cluster.RESTARTS, max_task_retries=cluster.RESTARTS).remote()
    public = None if settings is None else settings.to_public_dict()
    return actor.run.remote(target, run_id, public, None if settings is None else settings.api_key)


def actor_name(run_id: int) -> str:
    return f"mermaidflow-evolve-{run_id}"


def schema(ws: Any) -> None:
    ws.ensure_schema("evo_remote", DDL)


def _started(ws: Any, run_id: int) -> None:
    """An actor (first or restarted) took the run on: counted, and its time kept for ``reconcile``."""
    schema(ws)
    with ws.transaction() as c:
        c.execute("UPDATE evo_remote SET starts = starts + 1, seen = ? WHERE run_id = ?", (time.time(), run_id))


RESUME_WITH = "; resume it with: "


def resume_hint(reason: str | None) -> str | None:
    """The resume command a stopped run's reason names (``strand``'s), for a page to show as code."""
    return reason.rsplit(RESUME_WITH, 1)[1].strip() if reason and RESUME_WITH in reason else None


def grace() -> float:
    try:
        return max(0.0, float(os.environ.get(GRACE_ENV) or GRACE))
    except ValueError:
        return GRACE


def resume_command(ws: Any, run_id: int) -> str:
    """The command that hands ``run_id`` to a new Ray actor on the cluster it ran on (``--wait`` for a Ray that
    lives in the command's own process: it would go away with it)."""
    from flowcore.workspace.target import redact

    rows = ws.query("SELECT cluster FROM evo_remote WHERE run_id = ?", (run_id,)) if "evo_remote" in ws._schemas \
        else []
    where = rows[0]["cluster"] if rows else (cluster.address() or "local")
    target = redact(cluster._workspace_target(ws) or "")
    return (f"{cluster.ENV}={shlex.quote(where)} python -m flowcore submit --ray --resume {run_id} --db "
            f"{shlex.quote(target)}" + (" --wait" if where == "local" else ""))


def strand(ws: Any, run_id: int, why: str, *, wait_lease: float = 0.0) -> dict:
    """Record a run no actor evolves any more "stopped", with ``why`` and the command that resumes it. Under the
    run's lease (waited for up to ``wait_lease`` s: a dead actor on another machine frees it when its heartbeat is
    stale), so a live holder's run is left alone; a run that ended meanwhile keeps its own status."""
    from flowcore.evolution.history import History
    from flowcore.evolution.lease import STALE_AFTER, Lease, RunBusy

    lease = Lease(ws, run_id, stale_after=STALE_AFTER)
    deadline = time.monotonic() + wait_lease
    while True:
        try:
            lease.acquire()
            break
        except RunBusy as exc:
            if time.monotonic() >= deadline:
                return {"run_id": run_id, "status": "running", "reason": str(exc)}
            time.sleep(1.0)
    try:
        h = History(ws)
        h.guard = lease.check
        info = h.run(run_id)
        if info.status != "running":
            return {"run_id": run_id, "status": info.status, "reason": info.reason}
        reason = f"{why}{RESUME_WITH}{resume_command(ws, run_id)}"
        h.set_status(run_id, "stopped", reason)
    finally:
        lease.release()
    return {"run_id": run_id, "status": "stopped", "reason": reason}


def wait(ws: Any, run_id: int, ref: Any, poll: float = 1.0) -> dict:
    """The actor's answer (as ``Evolution.run``'s); when Ray reports the actor dead for good (its restarts used
    up) or the cluster gone, the run is recorded stopped (``strand``) and that is the answer."""
    from flowcore.evolution.lease import STALE_AFTER

    ray = cluster.connect()
    exc_mod = ray.exceptions
    while True:
        try:
            return ray.get(ref, timeout=poll)
        except exc_mod.GetTimeoutError:
            continue
        except exc_mod.RayActorError as exc:  # ActorDiedError: Ray restarted it RESTARTS times, then gave up
            why = (f"its Ray actor {actor_name(run_id)} died once more than Ray restarts it: the restarts "
                   f"({cluster.RESTARTS}) are used up ({_first_line(exc)})")
        except exc_mod.RayTaskError as exc:  # run() raised: the actor's own error, said as is
            why = f"its Ray actor {actor_name(run_id)} failed: {_first_line(exc)}"
        except Exception as exc:  # noqa: BLE001 - RaySystemError, ConnectionError...: the cluster is gone
            why = f"the Ray cluster went away ({type(exc).__name__}: {_first_line(exc)})"
        return strand(ws, run_id, why, wait_lease=STALE_AFTER + 5)


def reconcile(ws: Any, grace_s: float | None = None) -> list[int]:
    """Record stopped every "running" Ray run that no live process holds and no actor has started or beaten for
    ``grace_s`` seconds (its actor died for good, or the cluster went away, with nobody waiting on it). The ids
    recorded; nothing (and no error) when the workspace cannot be written."""
    from flowcore.evolution.lease import holder
    from flowcore.evolution.lease import schema as lease_schema

    grace_s = grace() if grace_s is None else grace_s
    try:
        schema(ws)
        lease_schema(ws)
        rows = ws.query("SELECT m.run_id, m.seen, l.heartbeat FROM evo_remote m JOIN evo_runs r ON r.id = m.run_id "
                        "LEFT JOIN evo_leases l ON l.run_id = m.run_id WHERE r.status = 'running'")
    except sqlite3.Error:
        return []
    done, now = [], time.time()
    for r in rows:
        last = max(float(r["seen"] or 0), float(r["heartbeat"] or 0))
        if now - last < grace_s or holder(ws, int(r["run_id"])) is not None:
            continue
        why = (f"no Ray actor has evolved it for {now - last:.0f} s (its actor {actor_name(int(r['run_id']))} died "
               "for good, or the Ray cluster went away)")
        try:
            if strand(ws, int(r["run_id"]), why)["status"] == "stopped":
                done.append(int(r["run_id"]))
        except sqlite3.Error:
            return done
    return done


def runs(ws: Any) -> list[dict]:
    """Every run handed to Ray: run_id, actor, cluster, starts (of its actors), status, reason."""
    try:
        schema(ws)
        return [dict(r) for r in ws.query(
            "SELECT m.run_id, m.actor, m.cluster, m.starts, r.status, r.reason FROM evo_remote m "
            "JOIN evo_runs r ON r.id = m.run_id ORDER BY m.run_id")]
    except sqlite3.Error:
        return []


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
