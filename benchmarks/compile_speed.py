"""Prepare + compile time of big workflows: 1k, 10k, 50k nodes (#14 item 5: must grow linearly).

A workflow of N Custom nodes in chains of 10 that start at PROBLEM and meet in ScEnsemble nodes feeding RETURN
through one last ensemble. Prints seconds per size and the growth ratio time(N)/time(1k) next to N/1k; a
linear pipeline keeps the two close (the shared, noisy machine makes a ratio of ratios within ~2x normal).
Usage: python benchmarks/compile_speed.py [SIZES...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowcore.execution.compiler import compile_workflow
from flowcore.execution.runtime import prepare
from flowcore.mermaid.reader import parse


def big_workflow_text(n: int, chain: int = 10) -> str:
    lines = ["flowchart TD", "    %% @prompt solver: Solve it.", '    PROBLEM(["Problem"])', '    RETURN(["Return"])']
    edges, ends = [], []
    for c in range(max(n // chain, 1)):
        prev = "PROBLEM"
        for k in range(chain):
            nid = f"C{c}_{k}"
            lines.append(f'    {nid}["Custom<br/>(role: solver)"]')
            edges.append(f"    {prev} -->|input| {nid}")
            prev = nid
        ends.append(prev)
    groups = [ends[i:i + 10] for i in range(0, len(ends), 10)]
    finals = []
    for g, members in enumerate(groups):
        if len(members) < 2:
            finals += members
            continue
        eid = f"E{g}"
        lines.append(f'    {eid}["ScEnsemble"]')
        edges += [f"    {m} -->|solutions| {eid}" for m in members]
        finals.append(eid)
    if len(finals) >= 2:
        lines.append('    EF["ScEnsemble"]')
        edges += [f"    {f} -->|solutions| EF" for f in finals]
        finals = ["EF"]
    edges.append(f"    {finals[0]} --> RETURN")
    lines.append("    class PROBLEM,RETURN Interface")
    return "\n".join(lines + edges) + "\n"


def main(sizes: list[int]) -> None:
    print(f"{'nodes':>7} {'edges':>7} {'parse s':>8} {'prepare s':>10} {'compile s':>10} {'prep+comp s':>12} "
          f"{'x time':>7} {'x nodes':>8}")
    base = None
    for n in sizes:
        w = parse(big_workflow_text(n))
        t0 = time.perf_counter()
        parse(big_workflow_text(n))
        t1 = time.perf_counter()
        prepare(w, "math")
        t2 = time.perf_counter()
        src = compile_workflow(w, "math")
        t3 = time.perf_counter()
        total = t3 - t1
        base = base or (total, n)
        print(f"{len(w.nodes):>7} {len(w.edges):>7} {t1 - t0:>8.2f} {t2 - t1:>10.2f} {t3 - t2:>10.2f} "
              f"{total:>12.2f} {total / base[0]:>7.1f} {n / base[1]:>8.1f}", flush=True)
        assert "class Workflow" in src
    print("(compile includes its own prepare; x time = prep+comp / first row; linear: x time ~ x nodes)")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000, 10_000, 50_000])
