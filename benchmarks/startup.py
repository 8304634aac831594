"""Start-up: wall time of a cold ``python -m flowcore check FILE`` (a new interpreter each time), next to a bare
interpreter and ``import flowcore``, interleaved so machine load hits all three alike; and whether networkx (or
another heavy package) is imported on the check path at all.

    .venv/bin/python benchmarks/startup.py [--runs 15]

Goal: ``check`` <= 150 ms. The machine is shared: the "over bare python" column is the part this project adds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "assets" / "examples" / "math_seed.mmd"
HEAVY = ("networkx", "pandas", "numpy", "plotly", "openai", "streamlit", "psycopg", "ray", "scipy", "sympy")
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import flowcore": [sys.executable, "-c", "import flowcore"],
    "python -m flowcore check": [sys.executable, "-m", "flowcore", "check", str(FILE)],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(args.runs):
        for name, cmd in CASES.items():
            t = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
            times[name].append(time.perf_counter() - t)
    probe = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['flowcore', 'check', "
                            f"{str(FILE)!r}]\ntry:\n    runpy.run_module('flowcore', run_name='__main__')\n"
                            "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.split('.')[0] in "
                            f"{HEAVY!r}))"], cwd=ROOT, capture_output=True, text=True, check=True)
    heavy = probe.stdout.strip().splitlines()[-1]
    bare = statistics.median(times["python -c pass"])
    print(f"Start-up, {args.runs} cold runs each, interleaved (the machine is shared and was loaded)\n")
    print("| command | median (ms) | min (ms) | over bare python, median (ms) |")
    print("|---|---:|---:|---:|")
    for name, ts in times.items():
        print(f"| `{name}` | {1000 * statistics.median(ts):.0f} | {1000 * min(ts):.0f} | "
              f"{1000 * (statistics.median(ts) - bare):.0f} |")
    print(f"\nheavy packages imported by `check`: {heavy if heavy != '[]' else 'none'}")


if __name__ == "__main__":
    main()
