"""The OpenAI-compatible API of a real ``flowcore serve`` process, through the real ``openai`` client: models,
answers equal to ``run``'s, streaming, every error in OpenAI's shape, cancellation and stored traces."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import openai
import pytest

from flowcore.cli.main import main
from flowcore.workspace import traces
from flowcore.workspace.store import Workspace
from tests.helpers.served import stored_trace
from tests.serve.conftest import ROOT


def client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def post(server, body: bytes | str, headers: dict | None = None, path: str = "/v1/chat/completions") -> tuple[int, dict]:
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(server.url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_for(predicate, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_models_lists_every_name_and_version(server):
    ids = [m.id for m in client(server).models.list()]
    assert ids == ["solver", "solver@v2", "solver@v1"]
    assert client(server).models.retrieve("solver@v1").owned_by == "alice@example.com"


def test_an_answer_equals_runs_and_carries_usage_and_mermaidflow(server, fake_llm, monkeypatch, capsys, tmp_path):
    r = client(server).chat.completions.create(model="solver@v1", messages=[
        {"role": "system", "content": "ignored"}, {"role": "user", "content": "What is 6 times 7?"}])
    answer = r.choices[0].message.content
    assert answer.startswith("ECHO ") and "6 times 7" in answer and r.choices[0].finish_reason == "stop"
    mf = r.model_extra["mermaidflow"]
    assert mf["version"] == "solver@v1" and mf["calls"] == 1 and len(mf["trace_id"]) == 32
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # `run` on the same text and problem, against the same endpoint, gives the same answer
    (tmp_path / "v1.mmd").write_text(Workspace(server_db(server)).query(
        "SELECT text FROM published WHERE name='solver' AND version=1")[0]["text"])
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    assert main(["run", str(tmp_path / "v1.mmd"), "--task", "math", "--problem", "What is 6 times 7?", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == answer
    # the trace of that request is in the workspace, per node
    t = stored_trace(server_db(server), mf["trace_id"])
    assert (t.workflow, t.version, t.source, t.status, t.answer) == ("solver", 1, "api", "ok", answer)
    [span] = t.spans
    assert (span.node, span.op, span.calls, span.prompt_tokens) == ("C1", "CustomOp", 1, r.usage.prompt_tokens)
    assert span.model == "gpt-4o-mini" and span.latency > 0 and span.error is None


def server_db(server) -> str:
    return server.proc.args[server.proc.args.index("--db") + 1]


def test_name_alone_runs_the_latest_version(server, fake_llm):
    r = client(server).chat.completions.create(model="solver", messages=[{"role": "user", "content": "latest?"}])
    assert r.model == "solver" and r.model_extra["mermaidflow"]["version"] == "solver@v2"
    assert "carefully, step by step" in fake_llm.requests[-1]["messages"][0]["content"]


def test_a_stream_gives_the_same_answer_with_usage_at_the_end(server):
    c = client(server)
    problem = [{"role": "user", "content": "Stream me: what is 2 plus 2?"}]
    whole = c.chat.completions.create(model="solver@v1", messages=problem).choices[0].message.content
    chunks = list(c.chat.completions.create(model="solver@v1", messages=problem, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    assert chunks[-1].usage.total_tokens > 0 and chunks[-1].model_extra["mermaidflow"]["version"] == "solver@v1"


def test_unknown_model_is_404_in_openais_shape(server):
    with pytest.raises(openai.NotFoundError) as e:
        client(server).chat.completions.create(model="nope@v3", messages=[{"role": "user", "content": "x"}])
    assert e.value.body["code"] == "model_not_found" and "nope@v3" in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):  # before a stream starts, too
        client(server).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}], stream=True)


@pytest.mark.parametrize("body, field", [
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    ("[" * 200_000, "JSON"),
    ('{"model": "solver", "messages": [{"role": "user", "content": "\\ud800 x"}]}', "not valid Unicode"),
    ('{"messages": [{"role": "user", "content": "x"}]}', "'model'"),
    ('{"model": "solver", "messages": []}', "'messages'"),
    ('{"model": "solver", "messages": [{"role": "system", "content": "only"}]}', "no user message"),
    ('{"model": "solver", "messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    ('{"model": "solver", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', "content[0]"),
    ('{"model": "solver", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "'stream'"),
    ('{"model": "solver", "messages": [{"role": "user", "content": "x"}], "n": 3}', "'n' must be 1"),
    ('{"model": "solver", "messages": [{"role": "user", "content": "x"}], "metadata": {"entry_point": "a b"}}',
     "entry_point"),
])
def test_a_malformed_body_is_400_naming_the_field(server, body, field):
    status, doc = post(server, body)
    assert status == 400 and set(doc) == {"error"} and field in doc["error"]["message"], doc
    assert set(doc["error"]) == {"message", "type", "code"} and doc["error"]["type"] == "invalid_request_error"


def raw_post(server, body: bytes, *, declare: bool = True) -> tuple[int, dict]:
    """POST over a bare socket and read the answer even when the server answers before taking the whole body
    (as it should for a body over the cap); ``declare=False`` sends it chunked, with no length up front."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n" if declare else "Transfer-Encoding: chunked\r\n\r\n"
        try:
            sock.sendall(head.encode())
            for i in range(0, len(body), 65536):
                piece = body[i:i + 65536]
                sock.sendall(piece if declare else b"%x\r\n%s\r\n" % (len(piece), piece))
            if not declare:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed early: read what it said
            pass
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 20:
            more = sock.recv(65536)
            if not more:
                break
            data += more
    head_, _, rest = data.partition(b"\r\n\r\n")
    status = int(head_.split()[1])
    if b"transfer-encoding: chunked" in head_.lower():
        rest = rest.split(b"\r\n", 1)[1].rsplit(b"\r\n0", 1)[0]
    return status, json.loads(rest[:rest.rindex(b"}") + 1])


@pytest.mark.parametrize("declare", [True, False])
def test_a_body_over_the_cap_is_413(server, declare):
    big = json.dumps({"model": "solver", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    status, doc = raw_post(server, big, declare=declare)
    assert status == 413 and doc["error"]["code"] == "body_too_large"


def test_the_executor_endpoint_failing_is_502_never_a_wrong_answer(server):
    with pytest.raises(openai.APIStatusError) as e:
        client(server).chat.completions.create(model="solver", messages=[{"role": "user", "content": "FAIL now"}])
    assert e.value.status_code == 502 and e.value.body["code"] == "executor_endpoint_failed"
    assert "LLM endpoint failed: HTTP 500" in e.value.body["message"] and "Traceback" not in e.value.body["message"]
    # the caller is told the kind; the endpoint's reply and address are the operator's, in the server's log
    assert "scripted executor failure" not in e.value.body["message"]
    for _ in range(100):  # the server's stderr is read by a thread: wait for the line, not a fixed time
        if "scripted executor failure" in "".join(server.log):
            break
        time.sleep(0.05)
    assert "scripted executor failure" in "".join(server.log), "".join(server.log)[-500:]
    with pytest.raises(openai.APIError, match="LLM endpoint failed: HTTP 500"):  # in a stream: an error event
        list(client(server).chat.completions.create(model="solver", stream=True,
                                                    messages=[{"role": "user", "content": "FAIL streamed"}]))


def test_a_workflow_past_its_deadline_is_504_and_its_call_is_cancelled(server, fake_llm):
    dropped = fake_llm.dropped
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as e:
        client(server, timeout=30).chat.completions.create(model="solver",
                                                          messages=[{"role": "user", "content": "SLOW one"}])
    assert e.value.status_code == 504 and e.value.body["code"] == "deadline_exceeded"
    assert time.monotonic() - t0 < 5  # the server's --timeout 2, not the endpoint's 6 s
    assert wait_for(lambda: fake_llm.dropped > dropped)
    ws = Workspace(server_db(server))
    assert wait_for(lambda: any(t.status == "timeout" and "SLOW one" in (t.problem or "")
                                for t in traces.list_traces(ws)))


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_disconnects_cancels_its_workflows_calls(server, fake_llm, stream):
    dropped = fake_llm.dropped
    problem = f"HANG and leave ({'stream' if stream else 'plain'})"
    with pytest.raises(openai.APITimeoutError):
        r = client(server, timeout=1.0).chat.completions.create(
            model="solver", stream=stream, messages=[{"role": "user", "content": problem}])
        list(r) if stream else None
    assert wait_for(lambda: fake_llm.dropped > dropped, 10)  # the endpoint saw its request abandoned
    ws = Workspace(server_db(server))
    assert wait_for(lambda: any(t.status == "cancelled" and problem in (t.problem or "")
                                for t in traces.list_traces(ws)))


def test_unknown_routes_and_methods_answer_in_openais_shape(server):
    status, doc = post(server, "{}", path="/v1/embeddings")
    assert status == 404 and doc["error"]["code"] == "not_found"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/v1/chat/completions", timeout=10)
    assert e.value.code == 405 and json.loads(e.value.read())["error"]["code"] == "method_not_allowed"


def test_loopback_without_keys_refuses_foreign_hosts_and_origins_and_wrong_keys(server):
    assert post(server, "{}", {"Host": "evil.example:80"})[0] == 403
    status, doc = post(server, "{}", {"Origin": "http://evil.example"})
    assert status == 403 and doc["error"]["code"] == "forbidden_origin"
    assert post(server, "{}", {"Origin": "null"})[0] == 403
    status, doc = post(server, "{}", {"Authorization": "Bearer mf_00000000_" + "a" * 43})
    assert status == 401 and doc["error"]["code"] == "invalid_api_key"
    assert ROOT.exists()
