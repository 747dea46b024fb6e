"""Statistics for comparing results, as rliable recommends (Agarwal et al., NeurIPS 2021):
the interquartile mean (IQM) and the mean, stratified bootstrap confidence intervals
(episodes resampled *within* each mission), and the probability of improvement P(X > Y),
the Mann–Whitney statistic averaged over missions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Scores = Mapping[str, Any]
"""Per mission ("task"), the per-episode scores ("runs"): sequences or arrays of floats."""
CHUNK_REPS = 200
"""Bootstrap reps resampled at once (an 8-byte index per episode per rep)."""


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
    batched = _BATCHED.get(statistic)
    if batched is None:
        return paired_bootstrap(scores, {}, lambda x, _: statistic(x), reps, confidence, seed)
    data = [np.asarray(v, dtype=float) for v in scores.values()]
    draws = np.concatenate([batched(rows) for rows in
                            _resamples(data, reps, np.random.default_rng(seed))])
    return _interval(statistic(dict(zip(scores, data, strict=True))), draws, confidence)


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) + P(X = Y)/2 for one mission (the normalised Mann–Whitney U statistic)."""
    a, b = np.asarray(x, dtype=float)[:, None], np.asarray(y, dtype=float)[None, :]
    return float((a > b).mean() + 0.5 * (a == b).mean())


def paired_bootstrap(
    x: Scores, y: Scores, statistic: Callable[[Scores, Scores], float],
    reps: int = 2000, confidence: float = 0.95, seed: int = 0,
) -> Interval:
    """Bootstrap CI of a statistic of two result sets, each resampled within missions."""
    xa = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    ya = {k: np.asarray(v, dtype=float) for k, v in y.items()}
    draws: list[float] = []
    for rows in _resamples([*xa.values(), *ya.values()], reps, np.random.default_rng(seed)):
        xr, yr = rows[:len(xa)], rows[len(xa):]
        draws += [statistic({k: m[r] for k, m in zip(xa, xr, strict=True)},
                            {k: m[r] for k, m in zip(ya, yr, strict=True)})
                  for r in range(min(CHUNK_REPS, reps - len(draws)))]
    return _interval(statistic(xa, ya), np.asarray(draws), confidence)


def _resamples(arrays: list[np.ndarray], reps: int,
               rng: np.random.Generator) -> Iterator[list[np.ndarray]]:
    """Each array resampled with replacement, ``reps`` times (a row each), in chunks of
    :data:`CHUNK_REPS` rows so memory stays at a chunk's (all reps of 20,000 episodes at once
    took 900 MiB). Consecutive draws continue one stream, so the numbers are those that
    drawing rep by rep, array by array gave."""
    sizes = [a.size for a in arrays]
    highs = np.repeat(sizes, sizes)
    ends = np.cumsum(sizes, dtype=int)
    for start in range(0, reps, CHUNK_REPS):
        picks = rng.integers(0, highs, (min(CHUNK_REPS, reps - start), sum(sizes)))
        yield [a[picks[:, end - a.size:end]] for a, end in zip(arrays, ends, strict=True)]


def _interval(value: float, draws: np.ndarray, confidence: float) -> Interval:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(value, float(low), float(high))


def _batched_mean(rows: list[np.ndarray]) -> np.ndarray:
    """:func:`aggregate_mean` of every rep at once (the same sums in the same order)."""
    return np.stack([m.mean(axis=1) for m in rows], axis=1).mean(axis=1)


def _batched_iqm(rows: list[np.ndarray]) -> np.ndarray:
    """:func:`aggregate_iqm` of every rep at once."""
    pooled = np.sort(np.concatenate(rows, axis=1), axis=1)
    cut = int(0.25 * pooled.shape[1])
    return pooled[:, cut: pooled.shape[1] - cut].mean(axis=1)


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


_BATCHED: dict[Callable[[Scores], float], Callable[[list[np.ndarray]], np.ndarray]] = {
    aggregate_mean: _batched_mean, aggregate_iqm: _batched_iqm}
"""Statistics that :func:`stratified_bootstrap` computes for all reps at once."""
