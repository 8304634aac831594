"""Flow's own settings: K (candidates, repair proposals and refinement updates, requested concurrently) and
its ceiling, the refinement period, and the log budget of repair/refinement prompts.

Read from the environment (``MERMAIDFLOW_AOV_K``, ``_K_MAX``, ``_REFINE_EVERY``, ``_MAX_REFINEMENTS``,
``_CONTEXT_CHARS``), overlaid by what the AOV page saved in the workspace (the ``settings`` table, row
``aov``; nothing secret is in here). A bad value is an error naming the variable or field.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from flowcore.aov.context import DEFAULT_BUDGET

K_CEILING = 50  # what K_max itself may be set to; the authors use K up to 10
_ENV = {"k": "MERMAIDFLOW_AOV_K", "k_max": "MERMAIDFLOW_AOV_K_MAX", "refine_every": "MERMAIDFLOW_AOV_REFINE_EVERY",
        "max_refinements": "MERMAIDFLOW_AOV_MAX_REFINEMENTS", "context_chars": "MERMAIDFLOW_AOV_CONTEXT_CHARS"}
_DDL = "CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value TEXT NOT NULL, updated REAL NOT NULL);"
ROW = "aov"


@dataclass(frozen=True)
class FlowSettings:
    k: int = 3  # default K
    k_max: int = 10  # the largest K a user may ask for
    refine_every: int = 3  # periodic refinement after every M completed subtasks (0 = off)
    max_refinements: int = 5
    context_chars: int = DEFAULT_BUDGET  # the log's budget in repair and refinement prompts

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.k_max <= K_CEILING:
            problems.append(f"k_max must be between 1 and {K_CEILING} (got {self.k_max})")
        if not 1 <= self.k <= max(self.k_max, 1):
            problems.append(f"k must be between 1 and k_max={self.k_max} (got {self.k})")
        if self.refine_every < 0 or self.max_refinements < 0:
            problems.append("refine_every and max_refinements must be >= 0")
        if self.context_chars < 1000:
            problems.append(f"context_chars must be at least 1000 (got {self.context_chars})")
        if problems:
            raise ValueError("Flow settings: " + "; ".join(problems))

    def check_k(self, k: int, what: str = "K") -> int:
        if not 1 <= k <= self.k_max:
            raise ValueError(f"{what} must be between 1 and {self.k_max} (the K maximum setting), not {k}")
        return k

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base: FlowSettings | None = None) -> FlowSettings:
        values = (base or cls()).to_dict()
        for f in fields(cls):
            if f.name in d and d[f.name] is not None:
                v = d[f.name]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"Flow settings: {f.name} must be a whole number (got {v!r})")
                values[f.name] = v
        return cls(**values)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FlowSettings:
        env = os.environ if env is None else env
        values: dict[str, int] = {}
        for name, var in _ENV.items():
            raw = (env.get(var) or "").strip()
            if raw:
                try:
                    values[name] = int(raw)
                except ValueError:
                    raise ValueError(f"environment variable {var}={raw!r} is not a whole number") from None
        try:
            return cls.from_dict(values)
        except ValueError as e:
            raise ValueError(f"{e} (from the MERMAIDFLOW_AOV_* environment variables)") from None


def load(ws: Any, base: FlowSettings | None = None) -> FlowSettings:
    """The environment's settings overlaid by those saved in the workspace (if any)."""
    base = base or FlowSettings.from_env()
    ws.ensure_schema("settings_store", _DDL)
    rows = ws.query("SELECT value FROM settings WHERE name=?", (ROW,))
    if not rows:
        return base
    try:
        return FlowSettings.from_dict(json.loads(rows[0]["value"]), base)
    except (ValueError, TypeError) as e:
        raise ValueError(f"the saved Flow settings in the workspace are unreadable ({e}); save them again") \
            from None


def save(ws: Any, s: FlowSettings) -> None:
    ws.ensure_schema("settings_store", _DDL)
    with ws.transaction() as conn:
        conn.execute("INSERT INTO settings(name, value, updated) VALUES (?,?,?) ON CONFLICT(name) DO UPDATE "
                     "SET value=excluded.value, updated=excluded.updated",
                     (ROW, json.dumps(s.to_dict(), sort_keys=True), time.time()))
