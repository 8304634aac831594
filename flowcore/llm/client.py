"""LLM access through the ``openai`` client against any OpenAI-compatible endpoint.

One model per role (optimizer, judge, executor); per-call tokens, cost (editable price table) and latency;
a per-run budget cap; a response cache in the workspace database (a re-run is free and reproducible, even
with no endpoint configured); a concurrency limit; retries and timeouts done by the client itself.
The API key lives only in memory: it is never persisted, logged, put in an error message or a repr.

Replies are checked before anyone sees them: a body that is not JSON, a reply with no choice or no content,
garbled text (invalid UTF-8 decoded as U+FFFD, lone surrogates) is retried like a 5xx; a caller may add
its own check (``accept``: the judge wants its JSON, a Programmer a code block) and a rejected reply is
retried too. Only a reply that passed every check is cached, so a fault is never replayed.

Every attempt the endpoint answered is charged, a failed one too (``_billed``): what its usage says, or when it
says none (a streamed reply from a server that leaves usage out, a garbled body, a stream that broke after some
tokens) an estimate, flagged ``estimated``: the prompt's tokens counted by the server's tokenizer where it has one,
else ~4 characters a token of the messages; the reply's ~4 characters a token of the text received (streamed: at
least a token a chunk). So the budget is never undercounted by a server that does not say what it billed.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import math
import os
import re
import sqlite3
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

try:  # the HTTP library the openai client itself runs on (openai 3.x: httpx2)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx  # type: ignore[no-redef]
import openai

from flowcore.execution import waits
from flowcore.execution._standalone_ops import MAX_REPLY_MB, price_lookup, reply_cap_hooks, reply_too_large
from flowcore.execution._standalone_ops import hidden_text as _hidden
from flowcore.llm import context as lc
from flowcore.llm import egress
from flowcore.llm.slots import FairSlots

if TYPE_CHECKING:
    from flowcore.workspace.store import Workspace

ROLES = ("optimizer", "judge", "executor")
# Completion caps per role (tokens). Without one a JSON-mode call on a weak model runs to the end of the
# context (1,800 tokens, two minutes on a slow machine). MERMAIDFLOW_MAX_TOKENS[_<ROLE>] or Settings change them.
DEFAULT_MAX_TOKENS = {"optimizer": 1536, "judge": 512, "executor": 1024}
MIN_COMPLETION = 64  # a prompt that leaves less room than this in the context is trimmed
DEFAULT_MODEL = "gpt-4o-mini"
OPENAI_URL = "https://api.openai.com/v1"

# USD per 1M (input, output) tokens. Editable in Settings or with MERMAIDFLOW_PRICES='{"model": [in, out]}'.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-3.5-turbo": (0.50, 1.50),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "deepseek-chat": (0.27, 1.10),
}

_DDL = """
CREATE TABLE IF NOT EXISTS llm_cache(
    key TEXT PRIMARY KEY, model TEXT NOT NULL, response_json TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS llm_calls(
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, ts REAL NOT NULL, role TEXT, model TEXT,
    prompt_tokens INTEGER, completion_tokens INTEGER, cost REAL, latency REAL, cached INTEGER, error TEXT);
CREATE INDEX IF NOT EXISTS llm_calls_run ON llm_calls(run_id);
"""


class LLMError(Exception):
    """The endpoint failed after the client's retries, or answered something that is not a completion.
    ``transient``: the endpoint was unreachable, overloaded or garbling (worth retrying later), as opposed to
    a request it refuses (HTTP 4xx) or a setting. ``timed_out``: no answer came within the client's timeout (a
    slow or queued endpoint), as opposed to one that said no at once (a refused connection, an error status)."""

    transient = False
    timed_out = False

    def __init__(self, message: str, *, transient: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.transient, self.timed_out = transient, timed_out


class ResultNotStored(sqlite3.OperationalError):
    """A call was made and paid for, but the workspace could not store its result (a full disk, a damaged or
    read-only file): a storage failure, never an endpoint failure. The message says what the call cost."""


class BudgetExceeded(LLMError):
    pass


def budget_refused(exc: BaseException | None) -> bool:
    """Did the run's budget refuse a call (a BudgetExceeded in the exception's cause/context chain)? Known by the
    type: an endpoint's, a proxy's or a workflow's words naming the budget are not the budget."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, BudgetExceeded):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class NotConfigured(LLMError):
    pass


class ContextOverflow(LLMError):
    """The prompt does not fit the model's context (even trimmed), or the server said so (HTTP 400): a
    property of this request, handled like an invalid answer, never a lost round."""


class Refused(LLMError):
    """The model or the endpoint's content filter refused this prompt (a ``refusal``, finish_reason
    ``content_filter``, an HTTP 400 ``content_filter``): like an overflow, a property of the request the workflow
    built, answered wrong, never left out of the score."""


# HTTP statuses that say "not now" rather than "not this request" (as the openai client retries them).
TRANSIENT_STATUS = frozenset({408, 409, 429})
Accept = Callable[[str], "str | None"]  # a reply's text -> None when usable, else the reason it is not


# -- settings -----------------------------------------------------------------------------------------------


def _default_models() -> dict[str, str]:
    return {r: DEFAULT_MODEL for r in ROLES}


@dataclass
class LLMSettings:
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    models: dict[str, str] = field(default_factory=_default_models)
    prices: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    timeout: float = 60.0
    max_retries: int = 2
    concurrency: int = 8
    budget_usd: float | None = None
    cache: bool = True
    max_tokens: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MAX_TOKENS))
    context_tokens: int | None = None  # the model's context window when the server does not say (tokens)
    stream: bool = False  # stream replies: the timeout is then a silence timeout, not a total one
    max_reply_mb: float = MAX_REPLY_MB  # a larger reply (decompressed) is refused as it streams in, never kept
    # where the client may connect (flowcore.llm.egress); None: this process's environment decides. Not a setting
    # that is saved or shown: the app attaches it (team or not), and it travels with the settings to jobs and Ray
    egress: egress.Egress | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.base_url = check_base_url(self.base_url)
        # a blank (or all-spaces) model name means the default, never a model called "   "
        names = {k: v.strip() if isinstance(v, str) else v for k, v in (self.models or {}).items()}
        self.models = {**_default_models(), **{k: v for k, v in names.items() if v}}
        caps = {**DEFAULT_MAX_TOKENS, **(self.max_tokens or {})}
        bad = {r: v for r, v in caps.items() if r not in ROLES or not isinstance(v, int) or v < 1}
        if bad:
            raise ValueError(f"LLM settings: max_tokens must map a role ({', '.join(ROLES)}) to a whole number "
                             f">= 1, got {bad}")
        self.max_tokens = caps
        if self.context_tokens is not None and (not isinstance(self.context_tokens, int) or self.context_tokens < 256):
            raise ValueError(f"LLM settings: context_tokens must be a whole number >= 256, got {self.context_tokens!r}")
        self.prices = _parse_prices(self.prices, "prices")
        if not math.isfinite(self.timeout):  # nan compares False with everything: it passed the check below
            raise ValueError(f"LLM settings: timeout must be a number of seconds above 0, got {self.timeout}")
        if not isinstance(self.max_reply_mb, (int, float)) or not math.isfinite(self.max_reply_mb) \
                or self.max_reply_mb <= 0:
            raise ValueError(f"LLM settings: max_reply_mb must be a number of MB above 0, got {self.max_reply_mb!r}")
        if self.budget_usd is not None and not math.isfinite(self.budget_usd):
            raise ValueError(f"LLM settings: budget_usd must be a number of USD >= 0, got {self.budget_usd}")
        if self.timeout <= 0 or self.max_retries < 0 or self.concurrency < 1:
            raise ValueError(f"LLM settings: timeout must be > 0, max_retries >= 0, concurrency >= 1 "
                             f"(got {self.timeout}, {self.max_retries}, {self.concurrency})")
        if self.budget_usd is not None and self.budget_usd < 0:
            raise ValueError(f"LLM settings: budget_usd must be >= 0 (got {self.budget_usd})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LLMSettings:
        """OPENAI_BASE_URL, OPENAI_API_KEY, MERMAIDFLOW_MODEL_<ROLE> (else OPENAI_MODEL), MERMAIDFLOW_TIMEOUT,
        MERMAIDFLOW_MAX_RETRIES, MERMAIDFLOW_CONCURRENCY, MERMAIDFLOW_BUDGET_USD, MERMAIDFLOW_CACHE (0 = off),
        MERMAIDFLOW_PRICES (JSON). A bad value raises ValueError naming the variable."""
        env = os.environ if env is None else env

        def num(name: str, kind: type, default: Any) -> Any:
            raw = (env.get(name) or "").strip()
            if not raw:
                return default
            try:
                return kind(raw)
            except ValueError:
                msg = f"environment variable {name}={raw!r} is not a valid {kind.__name__}"
                raise ValueError(msg) from None

        def url(name: str) -> str | None:
            try:
                return check_base_url(env.get(name))
            except ValueError as e:
                raise ValueError(f"environment variable {name}: {str(e).removeprefix('LLM settings: ')}") from None

        fallback = (env.get("OPENAI_MODEL") or "").strip() or DEFAULT_MODEL
        models = {r: (env.get(f"MERMAIDFLOW_MODEL_{r.upper()}") or "").strip() or fallback for r in ROLES}
        prices = dict(DEFAULT_PRICES)
        if (env.get("MERMAIDFLOW_PRICES") or "").strip():
            try:
                extra = json.loads(env["MERMAIDFLOW_PRICES"])
            except ValueError as e:
                raise ValueError(f"environment variable MERMAIDFLOW_PRICES is not JSON: {e}") from None
            try:
                prices.update(_parse_prices(extra, "environment variable MERMAIDFLOW_PRICES"))
            except TypeError as e:
                raise ValueError(str(e)) from None
        cache = (env.get("MERMAIDFLOW_CACHE") or "1").strip().lower() not in ("0", "false", "no", "off")
        every = num("MERMAIDFLOW_MAX_TOKENS", int, None)
        caps = {r: num(f"MERMAIDFLOW_MAX_TOKENS_{r.upper()}", int, every or DEFAULT_MAX_TOKENS[r]) for r in ROLES}
        stream = (env.get("MERMAIDFLOW_STREAM") or "0").strip().lower() in ("1", "true", "yes", "on")
        return cls(max_tokens=caps, context_tokens=num("MERMAIDFLOW_CONTEXT_TOKENS", int, None), stream=stream,
                   max_reply_mb=num("MERMAIDFLOW_MAX_REPLY_MB", float, MAX_REPLY_MB),
                   base_url=url("OPENAI_BASE_URL"),
                   api_key=(env.get("OPENAI_API_KEY") or "").strip() or None,
                   models=models, prices=prices,
                   timeout=num("MERMAIDFLOW_TIMEOUT", float, 60.0),
                   max_retries=num("MERMAIDFLOW_MAX_RETRIES", int, 2),
                   concurrency=num("MERMAIDFLOW_CONCURRENCY", int, 8),
                   budget_usd=num("MERMAIDFLOW_BUDGET_USD", float, None), cache=cache)

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self.api_key)

    @property
    def max_reply_bytes(self) -> int:
        return int(self.max_reply_mb * 1024 * 1024)

    def model_for(self, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown LLM role {role!r}; expected one of {', '.join(ROLES)}")
        return self.models.get(role) or DEFAULT_MODEL

    def price_for(self, model: str) -> tuple[float, float]:
        """Exact name, else the longest known prefix (``gpt-4o-mini-2024-07-18``); unknown models cost 0."""
        return price_lookup(self.prices, model)  # the one lookup, shared with compiled workflows

    def price_known(self, model: str) -> bool:
        """Whether ``price_for`` knows this model (else its cost shows as 'price unknown', never as $0)."""
        return any(name in self.prices or any(name.startswith(k) for k in self.prices)
                   for name in (model, model.rsplit("/", 1)[-1]))

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        pin, pout = self.price_for(model)
        return (prompt_tokens * pin + completion_tokens * pout) / 1_000_000

    def to_public_dict(self) -> dict:
        """Everything but the key (safe to save)."""
        return {"base_url": self.base_url, "models": dict(self.models),
                "prices": {m: list(p) for m, p in self.prices.items()}, "timeout": self.timeout,
                "max_retries": self.max_retries, "concurrency": self.concurrency,
                "budget_usd": self.budget_usd, "cache": self.cache, "max_tokens": dict(self.max_tokens),
                "context_tokens": self.context_tokens, "stream": self.stream, "max_reply_mb": self.max_reply_mb}

    @classmethod
    def from_public_dict(cls, d: dict, api_key: str | None = None) -> LLMSettings:
        if not isinstance(d, dict):
            raise TypeError(f"LLM settings must be a mapping, got {type(d).__name__}")
        d = {k: v for k, v in d.items() if k != "api_key"}  # a key in saved settings is ignored, never used
        unknown = set(d) - set(cls().to_public_dict())
        if unknown:
            raise ValueError(f"LLM settings: unknown field(s) {', '.join(sorted(unknown))}")
        models = d.get("models") or {}
        if not isinstance(models, dict) or not all(isinstance(v, str) for v in models.values()):
            raise ValueError("LLM settings: models must map role -> model name")
        bad_roles = set(models) - set(ROLES)
        if bad_roles:
            raise ValueError(f"LLM settings: unknown role(s) {', '.join(sorted(bad_roles))}")
        try:
            budget = d.get("budget_usd")
            return cls(base_url=d.get("base_url") or None, api_key=api_key or None, models=dict(models),
                       prices=_parse_prices(d.get("prices", DEFAULT_PRICES), "prices"),
                       timeout=float(d.get("timeout", 60.0)), max_retries=int(d.get("max_retries", 2)),
                       concurrency=int(d.get("concurrency", 8)),
                       budget_usd=None if budget in (None, "") else float(budget),
                       cache=bool(d.get("cache", True)),
                       max_tokens={k: int(v) for k, v in (d.get("max_tokens") or {}).items()},
                       context_tokens=None if d.get("context_tokens") in (None, "") else int(d["context_tokens"]),
                       stream=bool(d.get("stream", False)),
                       max_reply_mb=float(d.get("max_reply_mb", MAX_REPLY_MB)))
        except (TypeError, ValueError) as e:  # one exception type for the Settings page
            raise ValueError(f"LLM settings: {str(e).removeprefix('LLM settings: ')}") from None


def _parse_prices(prices: Any, where: str) -> dict[str, tuple[float, float]]:
    if not isinstance(prices, Mapping):
        raise TypeError(f"{where}: expected a mapping model -> [input, output] USD per 1M tokens")
    out = {}
    for model, pair in prices.items():
        try:
            pin, pout = (float(x) for x in pair)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: price of {model!r} must be [input, output] USD per 1M tokens, "
                             f"got {pair!r}") from None
        if not (math.isfinite(pin) and math.isfinite(pout)):  # NaN passed every check: the budget never tripped
            raise ValueError(f"{where}: price of {model!r} must be finite numbers of USD per 1M tokens, got {pair!r}")
        if pin < 0 or pout < 0:
            raise ValueError(f"{where}: price of {model!r} is negative")
        out[str(model)] = (pin, pout)
    return out


def check_base_url(url: str | None) -> str | None:
    """The endpoint URL stripped (None when blank); ValueError saying what is wrong with it otherwise, so a
    typo is refused where it is typed instead of failing later as a connection error or a crash."""
    if url is None:
        return None
    if not isinstance(url, str):
        raise ValueError(f"LLM settings: base_url must be text, got {type(url).__name__}")
    url = url.strip()
    if not url:
        return None
    example = "such as http://127.0.0.1:8000/v1"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as e:
        raise ValueError(f"LLM settings: the endpoint URL {url!r} is not a valid URL ({e}); write one "
                         f"{example}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"LLM settings: the endpoint URL {url!r} must start with http:// or https:// "
                         f"({example})")
    if not parts.hostname or any(c.isspace() for c in url) or port == 0:
        raise ValueError(f"LLM settings: the endpoint URL {url!r} names no valid host ({example})")
    return url


def public_url(url: str | None) -> str:
    """The endpoint as it may be shown: no user:password, query or fragment."""
    if not url:
        return OPENAI_URL
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# -- results ------------------------------------------------------------------------------------------------


@dataclass
class Reply:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency: float
    cached: bool
    accepted: bool = True  # False: every attempt was rejected by the caller's check (this one is not cached)
    # a cache hit: what the call cost and took when it was first made (None: not recorded, an older cache row)
    first_cost: float | None = None
    first_latency: float | None = None
    estimated: bool = False  # the server reported no (usable) token counts: they and the cost are estimates
    first_estimated: bool = False  # a cache hit whose first call's counts (so ``first_cost``) were estimates


@dataclass
class Usage:
    """Running totals. Tokens and cost count what was paid for: cache hits add to ``calls`` and ``cached``
    only. Failed calls add to ``errors`` only."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    cached: int = 0
    errors: int = 0
    gen_latency: float = 0.0  # seconds spent on calls that produced completion tokens (not cache hits)
    estimated: int = 0  # paid attempts (failed ones too) whose cost is an estimate: the server said no usage

    @property
    def tokens_per_s(self) -> float | None:
        """Completion tokens per second of generation (what a slow local model is measured by)."""
        return self.completion_tokens / self.gen_latency if self.gen_latency > 0 else None


def _ensure_log(workspace: Workspace) -> bool:
    """The call log's tables, with the ``estimated`` column added to an older workspace's. False when the column is
    not there (an older workspace opened read-only): nothing is written then, and reads go without it."""
    workspace.ensure_schema("llm", _DDL)
    if "llm-estimated" not in workspace._schemas:
        if workspace.read_only:
            return "estimated" in workspace.columns("llm_calls")
        workspace.add_columns("llm_calls", {"estimated": "INTEGER NOT NULL DEFAULT 0"})
        workspace.ensure_schema("llm-estimated", "")
    # History reads a run's estimated calls on every view: these few, not all of a long run's calls
    workspace.ensure_schema("llm-estimated-index", "CREATE INDEX IF NOT EXISTS llm_calls_estimated ON "
                                                   "llm_calls(run_id, ts) WHERE estimated = 1;")
    return True


def run_usage(workspace: Workspace, run_id: str) -> Usage:
    """Totals of one run from the call log."""
    flagged = "SUM(estimated)" if _ensure_log(workspace) else "0"
    row = workspace.query(
        "SELECT COUNT(*) AS n, SUM(CASE WHEN cached=0 AND error IS NULL THEN prompt_tokens ELSE 0 END) AS pt,"
        " SUM(CASE WHEN cached=0 AND error IS NULL THEN completion_tokens ELSE 0 END) AS ct,"
        " SUM(cost) AS cost, SUM(latency) AS lat, SUM(cached) AS hits,"
        f" SUM(CASE WHEN error IS NULL THEN 0 ELSE 1 END) AS errs, {flagged} AS est"
        " FROM llm_calls WHERE run_id = ?", (run_id,))[0]
    errs = row["errs"] or 0
    return Usage(calls=(row["n"] or 0) - errs, prompt_tokens=row["pt"] or 0, completion_tokens=row["ct"] or 0,
                 cost=row["cost"] or 0.0, latency=row["lat"] or 0.0, cached=row["hits"] or 0, errors=errs,
                 estimated=row["est"] or 0)


def estimated_times(workspace: Workspace, run_id: str) -> list[float]:
    """When each of the run's paid calls without usage from the endpoint was made (its cost is an estimate)."""
    if not _ensure_log(workspace):
        return []
    return [float(r["ts"]) for r in workspace.query(
        "SELECT ts FROM llm_calls WHERE run_id = ? AND estimated = 1 AND cached = 0", (run_id,))]


# -- the client ---------------------------------------------------------------------------------------------


# The call in flight (the openai client retries inside one create()), for the problem's clock: each HTTP attempt
# is pending until it ends; a failed one (no response, a 5xx or 429) and the backoff after it were the endpoint's.
_ATTEMPTS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("llm_attempts", default=None)


async def _attempt_started(request: Any) -> None:
    call = _ATTEMPTS.get()
    if call is None:
        return
    now = time.monotonic()
    if call["state"] == "sent":  # the last attempt got no response (refused, reset, timed out): the endpoint's,
        timed_out = now - call["sent"] >= 0.95 * call["timeout"]  # unless it timed out past the problem's own
        waits.clock_pending(call["key"], False, give=not (timed_out and waits.clock_overdue()))  # time (waits)
    waits.clock_blocked(call["key"], False)  # a backoff after a failed attempt ends
    waits.clock_pending(call["key"], True)
    call["state"], call["sent"] = "sent", now


async def _attempt_answered(response: Any) -> None:
    call = _ATTEMPTS.get()
    if call is None or call["state"] != "sent":
        return
    call["response"] = response  # its body, should it prove to be no completion (_salvage)
    failed = response.status_code in TRANSIENT_STATUS or response.status_code >= 500
    waits.clock_pending(call["key"], False, give=failed)
    if failed:
        waits.clock_blocked(call["key"], True)  # backing off until the next attempt
    call["state"] = "failed" if failed else "answered"


class _Body:
    """A plain attempt's 200 body as it is read (within the reply cap): ``done`` once read whole."""

    def __init__(self) -> None:
        self.data, self.done, self.refused = bytearray(), False, False


class _Recording(httpx.AsyncByteStream):
    def __init__(self, inner: Any, body: _Body) -> None:
        self.inner, self.body = inner, body

    async def __aiter__(self):  # type: ignore[override]
        try:
            async for chunk in self.inner:
                self.body.data += chunk
                yield chunk
        except reply_too_large():
            self.body.refused = True  # a flood past the cap: refused, holds no completion to count
            raise
        self.body.done = True

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _attempt_body(response: Any) -> None:
    """A plain (not streamed) attempt answered 200: its body is kept as it is read. One cut off on its way (a hang-up,
    silence) is retried by the openai client itself, and was charged $0 although the server made and billed it."""
    call = _ATTEMPTS.get()
    if call is None or call["stream"] or response.status_code != 200:
        return
    body = _Body()
    call["bodies"].append(body)
    response.stream = _Recording(response.stream, body)


class _Shared:
    """What an LLM and its children share: per-event-loop clients and semaphores, the totals lock."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        # AsyncOpenAI (its httpx pool) and asyncio.Semaphore belong to one event loop, and callers may run
        # asyncio.run() many times: one client per loop, closed when that loop shuts down.
        self.per_loop: dict[asyncio.AbstractEventLoop, tuple[openai.AsyncOpenAI, FairSlots, Any, Any]] = {}
        self.share: int | None = None  # slots one tenant may hold at once (flowcore.llm.slots); None: all
        self.tokenizer = lc.Tokenizer(settings.base_url)
        self.learned: dict[str, int] = {}  # model -> context window the server named in an overflow error
        self.json_ok = True  # False once the server refused response_format json_object: ask in words only
        # Replies and call-log rows not yet in the workspace (its database was away when they came): kept here,
        # served from here, and written with the next write that succeeds, so a paid call is never made twice.
        self.pending: dict[str, tuple[str, dict]] = {}
        self.unlogged: list[tuple] = []
        # None: each call's reply and log row are written at once, by the caller's thread. A server sets a
        # callable here that has another thread write them (flowcore.serve.engine): its event loop, which answers
        # every client, then never waits on the disk. Until written they are served from ``pending`` as above.
        self.persist_later: Callable[[], None] | None = None

    async def for_loop(self) -> tuple[openai.AsyncOpenAI, FairSlots, waits.Pool]:
        loop = asyncio.get_running_loop()
        closer = None
        with self.lock:
            entry = self.per_loop.get(loop)
            if entry is None:
                for old in [lp for lp in self.per_loop if lp.is_closed()]:
                    del self.per_loop[old]
                s = self.settings
                hooks = reply_cap_hooks(s.max_reply_bytes)
                hooks = {"request": [_attempt_started],
                         "response": [_attempt_answered, *hooks["response"], _attempt_body]}
                policy = egress.from_settings(s.egress)
                http = egress.http_client(policy, _ssl_context(), event_hooks=hooks) if policy.active else \
                    openai.DefaultAsyncHttpxClient(verify=_ssl_context(), event_hooks=hooks)
                client = openai.AsyncOpenAI(
                    base_url=s.base_url or OPENAI_URL, api_key=s.api_key or "not-needed", timeout=s.timeout,
                    max_retries=s.max_retries, http_client=http)
                closer = _close_at_shutdown(client)
                entry = self.per_loop[loop] = (client, FairSlots(s.concurrency, self.share), closer,
                                               waits.Pool(s.concurrency))
        if closer is not None:
            await closer.__anext__()  # now the loop tracks it and will aclose() it at shutdown
        return entry[0], entry[1], entry[3]


_ssl_lock = threading.Lock()
_ssl_ctx: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """Built once: loading the CA bundle costs ~90 ms, and a client is made per event loop."""
    global _ssl_ctx
    with _ssl_lock:
        if _ssl_ctx is None:
            cafile = None
            if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):
                try:
                    import certifi

                    cafile = certifi.where()
                except ImportError:
                    pass
            _ssl_ctx = ssl.create_default_context(cafile=cafile)
        return _ssl_ctx


async def _close_at_shutdown(client: openai.AsyncOpenAI) -> AsyncIterator[None]:
    """An async generator parked at ``yield``: loop.shutdown_asyncgens() (run by asyncio.run) closes it,
    which closes the client while its loop still runs (otherwise its sockets are torn down after)."""
    try:
        yield
    finally:
        await client.close()


_bg_lock = threading.Lock()
_usage_lock = threading.Lock()  # usage counts walk up to clients of other threads (LLM.under)
_bg_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    """One long-lived loop on a daemon thread for chat_sync, so sync callers reuse clients and connections."""
    global _bg_loop
    with _bg_lock:
        if _bg_loop is None or _bg_loop.is_closed():
            _bg_loop = asyncio.new_event_loop()
            threading.Thread(target=_bg_loop.run_forever, name="flowcore-llm", daemon=True).start()
        return _bg_loop


class LLM:
    def __init__(self, settings: LLMSettings, workspace: Workspace | None = None, run_id: str | None = None):
        self.settings = settings
        self.workspace = workspace
        self.run_id = run_id
        self.usage = Usage()
        self.calls: list[dict] = []
        self._parent: LLM | None = None
        self._shared = _Shared(settings)
        # Called before every paid call (a cache miss); raising stops it. An evolution run sets its lease's
        # verify here, so a process that lost its run (paused, then taken over) makes no more paid calls.
        self.guard: Callable[[], None] | None = None
        self.salt = ""  # prefixed to every cache salt (see salted)
        self.tenant: str | None = None  # whose calls these are, for a fair share of the slots (share_slots)
        if workspace is not None:
            _ensure_log(workspace)

    def share_slots(self, share: int) -> None:
        """From now on one tenant's calls (``tenant``, a server's key owner) hold at most ``share`` of the
        ``concurrency`` slots at once, and freed slots go to the waiting tenants in turn (flowcore.llm.slots)."""
        sh = self._shared
        with sh.lock:
            sh.share = share
            entries = list(sh.per_loop.items())
        for loop, entry in entries:
            if not loop.is_closed():
                loop.call_soon_threadsafe(entry[1].set_share, share)

    def child(self) -> LLM:
        """Same settings, cache, budget and concurrency limit; own usage/calls that also add to this one's."""
        c = LLM.__new__(LLM)
        c.settings, c.workspace, c.run_id = self.settings, self.workspace, self.run_id
        c.usage, c.calls, c._parent, c._shared = Usage(), [], self, self._shared
        c.salt, c.tenant = self.salt, self.tenant
        return c

    def salted(self, salt: str) -> LLM:
        """A child whose calls are cached apart from this one's, under ``salt``: every call is a fresh sample
        (a repeat measurement), yet the same repeat made again (a round retried after an outage) is answered
        from the cache."""
        c = self.child()
        c.salt = f"{self.salt}{salt}|"
        return c

    def under(self, parent: LLM) -> LLM:
        """This client (its own settings, connections and cache), its calls also counted in ``parent``'s usage, so
        that ``parent``'s budget and guard stop them too: an evolution run a server's MCP tool started spends from
        the server's budget, never from a fresh one of its own. Returns self."""
        self._parent = parent
        return self

    def _root(self) -> LLM:
        node = self
        while node._parent is not None:
            node = node._parent
        return node

    def _accounts(self) -> list[LLM]:
        """The clients that keep their own budget and guard, nearest first: this client's root, and the root of
        each client it was put ``under`` (a child shares its parent's settings and is no account of its own)."""
        out: list[LLM] = []
        node: LLM | None = self
        while node is not None:
            if node._parent is None or node._parent._shared is not node._shared:
                out.append(node)
            node = node._parent
        return out

    # -- public calls -------------------------------------------------------------------------------------
    async def chat(self, messages: list[dict] | str, *, role: str = "executor", temperature: float = 0.0,
                   json_mode: bool = False, max_tokens: int | None = None, cache_salt: str = "",
                   accept: Accept | None = None, trim: bool = True) -> Reply:
        """One chat completion. ``cache_salt`` separates otherwise identical calls (e.g. ensemble samples).
        A cached answer is served even when no endpoint is configured (replaying a run).

        ``accept(text)`` returns None for a usable reply or the reason it is not; a rejected reply is asked
        again (up to ``max_retries`` more times) and never cached. When every attempt is rejected the last
        reply comes back with ``accepted=False`` for the caller to handle as an unusable answer.
        ``trim=False``: a prompt too long for the model raises ContextOverflow instead of losing its middle (a
        judge must read the whole answer).
        A malformed reply (a body that is not JSON, or not UTF-8: a garbled transfer) is retried the same way,
        and raises a transient LLMError at the end. A refusal raises Refused."""
        msgs = _normalize(messages)
        s = self.settings
        model = s.model_for(role)
        key = _cache_key(model, msgs, temperature, json_mode, max_tokens, self.salt + cache_salt)
        hit = self._cache_get(key)
        if hit is not None and (accept is None or accept(hit["text"]) is None):
            reply = Reply(hit["text"], model, int(hit.get("prompt_tokens", 0)),
                          int(hit.get("completion_tokens", 0)), 0.0, 0.0, True,
                          first_cost=_number(hit.get("cost")), first_latency=_number(hit.get("latency")),
                          first_estimated=hit.get("estimated") is True)
            self._record(role, reply, None)
            return reply
        if not s.configured:
            raise NotConfigured("no LLM endpoint configured: set OPENAI_BASE_URL (any OpenAI-compatible "
                                "server, e.g. vLLM, Ollama, llama.cpp) and/or OPENAI_API_KEY, or enter them on "
                                "the Settings page")
        for account in self._accounts():
            guard = getattr(account, "guard", None)
            if guard is not None:
                guard()
        where = f"{role}, model {model!r} at {public_url(s.base_url)}"
        self._recorded_first(where)
        sent, cap, counted = await self._fit(msgs, model, role, max_tokens, where, trim)
        rejected: Reply | None = None
        refits = 0
        attempt = 0
        backoff = object()  # its key on the problem clock
        malformed = False  # the last attempt was the endpoint's failure (not a reply the caller rejected)
        while attempt <= s.max_retries:
            if malformed:  # a rejected reply is asked again at once: it was the model's answer, not a glitch
                waits.clock_blocked(backoff, True)  # the endpoint's failure, not the workflow's time
                try:
                    await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
                finally:
                    waits.clock_blocked(backoff, False)  # a short backoff, as the client's own
            kwargs: dict[str, Any] = {"model": model, "messages": sent, "temperature": temperature,
                                      "max_tokens": cap}
            if json_mode and self._shared.json_ok:
                kwargs["response_format"] = {"type": "json_object"}
            resp, latency, error, cut = await self._request(kwargs)
            for got in cut:  # a body cut off on its way, asked again by the client: generated, and billed
                self._record(role, self._charge(model, got, sent, counted, 0.0, cap),
                             self._redact(f"LLM call failed ({where}): the reply was cut off on its way"))
            if error is not None:  # the client already retried what is worth retrying
                if error.overflow and refits == 0 and self._learn_window(model, error.message):
                    refits += 1  # the server named its window: fit the prompt to it and ask again
                    sent, cap, counted = await self._fit(msgs, model, role, max_tokens, where, trim)
                    continue
                if json_mode and self._shared.json_ok and error.refuses_json:
                    self._shared.json_ok = False  # e.g. a server without JSON mode: the prompt asks for JSON
                    continue
                message = self._redact(f"LLM call failed ({where}): {error.message}")
                self._record(role, self._charge(model, error.got, sent, counted, latency, cap), message)
                kind = ContextOverflow if error.overflow else Refused if error.refused else LLMError
                raise kind(message, transient=error.transient, timed_out=error.timed_out)
            attempt += 1
            text, pt, ct, problem, guessed = _extract(resp, sent, counted, cap)
            # charged even when unusable (garbled, no choices): the endpoint billed it (or, saying nothing, may have)
            paid = Reply(text, model, pt, ct, s.cost(model, pt, ct), latency, False, estimated=guessed)
            if isinstance(problem, _Refusal):  # a well-formed answer that refuses: the prompt's, not a glitch
                message = self._redact(f"LLM call refused ({where}): {problem}")
                self._record(role, paid, message)
                raise Refused(message)
            if problem is not None:
                now = time.monotonic()
                waits.clock_give_span(now - latency, now)  # a garbled transfer: the endpoint's time
                last, malformed = f"malformed reply after {attempt} attempt(s): {problem}", True
                self._record(role, paid, self._redact(f"LLM call failed ({where}): {problem}"))
                continue
            why = accept(text) if accept is not None else None
            if why is None:
                self._cache_put(key, model, {"text": text, "prompt_tokens": pt, "completion_tokens": ct,
                                             "cost": paid.cost, "latency": round(latency, 4),
                                             **({"estimated": True} if guessed else {})})
                self._record(role, paid, None)
                return paid
            rejected, malformed = replace(paid, accepted=False), False
            self._record(role, paid, None)  # a good call the caller could not use: paid, not cached
        if rejected is not None:
            return rejected
        message = self._redact(f"LLM call failed ({where}): {last}")
        raise LLMError(message, transient=True)

    async def _request(self, kwargs: dict) -> tuple[Any, float, _Failure | None, list[_Received]]:
        """One request through the client (which retries connection errors, timeouts, 408/409/429/5xx).
        Returns (response, latency, failure or None, the bodies of attempts cut off before it). The whole call, retries included, is bounded: when it
        runs out the request is cancelled and its connection closed (the server stops working on it). A
        streamed call is bounded by silence instead (no token for ``timeout`` seconds) and by its token cap."""
        client, sem, pool = await self._shared.for_loop()
        tenant = self.tenant
        with pool.waiting():  # a slot others hold is their time, not this problem's (execution.waits)
            await sem.acquire(tenant)
        try:
            with pool.holding():
                return await self._send(client, kwargs)
        finally:
            sem.release(tenant)

    async def _send(self, client: openai.AsyncOpenAI, kwargs: dict) -> tuple[Any, float, _Failure | None,
                                                                        list[_Received]]:
        s = self.settings
        self._check_budget()  # others may have spent while this call waited for a slot
        start = time.perf_counter()
        error: _Failure | None = None
        resp = None
        call: dict[str, Any] = {"key": object(), "state": None, "timeout": s.timeout, "stream": s.stream,
                                "bodies": []}
        got = _Received()  # a streamed reply's chunks so far: what a stream that breaks off still delivered
        token = _ATTEMPTS.set(call)
        try:
            if s.stream:
                resp = await _streamed(client, kwargs, got)
            else:
                async with asyncio.timeout(s.timeout * (s.max_retries + 1) + 8.0 * s.max_retries):
                    resp = await client.chat.completions.create(**kwargs)
        except reply_too_large() as e:  # an endpoint failure, never a (truncated) answer; not retried
            error = _Failure(str(e), False)
        except (openai.APITimeoutError, TimeoutError, httpx.TimeoutException):
            # The endpoint's (a timeout under load is never a wrong answer), unless the problem's own time had run
            # out meanwhile (below). A one-token probe cannot tell a long answer from a batching server's load.
            silent = " of silence" if s.stream else ""
            error = _Failure(f"timed out after {s.timeout:g}s{silent} (after {s.max_retries} retries)", True,
                             timed_out=True)
        except openai.APIStatusError as e:
            detail = _status_detail(e)
            code = (e.body.get("code") if isinstance(e.body, dict) else None) or \
                ((e.body.get("error") or {}).get("code") if isinstance(e.body, dict)
                 and isinstance(e.body.get("error"), dict) else None)
            transient = e.status_code in TRANSIENT_STATUS or e.status_code >= 500
            error = _Failure(f"HTTP {e.status_code}: {detail}", transient,
                             overflow=lc.is_overflow(e.status_code, detail, code),
                             refused=e.status_code == 400 and _refused_status(code, detail),
                             refuses_json="response_format" in kwargs and e.status_code in (400, 422, 500)
                             and re.search(r"response_format|json", detail, re.I) is not None)
        except (openai.APIConnectionError, httpx.TransportError) as e:
            why = str(getattr(e, "__cause__", None) or e)  # a refusal by the endpoint policy is not transient
            error = _Failure(f"cannot connect ({why})", "refused by the endpoint policy" not in why)
        except openai.OpenAIError as e:
            error = _Failure(f"{type(e).__name__}: {e}", False)
        except ValueError as e:  # json.JSONDecodeError from a body that is not JSON: a garbled transfer
            resp = _Malformed(f"body is not JSON: {e}", got if s.stream else _salvage(call.get("response")))
        finally:
            _ATTEMPTS.reset(token)
            # No response at all: the endpoint's time, unless the problem's own time ran out while it was asked
            # (an answer the workflow asked to be that long is its own, however the client's timeout is set).
            waits.clock_pending(call["key"], False,
                                give=error is not None and not (error.timed_out and waits.clock_overdue()))
            waits.clock_blocked(call["key"], False)
        # plain bodies cut off on their way (each retried by the client, or the last one failed): made and billed
        cut = [_Received([b.data.decode("utf-8", "replace")]) for b in call["bodies"]
               if not b.done and not b.refused and b.data]
        if error is not None:
            error.got = got  # tokens that came before the failure (an error event, a hang-up, silence) were made
            if cut and not got.billed and got.usage is None:
                error.got = cut.pop()  # the last attempt's, charged as the call's failure
        return resp, time.perf_counter() - start, error, cut

    async def _window(self, model: str) -> int | None:
        """The model's context window: the server's metadata, else the setting, else what an error said."""
        sh, s = self._shared, self.settings
        stated = await sh.tokenizer.window((await sh.for_loop())[0], model) if s.base_url else None
        return stated or s.context_tokens or sh.learned.get(model)

    def _learn_window(self, model: str, message: str) -> bool:
        n = lc.window_from_error(message)
        if n is None or self._shared.learned.get(model) == n:
            return False
        self._shared.learned[model] = n
        return True

    async def _fit(self, msgs: list[dict], model: str, role: str, max_tokens: int | None,
                   where: str, trim: bool = True) -> tuple[list[dict], int, int | None]:
        """(messages, completion cap, prompt tokens when the server counted them) that fit the context window: the role's cap (or the caller's, when
        smaller), lowered to the room left; a prompt that leaves less than a quarter of the window (at most
        the cap) is trimmed; ContextOverflow when even that cannot make it fit."""
        cap = min(x for x in (max_tokens, self.settings.max_tokens.get(role)) if x)
        sh = self._shared
        known = self.settings.context_tokens or sh.learned.get(model) or sh.tokenizer.windows.get(model)
        rough = lc.estimate(lc.prompt_text(msgs)) + lc.MESSAGE_OVERHEAD * len(msgs) + lc.MARGIN + cap
        if known is None and rough <= lc.SMALLEST_WINDOW:
            return msgs, cap, None  # fits any model we expect to meet: no need to ask the server (saves a round trip)
        window = await self._window(model)
        if window is None:
            return msgs, cap, None
        want = min(cap, max(MIN_COMPLETION, window // 4))
        n = 0
        for _ in range(8):
            client = (await self._shared.for_loop())[0]
            n, _how = await self._shared.tokenizer.count(client, lc.prompt_text(msgs), model)
            n += lc.MESSAGE_OVERHEAD * len(msgs)
            room = window - n - lc.MARGIN
            if room >= want:
                return msgs, min(cap, room), (n if _how == "server" else None)  # for a reply without usage
            shorter = lc.trim(msgs, want - room, n) if trim else None
            if shorter is None:
                break
            msgs = shorter
        raise ContextOverflow(self._redact(f"LLM call not sent ({where}): the prompt needs ~{n} tokens and the "
                                           f"model's context is {window} (with {want} left for the reply)"
                                           + (", even trimmed" if trim else "")))

    def chat_sync(self, *args: Any, **kw: Any) -> Reply:
        """``chat`` for non-async callers (also from inside another running loop): runs on a shared
        background loop."""
        loop = _background_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("chat_sync called from the LLM background loop; await chat() instead")
        return asyncio.run_coroutine_threadsafe(self.chat(*args, **kw), loop).result()

    # -- internals ----------------------------------------------------------------------------------------
    def _charge(self, model: str, got: _Received, sent: list[dict], counted: int | None, latency: float,
                cap: int | None = None) -> Reply:
        """A failed attempt: free when nothing came (a refused connection, an error status), else charged for the
        tokens that came before it failed (its usage, or estimated: ``_billed``)."""
        if not got.billed and got.usage is None:
            return Reply("", model, 0, 0, 0.0, latency, False)
        pt, ct, guessed = _billed(got.usage, sent, counted, got.billed, got.chunks, cap)
        return Reply("", model, pt, ct, self.settings.cost(model, pt, ct), latency, False, estimated=guessed)

    def _check_budget(self) -> None:
        for i, account in enumerate(self._accounts()):
            budget, spent = account.settings.budget_usd, account.usage.cost
            if budget is not None and spent >= budget:
                whose = "for this run" if i == 0 else "of the process that started this run"
                raise BudgetExceeded(f"LLM budget of ${budget:.4f} {whose} is used up (spent ${spent:.4f})")

    def _redact(self, text: str) -> str:
        key = self.settings.api_key
        return text.replace(key, "***") if key and len(key) >= 4 else text

    def _record(self, role: str, reply: Reply, error: str | None) -> None:
        """Log one attempt. A failed one counts as an error; a paid one (even a malformed or rejected reply)
        adds its cost, since the endpoint charged for it. Counted in memory first, then written (``_persist``)."""
        rec = {"role": role, "model": reply.model, "prompt_tokens": reply.prompt_tokens,
               "completion_tokens": reply.completion_tokens, "cost": reply.cost, "latency": reply.latency,
               "cached": reply.cached, "error": error, "estimated": reply.estimated}
        if not reply.cached:
            waits.clock_spend(reply.cost)  # the problem's spend, should it end by a timeout
        with self._shared.lock, _usage_lock:  # (a client put under another counts in another's usage too)
            node: LLM | None = self
            while node is not None:
                u = node.usage
                u.estimated += reply.estimated and not reply.cached
                if error is not None:
                    u.errors += 1
                    u.cost += reply.cost
                else:
                    u.calls += 1
                    u.cached += reply.cached
                    if not reply.cached:
                        u.prompt_tokens += reply.prompt_tokens
                        u.completion_tokens += reply.completion_tokens
                        u.cost += reply.cost
                        u.gen_latency += reply.latency
                u.latency += reply.latency
                node.calls.append(dict(rec))
                node = node._parent
            if self.workspace is not None:
                self._shared.unlogged.append((self.run_id, time.time(), role, reply.model, reply.prompt_tokens,
                                              reply.completion_tokens, reply.cost, reply.latency, int(reply.cached),
                                              error, int(reply.estimated)))
        if self.workspace is not None:
            later = self._shared.persist_later
            if later is not None:
                later()
            else:
                self._persist(reply if error is None and not reply.cached else None)

    def _persist(self, paid: Reply | None = None) -> bool:
        """Write the replies and call-log rows still in memory. While the database is away (an outage) they stay
        in memory, served from there, and go out with the next write that succeeds. Any other storage failure
        (a full disk, a damaged or read-only file) of a paid call is ResultNotStored: the call was made and paid
        for, its result could not be stored - never an endpoint failure."""
        from flowcore.workspace import health

        sh = self._shared
        with sh.lock:
            cache, logs = dict(sh.pending), list(sh.unlogged)
        if not cache and not logs:
            return True
        try:
            with self.workspace.transaction() as conn:  # type: ignore[union-attr]
                for key, (model, data) in cache.items():
                    conn.execute("INSERT OR REPLACE INTO llm_cache(key, model, response_json, created)"
                                 " VALUES (?,?,?,?)", (key, model, json.dumps(data), time.time()))
                for row in logs:
                    conn.execute("INSERT INTO llm_calls(run_id, ts, role, model, prompt_tokens, completion_tokens,"
                                 " cost, latency, cached, error, estimated) VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)
        except Exception as exc:
            kind = health.fault_of(exc)
            if kind is None:
                raise
            if kind == "outage" or paid is None:
                return False  # kept in memory: written with the next write that succeeds
            where = self.workspace.path  # type: ignore[union-attr]
            err = ResultNotStored(f"an LLM call ({paid.model}, {paid.prompt_tokens}+{paid.completion_tokens} tokens, "
                                  f"${paid.cost:.6f}) was made and paid for, but its result could not be stored: "
                                  f"{health.describe(exc, where)}")
            err.fault = kind  # type: ignore[attr-defined]
            raise err from exc
        with sh.lock:
            for key in cache:
                if sh.pending.get(key) == cache[key]:
                    del sh.pending[key]
            del sh.unlogged[:len(logs)]
        return True

    def _recorded_first(self, where: str) -> None:
        """Before a paid call: the call-log rows a database outage left in memory are written first, and while they
        cannot be, no more money is spent (a transient LLMError: the caller waits the outage out as an endpoint's).
        The log is what a run's budget counts after a SIGKILL (History.logged): calls paid meanwhile were recorded
        nowhere that outlives the process, and the resume paid them again. A server's writer thread
        (``persist_later``) writes its own rows, so its calls go on."""
        if self.workspace is None or self._shared.persist_later is not None or not self._shared.unlogged:
            return
        if not self._persist():
            raise LLMError(f"LLM call not made ({where}): the workspace database cannot record what the calls "
                           "before it cost (it is away, locked or refusing writes), and a paid call must be on record first",
                           transient=True)

    def write_pending(self) -> Exception | None:
        """Write the replies and log rows in memory now, for ``persist_later``'s thread. What cannot be written
        stays in memory (served from there) for the next try; the failure is returned, never raised."""
        try:
            self._persist()
        except Exception as exc:  # noqa: BLE001 - the caller logs it
            return exc
        return None

    def flush(self) -> None:
        """Write what an outage left in memory (before a round is stored); storage errors propagate."""
        if self.workspace is not None:
            self._persist()

    @property
    def unwritten(self) -> int:
        """Replies and log rows still waiting for the database."""
        return len(self._shared.pending) + len(self._shared.unlogged)

    def _cache_get(self, key: str) -> dict | None:
        if self.workspace is None or not self.settings.cache:
            return None
        held = self._shared.pending.get(key)
        if held is not None:
            return held[1]
        rows = self.workspace.query("SELECT response_json FROM llm_cache WHERE key = ?", (key,))
        if not rows:
            return None
        try:
            data = json.loads(rows[0]["response_json"])
        except ValueError:
            return None
        return data if isinstance(data, dict) and isinstance(data.get("text"), str) else None

    def _cache_put(self, key: str, model: str, data: dict) -> None:
        """Keep the reply for this key; it is written by the ``_record`` that follows (in one transaction)."""
        if self.workspace is None or not self.settings.cache:
            return
        with self._shared.lock:
            self._shared.pending[key] = (model, data)


def _number(value: object) -> float | None:
    """A cost or latency read back from a cache row: a finite number >= 0, else None (not recorded)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < float("inf") else None


def _normalize(messages: list[dict] | str) -> list[dict]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a prompt string or a non-empty list of {role, content} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
            raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {m!r:.80}")
        out.append(dict(m))
    return out


def _cache_key(model: str, msgs: list[dict], temperature: float, json_mode: bool, max_tokens: int | None,
               salt: str) -> str:
    blob = json.dumps([model, msgs, float(temperature), bool(json_mode), max_tokens, salt], sort_keys=True,
                      ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _estimate_tokens(text: str) -> int:
    """The token count of a text the server did not count: ~4 characters a token (English text with OpenAI's and
    Llama's tokenizers), rounded up (never 0 for a text that is there)."""
    return -(-len(text) // 4)


def _billed(usage: Any, msgs: list[dict], counted: int | None, text: str, chunks: int = 0,
            cap: int | None = None) -> tuple[int, int, bool]:
    """(prompt tokens, completion tokens, estimated) of one answered attempt, usable or not: the counts its usage
    reports, else estimated: the prompt as the server's tokenizer ``counted`` it, else ~4 characters a token of the
    messages; the reply ~4 characters a token of the ``text`` received, and at least a token for each of its
    ``chunks`` (a streamed reply). A count no call can have (``_tokens``), or 0 for text that is there, is no report
    either: a server or proxy that sends zeros (or no usage at all when streaming) would otherwise make calls free;
    nor is a count below the ``chunks``. ``text`` is all the reply's text, its reasoning and tool calls too (_hidden).
    An estimate by characters is never more than ``cap``, the ``max_tokens`` the request sent: no server writes more
    (4 characters a token is too many for a small model's short tokens: SmolLM2's 64-token replies read as 81); the
    chunks that came are charged even past it."""
    prompt = "\n".join(str(m.get("content", "")) for m in msgs)
    pt, ct = _tokens(getattr(usage, "prompt_tokens", None)), _tokens(getattr(usage, "completion_tokens", None))
    pt = None if pt == 0 and prompt else pt
    # fewer tokens than the chunks of text that came is no count of this reply either: a usage chunk sent before the
    # text (then none at the end) billed 60 chunks as 1 token
    ct = None if ct is not None and ((ct == 0 and text) or ct < chunks) else ct
    estimated = pt is None or ct is None
    if pt is None:
        pt = counted if counted is not None else _estimate_tokens(prompt)
    if ct is None:
        guess = _estimate_tokens(text)
        # the cap trims the 4-characters-a-token guess, never the chunks that came (a server streaming past
        # max_tokens made those tokens: 60 chunks under a cap of 10 were charged 10)
        ct = max(chunks, min(guess, cap) if cap else guess)
    return pt, ct, estimated


@dataclass
class _Received:
    """What an attempt delivered before it failed: the text (a streamed reply's chunks, or what a body that is no
    completion holds) and the usage it reported, if any. The tokens in it were made, and are charged."""

    parts: list[str] = field(default_factory=list)
    usage: Any = None
    hidden: list[str] = field(default_factory=list)  # text outside ``content`` (_hidden): billed, not the answer
    chunks: int = 0  # streamed chunks that brought text (content or hidden): a token each at least

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def billed(self) -> str:
        """All the text the model made: the answer and what came outside it."""
        return "".join(self.parts + self.hidden)


@dataclass
class _Failure:
    message: str
    transient: bool
    overflow: bool = False
    refuses_json: bool = False
    refused: bool = False
    timed_out: bool = False
    got: _Received = field(default_factory=_Received)


async def _streamed(client: openai.AsyncOpenAI, kwargs: dict, got: _Received) -> Any:
    """A streamed completion gathered into the shape of a plain one (``got`` holds it as it comes, so that a
    stream that breaks off is charged for what it delivered). The client's timeout is then a read timeout: it
    fires on ``timeout`` seconds of silence, not on a long answer that keeps coming."""
    from types import SimpleNamespace

    stream = await client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    finish, seen = None, False
    async with stream:
        async for chunk in stream:
            got.usage = getattr(chunk, "usage", None) or got.usage
            for choice in getattr(chunk, "choices", None) or []:
                seen = True
                delta = getattr(choice, "delta", None)
                piece = getattr(delta, "content", None)
                if isinstance(piece, str) and piece:
                    got.parts.append(piece)
                hidden = _hidden(delta)
                got.hidden += hidden
                got.chunks += bool(isinstance(piece, str) and piece or hidden)
                finish = getattr(choice, "finish_reason", None) or finish
    # no usage (a server may leave it out even when asked): _extract estimates it, at least a token a chunk
    chunks = got.chunks
    if not seen:
        return SimpleNamespace(choices=[], usage=got.usage, chunks=chunks)
    # the text outside content rides along as reasoning_content, for _extract to charge (_hidden)
    message = SimpleNamespace(content=got.text, refusal=None, reasoning_content="".join(got.hidden) or None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason=finish)], usage=got.usage,
                           chunks=chunks)


@dataclass
class _Malformed:
    """A 200 whose body could not be read as a completion, and what could still be read of it."""

    problem: str
    got: _Received = field(default_factory=_Received)


def _salvage(response: Any) -> _Received:
    """What a plain (not streamed) body the client could not parse still says: the usage and text of a body that is
    JSON once its bytes that are not UTF-8 are replaced, else the whole body as the text received (an upper bound:
    a cut-off completion's text is in it)."""
    from types import SimpleNamespace

    try:
        raw = response.content.decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - no response, or its body was never read: nothing to salvage
        return _Received()
    try:
        doc = json.loads(raw)
    except ValueError:
        return _Received([raw] if raw else [])
    if not isinstance(doc, dict):
        return _Received([raw] if raw else [])
    usage = doc.get("usage")
    usage = SimpleNamespace(**{k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}) \
        if isinstance(usage, dict) else None
    choices = doc.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = first.get("message") if isinstance(first.get("message"), dict) else {}
    text = message.get("content")
    return _Received([text] if isinstance(text, str) and text else [], usage, _hidden(message))


class _Refusal(str):
    """Why a well-formed completion has no answer: the model refused, or the provider's filter did."""


_FILTER_CODES = ("content_filter", "content_policy_violation", "invalid_prompt")


def _refused_status(code: Any, detail: str) -> bool:
    """An HTTP 400 that refuses the prompt's content (Azure OpenAI's content filter, OpenAI's policy)."""
    return str(code or "") in _FILTER_CODES or re.search(
        r"content (management )?policy|content_filter|usage polic|flagged as potentially", detail, re.I) is not None


def _extract(resp: Any, msgs: list[dict], counted: int | None = None,
             cap: int | None = None) -> tuple[str, int, int, str | None, bool]:
    """(text, prompt_tokens, completion_tokens, error, estimated). The tokens are those of the attempt whether its
    reply is usable or not (``_billed``): an unusable one was billed too."""
    if isinstance(resp, _Malformed):
        pt, ct, guessed = _billed(resp.got.usage, msgs, counted, resp.got.billed, resp.got.chunks, cap)
        return "", pt, ct, resp.problem, guessed
    usage, chunks = getattr(resp, "usage", None), getattr(resp, "chunks", 0)
    message = None

    def failed(problem: str, received: str = "") -> tuple[str, int, int, str | None, bool]:
        pt, ct, guessed = _billed(usage, msgs, counted, received + "".join(_hidden(message)), chunks, cap)
        return "", pt, ct, problem, guessed

    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list) or not choices:
        return failed("malformed reply: no choices")
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None)
    reason = getattr(choices[0], "finish_reason", None)
    refusal = getattr(message, "refusal", None)
    if (refusal or reason == "content_filter") and not text:
        why = f"the model refused: {str(refusal)[:300]}" if refusal else "the provider's content filter stopped it"
        return failed(_Refusal(why), str(refusal or ""))
    if message is None:
        return failed("malformed reply: a choice without a message")
    if text is None:  # a well-formed reply that says nothing (a reasoning model past its token cap): the model's
        text = ""
    if not isinstance(text, str):
        return failed(f"malformed reply: message content is {type(text).__name__} (finish_reason={reason})",
                      str(text))
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate (a JSON escape) cannot be stored
    pt, ct, guessed = _billed(usage, msgs, counted, text + "".join(_hidden(message)), chunks, cap)
    return text, pt, ct, None, guessed


MAX_TOKENS_CLAIM = 2 ** 31  # more tokens than any model reads or writes in one call (and past it SQLite cannot store)


def _tokens(n: Any) -> int | None:
    """A token count a reply reports, or None when it is none a call can have (then estimated as when missing): a
    negative count would make the call's cost negative and move the run's budget away with every call, and an
    absurd one is no bill either (past SQLite's integers it made the call log unwritable)."""
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_TOKENS_CLAIM else None


def _status_detail(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:300]
    return str(e.message)[:300]


def list_models(settings: LLMSettings) -> list[str]:
    """Model ids the endpoint offers (a connection test for the Settings page). Raises LLMError."""
    if not settings.configured:
        raise NotConfigured("no LLM endpoint configured: set OPENAI_BASE_URL and/or OPENAI_API_KEY")
    hooks = reply_cap_hooks(settings.max_reply_bytes, sync=True)
    policy = egress.from_settings(settings.egress)
    http = egress.http_client(policy, _ssl_context(), sync=True, event_hooks=hooks) if policy.active else \
        openai.DefaultHttpxClient(event_hooks=hooks)
    client = openai.OpenAI(base_url=settings.base_url or OPENAI_URL, api_key=settings.api_key or "not-needed",
                           timeout=min(settings.timeout, 15.0), max_retries=0, http_client=http)
    try:
        return sorted(m.id for m in client.models.list())
    except (openai.OpenAIError, ValueError) as e:
        msg = str(e.__cause__ or e) if isinstance(e, openai.APIConnectionError) else str(e)
        if settings.api_key:
            msg = msg.replace(settings.api_key, "***")
        raise LLMError(f"cannot list models at {public_url(settings.base_url)}: {msg}") from None
    finally:
        client.close()
