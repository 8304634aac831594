"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests and offline demos.

Tests talk to it through the real ``openai`` client, so retries, timeouts and response parsing are the
client's own. Replies come from a responder: a callable ``(request_json) -> str | Fault``, a list of
``str | Fault`` consumed in order (the last one repeats), or None to echo the last user message.

Fault modes for robustness tests (seeded, so a run repeats): ``faults={"garbled": 0.3}`` corrupts that share
of replies (see FAULT_KINDS), ``outage(seconds)`` refuses every connection for a while, ``latency`` slows
every reply. Like llama.cpp's server, a request whose client has gone away is dropped (``in_flight`` counts
only requests some client still waits for).

    python -m tests.helpers.fakellm --port 8765 --reply "The answer is 42."
    python -m tests.helpers.fakellm --delay "Your subtask (build)=2.5" --delay "You are agent coder=0.5"

``delays`` (``--delay KEYWORD=SECONDS``) slows the answer to every request whose message text contains the
keyword (the first matching keyword, in the order given): per prompt, or per agent with the agent's name as
it appears in its prompt. ``spans`` records when each request arrived and was answered.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Responder = Callable[[dict], "str | Fault"]
# garbled: the content's bytes corrupted on the wire (bytes that are not UTF-8); truncated: the body
# cut short (either a short JSON body or a connection closed before Content-Length bytes); empty: a 200 with
# no choices; status: HTTP 503. "mixed" draws one of these four for each faulty reply.
FAULT_KINDS = ("garbled", "truncated", "empty", "status")


@dataclass
class Fault:
    """A scripted misbehaviour. ``status``: answer with that HTTP error (``body`` = error message);
    ``malformed``: answer 200 with ``body`` (default: not JSON) instead of a completion; otherwise a normal
    reply whose text is ``body`` (streamed when the request asks for a stream). ``delay`` (seconds) applies before
    any of these."""

    status: int = 0
    delay: float = 0.0
    malformed: bool = False
    body: str = ""
    huge: int = 0  # a completion of this many characters ("x"), written a chunk at a time (never built whole)
    gzip: bool = False  # with ``huge``: the body gzip-compressed (Content-Encoding: gzip), a few KB on the wire
    garbled: bool = False  # a completion of ``body`` whose bytes break on the wire (not UTF-8: a broken proxy)
    usage: dict | None = None  # a reply of ``body`` reporting this usage instead of its true count (a lying server)
    # a reply of ``body`` with no usage at all: no ``usage`` field, or streamed, no usage chunk even when asked with
    # stream_options={"include_usage": true} (OpenAI-compatible servers may leave it out)
    no_usage: bool = False
    # streamed: after this many words of ``body`` the stream fails: an error event (vLLM's {"error": ...} chunk),
    # or with ``garbled`` a chunk that is not JSON; plain: ``garbled`` alone breaks the body (see above)
    fail_after: int | None = None
    # ``body`` is sent in this message field instead of ``content`` (a reasoning model's "reasoning_content", or
    # "tool_calls": the text as a function call's arguments), content then empty (plain: null)
    into: str = "content"
    early_usage: bool = False  # streamed: the usage chunk comes first (before the text), none at the end
    cut: bool = False  # plain: Content-Length promises the whole body, half of it is sent, then a hang-up


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
                 delays: dict[str, float] | None = None, faults: dict[str, float] | None = None,
                 context: int | None = None, advertise_context: bool = False, json_mode: bool = True,
                 token_delay: float = 0.0) -> None:
        if isinstance(responder, (str, Fault)):
            responder = [responder]
        self._script = list(responder) if isinstance(responder, list) else None
        if self._script == []:
            raise ValueError("FakeLLMServer: the scripted reply list is empty")
        self._responder = responder if callable(responder) else None
        self.latency, self.fail_rate = latency, fail_rate
        self.delays = dict(delays or {})
        self.faults = dict(faults or {})
        # Like a real server: a context window in tokens (here: words), optionally stated in /v1/models as
        # vLLM does; json_mode=False refuses response_format; a streamed reply sends a word per token_delay.
        self.context, self.advertise_context, self.json_mode = context, advertise_context, json_mode
        self.token_delay = token_delay
        unknown = set(self.faults) - {*FAULT_KINDS, "mixed"}
        if unknown or sum(self.faults.values()) > 1:
            raise ValueError(f"FakeLLMServer: faults must map {FAULT_KINDS + ('mixed',)} to rates summing to "
                             f"<= 1, got {self.faults}")
        self.injected: dict[str, int] = {}  # fault kind -> how many replies got it
        self.dropped = 0  # requests abandoned because their client went away
        self.refused = 0  # connections turned away during an outage
        self._down_until = 0.0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._step = 0
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []  # request headers, in the same order as ``requests``
        self.spans: list[list[float]] = []  # [arrived, answered] per request (answered: 0.0 until then)
        self.in_flight = 0
        self.max_in_flight = 0
        self._conns: set[socket.socket] = set()  # open client connections (closed by stop/outage)
        self._active: set[Any] = set()  # handlers whose request is counted in in_flight
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

    def outage(self, seconds: float) -> None:
        """From now on, for ``seconds``, stop listening and drop open keep-alive connections (the client sees
        'connection refused' / 'server disconnected'); then listen again on the same port."""
        with self._lock:
            self._down_until = time.monotonic() + seconds
        self._close_listener()

        def back() -> None:
            time.sleep(max(0.0, self._down_until - time.monotonic()))
            self.start()

        threading.Thread(target=back, daemon=True).start()

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def stop(self) -> None:
        self._down_until = 0.0
        self._close_listener()

    def _close_listener(self) -> None:
        """Stop listening and hang up on every open connection, as a server process that goes away does."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

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

    def _next(self, request: dict, headers: dict[str, str], arrived: float) -> tuple[int, str | Fault, str | None]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            self.headers.append(headers)
            self.spans.append([arrived, 0.0])
            item = self._pick(request)
            return index, item, self._draw_fault()

    def _draw_fault(self) -> str | None:
        """Under the lock: which fault (if any) the next reply gets."""
        if not self.faults:
            return None
        x, acc = self._rng.random(), 0.0
        for kind, rate in self.faults.items():
            acc += rate
            if x < acc:
                if kind == "mixed":
                    kind = self._rng.choice(FAULT_KINDS)
                self.injected[kind] = self.injected.get(kind, 0) + 1
                return kind
        return None

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


@dataclass
class _Injected:
    """A reply text with a transport fault to apply when sending it."""

    kind: str
    text: str
    delay: float = 0.0


def _faulty(item: str | Fault, kind: str | None) -> str | Fault | _Injected:
    if kind is None or (isinstance(item, Fault) and (item.status or item.malformed)):
        return item
    if kind == "status":
        return Fault(status=503, body="scripted fault")
    text = item.body if isinstance(item, Fault) else str(item)
    return _Injected(kind, text, item.delay if isinstance(item, Fault) else 0.0)


def garble(text: str, rng: random.Random) -> bytes:
    """Corrupt bytes the way a broken proxy or encoder does: bytes that are not UTF-8 in the middle of the
    text (never a quote or a backslash, so the JSON around it still frames)."""
    data = bytearray((text or "x").encode())
    for _ in range(max(2, len(data) // 8)):
        data[rng.randrange(len(data))] = rng.choice((0xC3, 0xFF, 0x9F, 0xFE))
    return bytes(data) + b"\xff"


def _carried(into: str, text: str) -> dict:
    """A message (or delta) whose ``text`` is in the field ``into``: content, reasoning_content, or tool_calls."""
    if into == "tool_calls":
        return {"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                "function": {"name": "answer", "arguments": text}}]}
    return {into: text}


_MARK = "\x00garbled\x00"


def garbled_body(completion: dict, broken: bytes) -> bytes:
    """The completion's JSON with its text replaced by ``broken`` raw bytes (its usage still the text's count: what
    the server generated, and billed, before the bytes broke on their way)."""
    completion = {**completion, "choices": [{**c, "message": {**c["message"], "content": _MARK}}
                                            for c in completion["choices"]]}
    return json.dumps(completion).encode().replace(json.dumps(_MARK)[1:-1].encode(), broken)


def readable(conn: socket.socket, timeout: float) -> bool:
    """Whether ``conn`` turns readable within ``timeout`` seconds. poll, not select: select refuses file
    descriptors above 1023, which a long test session's process reaches (every reply then looked like a hang-up)."""
    p = select.poll()
    p.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(math.ceil(timeout * 1000) if timeout > 0 else 0))


def client_gone(conn: socket.socket) -> bool:
    """True when the client has closed its end (readable, and a peek reads nothing)."""
    try:
        return readable(conn, 0) and conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


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

    def _cut(self, data: bytes) -> None:
        """Promise ``data`` (Content-Length), send half of it, hang up: a body cut off on its way."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

    def _error(self, status: int, message: str) -> None:
        body = json.dumps({"error": {"message": message, "type": "fake_error", "code": status}})
        # A short Retry-After keeps the client's own backoff fast in tests.
        self._send(status, body, {"retry-after-ms": "10"})

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._conns.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _wait(self, seconds: float) -> bool:
        """Sleep, but give up (False) as soon as the client disconnects: a real server stops generating."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:  # wake when the socket turns readable (the client hung up) or the time is over
                ready = readable(self.connection, left)
            except (OSError, ValueError):
                ready = True
            if not ready:
                break
            if client_gone(self.connection):
                with self.fake._lock:
                    self.fake.dropped += 1
                self.close_connection = True
                return False
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))  # readable with data: poll instead
        return True

    def _inject(self, request: dict, item: _Injected) -> None:
        fake = self.fake
        if item.kind == "garbled":
            with fake._lock:
                broken = garble(item.text, fake._rng)
            self._send(200, garbled_body(fake.completion(request, item.text), broken))
        elif item.kind == "empty":
            body = fake.completion(request, item.text)
            body["choices"] = []
            self._send(200, json.dumps(body))
        else:  # truncated
            data = json.dumps(fake.completion(request, item.text)).encode()
            cut = data[:max(1, len(data) // 2)]
            with fake._lock:
                lie = fake._rng.random() < 0.5
            if lie:  # promise the whole body, send half, hang up
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(cut)
                    self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True
            else:  # a well-framed body that is half a JSON document
                self._send(200, cut)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            extra = {"max_model_len": self.fake.context} if self.fake.context and self.fake.advertise_context else {}
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakellm", **extra}]}))
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.fake.down:  # an outage: hang up on connections that were already open
            with self.fake._lock:
                self.fake.refused += 1
            self.close_connection = True
            return
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
            # Before counting this one, stop counting requests whose client has already left (a real server
            # notices at its next token; the poll in _wait may not have run yet).
            for other in [h for h in fake._active if client_gone(h.connection)]:
                fake._active.discard(other)
                fake.in_flight -= 1
            fake._active.add(self)
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self._answer(request)
        finally:
            with fake._lock:
                if self in fake._active:
                    fake._active.discard(self)
                    fake.in_flight -= 1

    def _refusal(self, request: dict) -> tuple[int, str, str] | None:
        """What a real server says before generating: over its context, or no JSON mode."""
        fake = self.fake
        if request.get("response_format") and not fake.json_mode:
            return 400, "response_format is not supported by this server", "invalid_request_error"
        if fake.context:
            asked = _words(message_text(request)) + int(request.get("max_tokens") or 0)
            if asked > fake.context:
                return 400, (f"This model's maximum context length is {fake.context} tokens. However, you "
                             f"requested {asked} tokens. Please reduce the length of the messages or completion."), \
                    "context_length_exceeded"
        return None

    def _answer(self, request: dict) -> None:
        fake = self.fake
        refusal = self._refusal(request)
        if refusal is not None:
            with fake._lock:
                fake.requests.append(request)
            status, message, code = refusal
            body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}})
            self._send(status, body)
            return
        index, item, kind = fake._next(request, {k.lower(): v for k, v in self.headers.items()}, time.monotonic())
        try:
            self._reply(request, item, kind)
        finally:
            with fake._lock:
                fake.spans[index][1] = time.monotonic()

    def _reply(self, request: dict, item: str | Fault | object, kind: str | None = None) -> None:
        fake = self.fake
        if item is _Later:
            try:
                item = fake._responder(request) if fake._responder is not None else _echo(request)
            except Exception as e:  # noqa: BLE001 -- a broken responder is a test bug: say so in the reply
                self._error(500, f"responder raised {type(e).__name__}: {e}")
                return
        item = _faulty(item, kind)  # type: ignore[arg-type]
        delay = fake.latency + fake.delay_for(request) + (item.delay if isinstance(item, (Fault, _Injected)) else 0.0)
        if delay and not self._wait(delay):
            return
        if isinstance(item, _Injected):
            self._inject(request, item)
            return
        if isinstance(item, Fault):
            if item.huge:
                self._huge(request, item)
            elif item.status:
                self._error(item.status, item.body or f"scripted HTTP {item.status}")
            elif item.malformed:
                self._send(200, item.body or "this is {not json")
            elif request.get("stream"):
                self._stream(request, item.body, usage=None if item.no_usage else (item.usage or True),
                             fail_after=item.fail_after, garbled=item.garbled, into=item.into,
                             early_usage=item.early_usage)
            elif item.garbled:
                self._send(200, garbled_body(fake.completion(request, item.body), item.body.encode() + b"\xc3\x28"))
            else:
                done = fake.completion(request, item.body)
                if item.into != "content":
                    done["choices"][0]["message"] = {"role": "assistant", "content": None,
                                                     **_carried(item.into, item.body)}
                if item.usage is not None:
                    done["usage"] = item.usage
                if item.no_usage:
                    del done["usage"]
                if item.cut:
                    self._cut(json.dumps(done).encode())
                    return
                self._send(200, json.dumps(done))
            return
        if request.get("stream"):
            self._stream(request, str(item))
            return
        self._send(200, json.dumps(fake.completion(request, str(item))))

    def _huge(self, request: dict, item: Fault) -> None:
        """A completion of ``item.huge`` characters, generated as it is sent: as one JSON body (gzip-compressed
        when ``item.gzip``), or as server-sent events for a streamed request. Stops when the client hangs up."""
        import zlib

        done = self.fake.completion(request, "\x00")
        streamed = bool(request.get("stream"))
        if streamed:
            base = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"],
                    "model": done["model"]}
            piece = {**base, "choices": [{"index": 0, "delta": {"content": "x" * 65536}, "finish_reason": None}]}
            head, block, tail = b"", f"data: {json.dumps(piece)}\n\n".encode(), b"data: [DONE]\n\n"
        else:
            head, tail = json.dumps(done).encode().split(b"\\u0000")
            block = b"x" * 65536
        count = max(1, item.huge // 65536)
        zip_ = zlib.compressobj(9, zlib.DEFLATED, 31) if item.gzip else None
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
            if zip_ is not None:
                self.send_header("Content-Encoding", "gzip")
            if streamed or zip_ is not None:
                self.send_header("Connection", "close")  # the body ends when the connection does
            else:
                self.send_header("Content-Length", str(len(head) + count * len(block) + len(tail)))
            self.end_headers()
            for part in (head, *(block for _ in range(count)), tail):
                self.wfile.write(zip_.compress(part) if zip_ is not None else part)
            if zip_ is not None:
                self.wfile.write(zip_.flush())
            self.wfile.flush()
        except OSError:
            pass  # the client refused the rest: what a capped client does
        self.close_connection = True

    def _stream(self, request: dict, text: str, *, usage: dict | None | bool = True, fail_after: int | None = None,
                garbled: bool = False, into: str = "content", early_usage: bool = False) -> None:
        """Server-sent events, one word per chunk, ``token_delay`` apart; the last chunk carries usage (the true
        count, ``usage`` when a dict, none when None; with ``early_usage`` the first). ``fail_after``: after that
        many words an error event, or with ``garbled`` a chunk that is not JSON, and the stream ends there (no
        usage). ``into``: the message field the words go in (see Fault)."""
        fake = self.fake
        done = fake.completion(request, text)
        base = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"],
                "model": done["model"]}
        words = text.split(" ")
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            told = usage if isinstance(usage, dict) else done["usage"]
            if early_usage and usage is not None:
                self.wfile.write(f"data: {json.dumps({**base, 'choices': [], 'usage': told})}\n\n".encode())
                usage = None
            for i, w in enumerate(words):
                if i == fail_after:
                    break
                if i and fake.token_delay and not self._wait(fake.token_delay):
                    return
                piece = w if i == 0 else " " + w
                chunk = {**base, "choices": [{"index": 0, "delta": _carried(into, piece), "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            if fail_after is not None and fail_after < len(words):
                if garbled:
                    self.wfile.write(b'data: {"id": "' + garble(text, fake._rng) + b'\n\n')
                else:
                    error = {"error": {"message": "generation failed", "type": "server_error", "code": 500}}
                    self.wfile.write(f"data: {json.dumps(error)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True
                return
            end = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            self.wfile.write(f"data: {json.dumps(end)}\n\n".encode())
            if usage is not None:
                last = {**base, "choices": [], "usage": told}
                self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.helpers.fakellm", description=__doc__.splitlines()[0])
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
