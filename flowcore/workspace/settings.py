"""Saved, non-secret LLM settings (endpoint, models, prices, limits) in the workspace database.

The API key is never stored: fields that look like secrets are dropped, credentials in the endpoint URL are
removed, and a save whose JSON would contain the live key is refused outright.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from flowcore.workspace.store import Workspace

_DDL = """
CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value TEXT NOT NULL, updated REAL NOT NULL);
"""
LLM_SETTINGS = "llm"
SAVED_BY = "llm_saved_by"  # who saved them (an address in a team deployment, "local" on loopback)
# (token counts such as max_tokens and context_tokens are settings, not secrets: "tokens" at the end is let through)
_SECRET = re.compile(
    r"(api[_-]?key|^key$|[_-]key$|secret|password|passwd|token(?!s$)|auth|credential|^sig$|signature)", re.I)


class SettingsError(ValueError):
    pass


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("settings_store", _DDL)


def scrub_url(url: str | None) -> str | None:
    """The URL without user:password and without query parameters that look like secrets."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, v) for k, v in pairs if not _SECRET.search(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def public_only(d: dict) -> dict:
    """A copy of ``d`` without any top-level field that looks like a secret, and a scrubbed base_url."""
    if not isinstance(d, dict):
        raise SettingsError(f"settings must be a mapping, got {type(d).__name__}")
    out = {k: v for k, v in d.items() if not _SECRET.search(str(k))}
    if "base_url" in out:
        out["base_url"] = scrub_url(out["base_url"])
    return out


def save_llm_settings(ws: Workspace, public: dict, *, secret: str | None = None, saved_by: str | None = None) -> dict:
    """Store the public part of the LLM settings, and who saved them; returns what was stored.

    ``secret`` is the live API key, if any: the save is refused if it would appear in what is written."""
    clean = public_only(public)
    data = json.dumps(clean, sort_keys=True)
    if secret and secret.strip() and secret.strip() in data:
        raise SettingsError("refusing to save: the API key appears in the settings (keys are never stored)")
    _schema(ws)
    with ws.transaction() as conn:
        conn.execute("INSERT INTO settings(name, value, updated) VALUES (?,?,?) "
                     "ON CONFLICT(name) DO UPDATE SET value=excluded.value, updated=excluded.updated",
                     (LLM_SETTINGS, data, time.time()))
        conn.execute("INSERT INTO settings(name, value, updated) VALUES (?,?,?) "
                     "ON CONFLICT(name) DO UPDATE SET value=excluded.value, updated=excluded.updated",
                     (SAVED_BY, json.dumps(saved_by), time.time()))
    return clean


def llm_saved_by(ws: Workspace) -> str | None:
    """Who saved the LLM settings (None: nobody named, e.g. settings saved by an older version)."""
    _schema(ws)
    rows = ws.query("SELECT value FROM settings WHERE name=?", (SAVED_BY,))
    try:
        by = json.loads(rows[0]["value"]) if rows else None
    except ValueError:
        return None
    return by if isinstance(by, str) else None


def load_llm_settings(ws: Workspace) -> dict | None:
    """The saved public LLM settings, or None when nothing was saved (secret-looking fields are dropped)."""
    _schema(ws)
    rows = ws.query("SELECT value FROM settings WHERE name=?", (LLM_SETTINGS,))
    if not rows:
        return None
    try:
        return public_only(json.loads(rows[0]["value"]))
    except (ValueError, SettingsError) as e:
        raise SettingsError(f"the saved LLM settings in {ws.path} are unreadable ({e}); save them again") \
            from None


def clear_llm_settings(ws: Workspace) -> None:
    _schema(ws)
    with ws.transaction() as conn:
        conn.execute("DELETE FROM settings WHERE name IN (?, ?)", (LLM_SETTINGS, SAVED_BY))


def prices_from_rows(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """The price table as edited in a grid (rows of model/input/output; blank rows skipped) -> prices."""
    prices: dict[str, tuple[float, float]] = {}
    for n, row in enumerate(rows, start=1):
        model = str(row.get("model") or "").strip()
        cells = [row.get("input"), row.get("output")]
        if not model or model.lower() == "nan":
            if any(c not in (None, "") and c == c for c in cells):  # c == c is False for NaN
                raise SettingsError(f"price table row {n}: a price without a model name")
            continue
        try:
            pin, pout = (float(c) for c in cells)
        except (TypeError, ValueError):
            raise SettingsError(f"price table row {n} ({model}): input and output must be numbers "
                                "(USD per 1M tokens)") from None
        if pin != pin or pout != pout:
            raise SettingsError(f"price table row {n} ({model}): needs both an input and an output price")
        if pin < 0 or pout < 0:
            raise SettingsError(f"price table row {n} ({model}): prices cannot be negative")
        if model in prices:
            raise SettingsError(f"price table row {n}: model {model!r} is listed twice")
        prices[model] = (pin, pout)
    return prices


def effective_llm_settings(ws: Workspace, typed_key: str | None = None, *,
                           saved_ok: Callable[[str | None], bool] | None = None) -> tuple[Any, list[str]]:
    """The settings every page uses, and what was ignored: the environment, overlaid by the settings saved in the
    workspace, overlaid by the key typed this session (which lives in the session only). A bad environment
    variable or unreadable saved settings are reported in the list, never raised."""
    from flowcore.llm.client import LLMSettings

    problems: list[str] = []
    try:
        env = LLMSettings.from_env()
    except ValueError as e:
        problems.append(f"Ignoring the LLM environment settings: {e}")
        env = LLMSettings()
    merged = env.to_public_dict()
    try:
        saved = load_llm_settings(ws) or {}
    except SettingsError as e:
        problems.append(str(e))
        saved = {}
    if saved and saved_ok is not None and not saved_ok(by := llm_saved_by(ws)):
        problems.append(f"Ignoring the LLM settings saved in the workspace by {by or 'someone unnamed'}: in a team "
                        "deployment only an admin's (MERMAIDFLOW_ADMINS) are used; an admin can save them again.")
        saved = {}
    merged.update({k: v for k, v in saved.items() if v not in (None, "") or k == "budget_usd"})
    key = typed_key or env.api_key
    try:
        return LLMSettings.from_public_dict(merged, api_key=key), problems
    except ValueError as e:
        problems.append(f"Ignoring the saved LLM settings: {e}")
        return LLMSettings.from_public_dict(env.to_public_dict(), api_key=key), problems
