"""Validity of evolution children on seeds the operators have not seen.

Unseen seeds are random operator walks (3-6 edits) from the shipped examples, drawn with RNG seeds disjoint from
the ones used for the children. Every child of every operator is then checked three ways: our checker, an
independent implementation of the same rules (tests/helpers/independent_checker.py) and the real Mermaid 11 parser.

    .venv/bin/python benchmarks/evolve_validity.py [--seeds 60] [--tries 5] [--no-hard]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowcore import check, is_valid, parse, to_mermaid
from flowcore.evolution import ops
from tests.helpers import independent_checker

EXAMPLES = {"math_seed": "math", "math_case_study": "math", "gsm8k_case_study": "math",
            "code_seed": "code", "humaneval_case_study": "code", "mbpp_case_study": "code"}


def unseen_seeds(n: int) -> list[tuple[object, str]]:
    """n workflows made by random operator walks from the examples (RNG seeds 100000+)."""
    base = [(parse((ROOT / "assets" / "examples" / f"{k}.mmd").read_text()), t) for k, t in EXAMPLES.items()]
    seeds, i = [], 0
    while len(seeds) < n:
        rng = random.Random(100_000 + i)
        i += 1
        w, task = base[rng.randrange(len(base))]
        for _ in range(rng.randint(3, 6)):
            partner = rng.choice([b for b, t in base if t == task])
            res = ops.apply(rng.choice(ops.OPERATORS), [w, partner], task, rng)
            if isinstance(res, ops.Child):
                w = res.workflow
        seeds.append((w, task))
    return seeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--tries", type=int, default=5, help="children attempted per seed and operator")
    ap.add_argument("--no-hard", action="store_true", help="skip the real Mermaid parser")
    ap.add_argument("--operators", default=",".join(ops.OPERATORS), help="comma-separated subset")
    args = ap.parse_args()
    parse_check = None
    if not args.no_hard:
        from flowcore.mermaid.engines.js import parse_check
    seeds = unseen_seeds(args.seeds)
    print(f"{len(seeds)} unseen seeds (random walks from the examples), {args.tries} tries per seed and operator")
    print("| operator | children | ours valid | independent valid | Mermaid 11 valid | ms/child |")
    print("|---|---:|---:|---:|---:|---:|")
    totals = Counter()
    for op in ops.parse_operator_list(args.operators):
        c = Counter()
        t0 = time.perf_counter()
        for i, (w, task) in enumerate(seeds):
            partners = [s for s, t in seeds if t == task]
            for k in range(args.tries):
                rng = random.Random(i * 1000 + k)
                res = ops.apply(op, [w, partners[rng.randrange(len(partners))]], task, rng)
                if not isinstance(res, ops.Child):
                    continue
                text = to_mermaid(res.workflow)
                c["children"] += 1
                c["ours"] += is_valid(check(text, task))
                c["independent"] += not independent_checker.errors(text, task)
                c["mermaid"] += parse_check is None or parse_check(text) is None
        ms = 1000 * (time.perf_counter() - t0) / max(1, c["children"])
        totals.update(c)
        print(f"| {op} | {c['children']} | {c['ours']} | {c['independent']} | "
              f"{c['mermaid'] if parse_check else 'skipped'} | {ms:.1f} |")
    print(f"| all | {totals['children']} | {totals['ours']} | {totals['independent']} | "
          f"{totals['mermaid'] if parse_check else 'skipped'} | |")


if __name__ == "__main__":
    main()
