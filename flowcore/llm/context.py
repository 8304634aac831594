"""Fitting prompts into a model's context window (issue #9): how big the window is, how many tokens a prompt
takes, and trimming a prompt that does not fit.

The window comes from the endpoint's ``/v1/models`` metadata when it offers one (vLLM ``max_model_len``,
llama.cpp ``meta.n_ctx_train``, ``context_length`` of other servers), else from the setting
(``MERMAIDFLOW_CONTEXT_TOKENS``), else from a "maximum context length is N tokens" error the server sent.
Tokens are counted by the server's own tokenizer where it has one (llama-cpp-python ``/extras/tokenize/count``,
llama.cpp and vLLM ``/tokenize``), else estimated on the safe side (one token per 3 UTF-8 bytes: English text
runs ~4 characters a token). tiktoken is not used: it downloads its BPE files on first use, and it only knows
OpenAI's vocabularies, not the local model's.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

MESSAGE_OVERHEAD = 6  # tokens of chat template per message (role markers, separators)
MARGIN = 16  # tokens kept free besides the reply's room
# The smallest context assumed without asking (a model with less needs MERMAIDFLOW_CONTEXT_TOKENS): a call whose
# safe-side estimate plus its cap stays under it is sent without asking the server for its window.
SMALLEST_WINDOW = 2048
_WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx",
                "n_ctx_train", "max_seq_len")
OVERFLOW_RE = re.compile(r"(?:maximum context length|context (?:length|window|size))[^0-9]{0,40}(\d{3,7})", re.I)
TRIM_NOTE = "\n[... {n} characters left out to fit the model's context ...]\n"


def estimate(text: str) -> int:
    """A count that errs high: ceil(bytes / 3)."""
    return math.ceil(len(text.encode("utf-8")) / 3) if text else 0


def prompt_text(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def root_url(base_url: str) -> str:
    """``http://host:port/v1`` -> ``http://host:port`` (where the tokenizer endpoints live)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def window_from_models(doc: Any, model: str) -> int | None:
    """The context window of ``model`` in a ``/v1/models`` answer, if the server says."""
    items = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return None
    entries = [m for m in items if isinstance(m, dict) and m.get("id") == model] or \
        [m for m in items if isinstance(m, dict)][:1 if len(items) == 1 else 0]
    for entry in entries:
        for where in (entry, entry.get("meta") if isinstance(entry.get("meta"), dict) else {}):
            for key in _WINDOW_KEYS:
                v = where.get(key)
                if isinstance(v, int) and v >= 256:
                    return v
    return None


def window_from_error(message: str) -> int | None:
    m = OVERFLOW_RE.search(message or "")
    return int(m.group(1)) if m else None


# How servers say a prompt is over the context without naming the size: llama.cpp ("the request exceeds the
# available context size, try increasing it", code exceed_context_size_error), vLLM ("maximum model length").
OVERFLOW_WORDS_RE = re.compile(r"too long|exceeds? the available context|maximum model length|"
                               r"context (?:length|window|size) (?:exceeded|is exceeded)", re.I)
OVERFLOW_CODES = ("context_length_exceeded", "exceed_context_size_error")


def is_overflow(status: int, message: str, code: Any = None) -> bool:
    return status in (400, 413, 422) and (code in OVERFLOW_CODES or OVERFLOW_RE.search(message or "") is not None
                                          or OVERFLOW_WORDS_RE.search(message or "") is not None)


class Tokenizer:
    """The endpoint's tokenizer, found by trying its known routes once; ``count`` falls back to the estimate.
    Requests go through the caller's openai client (its connection pool; no retries)."""

    def __init__(self, base_url: str | None) -> None:
        self.root = root_url(base_url) if base_url else None
        self.route: str | None = None  # the working route, "" when none works
        self.windows: dict[str, int | None] = {}
        self._asking: dict[str, asyncio.Future] = {}

    async def count(self, client: Any, text: str, model: str) -> tuple[int, str]:
        """(tokens, how): how = "server" or "estimate"."""
        if self.root is None or self.route == "":
            return estimate(text), "estimate"
        for route in [self.route] if self.route else ["/extras/tokenize/count", "/tokenize"]:
            body = {"input": text} if route.startswith("/extras") else {"content": text, "model": model,
                                                                        "prompt": text}
            try:
                doc = await client.post(self.root + route, body=body, cast_to=object,
                                        options={"max_retries": 0, "timeout": 10.0})
            except (openai.OpenAIError, ValueError):
                continue
            n = doc.get("count") if isinstance(doc, dict) else None
            if not isinstance(n, int) and isinstance(doc, dict) and isinstance(doc.get("tokens"), list):
                n = len(doc["tokens"])
            if isinstance(n, int):
                self.route = route
                return n, "server"
        if self.route is None:
            self.route = ""
        return estimate(text), "estimate"

    async def window(self, client: Any, model: str) -> int | None:
        """The window ``/v1/models`` states for ``model`` (asked once: concurrent callers share the answer)."""
        if model in self.windows:
            return self.windows[model]
        task = self._asking.get(model)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = self._asking[model] = asyncio.ensure_future(self._ask(client, model))
        return await asyncio.shield(task)

    async def _ask(self, client: Any, model: str) -> int | None:
        try:
            page = await client.models.list()
            found = window_from_models({"data": [m.to_dict() for m in page.data]}, model)
        except (openai.OpenAIError, ValueError, AttributeError):
            found = None
        self.windows[model] = found
        return found


def trim(messages: list[dict], excess_tokens: int, tokens_now: int) -> list[dict] | None:
    """A shorter copy of ``messages``, ``excess_tokens`` fewer (roughly), or None when nothing is left to cut.

    First the middle of a conversation goes (a repair exchange keeps the task and the latest diagnostics),
    then the middle of the longest message (where history, examples and logs sit in our prompts)."""
    if len(messages) > 4:
        return [*messages[:2], *messages[-2:]]
    longest = max(range(len(messages)), key=lambda i: len(str(messages[i].get("content") or "")))
    text = str(messages[longest].get("content") or "")
    per_token = max(1.0, len(text) / max(1, tokens_now))
    cut = min(int(excess_tokens * per_token * 1.15) + 64, len(text) - 300)  # keep the head and tail of it
    if cut <= 0:
        return None
    keep_head = (len(text) - cut) * 2 // 3
    keep_tail = len(text) - cut - keep_head
    shorter = text[:keep_head] + TRIM_NOTE.format(n=cut) + (text[-keep_tail:] if keep_tail else "")
    out = [dict(m) for m in messages]
    out[longest]["content"] = shorter
    return out
