"""How an evolution run reads on the Evolve page (no Streamlit here): one unambiguous progress phrase, and
candidate rows that say why a candidate the optimizer could not produce is missing."""

from __future__ import annotations

import re

from flowcore.evaluation.results import estimate_note, money
from flowcore.evolution.judge import CRITERIA
from flowcore.evolution.outcome import outcome_of
from flowcore.ui.words import edit_detail, edit_name

__all__ = ["candidate_rows", "progress_phrase"]


def progress_phrase(rounds: int, data: dict | None, stored: int, message: str = "") -> str:
    """E.g. 'Round 2 of 3: evaluating the chosen candidate, problem 1 of 5 · 1 of 3 rounds done'.

    ``rounds``: the rounds planned (the seed is round 0 and not counted); ``stored``: round records stored
    so far (the seed's included); ``data``: the job's progress data {"round", "phase", "done", "n"}."""
    data = data or {}
    done = max(0, min(stored - 1, rounds))
    tail = f"{done} of {rounds} round{'s' * (rounds != 1)} done"
    rnd, phase = data.get("round"), data.get("phase")
    if phase == "evaluating" and rnd is not None:
        what = "the seed workflow" if rnd == 0 else "the chosen candidate"
        where = "Seed" if rnd == 0 else f"Round {rnd} of {rounds}"
        return f"{where}: evaluating {what}, problem {data.get('done', 0)} of {data.get('n', '?')} · {tail}"
    if stored == 0:
        return f"Starting: scoring the seed workflow · {tail}"
    if done >= rounds:
        return f"All {rounds} round{'s' * (rounds != 1)} done · finishing"
    return f"Round {done + 1} of {rounds}: making and judging candidates · {tail}"


def candidate_rows(row: dict) -> list[dict]:
    """The round's candidates: chosen or not, operator, the judge's scores, and in 'what happened' the
    operator's detail or, for a candidate that could not be produced, the reason (never a row of blanks)."""
    out = []
    for i, c in enumerate(row.get("candidates") or []):
        s = c.get("scores") or {}
        reason = c.get("reason") or ""
        produced = bool(c.get("text")) or bool(s)
        status = "chosen" if i == row.get("chosen") else ("not produced" if not produced else
                                                           "dropped" if reason else "candidate")
        out.append({"#": i, "status": status, "operator": edit_name(c.get("operator")),
                    "judge total": s.get("total"),
                    "what happened": (f"not produced: {edit_detail(reason)}" if not produced and reason else
                                      f"dropped: {edit_detail(reason)}" if reason else edit_detail(c.get("detail"))),
                    **{k.replace("_", " "): s.get(k) for k in CRITERIA}})  # 'prompt quality', as people write
    return out


def run_summary(info, rows: list[dict], curve, estimated: int = 0) -> list[tuple[str, str, str]]:  # noqa: ANN001
    """The five figures above a run's curve (``info`` a RunInfo, ``curve`` its DataFrame), as (label, value, help):
    rounds done, the score of the round the run offers, its gain over the seed (saying when that is within noise),
    failed rounds, cost so far ('~$' when ``estimated`` of its paid calls had no usage). A structure-only run has
    no score to show, and says so."""
    found = None if info.offline else outcome_of(rows, info.config.get("search", "paper"))
    best = "not measured" if info.offline else (f"{100 * found.validation:.1f}%" if found else "—")
    gain, why = ("not measured" if info.offline else "—"), ""
    if found is not None and found.gain is not None:
        gain = f"{100 * found.gain:+.1f} pts" + (" (within noise)" if found.within_noise else "")
        why = found.sentence()
    elif found is not None and found.round == 0:
        gain, why = "none", found.sentence()
    return [
        ("Rounds done", f"{max(0, len(rows) - 1)} / {int(info.config.get('rounds', 0))}",
         "Evolution rounds stored, not counting the seed (round 0)"),
        ("Best score", best, "Validation score of the round the run offers as its result"
         + (f" (round {found.round})" if found else "")),
        ("Gain over the seed", gain, why or "The chosen round's validation gain over the seed, on the same problems"),
        ("Failed rounds", str(int((curve["status"] == "failed").sum())), ""),
        ("Cost so far", money(curve["total_cost"].iloc[-1] if len(curve) else 0.0, estimated), estimate_note(estimated)),
    ]


def judge_words(judge: str | None) -> str:
    """Who chose the round, in a few words: 'picked by the rule-based judge', 'picked by the LLM judge', 'the
    LLM judge could not decide: rule-based pick'."""
    if not judge:
        return "no judge"
    if judge.startswith("rule (fallback"):
        return "the LLM judge could not decide: rule-based pick"
    return "picked by the " + {"rule": "rule-based judge", "llm": "LLM judge"}.get(judge, f"{judge} judge")


def judge_sentence(judge: str, chosen: int) -> str:
    """Who picked the candidate, in one plain sentence: "rule (fallback: why)" means the LLM judge could not be
    used, so the rule-based one decided."""
    m = re.fullmatch(r"rule \(fallback: (.*)\)", judge or "", re.S)
    if m:
        return (f"The LLM judge could not decide ({m.group(1).removeprefix('the judge ')}), so the rule-based "
                f"judge picked candidate {chosen}.")
    who = {"rule": "The rule-based judge", "llm": "The LLM judge"}.get(judge, f"The {judge} judge")
    return f"{who} picked candidate {chosen}."
