"""attack17 on an exported workflow's cost (its OpenAIChat, openai and urllib transports), against the scripted
OpenAI-compatible server on 127.0.0.1 (tests/helpers/fakellm.py). Prices: only reply tokens cost ($2 a token)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from flowcore.execution._standalone_ops import OpenAIChat
from flowcore.execution.compiler import compile_workflow
from flowcore.mermaid.reader import parse
from tests.helpers.fakellm import FakeLLMServer, Fault
from tests.llm.test_reply_cap import MATH

THOUGHT = " ".join(f"step{i}" for i in range(40))
TOKENS = -(-len(THOUGHT) // 4)  # 68 by 4 characters a token
PRICES = {"m": (0.0, 2_000_000.0)}


def _body(message: dict, usage: dict | None = None) -> Fault:
    """A 200 whose body is this completion, as sent (``malformed`` sends any body)."""
    return Fault(malformed=True, body=json.dumps({"choices": [{"index": 0, "message": message,
                                                               "finish_reason": "stop"}],
                                                  **({"usage": usage} if usage else {})}))


def _chat(srv: FakeLLMServer, http: str) -> OpenAIChat:
    return OpenAIChat(prices=PRICES, env={"OPENAI_BASE_URL": srv.base_url, "OPENAI_MODEL": "m",
                                          "MERMAIDFLOW_HTTP": http, "MERMAIDFLOW_MAX_RETRIES": "0"})


@pytest.mark.parametrize("http", ["openai", "urllib"])
def test_a_reasoning_reply_is_charged_for_its_thinking(http):
    """content "" and the thinking in reasoning_content, no usage (or 0 completion tokens): before $0 (0 tokens)."""
    with FakeLLMServer([_body({"role": "assistant", "content": "", "reasoning_content": THOUGHT}),
                        _body({"role": "assistant", "content": "", "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "f", "arguments": THOUGHT}}]},
                            {"prompt_tokens": 3, "completion_tokens": 0})]) as srv:
        chat = _chat(srv, http)
        thinking, tool = asyncio.run(chat.chat("What is 1+1?")), asyncio.run(chat.chat("And 2+2?"))
    assert thinking.text == "" and thinking.estimated and thinking.completion_tokens == TOKENS
    assert tool.estimated and tool.completion_tokens >= TOKENS and tool.prompt_tokens == 3
    assert chat.cost == pytest.approx(thinking.cost + tool.cost) and thinking.cost == pytest.approx(2.0 * TOKENS)


@pytest.mark.parametrize("http", ["openai", "urllib"])
def test_a_reply_without_content_is_charged_before_it_fails(http):
    """No content at all (a reasoning model past its cap, a tool call, no choices, a choice of null): the call fails
    as before, but what its usage billed is counted (before: the run's cost said $0 for it). A choice of null or a
    number for content is the same failure, never an AttributeError or a number passed on as the answer."""
    billed = {"prompt_tokens": 3, "completion_tokens": 500}
    with FakeLLMServer([_body({"role": "assistant", "content": None, "reasoning_content": THOUGHT}, billed),
                        Fault(malformed=True, body=json.dumps({"choices": [], "usage": billed})),
                        Fault(malformed=True, body=json.dumps({"choices": [None], "usage": billed})),
                        _body({"role": "assistant", "content": 5}, billed)]) as srv:
        chat = _chat(srv, http)
        for i in range(4):
            with pytest.raises(RuntimeError, match=r"no message content \(it was charged \$1000\.000000\)"):
                asyncio.run(chat.chat(f"What is {i}+1?"))
    assert chat.calls == 4 and chat.cost == pytest.approx(4000.0)


TWO_CALLS = """flowchart TD
    %% @prompt solver: Solve it.
    %% @prompt checker: Check it.
    PROBLEM([Problem])
    C1["Custom (role: solver)"]
    C2["Custom (role: checker)"]
    RETURN([Return])
    class PROBLEM,RETURN Interface
    PROBLEM --> C1 --> C2 --> RETURN
"""


def test_an_exported_module_reports_what_a_reasoning_reply_cost(tmp_path):
    path = tmp_path / "wf.py"
    path.write_text(compile_workflow(parse(MATH)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    with FakeLLMServer(_body({"role": "assistant", "content": "2", "reasoning_content": THOUGHT})) as srv:
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k", OPENAI_MODEL="m",
                   MERMAIDFLOW_PRICES=json.dumps(PRICES))
        p = subprocess.run([sys.executable, "-I", str(path), "--problem", "1+1", "--json"], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cost"] == pytest.approx(2.0 * -(-len("2" + THOUGHT) // 4))  # the answer and thinking


def test_an_exported_run_that_fails_says_what_it_paid_before(tmp_path):
    """The second call of a two-node workflow fails (HTTP 400): the first was answered and paid for, but the
    module printed only the error, never the cost."""
    path = tmp_path / "wf.py"
    path.write_text(compile_workflow(parse(TWO_CALLS)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    answer = {"role": "assistant", "content": "The answer is 2"}
    with FakeLLMServer([_body(answer, {"prompt_tokens": 10, "completion_tokens": 3}),
                        Fault(status=400, body="bad request")]) as srv:
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k", OPENAI_MODEL="m",
                   MERMAIDFLOW_PRICES=json.dumps(PRICES), MERMAIDFLOW_MAX_RETRIES="0")
        p = subprocess.run([sys.executable, "-I", str(path), "--problem", "1+1"], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 1 and "error: " in p.stderr and "Traceback" not in p.stderr
    assert "cost so far: $6.000000, LLM calls: 1" in p.stderr  # 3 reply tokens at $2
