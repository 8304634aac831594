"""A reverse proxy on 127.0.0.1, as nginx is set up in front of Streamlit: every request head on a connection
is passed on with the headers a proxy adds (``X-Forwarded-For``/``-Proto``/``-Host`` when ``forward``), the
``Host`` kept (``proxy_set_header Host $host``) or set to the upstream's (nginx's default, ``rewrite_host``);
bodies, responses and a websocket after its upgrade pass through unchanged.

    with ReverseProxy(upstream_port, forward=True) as proxy:
        page.goto(proxy.url)
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self

HEAD_LIMIT = 64 * 1024


class ReverseProxy:
    def __init__(self, upstream_port: int, *, forward: bool = True, rewrite_host: bool = False) -> None:
        self.upstream_port, self.forward, self.rewrite_host = upstream_port, forward, rewrite_host
        self.heads: list[bytes] = []  # every request head sent upstream, as sent
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        await self._stop.wait()
        server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:  # the connections still open: end them before the loop closes
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _rewrite(self, head: bytes, client: str) -> bytes:
        lines = head.decode("latin-1").split("\r\n")
        out = [lines[0]]
        for line in lines[1:]:
            name = line.split(":", 1)[0].strip().lower()
            if name == "host" and self.rewrite_host:
                line = f"Host: 127.0.0.1:{self.upstream_port}"
            if name.startswith("x-forwarded-") or name == "forwarded":
                continue  # a proxy sets these itself, it does not pass on what the visitor sent
            out.append(line)
        if self.forward:
            host = next((x.split(":", 1)[1].strip() for x in lines[1:] if x.lower().startswith("host:")), "")
            out += [f"X-Forwarded-For: {client}", "X-Forwarded-Proto: http", f"X-Forwarded-Host: {host}"]
        return "\r\n".join(out).encode("latin-1")

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.get_extra_info("peername")[0]
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        back = asyncio.ensure_future(self._pipe(up_reader, writer))
        try:
            while True:  # one request head after another; a websocket after its upgrade is raw bytes
                head = await reader.readuntil(b"\r\n\r\n")
                if len(head) > HEAD_LIMIT:
                    break
                sent = self._rewrite(head[:-4], client) + b"\r\n\r\n"
                self.heads.append(sent)
                up_writer.write(sent)
                lower = head.lower()
                if b"upgrade: websocket" in lower:
                    await self._pipe(reader, up_writer)
                    break
                length = next((int(x.split(b":", 1)[1]) for x in lower.split(b"\r\n")
                               if x.startswith(b"content-length:")), 0)
                if length:
                    up_writer.write(await reader.readexactly(length))
                await up_writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            back.cancel()
            await asyncio.gather(back, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def __enter__(self) -> Self:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
