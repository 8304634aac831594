"""POST /v1/chat/completions is answered by a plain ASGI handler in front of Starlette (flowcore.serve.app.Lean):
what Starlette's exception handlers did for it, it does itself. Driven in-process through httpx's ASGI
transport: a failure nobody foresaw, before the workflow or inside it, is a 500 in OpenAI's shape naming no
internals, and the other routes still go through Starlette."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from flowcore.serve.app import create_app
from flowcore.serve.engine import Engine
from flowcore.workspace.store import Workspace
from tests.serve.conftest import MATH_SEED


class Broken(Engine):
    def __init__(self, ws: Workspace, where: str) -> None:
        super().__init__(ws)
        self.where = where

    def resolve(self, model):  # noqa: ANN001, ANN201 - the engine's own signature
        if self.where == "resolve":
            raise KeyError("secret internal detail")
        return super().resolve(model)

    async def run(self, *a, **kw):  # noqa: ANN002, ANN003, ANN201
        raise ZeroDivisionError("secret internal detail")


def _post(app, body: dict | str) -> httpx.Response:  # noqa: ANN001
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            if isinstance(body, str):
                return await c.post("/v1/chat/completions", content=body,
                                    headers={"Content-Type": "application/json"})
            return await c.post("/v1/chat/completions", json=body)

    return asyncio.run(go())


@pytest.fixture
def ws(tmp_path):
    from flowcore.workspace import published

    w = Workspace(tmp_path / "ws.db")
    published.publish(w, "solver", MATH_SEED, "math", created_by="alice@example.com")
    return w


@pytest.mark.parametrize("where", ["resolve", "run"])
def test_an_unforeseen_failure_is_a_500_in_openais_shape(ws, where):
    app = create_app(Broken(ws, where), require_keys=False)
    r = _post(app, {"model": "solver", "messages": [{"role": "user", "content": "what is 2 + 2?"}]})
    assert r.status_code == 500, r.text
    err = r.json()["error"]
    assert err["type"] == "server_error" and err["code"] == "internal_error"
    assert "secret internal detail" not in r.text and "Traceback" not in r.text


def test_bad_bodies_and_unknown_models_keep_their_statuses_on_the_lean_path(ws):
    app = create_app(Engine(ws), require_keys=False)
    r = _post(app, "{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = _post(app, {"model": "solver", "messages": []})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_messages"
    r = _post(app, {"model": "nobody", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert r.headers["content-type"] == "application/json"


def test_the_other_routes_still_go_through_starlette(ws):
    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(Engine(ws), require_keys=False)),
                                     base_url="http://127.0.0.1") as c:
            return await c.get("/v1/models"), await c.get("/v1/chat/completions")

    models, get = asyncio.run(go())
    assert models.status_code == 200 and "solver" in [m["id"] for m in models.json()["data"]]
    assert get.status_code == 405 and get.json()["error"]["code"] == "method_not_allowed"
