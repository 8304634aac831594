"""What a served caller is told when the workflow's LLM endpoint fails (flowcore.serve.engine.endpoint_failed):
the kind of failure, read from the real client's own errors against a real endpoint on 127.0.0.1, never the
endpoint's address nor its reply (which stay in the server's log for the operator)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from flowcore.llm.client import LLM, LLMError, LLMSettings
from flowcore.serve.engine import endpoint_failed, to_serve_error
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault


def _failure(tmp_path, base_url: str, **settings: object) -> LLMError:
    ws = Workspace(tmp_path / "ws.db")
    llm = LLM(LLMSettings(base_url=base_url, api_key="sk-secret-abcd", max_retries=0, cache=False, **settings), ws)
    with pytest.raises(LLMError) as e:
        asyncio.run(llm.chat("What is 2 + 2?"))
    ws.close_all()
    return e.value


@pytest.mark.parametrize(("fault", "settings", "kind"), [
    (Fault(status=503, body="upstream says: Incorrect API key provided: sk-...abcd"), {}, "HTTP 503"),
    (Fault(status=401, body="Incorrect API key provided: sk-...abcd"), {}, "HTTP 401"),
    (Fault(delay=3.0, body="late"), {"timeout": 0.5}, "timed out"),
    (Fault(malformed=True, body="<html>proxy error at 10.0.0.7</html>"), {}, "sent a malformed reply"),
])
def test_an_endpoint_failure_is_told_by_its_kind_without_address_or_reply(tmp_path, fault, settings, kind):
    srv = FakeLLMServer(lambda _req: fault).start()
    try:
        exc = _failure(tmp_path, srv.base_url, **settings)
    finally:
        srv.stop()
    told = endpoint_failed(str(exc))
    assert told == f"the workflow's LLM endpoint failed: {kind}", (told, str(exc))
    port = srv.base_url.rsplit(":", 1)[1].split("/")[0]
    assert srv.base_url in str(exc) or port in str(exc)  # the client's own message names where (the log keeps it)
    err = to_serve_error(exc, "solver@v1")
    assert err.status == 502 and err.code == "executor_endpoint_failed"
    assert not [s for s in (port, "127.0.0.1", "sk-", "10.0.0.7", "proxy error") if s in err.message], err.message


def test_an_endpoint_that_is_not_there_could_not_be_reached(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exc = _failure(tmp_path, f"http://127.0.0.1:{port}/v1")
    assert endpoint_failed(str(exc)) == "the workflow's LLM endpoint failed: could not be reached", str(exc)
    assert str(port) not in to_serve_error(exc, "solver@v1").message


def test_a_failure_of_no_known_kind_says_only_that_it_failed():
    assert endpoint_failed("something else at http://10.0.0.7:8000") == "the workflow's LLM endpoint failed"
