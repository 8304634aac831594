"""Counted nouns as people write them: '1 repeat', '3 repeats', never 'repeat(s)' or '1 rounds'."""

from __future__ import annotations

__all__ = ["count", "operator_name", "plural"]


def plural(noun: str) -> str:
    """English plural of a regular noun (the last word of ``noun``): step/steps, query/queries, match/matches."""
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "es" if noun.endswith(("s", "sh", "ch", "x")) else noun + "s"


def count(n: int, noun: str, many: str | None = None) -> str:
    """'1 step' / '2 steps' / '1,204 rows': the number with thousands separators, the noun singular only for 1
    (``many``: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else many or plural(noun)}"


def operator_name(op: str | None) -> str:
    """An operator as the workflow text writes it ('CustomOp' -> 'Custom'), not its class name."""
    return "" if not op else op[:-2] if op.endswith("Op") and len(op) > 2 else op
