"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests and offline demos.

Tests talk to it through the real ``openai`` client, so retries, timeouts and response parsing are the
client's own. Replies come from a responder: a callable ``(request_json) -> str | Fault``, a list of
``str | Fault`` consumed in order (the last one repeats), or None to echo the last user message.

    python -m tests.fakellm --port 8765 --reply "The answer is 42."
    python -m tests.fakellm --delay "Your subtask (build)=2.5" --delay "You are agent coder=0.5"

``delays`` (``--delay KEYWORD=SECONDS``) slows the answer to every request whose message text contains the
keyword (the first matching keyword, in the order given): per prompt, or per agent with the agent's name as
it appears in its prompt. ``spans`` records when each request arrived and was answered.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Responder = Callable[[dict], "str | Fault"]


@dataclass
class Fault:
    """A scripted misbehaviour. ``status``: answer with that HTTP error (``body`` = error message);
    ``malformed``: answer 200 with ``body`` (default: not JSON) instead of a completion; otherwise a normal
    reply whose text is ``body``. ``delay`` (seconds) applies before any of these."""

    status: int = 0
    delay: float = 0.0
    malformed: bool = False
    body: str = ""


def message_text(request: dict) -> str:
    """All message contents of a chat request joined by newlines (text parts of list contents too)."""
    parts = []
    for m in request.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def by_keyword(table: dict[str, str], default: str = "") -> Responder:
    """Reply with the value of the first key (in table order) found in the request's message text."""

    def respond(request: dict) -> str:
        text = message_text(request)
        return next((reply for key, reply in table.items() if key in text), default)

    return respond


def _echo(request: dict) -> str:
    users = [m for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else message_text({"messages": users[-1:]})


def _words(text: str) -> int:
    return len(text.split())


_Later = object()  # marker: the reply comes from the callable responder, called outside the lock


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # 32+ clients connect at once in the concurrency benchmark; 5 would drop some


class FakeLLMServer:
    """Context manager (or ``start()``/``stop()``). ``base_url`` ends in ``/v1``; ``requests`` holds every
    chat request body received (``headers`` their headers, ``spans`` their [arrived, answered] times from
    ``time.monotonic()``); ``in_flight`` the requests being handled now and ``max_in_flight`` the most at
    once. ``delays`` maps a keyword of the message text to extra seconds before the answer."""

    def __init__(self, responder: Responder | list | str | None = None, *, latency: float = 0.0,
                 fail_rate: float = 0.0, seed: int = 0, port: int = 0,
                 delays: dict[str, float] | None = None) -> None:
        if isinstance(responder, (str, Fault)):
            responder = [responder]
        self._script = list(responder) if isinstance(responder, list) else None
        if self._script == []:
            raise ValueError("FakeLLMServer: the scripted reply list is empty")
        self._responder = responder if callable(responder) else None
        self.latency, self.fail_rate = latency, fail_rate
        self.delays = dict(delays or {})
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._step = 0
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []  # request headers, in the same order as ``requests``
        self.spans: list[list[float]] = []  # [arrived, answered] per request (answered: 0.0 until then)
        self.in_flight = 0
        self.max_in_flight = 0
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", self._port), handler)
        self._port = self._server.server_address[1]  # stays readable after stop()
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("FakeLLMServer: not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- behaviour --------------------------------------------------------------------------------------
    def delay_for(self, request: dict) -> float:
        """The extra delay of the first keyword of ``delays`` found in the request's message text."""
        if not self.delays:
            return 0.0
        text = message_text(request)
        return next((sec for key, sec in self.delays.items() if key in text), 0.0)

    def _next(self, request: dict, headers: dict[str, str], arrived: float) -> tuple[int, str | Fault]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            self.headers.append(headers)
            self.spans.append([arrived, 0.0])
            return index, self._pick(request)

    def _pick(self, request: dict) -> str | Fault:
        if self.fail_rate and self._rng.random() < self.fail_rate:
            return Fault(status=500, body="scripted random failure")
        if self._script is not None:
            item = self._script[min(self._step, len(self._script) - 1)]
            self._step += 1
            return item
        return _Later  # a callable responder runs outside the lock: it may block (e.g. wait for an event)

    def completion(self, request: dict, text: str) -> dict:
        prompt = _words(message_text(request))
        completion = _words(text)
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion",
            "created": int(time.time()), "model": request.get("model", "fake-model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every answer carries Content-Length
    disable_nagle_algorithm = True  # headers and body go out in two writes; don't wait 40 ms between them
    fake: FakeLLMServer
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send(self, status: int, body: str | bytes, extra: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else body
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); nothing to tell it

    def _error(self, status: int, message: str) -> None:
        body = json.dumps({"error": {"message": message, "type": "fake_error", "code": status}})
        # A short Retry-After keeps the client's own backoff fast in tests.
        self._send(status, body, {"retry-after-ms": "10"})

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakellm"}]}))
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._error(404, f"no route POST {self.path}")
            return
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            self._error(400, "request body is not JSON")
            return
        fake = self.fake
        with fake._lock:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self._answer(request)
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _answer(self, request: dict) -> None:
        fake = self.fake
        index, item = fake._next(request, {k.lower(): v for k, v in self.headers.items()}, time.monotonic())
        try:
            self._reply(request, item)
        finally:
            with fake._lock:
                fake.spans[index][1] = time.monotonic()

    def _reply(self, request: dict, item: str | Fault | object) -> None:
        fake = self.fake
        if item is _Later:
            try:
                item = fake._responder(request) if fake._responder is not None else _echo(request)
            except Exception as e:  # noqa: BLE001 -- a broken responder is a test bug: say so in the reply
                self._error(500, f"responder raised {type(e).__name__}: {e}")
                return
        delay = fake.latency + fake.delay_for(request) + (item.delay if isinstance(item, Fault) else 0.0)
        if delay:
            time.sleep(delay)
        if isinstance(item, Fault):
            if item.status:
                self._error(item.status, item.body or f"scripted HTTP {item.status}")
            elif item.malformed:
                self._send(200, item.body or "this is {not json")
            else:
                self._send(200, json.dumps(fake.completion(request, item.body)))
            return
        self._send(200, json.dumps(fake.completion(request, str(item))))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.fakellm", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--reply", default=None, help="fixed reply text (default: echo the last user message)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--delay", action="append", default=[], metavar="KEYWORD=SECONDS",
                    help="extra seconds for requests whose text contains KEYWORD (repeatable; first match wins)")
    args = ap.parse_args(argv)
    delays: dict[str, float] = {}
    for item in args.delay:
        key, sep, sec = item.rpartition("=")
        try:
            delays[key] = float(sec)
        except ValueError:
            sep = ""
        if not sep or not key:
            ap.error(f"--delay {item!r}: expected KEYWORD=SECONDS")
    server = FakeLLMServer(args.reply, latency=args.latency, port=args.port, delays=delays).start()
    print(f"fake OpenAI-compatible endpoint at {server.base_url} (Ctrl+C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
