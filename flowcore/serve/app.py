"""The ASGI application ``python -m flowcore serve`` runs under uvicorn: Starlette routes for the OpenAI-compatible
API, the MCP SDK's streamable HTTP transport at /mcp, all behind the key guard (flowcore.serve.guard).

Every error leaves in OpenAI's shape {"error": {"message", "type", "code"}} with its status; an unexpected
exception is logged here and answered as a 500 naming no internals, never as a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from flowcore.serve import openai_api as api
from flowcore.serve.engine import Engine, ServeError
from flowcore.serve.guard import Guard, owner_of
from flowcore.serve.limits import Limits
from flowcore.serve.mcp_tools import build_mcp
from flowcore.serve.sessions import SessionCap
from flowcore.tracing import otel

log = logging.getLogger("flowcore.serve")
CHAT = "/v1/chat/completions"


def create_app(engine: Engine, *, require_keys: bool, max_body: int = api.DEFAULT_MAX_BODY,
               host: str = "127.0.0.1", limits: Limits | None = None) -> Any:
    limits = limits or Limits()
    mcp = build_mcp(engine, limits)
    if require_keys:  # a team server: no one key owner's calls hold every LLM slot
        engine.fair_share(limits.owner_slots)
    # Host/Origin checks for /mcp: the SDK's own when served on loopback (the guard checks them for every route
    # too); beyond loopback every request carries a key instead.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=not require_keys,
                                         allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                         allowed_origins=["http://127.0.0.1:*", "http://localhost:*",
                                                          "http://[::1]:*"])
    mcp_app = mcp.streamable_http_app(streamable_http_path="/mcp", transport_security=security, host=host,
                                      max_request_body_size=max_body, max_sessions=limits.sessions,
                                      session_idle_timeout=limits.session_idle)
    # the SDK's table of open sessions (its only record of which still live: a deleted or idle one leaves it)
    cap = SessionCap(limits.sessions_per_owner, lambda: mcp.session_manager._server_instances)

    async def models(request: Request) -> Response:  # database reads off the event loop: others never wait
        return await asyncio.to_thread(api.models, engine)

    async def one_model(request: Request) -> Response:
        return await asyncio.to_thread(api.model, engine, request.path_params["model"])

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def serve_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServeError)
        return api.error_response(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: ("not_found", "invalid_request_error"), 405: ("method_not_allowed", "invalid_request_error")}
        code, type_ = kind.get(exc.status_code, ("http_error", "invalid_request_error"))
        message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
        return api.error_response(ServeError(exc.status_code, message, type_, code))

    async def crash(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return api.error_response(ServeError(500, f"internal error ({type(exc).__name__}); see the server's log",
                                             "server_error", "internal_error"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.on_loop_thread()  # this thread answers every request: it never waits on a disk sync itself
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            engine.close()  # every trace still queued is written before the process ends
            otel.flush()

    routes = [Route("/health", health), Route("/v1/models", models),
              Route("/v1/models/{model:path}", one_model),
              Route(CHAT, _not_here, methods=["POST"])]  # answered by Lean below; listed for 405 on GET
    routes += list(mcp_app.routes)
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={ServeError: serve_error, HTTPException: http_error, Exception: crash})
    return Guard(Lean(app, engine, max_body, cap), engine.ws, require_keys=require_keys, max_body=max_body)


async def _not_here(request: Request) -> Response:  # pragma: no cover - Lean answers POST /v1/chat/completions
    raise RuntimeError("POST /v1/chat/completions reached the router")


async def _mcp_post(app: Any, cap: SessionCap, scope: Scope, receive: Receive, send: Send) -> None:
    """An MCP POST: the SDK runs its tool call in the session, not in this request, so a client that hung up
    left the call spending. One that opens a session counts against its owner's (flowcore.serve.sessions).
    ``scope["state"]["gone"]`` is set once the client disconnects or this POST's
    response ends, whichever first; the long tools (mcp_tools.run_workflow, evaluate_workflow) cancel their work
    on it (a tool that answered is done by then)."""
    gone = asyncio.Event()
    scope.setdefault("state", {})["gone"] = gone

    async def watched() -> dict:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
        return message

    try:
        await cap(app, owner_of(scope.get("state")), scope, watched, send)
    finally:
        gone.set()


class Lean:
    """POST /v1/chat/completions, the hot path, goes straight to its ASGI handler (flowcore.serve.openai_api.chat:
    no router, middleware or Request object, ~0.2 ms of CPU less per request); everything else to Starlette."""

    def __init__(self, app: Any, engine: Engine, max_body: int, cap: SessionCap) -> None:
        self.app, self.engine, self.max_body, self.cap = app, engine, max_body, cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != CHAT or scope["method"] != "POST":
            if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/mcp":
                await _mcp_post(self.app, self.cap, scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: dict) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await api.chat(self.engine, scope, receive, sending, self.max_body)
        except Exception as exc:  # what Starlette's exception handler did for this route: a 500, never a traceback
            log.exception("unexpected error on POST %s", CHAT, exc_info=exc)
            if started:
                raise
            err = ServeError(500, f"internal error ({type(exc).__name__}); see the server's log", "server_error",
                             "internal_error")
            await api.send_json(send, 500, err.body())
