"""What serving costs: N problems at concurrency C through a real ``flowcore serve`` process (HTTP, the key guard
with a real key, the trace stored per request) next to the compiled module called directly in this process
(issue 27's anchor), against the same scripted endpoint.

The anchor: ``compile_workflow`` writes the module ``python -m flowcore export`` writes; it is imported and its
``Workflow`` called, C at once, with flowcore's LLM client logging to a workspace, as the server's is. So both
sides do the same workflow work (one cached-and-logged LLM call per problem, distinct problems so no answer
comes from the cache), and the difference is what serving adds: HTTP in and out, the guard, JSON, the trace.

The served side is timed with two callers, each a row: a plain HTTP/1.1 keep-alive client (``RawPool`` below,
~0.2 ms of CPU per request: the figure for what the server adds) and the ``openai`` client (~2.5-3 ms of CPU per
request in the caller's own process: on this 2-core machine the caller, the server and the endpoint share the
cores, so that row also pays for the client library). The endpoint answers each call after LATENCY seconds
(default 0.25 s: a short real completion), from a process of its own: run as threads of this process (before),
it took the direct caller's GIL but not the server's, a handicap for the anchor only. The paths alternate, REPEATS times each; the table shows medians.
The machine is shared and noisy, so the CPU each path spends per problem is printed too, split by process:
the caller (client, or the in-process runtime), the scripted endpoint, and the server.
Usage: python benchmarks/serve_overhead.py [N=128] [C=32] [LATENCY=0.25] [REPEATS=3] [PATHS=raw,openai,direct]
(PATHS: a subset to time, e.g. one path per process for a whole-process paired timer; the server starts either
way, so such processes differ only in the path timed.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from flowcore.execution.compiler import compile_workflow  # noqa: E402
from flowcore.llm.client import LLM, LLMSettings  # noqa: E402
from flowcore.mermaid.reader import parse  # noqa: E402
from flowcore.workspace import keys, published  # noqa: E402
from flowcore.workspace.store import Workspace  # noqa: E402
from tests.helpers.served import Served  # noqa: E402

PATHS = ("raw", "openai", "direct")
TEXT = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()


def problem(tag: str, i: int) -> str:
    return f"{tag} problem {i}: what is {i} plus {i}?"


class RawPool:
    """HTTP/1.1 POSTs of JSON over up to ``size`` keep-alive connections (asyncio streams, nothing else)."""

    def __init__(self, base_url: str, size: int, key: str) -> None:
        u = urlsplit(base_url)
        self.host, self.port, self.prefix, self.size = u.hostname or "127.0.0.1", u.port or 80, u.path, size
        self.head = f"Host: {self.host}:{self.port}\r\nContent-Type: application/json\r\nAuthorization: Bearer {key}\r\n"
        self.free: asyncio.Queue = asyncio.Queue()
        self.made = 0

    async def post(self, path: str, obj: dict) -> tuple[int, dict]:
        if self.free.empty() and self.made < self.size:
            self.made += 1
            r, w = await asyncio.open_connection(self.host, self.port)
        else:
            r, w = await self.free.get()
        body = json.dumps(obj).encode()
        w.write(f"POST {self.prefix}{path} HTTP/1.1\r\n{self.head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await r.readuntil(b"\r\n\r\n")
        length = next(int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                      if k.strip().lower() == b"content-length")
        data = await r.readexactly(length)
        self.free.put_nowait((r, w))
        return int(head.split(b" ", 2)[1]), json.loads(data)

    def close(self) -> None:
        while not self.free.empty():
            self.free.get_nowait()[1].close()


async def _bounded(n: int, c: int, one) -> float:  # noqa: ANN001 - an async callable of the problem index
    sem = asyncio.Semaphore(c)

    async def go(i: int) -> None:
        async with sem:
            await one(i)

    t = time.perf_counter()
    await asyncio.gather(*(go(i) for i in range(n)))
    return time.perf_counter() - t


async def served_raw(base_url: str, key: str, n: int, c: int, tag: str) -> float:
    pool = RawPool(base_url, c, key)

    async def one(i: int) -> None:
        status, r = await pool.post("/chat/completions", {"model": "bench", "messages": [
            {"role": "user", "content": problem(tag, i)}]})
        assert status == 200 and f"problem {i}:" in r["choices"][0]["message"]["content"], (status, r)

    try:
        return await _bounded(n, c, one)
    finally:
        pool.close()


async def served_openai(base_url: str, key: str, n: int, c: int, tag: str) -> float:
    async with openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600) as client:
        async def one(i: int) -> None:
            r = await client.chat.completions.create(model="bench", messages=[
                {"role": "user", "content": problem(tag, i)}])
            assert f"problem {i}:" in r.choices[0].message.content

        return await _bounded(n, c, one)


def compiled(folder: Path) -> ModuleType:
    """The exported module (what ``python -m flowcore export`` writes), imported."""
    path = folder / "bench_workflow.py"
    path.write_text(compile_workflow(parse(TEXT), "math"))
    spec = importlib.util.spec_from_file_location("bench_workflow", path)
    assert spec is not None and spec.loader is not None
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look themselves up
    spec.loader.exec_module(mod)
    return mod


async def direct(mod: ModuleType, settings: LLMSettings, ws: Workspace, n: int, c: int, tag: str) -> float:
    llm = LLM(settings, ws, run_id="bench-direct")

    async def one(i: int) -> None:
        answer, _ = await mod.Workflow(llm)(problem(tag, i))
        assert f"problem {i}:" in answer

    return await _bounded(n, c, one)


def _cpu(pid: int, thread: bool = False) -> float:
    """User + system CPU seconds of process ``pid`` so far, or of its main thread alone (Linux /proc)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat" if thread else f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed(run, endpoint: int, server: int) -> tuple[float, ...]:  # noqa: ANN001 - a coroutine to asyncio.run
    """Wall seconds, and CPU seconds of: this process (the caller), the scripted endpoint's process, the server
    process, the server's main thread (its event loop)."""
    p, e, s, loop = time.process_time(), _cpu(endpoint), _cpu(server), _cpu(server, thread=True)
    wall = asyncio.run(run)
    return wall, time.process_time() - p, _cpu(endpoint) - e, _cpu(server) - s, _cpu(server, thread=True) - loop


class Endpoint:
    """The scripted endpoint in a process of its own (``python -m tests.helpers.fakellm``, echoing the user
    message after ``latency`` seconds): in the caller's process its threads would take the direct caller's GIL
    and not the server's, which favoured the served side."""

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.fakellm", "--port", "0", "--latency",
                                      str(latency)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.base_url = line.split(" at ", 1)[1].split()[0] if " at " in line else ""
        if not self.base_url:
            self.stop()
            sys.exit(f"the scripted endpoint did not start: {line!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def main(n: int, c: int, latency: float, repeats: int, paths: tuple[str, ...] = PATHS) -> None:
    if not paths or set(paths) - set(PATHS):
        sys.exit(f"PATHS: choose from {','.join(PATHS)}, got {','.join(paths) or '(none)'}")
    fake = Endpoint(latency)
    env = {"MERMAIDFLOW_CONCURRENCY": str(c)}
    os.environ.update(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="test-key", MERMAIDFLOW_MAX_RETRIES="0", **env)
    got: dict[str, list[tuple[float, ...]]] = {p: [] for p in paths}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "served.db"
            published.publish(Workspace(db), "bench", TEXT, "math", created_by="bench")
            key = keys.create_key(Workspace(db), "bench", "bench")[1]
            settings, ws, mod = LLMSettings.from_env(), Workspace(Path(tmp) / "direct.db"), compiled(Path(tmp))
            with Served(db, llm_url=fake.base_url, env=env, extra=["--require-key"]) as srv:
                url, pid = srv.base_url, srv.proc.pid
                runs = {"raw": lambda tag, k: served_raw(url, key, k, c, tag),
                        "openai": lambda tag, k: served_openai(url, key, k, c, tag),
                        "direct": lambda tag, k: direct(mod, settings, ws, k, c, tag)}
                for p in paths:  # connections, imports and caches, every side
                    asyncio.run(runs[p](f"warm-{p}", c))
                for r in range(repeats):
                    for p in paths:
                        got[p].append(_timed(runs[p](f"{p}{r}", n), fake.proc.pid, pid))
    finally:
        fake.stop()
    report(got, n, c, latency, repeats)


def report(got: dict[str, list[tuple[float, ...]]], n: int, c: int, latency: float,
           repeats: int) -> None:
    load = os.getloadavg()[0]
    med = {p: [statistics.median(x) for x in zip(*runs, strict=True)] for p, runs in got.items()}
    print(f"{n} problems at concurrency {c}, endpoint latency {latency:g} s, median of {repeats} runs each; wall s: "
          + "; ".join(f"{p} {', '.join(f'{x[0]:.2f}' for x in runs)}" for p, runs in got.items()))
    if "direct" in med:
        d = med["direct"][0]
        print(f"{'product (served)':>34} | {'direct (compiled module)':>24} | {'ratio':>6} | load")
        for p, label in (("raw", "plain HTTP client"), ("openai", "openai client")):
            if p in med:
                s = med[p][0]
                print(f"{label:>26} {s:>5.2f} s | {d:>22.2f} s | {s / d:>6.3f} | {load:.2f}")
        if "raw" in med:
            print(f"goal <= 1.1 x direct (plain HTTP client): {'met' if med['raw'][0] <= 1.1 * d else 'NOT met'}")
    print(f"CPU ms per problem (caller | endpoint | server (its event loop) | total), load {load:.2f}:")
    for p, m in med.items():
        _, main_, end, srv_, loop = (x / n * 1000 for x in m)
        print(f"  {p:>6}: {main_:6.2f} | {end:6.2f} | {srv_:6.2f} ({loop:5.2f}) | {main_ + end + srv_:6.2f}")
    if "raw" in med and "direct" in med:
        more, loop_more = ((med["raw"][i] - med["direct"][1]) / n * 1000 for i in (3, 4))
        print(f"the server spends {more:+.2f} ms per problem more than the direct caller, {loop_more:+.2f} ms of it "
              "on its event loop (both run the workflow and its LLM client; the server adds HTTP, JSON, the guard "
              "and the trace)")

if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 128, int(a[1]) if len(a) > 1 else 32, float(a[2]) if len(a) > 2 else 0.25,
         int(a[3]) if len(a) > 3 else 3, tuple(a[4].split(",")) if len(a) > 4 else PATHS)
