"""AOV scale: reading + validating an AOV file and computing its metrics at 1,000 and 10,000 subtasks, next
to plain networkx doing the same work on the same graph.

Run: .venv/bin/python benchmarks/aov_scale.py   (prints a table; medians over repeats, ratios within one run)
Goal (issue #12): linear growth, and within 3x of plain networkx.

Shapes: ``fan`` (one root, n-2 parallel subtasks, one sink: the shape the selection rule prefers, with two
nodes of degree n-2) and ``layered`` (layers of 50, each subtask fed by 3 subtasks of the previous layer).
"Plain networkx" is ``json.loads`` + a ``DiGraph`` from the parent lists + ``is_directed_acyclic_graph``
(read/validate), and a ``DiGraph`` from the edges + ``topological_generations`` + the degree standard
deviation (metrics): what any careful hand-written version must do at least.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import networkx as nx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowcore.aov import AOVGraph
from flowcore.aov import metrics as M


def fan(n: int) -> dict:
    mids = [f"s{i}" for i in range(1, n - 1)]
    subs = {"root": {"subtask_requirement": "plan", "agent": "a", "parents": []}}
    subs.update({m: {"subtask_requirement": f"part {m}", "agent": "a", "parents": ["root"]} for m in mids})
    subs["sink"] = {"subtask_requirement": "merge", "agent": "a", "parents": mids}
    return {"goal": "fan", "agents": [{"id": "a", "role": "worker"}], "subtasks": subs}


def layered(n: int, width: int = 50, fan_in: int = 3) -> dict:
    subs: dict[str, dict] = {}
    for i in range(n):
        layer, pos = divmod(i, width)
        parents = [] if layer == 0 else sorted({f"s{(layer - 1) * width + (pos + k) % width}"
                                               for k in range(fan_in)})
        subs[f"s{i}"] = {"subtask_requirement": f"part {i}", "agent": "a", "parents": parents}
    return {"goal": "layered", "agents": [{"id": "a", "role": "worker"}], "subtasks": subs}


def plain_read(text: str) -> nx.DiGraph:
    doc = json.loads(text)
    g = nx.DiGraph()
    g.add_nodes_from(doc["subtasks"])
    g.add_edges_from((p, sid) for sid, rec in doc["subtasks"].items() for p in rec["parents"])
    assert nx.is_directed_acyclic_graph(g)
    return g


def plain_metrics(edges: list[tuple[str, str]], nodes: list[str]) -> tuple[float, float]:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    gens = [list(s) for s in nx.topological_generations(g)]
    degs = [d for _, d in g.degree()]
    mean = sum(degs) / len(degs)
    return len(nodes) / len(gens), math.sqrt(sum((d - mean) ** 2 for d in degs) / len(degs))


def paired_ms(ours, base, repeats: int) -> tuple[float, float]:
    """Median CPU times (ms, this process) of ``ours`` and ``base``, run alternately: on a shared machine the
    wall clock also counts the time other jobs held the cores; CPU time and alternation keep the ratio
    honest."""
    a, b = [], []
    for _ in range(repeats):
        for fn, out in ((ours, a), (base, b)):
            gc.collect()  # start each run from the same heap: the collector's timing is the main noise here
            t0 = time.process_time()
            fn()
            out.append((time.process_time() - t0) * 1000)
    return statistics.median(a), statistics.median(b)


def main() -> None:
    print(f"machine: {os.cpu_count()} cores shared with other jobs (load average {os.getloadavg()[0]:.1f}); CPU ms of this process, medians; compare the ratios")
    head = (f"{'shape':>8} {'subtasks':>9} {'edges':>7} | {'read+validate ms':>17} {'networkx ms':>12} "
            f"{'ratio':>6} | {'metrics ms':>11} {'networkx ms':>12} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for shape, build in (("fan", fan), ("layered", layered)):
        for n in (1000, 10000):
            text = json.dumps(build(n))
            repeats = 9 if n <= 1000 else 5
            g = AOVGraph.from_json(text)
            edges, nodes = g.edges(), list(g.subtasks)
            m = M.compute(g)
            pa, cd = plain_metrics(edges, nodes)
            assert abs(m.P_avg - pa) < 1e-9 and abs(m.C_dependency - cd) < 1e-9  # the same figures
            ours_r, base_r = paired_ms(lambda text=text: AOVGraph.from_json(text),
                                       lambda text=text: plain_read(text), repeats)
            ours_m, base_m = paired_ms(lambda g=g: M.compute(g), lambda e=edges, v=nodes: plain_metrics(e, v),
                                       repeats)
            worst = max(worst, ours_r / base_r, ours_m / base_m)
            print(f"{shape:>8} {n:>9,} {len(edges):>7,} | {ours_r:>17.1f} {base_r:>12.1f} {ours_r / base_r:>6.2f} "
                  f"| {ours_m:>11.1f} {base_m:>12.1f} {ours_m / base_m:>6.2f}")
    print(f"\nworst ratio to plain networkx: {worst:.2f}x (goal: within 3x)")


if __name__ == "__main__":
    main()
