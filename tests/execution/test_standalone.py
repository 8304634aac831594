"""The exported module is what its header says: it runs on the standard library alone (a bare venv with
neither flowcore nor openai), the same as with openai installed, and its urllib path retries like the
client does and reports failures without the key."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from flowcore.execution.compiler import compile_workflow
from flowcore.mermaid.reader import parse
from flowcore.workspace.library import examples
from tests.helpers.fakellm import FakeLLMServer, Fault, by_keyword

CASE = {"Several candidate": "Candidates B-F agree. Answer: C",
        "Check the selected solution": "Rechecked: 6*7 = 42. The answer is 42",
        "solve()": "```python\ndef solve():\n    return 6 * 7\n```"}


def example(name: str):
    return parse(next(t for n, _, t in examples() if n == name))


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A venv with nothing but the standard library (no pip, no site packages)."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(root)
    py = root / "bin" / "python"
    probe = subprocess.run([str(py), "-c", "import openai"], capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'openai'" in probe.stderr
    return py


def _run(py: Path, path: Path, srv: FakeLLMServer, problem: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-secret-key-123", **extra)
    return subprocess.run([str(py), "-I", str(path), "--problem", problem, "--json"], capture_output=True,
                          text=True, env=env, cwd=path.parent, timeout=120)


def test_the_header_says_what_the_module_needs(tmp_path):
    src = compile_workflow(example("math_seed"))
    head = src.split('"""', 2)[1]
    assert "standard library" in head and "openai" in head
    path = tmp_path / "workflow.py"
    path.write_text(src)
    out = subprocess.run([sys.executable, "-I", str(path), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "standard library" in " ".join(out.stdout.split())


def test_a_bare_venv_runs_the_export_like_the_openai_client(bare_python, tmp_path):
    path = tmp_path / "workflow.py"
    path.write_text(compile_workflow(example("gsm8k_case_study")))
    problem = "Tom has 6 bags of 7 apples. How many apples?"
    with FakeLLMServer(by_keyword(CASE, "6 bags of 7 is 43. The answer is 43")) as srv:
        bare = _run(bare_python, path, srv, problem)
        assert bare.returncode == 0, bare.stderr
        bare_requests = [r["messages"] for r in srv.requests]
        with_openai = _run(Path(sys.executable), path, srv, problem)
        assert with_openai.returncode == 0, with_openai.stderr
        openai_requests = [r["messages"] for r in srv.requests[len(bare_requests):]]
        assert {h.lower(): v for h, v in srv.headers[0].items()}["authorization"] == "Bearer sk-secret-key-123"
    a, b = json.loads(bare.stdout), json.loads(with_openai.stdout)
    assert a == b and a["answer"].endswith("The answer is 42") and a["calls"] == 8
    assert sorted(map(json.dumps, bare_requests)) == sorted(map(json.dumps, openai_requests))


def test_the_urllib_path_retries_server_errors_and_hides_the_key(bare_python, tmp_path):
    path = tmp_path / "workflow.py"
    path.write_text(compile_workflow(example("math_seed")))
    with FakeLLMServer([Fault(status=503, body="busy"), Fault(status=429, body="slow down"),
                        "so \\boxed{42}"]) as srv:
        ok = _run(bare_python, path, srv, "What is 6*7?", MERMAIDFLOW_MAX_RETRIES="2")
        assert len(srv.requests) == 3
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["answer"].endswith("\\boxed{42}")
    with FakeLLMServer([Fault(status=401, body="bad key sk-secret-key-123")]) as srv:
        bad = _run(bare_python, path, srv, "What is 6*7?", MERMAIDFLOW_MAX_RETRIES="3")
        assert len(srv.requests) == 1  # a 4xx other than 408/409/429 is final
    assert bad.returncode == 1 and "HTTP 401" in bad.stderr and "Traceback" not in bad.stderr
    assert "sk-secret-key-123" not in bad.stderr and "***" in bad.stderr
    with FakeLLMServer([Fault(malformed=True, body="<html>not json</html>")]) as srv:
        garbled = _run(bare_python, path, srv, "What is 6*7?")
    assert garbled.returncode == 1 and "not JSON" in garbled.stderr and "Traceback" not in garbled.stderr


def test_an_unreachable_endpoint_is_named(bare_python, tmp_path):
    path = tmp_path / "workflow.py"
    path.write_text(compile_workflow(example("math_seed")))
    srv = FakeLLMServer("x").start()
    url = srv.base_url
    srv.stop()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    env.update(OPENAI_BASE_URL=url, MERMAIDFLOW_MAX_RETRIES="0", MERMAIDFLOW_TIMEOUT="5")
    out = subprocess.run([str(bare_python), "-I", str(path), "--problem", "1+1"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60)
    assert out.returncode == 1 and "cannot reach" in out.stderr and "Traceback" not in out.stderr


def test_urllib_can_be_chosen_in_process(monkeypatch):
    """MERMAIDFLOW_HTTP=urllib: the same reply object shape as the client's (usage and cost included)."""
    from flowcore.execution._standalone_ops import OpenAIChat

    with FakeLLMServer("hello") as srv:
        chat = OpenAIChat(prices={"m": (1.0, 2.0)}, env={"OPENAI_BASE_URL": srv.base_url, "OPENAI_MODEL": "m",
                                                         "MERMAIDFLOW_HTTP": "urllib"})
        assert chat.transport == "urllib"
        reply = asyncio.run(chat.chat("hi"))
    assert reply.text == "hello" and reply.model == "m" and reply.prompt_tokens > 0
    assert reply.cost == pytest.approx((reply.prompt_tokens * 1 + reply.completion_tokens * 2) / 1e6)


@pytest.mark.parametrize("http", ["openai", "urllib"])
def test_an_exported_workflows_cost_is_estimated_when_the_endpoint_reports_no_usage(http):
    """A reply without usage was counted 0 tokens, $0: now ~4 characters a token of the prompt and of the reply,
    flagged ``estimated``; a reply with usage keeps the endpoint's counts."""
    from flowcore.execution._standalone_ops import OpenAIChat

    text = "The sum of one and one is two."
    with FakeLLMServer([Fault(body=text, no_usage=True), text]) as srv:
        chat = OpenAIChat(prices={"m": (1.0, 2.0)}, env={"OPENAI_BASE_URL": srv.base_url, "OPENAI_MODEL": "m",
                                                         "MERMAIDFLOW_HTTP": http})
        guessed, told = asyncio.run(chat.chat("What is 1+1?")), asyncio.run(chat.chat("And 1+1?"))
    assert guessed.estimated and (guessed.prompt_tokens, guessed.completion_tokens) == (3, 8)  # 12 and 30 characters
    assert guessed.cost == pytest.approx((3 * 1 + 8 * 2) / 1e6)
    assert not told.estimated and (told.prompt_tokens, told.completion_tokens) == (2, 8)  # the server's: a word a token
    assert chat.cost == pytest.approx(guessed.cost + told.cost)


@pytest.mark.parametrize("var, value", [("MERMAIDFLOW_TIMEOUT", "abc"), ("MERMAIDFLOW_TIMEOUT", "nan"),
                                        ("MERMAIDFLOW_TIMEOUT", "-1"), ("MERMAIDFLOW_MAX_RETRIES", "1.5"),
                                        ("MERMAIDFLOW_CONCURRENCY", "0"), ("MERMAIDFLOW_PRICES", "{bad")])
def test_a_bad_setting_in_the_environment_is_named(tmp_path, var, value):
    path = tmp_path / "workflow.py"
    path.write_text(compile_workflow(example("math_seed")))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    env.update(OPENAI_BASE_URL="http://127.0.0.1:9/v1", **{var: value})
    p = subprocess.run([sys.executable, "-I", str(path), "--problem", "1+1"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 2 and var in p.stderr and "Traceback" not in p.stderr, p.stderr  # was a bare
    # "could not convert string to float: 'abc'", a JSON traceback, or nan taken as no timeout at all
