"""Saved, non-secret LLM settings (endpoint, models, prices, limits) in the workspace database.

The API key is never stored: fields that look like secrets are dropped, credentials in the endpoint URL are
removed, and a save whose JSON would contain the live key is refused outright.

Two people may edit the settings at once. The stored settings carry a version, and each field (``timeout``,
``models.judge``, ``prices.gpt-4o``...) the version that last changed it. A save names the version and the values it
started from (``base``): fields changed since by someone else are kept, the saver's own changes are applied on top,
and only when both changed the same field is the save refused (``SettingsConflict``, naming each field with both
values), never silently overwritten.
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
SAVED_BY = "llm_saved_by"  # who saved them last (an address in a team deployment, "local" on loopback)
# (token counts such as max_tokens and context_tokens are settings, not secrets: "tokens" at the end is let through)
_SECRET = re.compile(
    r"(api[_-]?key|^key$|[_-]key$|secret|password|passwd|token(?!s$)|auth|credential|^sig$|signature)", re.I)


class SettingsError(ValueError):
    pass


class SettingsConflict(SettingsError):
    """The same field was changed by someone else since the save's base version. ``fields``: (field, yours,
    theirs) for each; ``version``: the stored version now (save again with it to keep yours); ``current``: the
    stored settings now (reload them to keep theirs)."""

    def __init__(self, fields: list[tuple[str, Any, Any]], version: int, current: dict, since: int) -> None:
        self.fields, self.version, self.current = fields, version, current
        said = "; ".join(f"{f}: yours {_show(mine)}, theirs {_show(theirs)}" for f, mine, theirs in fields[:6])
        super().__init__(f"not saved: since you opened these settings (version {since}), someone saved version "
                         f"{version}, changing what you changed too ({said})")


def _show(v: Any) -> str:
    return "(not set)" if v is _MISSING else json.dumps(v)


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("settings_store", _DDL)
    if "settings_store-versions" not in ws._schemas:
        ws.add_columns("settings", {"version": "INTEGER NOT NULL DEFAULT 0", "fields_json": "TEXT"})
        ws._schemas.add("settings_store-versions")


_MISSING: Any = type("Missing", (), {"__repr__": lambda self: "(not set)"})()


def flatten(d: dict) -> dict[str, Any]:
    """Fields one level deep: ``{"models": {"judge": "m"}}`` -> ``{"models.judge": "m"}`` (what two people may
    change independently)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update({f"{k}.{sub}": x for sub, x in v.items()})
        else:
            out[k] = v
    return out


def unflatten(flat: dict[str, Any], like: dict) -> dict:
    out: dict[str, Any] = {}
    for k, v in flat.items():
        head, dot, sub = k.partition(".")
        if dot and (isinstance(like.get(head), dict) or head in out and isinstance(out[head], dict)
                    or head not in like):
            out.setdefault(head, {})[sub] = v
        else:
            out[k] = v
    return out


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


def save_llm_settings(ws: Workspace, public: dict, *, secret: str | None = None, base: dict | None = None,
                      version: int | None = None, prefer: str | None = None, saved_by: str | None = None) -> dict:
    """Store the public part of the LLM settings, and who saved them (``saved_by``); returns what was stored.

    ``secret`` is the live API key, if any: the save is refused if it would appear in what is written.
    ``version`` and ``base``: the stored version and the values the editor started from (``load_versioned``).
    With them, fields someone else changed since are kept and only this save's own changes are applied; the same
    field changed by both is a SettingsConflict (nothing written), unless ``prefer`` says whose value such a field
    takes ("mine" or "theirs": the one-click merges of the Settings page). Without them the save writes ``public``
    as it is (the command line, a script)."""
    clean = public_only(public)
    data = json.dumps(clean, sort_keys=True)
    if secret and secret.strip() and secret.strip() in data:
        raise SettingsError("refusing to save: the API key appears in the settings (keys are never stored)")
    _schema(ws)
    mine_flat = flatten(clean)
    with ws.transaction() as conn:
        row = conn.execute("SELECT value, version, fields_json FROM settings WHERE name=?", (LLM_SETTINGS,)).fetchone()
        now_version = int(row["version"] or 0) if row is not None else 0
        current = _decode(row["value"], ws) if row is not None else {}
        field_versions: dict[str, int] = json.loads(row["fields_json"] or "{}") if row is not None else {}
        cur_flat = flatten(current)
        if base is not None:  # what this save changed: its own edits, not the values it was shown
            base_flat = flatten(public_only(base))
            changed = {f for f in set(mine_flat) | set(base_flat)
                       if mine_flat.get(f, _MISSING) != base_flat.get(f, _MISSING)}
        else:
            changed = {f for f in set(mine_flat) | set(cur_flat)
                       if mine_flat.get(f, _MISSING) != cur_flat.get(f, _MISSING)}
        if version is not None and base is not None and version != now_version:
            theirs = {f for f in set(cur_flat) | set(field_versions) if field_versions.get(f, 0) > version}
            # a field both changed is refused even when both chose the same value: the change is each one's own
            # (two increments of a number that meet at the same value are two updates, not one)
            clash = sorted(changed & theirs)
            if prefer == "theirs":
                changed -= theirs
            elif prefer == "mine":
                theirs -= changed
            elif clash:
                raise SettingsConflict([(f, mine_flat.get(f, _MISSING), cur_flat.get(f, _MISSING)) for f in clash],
                                       now_version, current, version)
            merged = dict(mine_flat)
            for f in theirs - changed:  # their change stands; a field they removed stays removed
                if f in cur_flat:
                    merged[f] = cur_flat[f]
                else:
                    merged.pop(f, None)
            clean = unflatten(merged, clean)
            mine_flat = flatten(clean)
        new_version = now_version + 1
        for f in changed:
            if mine_flat.get(f, _MISSING) != cur_flat.get(f, _MISSING):
                field_versions[f] = new_version
        conn.execute("INSERT INTO settings(name, value, updated, version, fields_json) VALUES (?,?,?,?,?) "
                     "ON CONFLICT(name) DO UPDATE SET value=excluded.value, updated=excluded.updated, "
                     "version=excluded.version, fields_json=excluded.fields_json",
                     (LLM_SETTINGS, json.dumps(clean, sort_keys=True), time.time(), new_version,
                      json.dumps(field_versions, sort_keys=True)))
        conn.execute("INSERT INTO settings(name, value, updated) VALUES (?,?,?) ON CONFLICT(name) DO UPDATE SET "
                     "value=excluded.value, updated=excluded.updated", (SAVED_BY, json.dumps(saved_by), time.time()))
    return clean


def llm_saved_by(ws: Workspace) -> str | None:
    """Who saved the LLM settings last (None: nobody named, e.g. settings saved by an older version)."""
    _schema(ws)
    rows = ws.query("SELECT value FROM settings WHERE name=?", (SAVED_BY,))
    try:
        by = json.loads(rows[0]["value"]) if rows else None
    except ValueError:
        return None
    return by if isinstance(by, str) else None


def _decode(value: str, ws: Workspace) -> dict:
    try:
        return public_only(json.loads(value))
    except (ValueError, SettingsError) as e:
        raise SettingsError(f"the saved LLM settings in {ws.path} are unreadable ({e}); save them again") \
            from None


def load_versioned(ws: Workspace) -> tuple[dict | None, int]:
    """(the saved public LLM settings or None, their version: 0 when nothing was ever saved). An editor keeps the
    version and hands it back to ``save_llm_settings`` with the values it started from."""
    _schema(ws)
    rows = ws.query("SELECT value, version FROM settings WHERE name=?", (LLM_SETTINGS,))
    if not rows:
        return None, 0
    return _decode(rows[0]["value"], ws) or None, int(rows[0]["version"] or 0)


def load_llm_settings(ws: Workspace) -> dict | None:
    """The saved public LLM settings, or None when nothing was saved (secret-looking fields are dropped)."""
    return load_versioned(ws)[0]


def clear_llm_settings(ws: Workspace, saved_by: str | None = None) -> None:
    save_llm_settings(ws, {}, saved_by=saved_by)  # a new version without any field: an editor still holding an older one is told


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
