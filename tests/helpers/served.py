"""A real ``python -m flowcore serve`` process on a free port of 127.0.0.1, for tests and the serving benchmark.

The server binds port 0 itself and names the port on its first stderr line; ``Served`` waits for that line and
for /health, and stops the process by its pid (SIGTERM, then SIGKILL) when done.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"at http://(?P<host>[^ ]+):(?P<port>\d+)/v1")


class Served:
    def __init__(self, db: str | Path, *, llm_url: str | None, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, startup: float = 60.0, no_keys: bool = True) -> None:
        """``no_keys``: unless ``extra`` asks for keys (--require-key), serve with --no-keys (loopback without
        keys, an opt-in since keys became the default); False: the server's own default (keys required)."""
        e = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "OTEL_"))}
        if llm_url:
            e.update(OPENAI_BASE_URL=llm_url, OPENAI_API_KEY="test-key", MERMAIDFLOW_MAX_RETRIES="0")
        e.update(env or {})
        extra = list(extra or [])
        if no_keys and "--require-key" not in extra:
            extra.append("--no-keys")
        cmd = [sys.executable, "-m", "flowcore", "serve", "--db", str(db), "--port", "0", *extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.log: list[str] = []
        first = threading.Event()
        self.port = 0

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                m = LINE.search(line)
                if m and not self.port:
                    self.port = int(m.group("port"))
                    first.set()
            first.set()

        threading.Thread(target=read, daemon=True).start()
        if not first.wait(startup) or not self.port:
            self.stop()
            raise RuntimeError(f"flowcore serve did not start: {''.join(self.log)[-2000:]}")
        deadline = time.monotonic() + startup
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"flowcore serve never answered /health: {''.join(self.log)[-2000:]}") \
                        from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stored_trace(db: str | Path, trace_id: str, seconds: float = 10.0) -> Any:
    """The trace ``trace_id`` once the server's writer has stored it (it writes off the request path, within
    MERMAIDFLOW_TRACE_LINGER of the answer), or None after ``seconds``."""
    from flowcore.workspace import traces
    from flowcore.workspace.store import Workspace

    ws, end = Workspace(db), time.monotonic() + seconds
    while (t := traces.load_trace(ws, trace_id)) is None and time.monotonic() < end:
        time.sleep(0.02)
    return t


@asynccontextmanager
async def mcp_client(url: str, key: str) -> AsyncIterator[Any]:
    """An MCP session (the SDK's own client) on ``url`` (a server's /mcp) that sends ``key`` as its bearer."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as c:
        yield c
