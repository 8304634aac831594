"""Evolution through the work queue: submit a run for a worker, and the "evolve" handler a worker runs."""

from __future__ import annotations

import threading
from typing import Any

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
def evolve_item(ws: Workspace, item: queue.Item, stop: threading.Event) -> dict:
    evo = Evolution.resume(ws, int(item.payload["run_id"]), cancel=stop)
    out = evo.run()  # after a worker died: continues after the last stored round
    return {"run_id": out["run_id"], "status": out["status"], "rounds": len(out["rounds"])}
