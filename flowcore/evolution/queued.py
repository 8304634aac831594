"""Evolution through the work queue: submit a run for a worker, and the "evolve" handler a worker runs."""

from __future__ import annotations

import threading
import time
from typing import Any

from flowcore.evolution.lease import BEAT_EVERY, RunBusy
from flowcore.evolution.loop import Evolution
from flowcore.workspace import queue
from flowcore.workspace.store import Workspace


def submit_evolution(ws: Workspace, config: Any) -> tuple[int, int]:
    """Store a new evolution run (validated, its problems loadable) and queue it for a worker: (run id, item id)."""
    evo = Evolution(ws, config)
    evo.prepare()
    run_id = evo.start(resume=False)
    evo.release()  # the worker that claims it takes the run's lease
    return run_id, queue.submit(ws, "evolve", {"run_id": run_id})


@queue.handler("evolve")
def evolve_item(ws: Workspace, item: queue.Item, lost: threading.Event) -> dict:
    """Evolve the item's run, continuing after its last stored round (a worker that died or was paused left it).
    The run's lease is judged by the queue's ``stale_after`` too, and waited for that long when its holder is
    still heard from; an item taken over from this worker (``lost``) stops the run here without a word written
    (queue.Lost), and is never recorded as cancelled."""
    run_id = int(item.payload["run_id"])
    evo = Evolution.resume(ws, run_id, lease_stale_after=item.stale_after)
    deadline = time.monotonic() + item.stale_after + BEAT_EVERY
    while True:
        try:
            evo.start()
            break
        except RunBusy:
            if time.monotonic() > deadline or lost.wait(0.5):
                raise
    ended = threading.Event()

    def watch() -> None:  # the queue's heartbeat found the item taken over: give the run up at once
        while not ended.is_set():
            if lost.wait(0.5):
                if evo._lease is not None:
                    evo._lease.lose(f"work item {item.id} was taken over by another worker while this one "
                                    f"({item.worker}) was not heard from; it carries the run on")
                return

    threading.Thread(target=watch, daemon=True, name=f"lost-{item.id}").start()
    try:
        out = evo.run()
    finally:
        ended.set()
    if out["status"] == "lost":
        raise queue.Lost(out["reason"])
    return {"run_id": out["run_id"], "status": out["status"], "rounds": len(out["rounds"])}
