"""Statistics for honest comparisons (scipy): McNemar's exact test on paired solved/unsolved outcomes, a paired
bootstrap interval of a score difference, a problem-level (cluster) bootstrap interval for repeated runs, and
the score-vs-cost Pareto front. Fractional scores (a task's f1, json, python or judge metric) get a percentile
bootstrap interval of the mean (``mean_ci``) and the Wilcoxon signed-rank test on paired scores; McNemar stays
for 0/1 outcomes.

scipy is imported inside the functions: the command line's quick commands never pay for it.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 10_000


def exact_all_same(solved: bool, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Clopper-Pearson interval when all n outcomes agree: 0/10 is 0-31%, 10/10 is 69-100%."""
    edge = 1 - (alpha / 2) ** (1 / n)
    return (1 - edge, 1.0) if solved else (0.0, edge)


def is_binary(values: Sequence[float]) -> bool:
    """Every score is 0 or 1 (a solved/unsolved outcome), so McNemar and the binomial interval apply."""
    return all(v in (0, 1) for v in values)


def mean_ci(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = 0.95,
            seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of fractional scores in [0, 1] (resampling problems)."""
    return problem_bootstrap(values, resamples=resamples, confidence=confidence, seed=seed)


@dataclass(frozen=True)
class Wilcoxon:
    n: int  # pairs that differ (zero differences are dropped, as the test does)
    higher_a: int
    higher_b: int
    p_value: float  # two-sided

    def to_json(self) -> dict:
        return {"n": self.n, "higher_a": self.higher_a, "higher_b": self.higher_b, "p_value": self.p_value}


def wilcoxon_paired(a: Sequence[float], b: Sequence[float]) -> Wilcoxon:
    """Wilcoxon signed-rank test on paired fractional scores (two-sided; exact for small n, as scipy chooses).
    No difference at all is p = 1."""
    if len(a) != len(b):
        raise ValueError(f"paired scores differ in length ({len(a)} vs {len(b)})")
    d = [x - y for x, y in zip(a, b) if abs(x - y) > 1e-12]
    if not d:
        return Wilcoxon(0, 0, 0, 1.0)
    from scipy.stats import wilcoxon

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small samples warn that the normal approximation is rough
        p = float(wilcoxon(d, alternative="two-sided").pvalue)
    if math.isnan(p):
        p = 1.0
    return Wilcoxon(len(d), sum(1 for x in d if x > 0), sum(1 for x in d if x < 0), min(1.0, p))


@dataclass(frozen=True)
class McNemar:
    only_a: int  # problems A solves and B does not
    only_b: int  # problems B solves and A does not
    both: int
    neither: int
    p_value: float  # two-sided exact (binomial) test of only_a vs only_b

    def to_json(self) -> dict:
        return {"only_a": self.only_a, "only_b": self.only_b, "both": self.both, "neither": self.neither,
                "p_value": self.p_value}


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """McNemar's exact test on paired outcomes: under 'no difference' the discordant pairs split as a fair
    coin, so the p-value is the two-sided binomial test of ``only_a`` successes in ``only_a + only_b``."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length ({len(a)} vs {len(b)})")
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    both = sum(1 for x, y in zip(a, b) if x and y)
    neither = len(a) - only_a - only_b - both
    if only_a + only_b == 0:
        return McNemar(only_a, only_b, both, neither, 1.0)
    from scipy.stats import binomtest

    p = float(binomtest(only_a, only_a + only_b, 0.5, alternative="two-sided").pvalue)
    return McNemar(only_a, only_b, both, neither, min(1.0, p))


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                     confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean(a) − mean(b), low, high): percentile bootstrap of the difference, resampling problems so each
    keeps its pair. ``a``/``b`` are per-problem scores (0/1, or solve rates over repeats)."""
    if len(a) != len(b):
        raise ValueError(f"paired scores differ in length ({len(a)} vs {len(b)})")
    if not a:
        return 0.0, 0.0, 0.0
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len({x - y for x, y in zip(a, b)}) == 1:  # every pair differs by the same amount: nothing to resample
        return diff, diff, diff
    import numpy as np
    from scipy.stats import bootstrap

    res = bootstrap((np.asarray(a, float), np.asarray(b, float)),
                    lambda x, y, axis: x.mean(axis=axis) - y.mean(axis=axis), paired=True, vectorized=True,
                    n_resamples=resamples, confidence_level=confidence, method="percentile",
                    rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return diff, lo, hi


def problem_bootstrap(rates: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                      confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of per-problem solve rates, resampling problems (a cluster bootstrap:
    the R outcomes of one problem are not independent, so they are resampled together)."""
    if not rates:
        return 0.0, 0.0
    if len(set(rates)) == 1:
        if rates[0] in (0, 1):  # every run of every problem failed (solved): exact, never "0-0%"
            return exact_all_same(rates[0] == 1, len(rates), 1 - confidence)
        return float(rates[0]), float(rates[0])
    import numpy as np
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # near-degenerate samples warn; the percentile interval is still right
        res = bootstrap((np.asarray(rates, float),), np.mean, vectorized=True, n_resamples=resamples,
                        confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for fewer than two values)."""
    if not values:
        return 0.0, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (cost, score) points no other point beats: none is at most as costly and at least as
    good with one of the two strictly better. Sorted by cost."""
    front = []
    for i, (ci, si) in enumerate(points):
        if any(math.isnan(v) for v in (ci, si)):
            continue
        dominated = any((cj <= ci and sj >= si) and (cj < ci or sj > si)
                        for j, (cj, sj) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))
