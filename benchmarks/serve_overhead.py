"""What serving costs: N problems at concurrency C through a real ``flowcore serve`` process (the real ``openai``
client, HTTP, the key guard, the trace stored per request) next to the same runtime called directly in this
process (``run_workflow`` with the same settings, C at once), against the same scripted endpoint.

Goal (issue 27): served <= 1.1 x direct at concurrency 32. The endpoint answers each call after LATENCY seconds
(default 0.25 s: a short real completion); both paths log every call in a workspace, with distinct problems so
no answer comes from the cache. The two paths alternate, REPEATS times each; the table shows the medians. On a
machine shared under heavy load, wall time follows CPU share; the CPU each path spends per problem is printed too.
Usage: python benchmarks/serve_overhead.py [N=128] [C=32] [LATENCY=0.25] [REPEATS=3]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from flowcore.execution.runtime import run_workflow  # noqa: E402
from flowcore.llm.client import LLM, LLMSettings  # noqa: E402
from flowcore.mermaid.reader import parse  # noqa: E402
from flowcore.workspace import published  # noqa: E402
from flowcore.workspace.store import Workspace  # noqa: E402
from tests.helpers.fakellm import FakeLLMServer  # noqa: E402
from tests.helpers.served import Served  # noqa: E402

TEXT = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()


async def _bounded(n: int, c: int, one) -> float:  # noqa: ANN001 - an async callable of the problem index
    sem = asyncio.Semaphore(c)

    async def go(i: int) -> None:
        async with sem:
            await one(i)

    t = time.perf_counter()
    await asyncio.gather(*(go(i) for i in range(n)))
    return time.perf_counter() - t


async def served(base_url: str, n: int, c: int, tag: str) -> float:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600) as client:
        async def one(i: int) -> None:
            r = await client.chat.completions.create(model="bench", messages=[
                {"role": "user", "content": f"{tag} problem {i}: what is {i} plus {i}?"}])
            assert f"problem {i}:" in r.choices[0].message.content

        return await _bounded(n, c, one)


async def direct(settings: LLMSettings, ws: Workspace, n: int, c: int, tag: str) -> float:
    w, llm = parse(TEXT), LLM(settings, ws, run_id="bench-direct")

    async def one(i: int) -> None:
        res = await run_workflow(w, f"{tag} problem {i}: what is {i} plus {i}?", llm=llm, task="math")
        assert f"problem {i}:" in res.answer

    return await _bounded(n, c, one)


def main(n: int, c: int, latency: float, repeats: int) -> None:
    def echo(req: dict) -> str:
        return "ECHO " + req["messages"][-1]["content"].rsplit("\n", 1)[-1]

    fake = FakeLLMServer(echo, latency=latency).start()
    env = {"MERMAIDFLOW_CONCURRENCY": str(c)}
    os.environ.update(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="test-key", MERMAIDFLOW_MAX_RETRIES="0", **env)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "served.db"
        published.publish(Workspace(db), "bench", TEXT, "math", created_by="bench")
        settings, ws = LLMSettings.from_env(), Workspace(Path(tmp) / "direct.db")
        s_times, d_times, s_cpu, d_cpu = [], [], [], []
        with Served(db, llm_url=fake.base_url, env=env) as srv:
            asyncio.run(served(srv.base_url, c, c, "warm"))  # connections and imports, both sides
            asyncio.run(direct(settings, ws, c, c, "warm"))
            for r in range(repeats):
                t = time.process_time()
                d_times.append(asyncio.run(direct(settings, ws, n, c, f"d{r}")))
                d_cpu.append(time.process_time() - t)
                t, server = time.process_time(), _cpu(srv.proc.pid)
                s_times.append(asyncio.run(served(srv.base_url, n, c, f"s{r}")))
                s_cpu.append(time.process_time() - t + _cpu(srv.proc.pid) - server)
    fake.stop()
    s, d = statistics.median(s_times), statistics.median(d_times)
    load = os.getloadavg()[0]
    print(f"{n} problems at concurrency {c}, endpoint latency {latency:g} s, median of {repeats} runs each "
          f"(served {', '.join(f'{x:.2f}' for x in s_times)} s; direct {', '.join(f'{x:.2f}' for x in d_times)} s)")
    print(f"{'product (served)':>18} | {'direct (runtime)':>16} | {'ratio':>6} | load")
    print(f"{s:>16.2f} s | {d:>14.2f} s | {s / d:>6.3f} | {load:.2f}")
    print(f"goal <= 1.1 x direct: {'met' if s <= 1.1 * d else 'NOT met'}")
    sc, dc = statistics.median(s_cpu) / n * 1000, statistics.median(d_cpu) / n * 1000
    print(f"CPU per problem (load-independent): served {sc:.1f} ms (client + endpoint + server process), direct "
          f"{dc:.1f} ms (runtime + endpoint): serving adds {sc - dc:.1f} ms of CPU per request")


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 128, int(a[1]) if len(a) > 1 else 32, float(a[2]) if len(a) > 2 else 0.25,
         int(a[3]) if len(a) > 3 else 3)
