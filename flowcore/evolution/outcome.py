"""What an evolution run found, said honestly: the round it offers as its result, that round's validation score
beside the seed's (with a paired interval of the gain on the same problems, so a gain within noise is called
that), and its test score when it was re-scored on the held-out split. The winner's curse is why: among many
noisy validation scores the best one is partly luck, and only the test split says how much.

Used by the History and Compare pages (through flowcore.ui), the Evolve page's summary and the command line's
last line, so all of them say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowcore.evaluation.stats import paired_bootstrap
from flowcore.evolution.history import History
from flowcore.evolution.search import chosen
from flowcore.evolution.testsplit import stored_test_scores
from flowcore.workspace.store import Workspace

__all__ = ["Outcome", "outcome", "outcome_of", "rates"]


@dataclass
class Outcome:
    round: int
    operator: str
    validation: float
    val_low: float | None
    val_high: float | None
    val_n: int | None
    seed: float | None  # the seed round's validation score
    gain: float | None  # validation gain over the seed (fraction), on the problems both were scored on
    gain_low: float | None
    gain_high: float | None
    test: float | None = None
    test_low: float | None = None
    test_high: float | None = None
    test_n: int | None = None

    @property
    def within_noise(self) -> bool | None:
        """Whether the paired 95% interval of the validation gain over the seed includes 0 (None: no seed)."""
        if self.gain is None or self.gain_low is None or self.gain_high is None:
            return None
        return self.gain_low <= 0 <= self.gain_high

    def sentence(self) -> str:
        """One line for people: the chosen round's validation score, its gain and whether that is noise, and
        its test score when there is one."""
        pct = _pct
        text = (f"Result: round {self.round} ({self.operator or 'seed'}), validation {pct(self.validation)}"
                f"{_ci(self.val_low, self.val_high)}" + (f" on {self.val_n} problems" if self.val_n else ""))
        if self.round == 0:
            text += "; no evolved round beat the seed"
        elif self.gain is not None:
            text += (f"; {100 * self.gain:+.1f} points over the seed ({pct(self.seed)}), paired 95% interval "
                     f"{100 * (self.gain_low or 0):+.1f} to {100 * (self.gain_high or 0):+.1f}: ")
            text += ("within noise, so this validation gain is not evidence of a better workflow"
                     if self.within_noise else "beyond noise")
        if self.test is not None:
            text += (f". Test: {pct(self.test)}{_ci(self.test_low, self.test_high)} on {self.test_n} held-out "
                     f"problems ({100 * (self.test - self.validation):+.1f} points from validation)")
        return text + "."


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f" [{100 * lo:.1f}, {100 * hi:.1f}]"


def rates(per_problem: list[dict] | None) -> dict[str, float]:
    """Per-problem solve rate over a round's measurements (the runs the endpoint failed left out)."""
    runs: dict[str, list[bool]] = {}
    for x in per_problem or []:
        if x.get("id") is not None and not x.get("errored"):
            runs.setdefault(str(x["id"]), []).append(bool(x.get("correct")))
    return {k: sum(v) / len(v) for k, v in runs.items() if v}


def outcome(ws: Workspace, run_id: int) -> Outcome | None:
    """The run's result (None while no round is measured). Only the chosen round and the seed are read in full."""
    h = History(ws)
    info = h.run(run_id)
    pick = chosen(h.summaries(run_id), info.config.get("search", "paper"))
    if pick is None:
        return None
    full = [h.get_round(run_id, 0) or {}, h.get_round(run_id, pick["round"]) or {}]
    return outcome_of([r for r in full if r], info.config.get("search", "paper"), stored_test_scores(ws, run_id))


def outcome_of(rows: list[dict], search: str = "paper", tests: list[dict] | None = None) -> Outcome | None:
    """``outcome`` from rounds already read in full (the chosen one and the seed among them) and the run's
    stored test scores."""
    pick = chosen(rows, search)
    if pick is None:
        return None
    seed = next((r for r in rows if r["round"] == 0), {})
    gain = low = high = None
    if pick["round"] != 0 and seed.get("score") is not None:
        a, b = rates(pick.get("per_problem")), rates(seed.get("per_problem"))
        both = sorted(set(a) & set(b))
        if both:
            gain, low, high = paired_bootstrap([a[i] for i in both], [b[i] for i in both])
    out = Outcome(pick["round"], pick.get("operator") or "", pick["score"], pick.get("ci_low"), pick.get("ci_high"),
                  pick.get("n"), seed.get("score"), gain, low, high)
    for t in tests or []:
        if t["round"] == pick["round"] and t["score"] is not None:
            out.test, out.test_low, out.test_high, out.test_n = t["score"], t["ci_low"], t["ci_high"], t["n"]
    return out
