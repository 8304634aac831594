"""Evaluation speed: wall time to evaluate N problems with the math seed against a scripted OpenAI-compatible
endpoint of fixed latency, at several concurrency levels, and the ratio to the ideal N x latency / concurrency.

Run: .venv/bin/python benchmarks/eval_speed.py [--n 64] [--latency 0.2] [--concurrency 1,8,32]
Goal: at concurrency 32 the wall time is at most 1.25x the ideal. Every answer is scored (all must be right).
Columns: "wall" is the full evaluation through HTTP (endpoint in its own process); "raw client" the same
calls made directly with the openai client, no engine: the floor this machine and endpoint allow; "no-HTTP"
the full evaluation against an in-memory endpoint that only waits the latency: the engine's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowcore import parse
from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks import Problem

TARGET = 1.25

# The scripted endpoint runs in its own process, as a real one would: its request handling must not compete
# with the evaluation for this interpreter's GIL. It answers "Problem i: what is i + 1?" correctly.
SERVER = r"""
import re, sys, time
from tests.helpers.fakellm import FakeLLMServer, message_text

def reply(request):
    m = re.search(r"Problem (\d+):", message_text(request))
    return "Adding one gives \\boxed{%d}." % (int(m.group(1)) + 1) if m else "no idea"

server = FakeLLMServer(reply, latency=float(sys.argv[1])).start()  # backlog 256, like a real endpoint
print(server.base_url, flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
"""


@contextlib.contextmanager
def endpoint(latency: float) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(latency)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def measure(base_url: str, n: int, latency: float, concurrency: int) -> tuple[float, float]:
    workflow = parse((ROOT / "assets" / "examples" / "math_seed.mmd").read_text())
    problems = _problems(n)
    llm = LLM(LLMSettings(base_url=base_url, api_key="bench", concurrency=max(concurrency, 8), cache=False))
    start = time.perf_counter()
    report = asyncio.run(evaluate_workflow(workflow, "gsm8k", problems, llm=llm, concurrency=concurrency))
    wall = time.perf_counter() - start
    if report.n != n or report.score != 1.0:
        errors = [r.error for r in report.results if r.error][:3]
        raise SystemExit(f"evaluation went wrong at concurrency {concurrency}: score {report.score}, {errors}")
    return wall, n * latency / concurrency


class SleepLLM:
    """An in-memory endpoint: waits the latency, answers correctly. Isolates the engine's own overhead
    (scheduling, runtime, harness, scoring) from HTTP and the openai client."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def chat(self, messages: list[dict], **_: object) -> SimpleNamespace:
        await asyncio.sleep(self.latency)
        i = int(re.search(r"Problem (\d+):", messages[-1]["content"]).group(1))
        return SimpleNamespace(text=f"Adding one gives \\boxed{{{i + 1}}}.", cost=0.0)


def _problems(n: int) -> list[Problem]:
    return [Problem(id=f"speed/{i}", benchmark="gsm8k", question=f"Problem {i}: what is {i} + 1?",
                    reference=str(i + 1)) for i in range(n)]


def engine_only(n: int, latency: float, concurrency: int) -> float:
    workflow = parse((ROOT / "assets" / "examples" / "math_seed.mmd").read_text())
    start = time.perf_counter()
    report = asyncio.run(evaluate_workflow(workflow, "gsm8k", _problems(n), llm=SleepLLM(latency),
                                           concurrency=concurrency))
    assert report.score == 1.0, report.results[:2]
    return time.perf_counter() - start


def client_floor(base_url: str, n: int, concurrency: int) -> float:
    """Wall time of the same n calls made straight through the openai client (no engine): what this machine
    and endpoint allow, to separate the engine's overhead from the environment's."""
    import openai

    async def calls() -> float:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await client.chat.completions.create(model="gpt-4o-mini", messages=[
                    {"role": "user", "content": f"Problem {i}: what is {i} + 1?"}])

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - start
        await client.close()
        return wall

    return asyncio.run(calls())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="problems (default 64)")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per LLM reply (default 0.2)")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated levels (default 1,8,32)")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    print(f"math seed, {args.n} problems, endpoint latency {args.latency:g}s, 1 LLM call per problem")
    print(f"{'concurrency':>11} {'ideal s':>8} {'wall s':>8} {'ratio':>6} {'raw client s':>13} {'ratio':>6} "
          f"{'no-HTTP s':>10} {'ratio':>6}")
    ratios: dict[int, float] = {}
    bare_ratios: dict[int, float] = {}
    with endpoint(args.latency) as base_url:
        measure(base_url, 4, args.latency, 4)  # warm up: imports and the client's first-use costs
        for c in levels:
            wall, ideal = measure(base_url, args.n, args.latency, c)
            raw = client_floor(base_url, args.n, c)
            bare = engine_only(args.n, args.latency, c)
            ratios[c] = wall / ideal
            bare_ratios[c] = bare / ideal
            print(f"{c:>11} {ideal:>8.2f} {wall:>8.2f} {ratios[c]:>5.2f}x {raw:>13.2f} {raw / ideal:>5.2f}x "
                  f"{bare:>10.2f} {bare / ideal:>5.2f}x", flush=True)
    if 32 in ratios:
        def verdict(r: float) -> str:
            return f"{'met' if r <= TARGET else 'MISSED'} ({r:.2f}x)"

        print(f"target at concurrency 32, <= {TARGET}x ideal: through HTTP {verdict(ratios[32])}; "
              f"engine without HTTP {verdict(bare_ratios[32])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
