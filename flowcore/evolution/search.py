"""The guided search: the paper's loop (DESIGN §5) plus what measuring it on a simulated executor showed it
needs (issue 31, ``benchmarks/search_efficacy.py``). ``search = "paper"`` keeps the loop exactly as §5 writes it.

What "guided" adds, each for a measured reason:

- **Diversity.** Each of the K candidates draws its own parents (with §5's formula over the top-k rounds) and
  uses an operator no other candidate of the round uses, so a round is not four variants of one edit of one
  parent.
- **Experience in the judge.** The rule judge's *rationale* criterion scores an edit by what edits of the same
  kind did in this run's history buffer (the mean validation change child − parent, with a bonus for kinds
  tried rarely, so untried kinds are explored first); parallel samples of one generator are not penalised as
  duplicates (each call samples anew, which is what self-consistency needs).
- **Confidence-aware acceptance.** A round that would change what the run believes (its validation score beats
  the best so far, or its lower confidence bound beats the result's) is measured again with fresh samples and
  stored with the pooled score, while it still would, up to ``remeasure`` times; the run's result is the round
  with the highest lower confidence bound, not the luckiest single score. Both shrink the winner's curse.

Nothing here changes what an operator may produce: every candidate still comes from the safety-constrained
operators (macro-operators included) and passes the checker.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from flowcore.evolution import ops
from flowcore.evolution.history import sample_from_pool

SEARCHES = ("guided", "paper")


def edit_kind(operator: str | None, detail: str | None) -> str:
    """What kind of edit a round made: the operator, refined by its variant where it has several
    ('insert:review_revise', 'subgraph:expand', 'crossover:graft_branch', 'ensemble:new', 'ensemble:grow')."""
    op = operator or "?"
    head = (detail or "").split(":", 1)[0].strip()
    if op in ("insert", "subgraph", "crossover") and head and " " not in head:
        return f"{op}:{head}"
    if op == "ensemble":  # a first vote and more samples for an existing one pay off very differently
        return "ensemble:grow" if " grown from " in (detail or "") else "ensemble:new"
    return op


def kind_record(rows: Iterable[dict]) -> dict[str, list[float]]:
    """Validation changes (child − its first parent) per kind of edit, over the measured rounds; a failed round
    counts as a loss of 0.1 (10 points) against its kind."""
    rows = list(rows)
    by_round = {r["round"]: r for r in rows}
    out: dict[str, list[float]] = {}
    for r in rows:
        parents = r.get("parents") or []
        if r["round"] == 0 or not r.get("operator") or not parents:
            continue
        p = by_round.get(parents[0])
        kind = edit_kind(r["operator"], r.get("detail"))
        if r.get("status") == "failed":
            out.setdefault(kind, []).append(-0.1)
        elif p and p.get("score") is not None and r.get("score") is not None:
            out.setdefault(kind, []).append(r["score"] - p["score"])
    return out


def rationale(kind: str, record: dict[str, list[float]]) -> float:
    """0-10: 5 + 50 × the kind's mean change (10 points of validation score = 5 judge points) + an exploration
    bonus of 3/√(1+tries), so an untried kind scores 8 and a kind that hurt falls below 5."""
    deltas = record.get(kind) or []
    mean = sum(deltas) / len(deltas) if deltas else 0.0
    return round(max(0.0, min(10.0, 5 + 50 * mean + 3 / math.sqrt(1 + len(deltas)))), 2)


def candidate_plan(pool: list[dict], rng: random.Random, k: int, names: list[str], *, alpha: float,
                   lam: float) -> list[tuple[list[dict], list[str]]]:
    """For each of ``k`` candidates: its own two parents (§5's formula over the pool) and the operators to try,
    in order; candidate i tries a different first operator than the others while there are operators left."""
    order = list(names)
    rng.shuffle(order)
    plan = []
    for i in range(k):
        drawn, _, _ = sample_from_pool(pool, rng, n=2, alpha=alpha, lam=lam)
        first = order[i % len(order)]
        rest = [n for n in order if n != first]
        rng.shuffle(rest)
        plan.append((drawn, [first, *rest]))
    return plan


def usable_operators(names: list[str], task: str, distinct_parents: bool) -> list[str]:
    """The configured operators that can apply here (crossover needs two different parents)."""
    out = [n for n in ops.operators_for(task, names) if n != "crossover" or distinct_parents]
    return out or ["insert"]


def close_call(score: float, ci_low: float | None, best: float | None, result_low: float | None) -> bool:
    """Is this round worth measuring again? When it would change what the run believes: its score beats the
    best score so far (it would lead the parent pool), or its lower confidence bound beats that of the run's
    result (it would become the result). The first measured round always is."""
    if best is None:
        return True
    return score > best or (ci_low is not None and result_low is not None and ci_low > result_low)


def chosen(rows: list[dict], search: str = "guided") -> dict | None:
    """The round a run offers as its result: for a guided run the measured round with the highest lower
    confidence bound (then the higher score, then the earlier round); for a paper run the best score."""
    scored = [r for r in rows if r.get("status") == "ok" and r.get("score") is not None]
    if not scored:
        return None
    if search == "paper":
        return min(scored, key=lambda r: (-r["score"], r["round"]))
    return min(scored, key=lambda r: (-(r.get("ci_low") if r.get("ci_low") is not None else r["score"]),
                                      -r["score"], r["round"]))
