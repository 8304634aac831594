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

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from flowcore.serve.engine import Answer, Engine, ServeError, to_serve_error
from flowcore.workspace import published

KEEPALIVE = 10.0  # seconds between SSE comments while a streamed workflow runs (proxies close idle streams)
DEFAULT_MAX_BODY = 1 << 20  # bytes of request body accepted (MERMAIDFLOW_SERVE_MAX_BODY, `serve --max-body`)


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


async def read_body(request: Request, cap: int) -> bytes:
    """The body, refused with 413 once it passes ``cap`` bytes (before reading it when Content-Length says so)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise ServeError(413, f"the request body is {int(declared)} bytes; at most {cap} are accepted",
                         "invalid_request_error", "body_too_large")
    data = bytearray()
    try:
        async for chunk in request.stream():
            data += chunk
            if len(data) > cap:
                raise ServeError(413, f"the request body is over {cap} bytes; at most {cap} are accepted",
                                 "invalid_request_error", "body_too_large")
    except ClientDisconnect:  # gone, or too slow to send its body (flowcore.serve.slow)
        raise ServeError(408, f"the request body stopped coming after {len(data)} bytes", "invalid_request_error",
                         "request_timeout") from None
    return bytes(data)


def models(engine: Engine) -> JSONResponse:
    data, seen = [], set()
    for p in published.list_published(engine.ws):
        owner = {"object": "model", "created": int(p.created), "owned_by": p.created_by}
        if p.name not in seen:
            seen.add(p.name)
            data.append({"id": p.name, **owner})
        data.append({"id": p.model_id, **owner})
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


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def chat(engine: Engine, request: Request, cap: int) -> Response:
    req = parse_chat(_json(await read_body(request, cap)))
    version = engine.resolve(req.model)  # 404 before a stream starts
    owner = getattr(request.state, "owner", "local")
    created = int(time.time())
    work = asyncio.ensure_future(engine.run(req.model, req.problem, entry_point=req.entry_point, source="api",
                                            created_by=owner, version=version))
    if req.stream:
        return StreamingResponse(_events(work, req, created), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    gone = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():  # the client went away (or this handler was cancelled): stop its LLM calls
            work.cancel()
    if not work.done() or work.cancelled():
        return Response(status_code=499)  # nobody is listening; the 'cancelled' trace is stored
    return JSONResponse(completion(work.result(), created))  # a ServeError propagates to its handler


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
