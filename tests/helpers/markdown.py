"""Reading back what a page printed as markdown, as a reader would see it."""

from __future__ import annotations

import re


def cells(line: str) -> list[str]:
    """One markdown table row's cells, split at the unescaped pipes only, as printed (escapes kept)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def read_table(text: str) -> list[dict[str, str]]:
    """A markdown table (flowcore.mermaid.safe.table) read back: its rows as dicts of what a reader sees in each
    cell (escapes undone)."""
    rows = [[re.sub(r"\\(.)", r"\1", c) for c in cells(line)] for line in text.splitlines()]
    return [dict(zip(rows[0], row, strict=True)) for row in rows[2:]]
