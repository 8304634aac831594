"""Start-to-exit time of a trivial program in the sandbox next to a plain ``python -c pass`` (#14).

Goal: sandbox median <= 1.5 x plain + 30 ms. A HumanEval verdict (the tests in one sandbox calling the solution
in another, #17) costs <= 2 x the one-sandbox verdict it replaced (solution and tests in one interpreter, timed
in the same run as its anchor). Each row is the median of N runs (default 30) on this (shared,
noisy) machine; the runs alternate so load hits both alike. Usage: python benchmarks/sandbox_overhead.py [N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowcore.execution.sandbox import require_sandbox, run_untrusted


def _humaneval():
    from flowcore.tasks import data

    p = data.load("humaneval", "validation")[0]
    return p, p.question + p.reference


def main(n: int) -> None:
    require_sandbox()
    plain, sandboxed, program, verdict, inline = [], [], [], [], []
    problem, answer = _humaneval()
    together = f"{answer}\n\n{problem.tests}\n\ncheck({problem.entry_point})\n"
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        res = run_untrusted("pass")
        sandboxed.append(time.perf_counter() - t)
        assert res.ok, res
        t = time.perf_counter()
        res = run_untrusted("def solve():\n    return 6 * 7\n", call_solve=True)
        program.append(time.perf_counter() - t)
        assert res.ok and res.stdout == "42\n", res
        t = time.perf_counter()
        res = run_untrusted(answer, tests=problem.tests, entry_point=problem.entry_point, context=problem.question)
        verdict.append(time.perf_counter() - t)
        assert res.ok, res
        t = time.perf_counter()
        res = run_untrusted(together)
        inline.append(time.perf_counter() - t)
        assert res.ok, res
    p, s, q, v, i = (statistics.median(x) * 1000 for x in (plain, sandboxed, program, verdict, inline))
    goal = 1.5 * p + 30
    print(f"runs per row: {n}; user: {'root' if os.geteuid() == 0 else os.geteuid()}; load: "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'what':<44} {'median ms':>10} {'x plain':>8}")
    print(f"{'python -I -c pass (no sandbox)':<44} {p:>10.1f} {1:>8.2f}")
    label = "sandbox: run_untrusted('pass')"
    print(f"{label:<44} {s:>10.1f} {s / p:>8.2f}")
    print(f"{'sandbox: a solve() program (ProgrammerOp)':<44} {q:>10.1f} {q / p:>8.2f}")
    print(f"{'anchor: ' + problem.id + ' tests inside one sandbox':<44} {i:>10.1f} {i / p:>8.2f}")
    print(f"{'verdict: ' + problem.id + ' judge + candidate':<44} {v:>10.1f} {v / p:>8.2f}")
    print(f"verdict / anchor = {v / i:.2f} (goal <= 2): {'met' if v <= 2 * i else 'NOT met'}")
    print(f"goal 1.5 x plain + 30 ms = {goal:.1f} ms: {'met' if s <= goal else 'NOT met'} "
          f"(overhead {s - p:+.1f} ms)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
