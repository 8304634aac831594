"""Start-up: wall time of a cold ``python -m flowcore check FILE`` (a new interpreter each time), next to a bare
interpreter and ``import flowcore``, interleaved so machine load hits all of them alike; and whether networkx
(or another heavy package) is imported on the check path at all.

    .venv/bin/python benchmarks/startup.py [--runs 15]

Goal: ``check`` <= 150 ms. The machine is shared: the load average is printed, and the ratio to a bare
interpreter started in the same round is the figure to compare between runs; the CPU time (user + system) of
each child is printed too, as it depends less on what else the machine is doing than the wall time.

Bytecode: the rows are measured as a user runs the app, with Python's bytecode cache (``__pycache__``) in place
(it is compiled first here; ``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment). The last
row is the very first run after an install or an edit, when every module is compiled from source (an empty
``PYTHONPYCACHEPREFIX``, nothing written).
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "assets" / "examples" / "math_seed.mmd"
HEAVY = ("networkx", "pandas", "numpy", "plotly", "openai", "streamlit", "psycopg", "ray", "scipy", "sympy",
         "sqlite3", "subprocess")
CHECK = [sys.executable, "-m", "flowcore", "check", str(FILE)]
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import flowcore": [sys.executable, "-c", "import flowcore"],
    "python -m flowcore check": CHECK,
}
NO_CACHE = "python -m flowcore check, no bytecode cache"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    compileall.compile_dir(ROOT / "flowcore", quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    empty = tempfile.mkdtemp(prefix="mf-nopyc-")
    env_cold = {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}
    runs = {**{k: (v, env) for k, v in CASES.items()}, NO_CACHE: (CHECK, env_cold)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    load0 = os.getloadavg()[0]
    for _ in range(args.runs):
        for name, (cmd, e) in runs.items():
            r0, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=e)
            times[name].append(time.perf_counter() - t)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    load1 = os.getloadavg()[0]
    probe = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = ['flowcore', 'check', "
                            f"{str(FILE)!r}]\ntry:\n    runpy.run_module('flowcore', run_name='__main__')\n"
                            "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.split('.')[0] in "
                            f"{HEAVY!r}))"], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    heavy = probe.stdout.strip().splitlines()[-1]
    bare = statistics.median(times["python -c pass"])
    bare_min = min(times["python -c pass"])
    print(f"Start-up, {args.runs} cold runs each, interleaved; load average {load0:.1f} before, {load1:.1f} after "
          f"({os.cpu_count()} CPUs, shared)\n")
    print("| command | wall median (ms) | wall min (ms) | over bare python, median (ms) | "
          "x bare python (median / min) | CPU median (ms) | CPU min (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, ts in times.items():
        med, lo = statistics.median(ts), min(ts)
        print(f"| `{name}` | {1000 * med:.0f} | {1000 * lo:.0f} | {1000 * (med - bare):.0f} | "
              f"{med / bare:.1f} / {lo / bare_min:.1f} | {1000 * statistics.median(cpu[name]):.0f} | "
              f"{1000 * min(cpu[name]):.0f} |")
    print(f"\nmodules of {HEAVY} imported by `check`: {heavy if heavy != '[]' else 'none'}")


if __name__ == "__main__":
    main()
