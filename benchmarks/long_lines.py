"""Soft-check CPU time on one long line (issue 20) and, beside it, the MermaidFlow papers' dialect, each next to
the same run's anchor: one pass of `re` over the same text (a floor no reader can beat by much).

    .venv/bin/python benchmarks/long_lines.py [--repeats 3]

Shapes: a chain `N0 --> N1 --> ...` on one line (8 / 16 / 32 KB), the 120 KB line `flowchart TD;` + `A-->B;` x
20,000 that a 300-character link expands to, and the papers' dialect (one `class X CustomOp` line per node, a space
before the pipe: `A --> |input| B`) at 100 and 1,000 nodes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from check_speed import TOKEN, load_line, papers

from flowcore import check


def chain(kb: int) -> str:
    text = "flowchart TD\n" + " --> ".join(f"N{i}" for i in range(kb * 1024 // 6))
    return text[:kb * 1024].rsplit(" ", 1)[0] + "\n"


def cpu_ms(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(load_line())
    print(f"{'text':<40} {'chars':>8} {'check CPU ms':>13} {'re pass ms':>11} {'x re pass':>10}")
    shapes = [(f"one-line chain, {kb} KB", chain(kb)) for kb in (8, 16, 32)]
    shapes.append(("`flowchart TD;` + `A-->B;` x 20,000", "flowchart TD;" + "A-->B;" * 20_000))
    shapes += [(f"papers' dialect, {n} nodes", papers(n)) for n in (100, 1000)]
    for name, text in shapes:
        ours = cpu_ms(lambda t=text: check(t), args.repeats)
        floor = cpu_ms(lambda t=text: sum(1 for _ in TOKEN.finditer(t)), args.repeats)
        print(f"{name:<40} {len(text):>8,} {ours:>13.1f} {floor:>11.2f} {ours / max(floor, 1e-3):>10.0f}")


if __name__ == "__main__":
    main()
