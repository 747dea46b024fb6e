"""Ratings from cross-play: a Bradley–Terry model fitted to the games, with bootstrap
intervals and the probability that each policy is the best.

A *game* is one policy against another. Where a mission has a winner (every return is -1, 0
or +1, as in PettingZoo's board games) each cross-play episode is a game: the side with the
higher mean return wins, equal returns draw, and a seat term per mission absorbs the
first-mover (or row-side) advantage. Elsewhere sides score on different scales (evade's
pursuers and evader), so a game is a *duplicate* match: on one episode seed, policy A plays
both seats against B (the cross-play runs both orders on the same seeds), and the one whose
two seats' mean returns add up to more wins. Draws count half a win, as in Elo.

The fit maximises the likelihood of P(A beats B) = 1 / (1 + exp(r_B - r_A - seat)) with a
weak Gaussian prior (sd 3 logits, 520 Elo points) that keeps a rating finite when a policy
wins every game; ratings print in Elo points (400 = 10:1 odds) around a mean of 0. The
bootstrap resamples episode seeds within each mission (every game on a seed together), so
its intervals (the estimate ± 1.96 bootstrap standard errors, never less than the model's
own), and P(best), the share of resampled fits a policy tops, are a function of the seed
and the results.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from parcat.episode.results import EpisodeResult
from parcat.eval.report import agent_role
from parcat.eval.stats import Interval, aggregate_mean, stratified_bootstrap

ELO = 400 / math.log(10)
"""Elo points per logit."""
PRIOR = 1 / 9
"""Precision of the Gaussian prior on every parameter, in logits (sd 3)."""
WIN_DRAW_LOSS = "win/draw/loss"
DUPLICATE = "duplicate score"
OVERALL = "overall"
ILLEGAL = "illegal moves"


@dataclass(frozen=True)
class Seats:
    """Who sat where on one mission of a cross-play run."""

    mission: str
    row_agents: tuple[str, ...]
    col_agents: tuple[str, ...]


@dataclass(frozen=True)
class Games:
    """Pairwise games, one entry each."""

    first: np.ndarray
    """Index of the policy the score is of."""
    second: np.ndarray
    score: np.ndarray
    """1 a win of ``first``, 0.5 a draw, 0 a loss."""
    seat: np.ndarray
    """Index of the mission whose seat term applies (``first`` on the row side), or -1."""
    episode: np.ndarray
    """The resampling unit: one id per (mission, episode seed)."""
    mission: np.ndarray
    """Index of the mission."""


def has_winner(episodes: Sequence[EpisodeResult]) -> bool:
    """Whether every finished episode's returns are -1, 0 or +1 (a game with a winner)."""
    returns = [a.reward for e in episodes if e.ok for a in e.agents]
    return bool(returns) and all(r in (-1.0, 0.0, 1.0) for r in returns)


def side_return(episode: EpisodeResult, agents: set[str] | tuple[str, ...]) -> float:
    """The mean return of ``agents`` in ``episode``."""
    values = [a.reward for a in episode.agents if a.agent_id in agents]
    return sum(values) / len(values) if values else math.nan


def seated(episode: EpisodeResult, seats: Seats) -> tuple[str, str] | None:
    """The policies on the row and the column side, or ``None`` for self-play."""
    by_agent = {a.agent_id: a.policy for a in episode.agents}
    row = {by_agent.get(a, "") for a in seats.row_agents}
    col = {by_agent.get(a, "") for a in seats.col_agents}
    if len(row) != 1 or len(col) != 1 or row == col or "" in row | col:
        return None
    return next(iter(row)), next(iter(col))


def make_games(seats: Sequence[Seats], episodes: Sequence[EpisodeResult],
               policies: Sequence[str]) -> tuple[Games, dict[str, str]]:
    """The games of a cross-play run, and each mission's kind of game (module docstring)."""
    index = {name: i for i, name in enumerate(policies)}
    rows: list[tuple[int, int, float, int, int, int]] = []
    units: dict[tuple[str, int], int] = {}
    kinds = {}
    for m, seat in enumerate(seats):
        mine = [e for e in episodes if e.mission == seat.mission and e.ok]
        played = {}
        for episode in mine:
            pair = seated(episode, seat)
            if pair is not None and pair[0] in index and pair[1] in index:
                played[(*pair, episode.episode_index)] = (
                    side_return(episode, seat.row_agents), side_return(episode, seat.col_agents))
        kinds[seat.mission] = WIN_DRAW_LOSS if has_winner(mine) else DUPLICATE
        for (row, col, e), (mine_r, theirs) in played.items():
            unit = units.setdefault((seat.mission, e), len(units))
            if kinds[seat.mission] == WIN_DRAW_LOSS:
                rows.append((index[row], index[col], _score(mine_r, theirs), m, unit, m))
            elif index[row] < index[col] and (col, row, e) in played:
                back = played[(col, row, e)]  # the same seed with the seats swapped
                rows.append((index[row], index[col], _score(mine_r + back[1], theirs + back[0]),
                             -1, unit, m))
    columns = np.asarray(rows, dtype=float).reshape(-1, 6).T
    ints = [c.astype(int) for c in columns]
    return Games(ints[0], ints[1], columns[2], ints[3], ints[4], ints[5]), kinds


def _score(mine: float, theirs: float) -> float:
    return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0


def _design(games: Games, num_policies: int, num_seats: int) -> tuple[np.ndarray, np.ndarray]:
    """One row per distinct (first, second, seat), and each game's row."""
    cells, cell = np.unique(np.stack([games.first, games.second, games.seat]), axis=1,
                            return_inverse=True)
    design = np.zeros((cells.shape[1], num_policies + num_seats))
    rows = np.arange(cells.shape[1])
    design[rows, cells[0]] += 1.0
    design[rows, cells[1]] -= 1.0
    seated_rows = cells[2] >= 0
    design[rows[seated_rows], num_policies + cells[2][seated_rows]] = 1.0
    return design, cell.ravel()


def _newton(design: np.ndarray, cell: np.ndarray, score: np.ndarray,
            weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The most probable parameters, and the curvature of the log posterior there."""
    total = np.bincount(cell, weights, design.shape[0])
    won = np.bincount(cell, weights * score, design.shape[0])
    theta = np.zeros(design.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(design @ theta)))
        gradient = design.T @ (won - total * p) - PRIOR * theta
        hessian = (design.T * (total * p * (1 - p))) @ design + PRIOR * np.eye(theta.size)
        step = np.linalg.solve(hessian, gradient)
        step *= min(1.0, 2.0 / max(float(np.abs(step).max()), 1e-12))  # a trust region
        theta += step
        if np.abs(step).max() < 1e-8:
            break
    return theta, hessian


@dataclass(frozen=True)
class Rating:
    """One policy's rating."""

    policy: str
    rating: Interval
    """Elo points around the mean of 0, with its bootstrap 95% interval."""
    p_best: float
    """Share of the bootstrap fits in which this policy rates highest."""
    games: int
    ahead: Interval | None = None
    """How far it rates above the next policy, with its 95% interval (``None``: the last):
    an interval that holds 0 leaves the order of the two open."""


@dataclass(frozen=True)
class RatingTable:
    """The ratings on one mission, or ``overall`` on all of them."""

    mission: str
    kind: str
    """:data:`WIN_DRAW_LOSS`, :data:`DUPLICATE` or both (``overall``)."""
    ratings: tuple[Rating, ...]
    """Best first."""
    seat: Interval | None
    """The row side's advantage in Elo points (win/draw/loss missions)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"mission": self.mission, "games": self.kind,
                "ratings": [{"policy": r.policy, "rating": vars(r.rating), "p_best": r.p_best,
                             "games": r.games,
                             "ahead_of_next": None if r.ahead is None else vars(r.ahead)}
                            for r in self.ratings],
                "row_side_advantage": None if self.seat is None else vars(self.seat)}


def model_dict(reps: int, seed: int) -> dict[str, Any]:
    """What the ratings in a document are (its ``ratings_model``)."""
    return {"model": "bradley-terry", "scale": "elo points, mean 0 (400 = 10:1 odds)",
            "prior_sd_logits": round(PRIOR ** -0.5, 6), "confidence": 0.95,
            "bootstrap": {"reps": reps, "seed": seed, "resampled": "episode seeds per mission"},
            "games": {WIN_DRAW_LOSS: "per episode; higher side mean return wins",
                      DUPLICATE: "per seed: both seats each; higher sum of side means wins"}}


def rate(seats: Sequence[Seats], episodes: Sequence[EpisodeResult], policies: Sequence[str],
         reps: int = 1000, seed: int = 0) -> list[RatingTable]:
    """Ratings per mission, and ``overall`` when there are several (module docstring)."""
    games, kinds = make_games(seats, episodes, policies)
    tables = []
    for m, seat in enumerate(seats):
        tables.append(rate_games(subset(games, games.mission == m), seat.mission,
                                 kinds[seat.mission], policies, len(seats), reps, seed))
    if len(seats) > 1:
        tables.append(rate_games(games, OVERALL, " + ".join(sorted(set(kinds.values()))),
                                 policies, len(seats), reps, seed))
    return tables


def subset(games: Games, keep: np.ndarray) -> Games:
    """The games where ``keep`` is true."""
    return Games(*(getattr(games, name)[keep] for name in Games.__dataclass_fields__))


def rate_games(games: Games, mission: str, kind: str, policies: Sequence[str],
               num_seats: int, reps: int = 1000, seed: int = 0) -> RatingTable:
    """Fit ``games`` and bootstrap the fit, resampling episode seeds within missions; a
    policy that played no game is listed last, unrated."""
    n = len(policies)
    design, cell = _design(games, n, num_seats)
    point, curvature = _newton(design, cell, games.score, np.ones(games.score.size))
    covariance = np.linalg.inv(curvature)
    draws = _bootstrap(games, design, cell, reps, seed)
    played = np.bincount(np.concatenate([games.first, games.second]), minlength=n)
    rated = played > 0
    centre = np.eye(n) - rated / max(int(rated.sum()), 1)  # around the rated policies' mean
    floor = np.sqrt(np.diag(centre @ covariance[:n, :n] @ centre.T)) * ELO
    ratings = draws[:, :n] @ centre.T * ELO
    best = np.bincount(np.where(rated, ratings, -np.inf).argmax(axis=1), minlength=n) / reps
    centred = centre @ point[:n] * ELO
    low, high = _normal(centred, ratings, floor)
    order = [int(i) for i in np.argsort(-centred, kind="stable") if rated[i]]
    seat = None
    seat_columns = sorted({int(s) for s in games.seat if s >= 0})
    if len(seat_columns) == 1:
        s = n + seat_columns[0]
        edges = _normal(point[s] * ELO, draws[:, s] * ELO, np.sqrt(covariance[s, s]) * ELO)
        seat = Interval(float(point[s] * ELO), float(edges[0]), float(edges[1]))
    ahead: list[Interval | None] = [_difference(a, b, point, draws, covariance)
                                    for a, b in pairwise(order)]
    ahead += [None] * bool(order)  # the last rated policy is ahead of no one
    unrated = Interval(math.nan, math.nan, math.nan)
    return RatingTable(mission, kind, tuple(
        Rating(policies[i], Interval(float(centred[i]), float(low[i]), float(high[i])),
               float(best[i]), int(played[i]), gap)
        for i, gap in zip(order, ahead, strict=True)) + tuple(
        Rating(policies[i], unrated, 0.0, 0) for i in range(n) if not rated[i]), seat)


def _bootstrap(games: Games, design: np.ndarray, cell: np.ndarray, reps: int,
               seed: int) -> np.ndarray:
    """``reps`` fits, each to the games of episode seeds drawn again within each mission."""
    draws = np.empty((reps, design.shape[1]))
    for r, weights in enumerate(resampled(games, reps, seed)):
        draws[r] = _newton(design, cell, games.score, weights)[0]
    return draws


def resampled(games: Games, reps: int, seed: int) -> Iterator[np.ndarray]:
    """``reps`` bootstrap weights of ``games``: how often each game's episode seed is drawn
    when the seeds are drawn again within each mission (every game on a seed together)."""
    rng = np.random.default_rng(seed)
    strata = [np.unique(games.episode[games.mission == m]) for m in np.unique(games.mission)]
    for _ in range(reps):
        counts = np.zeros(int(games.episode.max(initial=-1)) + 1)
        for units in strata:
            np.add.at(counts, rng.choice(units, units.size), 1.0)
        yield counts[games.episode]


def _difference(a: int, b: int, point: np.ndarray, draws: np.ndarray,
                covariance: np.ndarray) -> Interval:
    """Policy ``a``'s rating minus ``b``'s, with its 95% interval, in Elo points."""
    spread = covariance[a, a] + covariance[b, b] - 2 * covariance[a, b]
    value = (point[a] - point[b]) * ELO
    low, high = _normal(value, (draws[:, a] - draws[:, b]) * ELO,
                        np.sqrt(max(spread, 0.0)) * ELO)
    return Interval(float(value), float(low), float(high))


def _normal(estimate: Any, draws: np.ndarray, floor: Any) -> tuple[Any, Any]:
    """The 95% interval: the estimate ± 1.96 bootstrap standard errors, or the model's own
    (the curvature of the log posterior) where they are larger. On simulated Bradley–Terry
    populations it covers the truth 95% of the time, where the percentile interval covers
    it 92% (the prior pulls the resampled fits inwards); the floor matters where the
    bootstrap sees no spread: a policy that won every game wins every resample."""
    error = 1.959964 * np.maximum(draws.std(axis=0), floor)
    return estimate - error, estimate + error


# -- outcomes per policy and side ------------------------------------------------------------


@dataclass(frozen=True)
class SideRow:
    """One policy on one side of a mission, against every other policy."""

    mission: str
    policy: str
    side: str
    """The side's agents (their shared prefix: ``pursuer``, or the agent: ``player_0``)."""
    episodes: int
    outcomes: dict[str, Interval]
    """``win``, ``draw`` and ``loss`` rates (missions with a winner; else empty)."""
    illegal_moves: int | None
    """Games this policy lost by an illegal move (missions with a winner; else ``None``)."""
    metrics: dict[str, Interval]
    """The mean of each number the environment reported (``episode_stats``): evade's
    ``captured`` is the capture rate."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def side_label(agents: Sequence[str], others: Sequence[str]) -> str:
    """``pursuer`` for pursuer_0..2 against ``evader``; the agents' ids where both sides
    share a prefix (``player_0`` against ``player_1``)."""
    prefixes = {agent_role(a) for a in agents}
    theirs = {agent_role(a) for a in others}
    return next(iter(prefixes)) if len(prefixes) == 1 and not prefixes & theirs else \
        ",".join(agents)


def illegal_move(episode: EpisodeResult, agents: Sequence[str]) -> bool:
    """Whether one of ``agents`` ended a game with a winner by an illegal move: PettingZoo's
    termination gives the mover -1 and everyone else 0, where a lost game gives the winner
    +1."""
    returns = {a.agent_id: a.reward for a in episode.agents}
    return sum(returns.values()) == -1.0 and any(returns.get(a) == -1.0 for a in agents)


def side_rows(seats: Sequence[Seats], episodes: Sequence[EpisodeResult], reps: int = 1000,
              seed: int = 0) -> list[SideRow]:
    """Every policy's outcomes and metrics per mission and side, with bootstrap intervals."""
    rows = []
    for seat in seats:
        mine = [e for e in episodes if e.mission == seat.mission and e.ok]
        winner = has_winner(mine)
        for own, other, which in ((seat.row_agents, seat.col_agents, 0),
                                  (seat.col_agents, seat.row_agents, 1)):
            label = side_label(own, other)
            found: dict[str, list[EpisodeResult]] = {}
            for episode in mine:
                pair = seated(episode, seat)
                if pair is not None:
                    found.setdefault(pair[which], []).append(episode)
            for policy, games in found.items():
                rows.append(_side_row(seat.mission, policy, label, games, own, other,
                                      winner, reps, seed))
    return rows


def side_outcome(episode: EpisodeResult, own: Sequence[str], other: Sequence[str]
                 ) -> dict[str, float]:
    """``win``, ``draw`` and ``loss`` (one of them 1) of the side ``own`` against ``other``
    in a game with a winner, and :data:`ILLEGAL` (1: ``own`` lost by an illegal move)."""
    score = _score(side_return(episode, tuple(own)), side_return(episode, tuple(other)))
    return {"win": float(score == 1.0), "draw": float(score == 0.5),
            "loss": float(score == 0.0), ILLEGAL: float(illegal_move(episode, own))}


def _side_row(mission: str, policy: str, label: str, games: list[EpisodeResult],
              own: Sequence[str], other: Sequence[str], winner: bool, reps: int,
              seed: int) -> SideRow:
    values: dict[str, list[float]] = {}
    illegal = 0
    for episode in games:
        if winner:
            outcome = side_outcome(episode, own, other)
            illegal += int(outcome.pop(ILLEGAL))
            for name, value in outcome.items():
                values.setdefault(name, []).append(value)
        for key, value in episode.stats.items():
            values.setdefault(f"stats.{key}", []).append(value)
    intervals = {name: stratified_bootstrap({mission: np.asarray(v)}, aggregate_mean, reps,
                                            seed=seed)
                 for name, v in values.items() if len(v) == len(games)}
    return SideRow(mission, policy, label, len(games),
                   {k: v for k, v in intervals.items() if not k.startswith("stats.")},
                   illegal if winner else None,
                   {k[6:]: v for k, v in intervals.items() if k.startswith("stats.")})
