"""Counted nouns as people write them: '1 repeat', '3 repeats', never 'repeat(s)' or '1 rounds'."""

from __future__ import annotations

__all__ = ["EDIT_HELP", "count", "edit_detail", "edit_name", "operator_name", "plural"]


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


# The evolution's edits as a stakeholder reads them; the internal name stays in each column's tooltip (EDIT_HELP).
EDIT_WORDS = {
    "seed": "seed", "substitute": "swap an operator", "insert": "insert a step", "rewire": "rewire an input",
    "delete": "delete a step", "subgraph": "reshape a region", "prompt": "rewrite a prompt",
    "ensemble": "add a vote", "test_retry": "test and retry", "review_revise": "review and revise",
    "crossover": "combine two parents",
}
# The variant an operator's detail starts with ('review_revise: Review R1 + Revise V1 on C1 -> RETURN').
VARIANT_WORDS = {
    "review_revise": "review and revise", "refine": "refine step", "format": "format step", "test": "test step",
    "new_ensemble": "new vote", "ensemble_branch": "one more voter", "expand": "one step into a vote",
    "chain": "plan, then solve", "collapse": "a vote back to one step", "graft_branch": "graft a branch",
    "graft_ensemble": "vote over both", "swap": "swap a region", "new": "new vote", "grow": "more voters",
}
EDIT_HELP = "The edit that made the round. Internal names: " + ", ".join(
    f"{words} = {name}" for name, words in EDIT_WORDS.items() if name != "seed")


def edit_name(op: str | None) -> str:
    """An operator or edit kind in words: 'review_revise' -> 'review and revise', 'insert:review_revise' ->
    'insert a step (review and revise)'; an unknown name is shown as it is, '—' for none."""
    if not op:
        return "—"
    head, _, variant = op.partition(":")
    words = EDIT_WORDS.get(head, head)
    return f"{words} ({VARIANT_WORDS.get(variant, variant)})" if variant else words


def edit_detail(detail: str | None) -> str:
    """An operator's detail in words: its leading variant name ('ensemble_branch: new Custom C6 into E1')
    becomes words ('one more voter: new Custom C6 into E1') and arrows read as arrows."""
    text = detail or ""
    head, sep, rest = text.partition(": ")
    if sep and (head in VARIANT_WORDS or head in EDIT_WORDS):
        text = f"{VARIANT_WORDS.get(head) or EDIT_WORDS[head]}: {rest}"
    return text.replace(" -> ", " → ")
