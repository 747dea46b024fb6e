"""α-Rank (Omidshafiei et al., 2019) of a cross-play population, for when strength is not
one number: rock beats scissors beats paper beats rock, and a Bradley–Terry rating (one
number per policy) averages the cycle away.

The payoff of policy i against j is the share of their games i won (draws half, as in
:mod:`parcat.eval.ratings`; unplayed pairs 1/2). α-Rank follows a population of
:data:`POPULATION` players of one policy into which players of another enter one at a time
and take over with a fixation probability that rises with how much better they do; the
stationary distribution of that Markov chain over the policies is each one's *mass*. A
policy that beats everyone takes all of it; a cycle shares it (rock, paper and scissors a
third each). :data:`SELECTION` (α) makes an edge of 2 points in win probability decisive,
close to α-Rank's α → ∞ limit. Intervals and P(best) come from the same episode-seed
bootstrap as the ratings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from parcat.episode.results import EpisodeResult
from parcat.eval.ratings import (
    OVERALL,
    Games,
    Rating,
    RatingTable,
    Seats,
    make_games,
    resampled,
    subset,
)
from parcat.eval.stats import Interval

POPULATION = 50
"""m: players in the population."""
SELECTION = 10.0
"""α: how strongly a better payoff favours taking over, per unit of win probability."""


def payoffs(games: Games, num_policies: int, weights: np.ndarray | None = None) -> np.ndarray:
    """P(i beats j) from ``games`` weighted by ``weights`` (draws half; 1/2 where the two
    played no game, and on the diagonal)."""
    n = num_policies
    w = np.ones(games.score.size) if weights is None else weights
    forward, backward = games.first * n + games.second, games.second * n + games.first
    won = np.bincount(forward, w * games.score, n * n) + \
        np.bincount(backward, w * (1 - games.score), n * n)
    total = np.bincount(forward, w, n * n) + np.bincount(backward, w, n * n)
    share = np.divide(won, total, out=np.full(n * n, 0.5), where=total > 0).reshape(n, n)
    np.fill_diagonal(share, 0.5)
    return share


def stationary(payoff: np.ndarray, alpha: float = SELECTION,
               population: int = POPULATION) -> np.ndarray:
    """α-Rank's mass of each policy of a symmetric game whose row player scores ``payoff``."""
    n, m = payoff.shape[0], population
    if n == 1:
        return np.ones(1)
    k = np.arange(1, m)[None, None, :]
    own = np.diagonal(payoff)
    # [i, j, k - 1]: k players of j among m - k of i; each plays the rest of the population
    gain = ((k - 1) * own[None, :, None] + (m - k) * payoff.T[:, :, None]
            - k * payoff[:, :, None] - (m - k - 1) * own[:, None, None]) / (m - 1)
    steps = np.concatenate([np.zeros((n, n, 1)), -alpha * np.cumsum(gain, axis=2)], axis=2)
    top = steps.max(axis=2, keepdims=True)  # log-sum-exp: no overflow however large α
    fixation = np.exp(-(top[..., 0] + np.log(np.exp(steps - top).sum(axis=2))))
    chain = fixation / (n - 1)
    np.fill_diagonal(chain, 0.0)
    np.fill_diagonal(chain, 1.0 - chain.sum(axis=1))
    system = np.vstack([chain.T - np.eye(n), np.ones((1, n))])
    mass = np.linalg.lstsq(system, np.concatenate([np.zeros(n), [1.0]]), rcond=None)[0]
    mass = np.clip(mass, 0.0, None)
    return mass / mass.sum()


def alpharank(seats: Sequence[Seats], episodes: Sequence[EpisodeResult],
              policies: Sequence[str], reps: int = 1000, seed: int = 0) -> list[RatingTable]:
    """α-Rank masses per mission, and ``overall`` when there are several, in the shape of
    :func:`parcat.eval.ratings.rate`'s tables (a rating is a mass, ``ahead`` its lead over
    the next policy's)."""
    games, kinds = make_games(seats, episodes, policies)
    tables = [rank_games(subset(games, games.mission == m), seat.mission, kinds[seat.mission],
                         policies, reps, seed) for m, seat in enumerate(seats)]
    if len(seats) > 1:
        tables.append(rank_games(games, OVERALL, " + ".join(sorted(set(kinds.values()))),
                                 policies, reps, seed))
    return tables


def rank_games(games: Games, mission: str, kind: str, policies: Sequence[str],
               reps: int = 1000, seed: int = 0) -> RatingTable:
    """α-Rank of ``games`` with percentile bootstrap intervals, resampling episode seeds
    within missions; a policy that played no game is listed last, without a mass."""
    n = len(policies)
    point = stationary(payoffs(games, n))
    draws = np.array([stationary(payoffs(games, n, w)) for w in resampled(games, reps, seed)]
                     ).reshape(reps, n)
    played = np.bincount(np.concatenate([games.first, games.second]), minlength=n)
    rated = played > 0
    best = np.bincount(np.where(rated, draws, -np.inf).argmax(axis=1), minlength=n) / reps
    order = [int(i) for i in np.argsort(-point, kind="stable") if rated[i]]
    ahead: list[Interval | None] = [_interval(point[a] - point[b], draws[:, a] - draws[:, b])
                                    for a, b in pairwise(order)]
    ahead += [None] * bool(order)
    unrated = Interval(math.nan, math.nan, math.nan)
    return RatingTable(mission, kind, tuple(
        Rating(policies[i], _interval(point[i], draws[:, i]), float(best[i]), int(played[i]),
               gap) for i, gap in zip(order, ahead, strict=True)) + tuple(
        Rating(policies[i], unrated, 0.0, 0) for i in range(n) if not rated[i]), None)


def _interval(value: float, draws: np.ndarray) -> Interval:
    """``value`` with the 2.5th and 97.5th percentiles of its resampled ``draws`` (widened to
    hold ``value``: a mass near 0 or 1 has a skewed bootstrap)."""
    low, high = np.percentile(draws, [2.5, 97.5])
    return Interval(float(value), float(min(low, value)), float(max(high, value)))


def model_dict(reps: int, seed: int) -> dict[str, Any]:
    """What the masses in a document are (its ``alpharank_model``)."""
    return {"model": "alpha-rank", "scale": "stationary mass (sums to 1)",
            "payoff": "share of games won against each policy, draws half",
            "population": POPULATION, "alpha": SELECTION, "confidence": 0.95,
            "bootstrap": {"reps": reps, "seed": seed, "resampled": "episode seeds per mission",
                          "interval": "percentile"}}
