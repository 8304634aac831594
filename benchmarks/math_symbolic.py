"""Per-comparison cost of MATH's symbolic step on the real MATH data: in the worker process (flowcore/tasks/symbolic.py,
issue 25.2) next to the old in-process thread (its anchor, timed in the same run, alternating).

Pairs come from the bundled MATH file: each reference answer against a parenthesised copy of itself (equal, but not
as strings) and against the next problem's answer (mostly unequal); only the pairs that reach sympy are timed
(both translate from LaTeX and pass the size check). Usage: python benchmarks/math_symbolic.py [PAIRS]
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowcore.tasks import data, symbolic  # noqa: E402
from flowcore.tasks.scoring import _latex_to_py, _safe_size, _Unsupported, last_boxed, normalize  # noqa: E402


def _pairs(limit: int) -> list[tuple[str, str]]:
    refs = []
    for p in data.load("math", None):
        ref = last_boxed(p.reference) or p.reference
        try:
            py = _latex_to_py(normalize(ref))
        except _Unsupported:
            continue
        if py.strip() and _safe_size(py):
            refs.append(py)
    out = []
    for i, py in enumerate(refs):
        out.append((py, f"({py})"))
        out.append((py, refs[(i + 1) % len(refs)]))
    return out[:limit]


def _in_thread(a: str, b: str) -> bool | None:
    """The old path: sympy in a daemon thread of this process, joined with a timeout."""
    sys.path.insert(0, str(Path(symbolic.__file__).parent))
    import _symbolic_worker as w

    box: list = []
    t = threading.Thread(target=lambda: box.append(w.sympy_equal(a, b)), daemon=True)
    t.start()
    t.join(symbolic.CPU_SECONDS)
    return box[0] if box else None


def main(limit: int) -> None:
    pairs = _pairs(limit)
    assert symbolic.equal("x+1", "1+x") and _in_thread("x+1", "1+x")  # both warm before timing
    worker, thread, disagree = [], [], 0
    for a, b in pairs:
        t = time.perf_counter()
        got = symbolic.equal(a, b)
        worker.append(time.perf_counter() - t)
        t = time.perf_counter()
        old = _in_thread(a, b)
        thread.append(time.perf_counter() - t)
        disagree += got is not old
    w, o = statistics.median(worker) * 1000, statistics.median(thread) * 1000
    wm, om = statistics.mean(worker) * 1000, statistics.mean(thread) * 1000
    print(f"pairs that reach sympy: {len(pairs)} (MATH references); verdicts that differ: {disagree}; "
          f"load: {os.getloadavg()[0]:.2f}")
    print(f"{'per comparison':<34} | {'product: worker process':>24} | {'anchor: thread in-process':>26} | "
          f"{'ratio':>6} | load")
    print(f"{'median ms':<34} | {w:>24.2f} | {o:>26.2f} | {w / o:>6.2f} | {os.getloadavg()[0]:.2f}")
    print(f"{'mean ms':<34} | {wm:>24.2f} | {om:>26.2f} | {wm / om:>6.2f} | {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
