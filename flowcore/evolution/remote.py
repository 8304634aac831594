"""An evolution run as a detached Ray actor: it keeps evolving after the browser session or the app process that
started it is gone (on a cluster started with `ray start`); its rounds land in the workspace as usual."""

from __future__ import annotations

from typing import Any

from flowcore.execution import cluster

ANSWER_GRACE = 5.0  # seconds a finished actor stays for its answer to reach the driver before it leaves


class _Evolver:
    """A detached actor evolving one stored run (resuming after its last stored round)."""

    def run(self, workspace: str, run_id: int, settings: dict | None, api_key: str | None) -> dict:
        import time

        from flowcore.evolution.lease import STALE_AFTER, RunBusy
        from flowcore.evolution.loop import Evolution
        from flowcore.llm.client import LLM, LLMSettings
        from flowcore.workspace.store import Workspace

        ws = Workspace(workspace)
        llm = None
        if settings is not None:
            llm = LLM(LLMSettings.from_public_dict(settings, api_key=api_key), ws, run_id=f"evo-{run_id}")
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
    actor_cls = cluster._remote_fn("evolver", _Evolver, num_cpus=1)
    # A process that dies (killed, out of memory) is restarted by Ray and its run() task sent again: it resumes the
    # run after its last stored round, as the same command would (Ray's max_restarts / max_task_retries).
    actor = actor_cls.options(name=f"mermaidflow-evolve-{run_id}", namespace="mermaidflow", lifetime="detached",
                              max_restarts=cluster.RESTARTS, max_task_retries=cluster.RESTARTS).remote()
    public = None if settings is None else settings.to_public_dict()
    ref = actor.run.remote(target, run_id, public, None if settings is None else settings.api_key)
    return run_id, ref
