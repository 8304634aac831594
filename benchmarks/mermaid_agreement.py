"""Agreement of the soft reader and fmt with the bundled Mermaid 11, on N generated flowchart texts.

Run: .venv/bin/python benchmarks/mermaid_agreement.py [N] [--seed S]     (default N = 5000, seed 1)

Texts come from the grammar-based generator in tests/helpers/flowchart_gen.py (every flowchart feature); one in four
is a near-miss made by a one-character edit, so both acceptance and rejection are exercised. For each text
Mermaid 11 (the JS engine) is the oracle. Printed counts (all must be 0):
  false syntax errors  the soft reader rejects a text Mermaid accepts
  missed syntax errors the soft reader accepts a text Mermaid rejects
  wrong line           both reject, the soft reader names another line than Mermaid (when Mermaid names one)
  misreads             both accept, different graphs (vertices, edges in order, subgraphs, classes)
  fmt changes          Mermaid rejects fmt(x), draws fmt(x) differently, or fmt(fmt(x)) != fmt(x)
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowcore.mermaid.agreement import compare
from tests.helpers.flowchart_gen import text_from_random


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=3, help="examples to print per kind of disagreement")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    t0 = time.perf_counter()
    for i in range(args.n):
        text = text_from_random(rng, broken=i % 4 == 3)
        v = compare(text)
        counts[v.outcome] += 1
        if v.outcome not in ("agree-accept", "agree-reject"):
            examples[v.outcome].append((text, v.detail))
        if v.wrong_line:
            counts["wrong-line"] += 1
            examples["wrong-line"].append((text, v.detail))
        if v.fmt_change:
            counts["fmt-change"] += 1
            examples["fmt-change"].append((text, v.fmt_change))
    secs = time.perf_counter() - t0
    accepted = counts["agree-accept"] + counts["false-error"] + counts["misread"]
    rows = [
        ("generated texts", args.n),
        ("  Mermaid accepts", accepted),
        ("  Mermaid rejects", args.n - accepted),
        ("false syntax errors", counts["false-error"]),
        ("missed syntax errors", counts["missed-error"]),
        ("wrong line (both reject)", counts["wrong-line"]),
        ("misreads", counts["misread"]),
        ("fmt changes", counts["fmt-change"]),
    ]
    print(f"Mermaid 11 agreement, seed {args.seed} ({secs:.0f} s; the JS engine is the oracle)")
    print(f"{'':28}{'count':>8}")
    for name, value in rows:
        print(f"{name:28}{value:>8}")
    for kind, items in examples.items():
        print(f"\n{kind}: {len(items)}")
        for text, detail in items[: args.show]:
            print(f"  {text!r}\n    -> {detail[:300]}")
    bad = sum(counts[k] for k in ("false-error", "missed-error", "wrong-line", "misread", "fmt-change"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
