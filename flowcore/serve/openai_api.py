"""The OpenAI-compatible surface: GET /v1/models and POST /v1/chat/completions (OpenAI's schema, streamed as
server-sent events or not), answered by flowcore.serve.engine.

What a request may carry is checked here and refused with 400 naming the field: the workflow decides its own
sampling, so ``temperature``, ``max_tokens`` and the like are accepted and ignored; ``n`` other than 1 is refused
(a workflow gives one answer). The problem is the last user message; a code workflow's entry point comes from
``metadata.entry_point`` or is found in the problem, as ``run`` does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from flowcore.serve.engine import Answer, Engine, ServeError, to_serve_error
from flowcore.workspace import published

KEEPALIVE = 10.0  # seconds between SSE comments while a streamed workflow runs (proxies close idle streams)
DEFAULT_MAX_BODY = 1 << 20  # bytes of request body accepted (MERMAIDFLOW_SERVE_MAX_BODY, `serve --max-body`)
_NONE: list[tuple[bytes, bytes]] = []
_AUTH = [(b"www-authenticate", b"Bearer")]


@dataclass
class ChatRequest:
    model: str
    problem: str
    stream: bool
    include_usage: bool
    entry_point: str | None


def error_response(err: ServeError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def bad(message: str, code: str = "invalid_request") -> ServeError:
    return ServeError(400, message, "invalid_request_error", code)


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}.content[{j}]: only text parts ({{\"type\": \"text\", \"text\": ...}}) are "
                          "accepted")
            parts.append(part["text"])
        return "\n".join(parts)
    raise bad(f"{where}.content: expected a string or a list of text parts, got {type(content).__name__}")


def parse_chat(body: Any) -> ChatRequest:
    """A checked chat request; ServeError 400 naming the first bad field."""
    if not isinstance(body, dict):
        raise bad(f"the body must be a JSON object, got {type(body).__name__}")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad("'model' is required: the published workflow to run (NAME or NAME@vN)", "invalid_model")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list of {role, content}", "invalid_messages")
    problem = None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a 'role'", "invalid_messages")
        text = _text(m.get("content"), f"messages[{i}]")
        if m["role"] == "user":
            problem = text
    if problem is None or not problem.strip():
        raise bad("no user message with text: the last user message is the problem", "invalid_messages")
    if "\x00" in problem:  # valid JSON, but PostgreSQL text cannot hold it: the request's trace would be lost
        raise bad("the problem (the last user message) contains a NUL character (\\u0000), which is not accepted",
                  "invalid_messages")
    try:
        problem.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (\ud800) is valid JSON but no text
        raise bad(f"the problem is not valid Unicode text ({exc.reason} at offset {exc.start})",
                  "invalid_messages") from None
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise bad(f"'stream' must be true or false, got {stream!r}")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
        raise bad("'stream_options' must be an object like {\"include_usage\": true}")
    n = body.get("n", 1)
    if n not in (1, None):
        raise bad(f"'n' must be 1: a workflow gives one answer (got {n!r})")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise bad("'metadata' must be an object")
    entry = meta.get("entry_point")
    if entry is not None and not (isinstance(entry, str) and entry.isidentifier()):
        raise bad(f"'metadata.entry_point' must be a Python function name, got {entry!r}")
    return ChatRequest(model.strip(), problem, bool(stream), bool(opts.get("include_usage")), entry)


async def read_body(receive: Receive, cap: int) -> bytes:
    """The request's body from ASGI ``receive``, refused with 413 once it passes ``cap`` bytes (a Content-Length
    over the cap was refused by the guard before any of it was read)."""
    data = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":  # gone, or too slow to send its body (flowcore.serve.slow)
            raise ServeError(408, f"the request body stopped coming after {len(data)} bytes",
                             "invalid_request_error", "request_timeout")
        data += message.get("body", b"")
        if len(data) > cap:
            raise ServeError(413, f"the request body is over {cap} bytes; at most {cap} are accepted",
                             "invalid_request_error", "body_too_large")
        if not message.get("more_body", False):
            return bytes(data)


def models(engine: Engine) -> JSONResponse:
    data, seen = [], set()
    for name, version, created, by in published.list_ids(engine.ws):  # never the texts (a version may be 1 MB)
        owner = {"object": "model", "created": int(created), "owned_by": by}
        if name not in seen:
            seen.add(name)
            data.append({"id": name, **owner})
        data.append({"id": f"{name}@v{version}", **owner})
    return JSONResponse({"object": "list", "data": data})


def model(engine: Engine, model_id: str) -> JSONResponse:
    p = engine.resolve(model_id)
    return JSONResponse({"id": model_id, "object": "model", "created": int(p.created), "owned_by": p.created_by})


def completion(a: Answer, created: int) -> dict:
    return {"id": f"chatcmpl-{a.trace_id}", "object": "chat.completion", "created": created, "model": a.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": a.text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": _usage(a), "mermaidflow": a.mermaidflow()}


def _usage(a: Answer) -> dict:
    return {"prompt_tokens": a.prompt_tokens, "completion_tokens": a.completion_tokens,
            "total_tokens": a.prompt_tokens + a.completion_tokens}


async def send_json(send: Send, status: int, obj: dict | None, headers: list[tuple[bytes, bytes]] = _NONE) -> None:
    """One JSON response straight onto ASGI ``send`` (what JSONResponse sends, without its machinery)."""
    body = b"" if obj is None else json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *headers]})
    await send({"type": "http.response.body", "body": body})


async def chat(engine: Engine, scope: Scope, receive: Receive, send: Send, cap: int) -> None:
    """POST /v1/chat/completions as a plain ASGI handler: the body read and parsed by hand (one json.loads and
    :func:`parse_chat`), the answer written straight to ``send``; every refusal in OpenAI's shape. Streamed
    answers go through Starlette's StreamingResponse. A client that disconnects cancels its workflow."""
    try:
        req = parse_chat(_json(await read_body(receive, cap)))
        version = engine.resolve(req.model)  # 404 before a stream starts
    except ServeError as err:
        await send_json(send, err.status, err.body(), _AUTH if err.status == 401 else _NONE)
        return
    owner = (scope.get("state") or {}).get("owner", "local")
    created = int(time.time())
    run = engine.run(req.model, req.problem, entry_point=req.entry_point, source="api", created_by=owner,
                     version=version)
    if req.stream:
        work = asyncio.ensure_future(run)
        response = StreamingResponse(_events(work, req, created), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await response(scope, receive, send)
        return
    # The workflow runs in this handler's task; a watcher cancels it when the client leaves (the engine then
    # stores the 'cancelled' trace and stops its LLM calls).
    me = asyncio.current_task()
    gone = False

    async def watch() -> None:  # the request's body is read: what receive says next is that the client left
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        if me is not None:
            me.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        answer = await run  # this handler cancelled (the server stopping) cancels the workflow too
    except asyncio.CancelledError:
        if not gone or me is None:
            raise
        me.uncancel()
        await send_json(send, 499, None)  # nobody is listening
        return
    except Exception as exc:  # noqa: BLE001 - a ServeError, or whatever the engine did not foresee (a 500)
        err = to_serve_error(exc, req.model)
        await send_json(send, err.status, err.body(), _AUTH if err.status == 401 else _NONE)
        return
    finally:
        watcher.cancel()
    await send_json(send, 200, completion(answer, created))


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"the body is not JSON: {exc}", "invalid_json") from None
    except RecursionError:  # '[[[[...' a hundred thousand deep
        raise bad("the body is not JSON this server reads: nested too deeply", "invalid_json") from None


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _events(work: asyncio.Future, req: ChatRequest, created: int) -> AsyncIterator[str]:
    """Role first, keep-alive comments while the workflow runs, then the answer, the finish chunk (with the
    ``mermaidflow`` field), usage when asked, [DONE]. A failure after the stream began comes as an ``error``
    event, which the openai client raises as an APIError with that message."""
    head = {"id": "", "object": "chat.completion.chunk", "created": created, "model": req.model}
    try:
        yield _sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}]})
        while not (await asyncio.wait({work}, timeout=KEEPALIVE))[0]:
            yield ": keep-alive\n\n"
        try:
            a: Answer = work.result()
        except Exception as exc:  # noqa: BLE001 - every failure leaves as an error event, never a broken stream
            yield _sse(to_serve_error(exc, req.model).body())
            yield "data: [DONE]\n\n"
            return
        head["id"] = f"chatcmpl-{a.trace_id}"
        yield _sse({**head, "choices": [{"index": 0, "delta": {"content": a.text}, "finish_reason": None}]})
        yield _sse({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "mermaidflow": a.mermaidflow()})
        if req.include_usage:
            yield _sse({**head, "choices": [], "usage": _usage(a), "mermaidflow": a.mermaidflow()})
        yield "data: [DONE]\n\n"
    finally:
        if not work.done():  # the client disconnected: cancel the workflow's calls (never awaited here:
            work.cancel()  # this scope is being cancelled; the engine stores the trace in its own task)
