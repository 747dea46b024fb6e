"""Statistics for comparing results, as rliable recommends (Agarwal et al., NeurIPS 2021):
the interquartile mean (IQM) and the mean, stratified bootstrap confidence intervals
(episodes resampled *within* each mission), and the probability of improvement P(X > Y),
the Mann–Whitney statistic averaged over missions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Scores = Mapping[str, Any]
"""Per mission ("task"), the per-episode scores ("runs"): sequences or arrays of floats."""


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean, as ``scipy.stats.trim_mean(values, 0.25)``."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        return float("nan")
    cut = int(0.25 * x.size)
    return float(x[cut: x.size - cut].mean())


def aggregate_mean(scores: Scores) -> float:
    """Mean over missions of the per-mission mean."""
    return float(np.mean([np.mean(v) for v in scores.values()]))


def aggregate_iqm(scores: Scores) -> float:
    """IQM over all episodes of all missions pooled (rliable's aggregate IQM)."""
    return iqm(np.concatenate([np.asarray(v, dtype=float) for v in scores.values()]))


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap confidence interval."""

    value: float
    """The statistic on the data."""
    low: float
    high: float


def stratified_bootstrap(scores: Scores, statistic: Callable[[Scores], float],
                         reps: int = 2000, confidence: float = 0.95, seed: int = 0) -> Interval:
    """Percentile bootstrap CI of ``statistic``, resampling episodes within each mission."""
    return paired_bootstrap(scores, {}, lambda x, _: statistic(x), reps, confidence, seed)


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) + P(X = Y)/2 for one mission (the normalised Mann–Whitney U statistic)."""
    a, b = np.asarray(x, dtype=float)[:, None], np.asarray(y, dtype=float)[None, :]
    return float((a > b).mean() + 0.5 * (a == b).mean())


def paired_bootstrap(
    x: Scores, y: Scores, statistic: Callable[[Scores, Scores], float],
    reps: int = 2000, confidence: float = 0.95, seed: int = 0,
) -> Interval:
    """Bootstrap CI of a statistic of two result sets, each resampled within missions."""
    rng = np.random.default_rng(seed)
    xa = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    ya = {k: np.asarray(v, dtype=float) for k, v in y.items()}
    draws = np.empty(reps)
    for r in range(reps):
        xs = {k: a[rng.integers(0, a.size, a.size)] for k, a in xa.items()}
        ys = {k: a[rng.integers(0, a.size, a.size)] for k, a in ya.items()}
        draws[r] = statistic(xs, ys)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(statistic(xa, ya), float(low), float(high))


def mean_difference(x: Scores, y: Scores) -> float:
    """Aggregate mean of ``x`` minus that of ``y`` over their common missions."""
    common = sorted(set(x) & set(y))
    return float(np.mean([np.mean(x[k]) - np.mean(y[k]) for k in common]))


def average_improvement_probability(x: Scores, y: Scores) -> float:
    """P(X > Y) averaged over common missions."""
    common = sorted(set(x) & set(y))
    return float(np.mean([probability_of_improvement(x[k], y[k]) for k in common]))


def normalised(all_scores: Sequence[Scores]) -> list[dict[str, np.ndarray]]:
    """Each mission's scores mapped to [0, 1] by the lowest and highest episode score any
    of ``all_scores`` had on it (all equal: 0.5), so missions on different scales weigh
    alike in an aggregate (rliable's per-task normalisation)."""
    bounds = {}
    for mission in set().union(*all_scores):
        values = np.concatenate([np.asarray(s[mission], dtype=float)
                                 for s in all_scores if mission in s])
        bounds[mission] = (float(values.min()), float(values.max()))

    def mapped(mission: str, values: Any) -> np.ndarray:
        low, high = bounds[mission]
        array = np.asarray(values, dtype=float)
        return np.full(array.shape, 0.5) if high == low else (array - low) / (high - low)

    return [{m: mapped(m, v) for m, v in scores.items()} for scores in all_scores]
