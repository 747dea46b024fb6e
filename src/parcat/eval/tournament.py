"""Comparing policies in one command: each on its own (``--each``) and every pair against
each other (``--cross``).

``--each`` evaluates every ``-p`` with all agents playing it, on the same episode seeds (on a
turn-based game, or with ``--against``, against that opponent in both seats); each policy
gets, per mission and overall (normalised per mission, as rliable does), its mean and
IQM and, against the first policy, the difference of means and P(policy > baseline), all
with bootstrap 95% intervals.

``--cross`` splits each mission's agents into two sides (by agent-id prefix, e.g.
``pursuer_*`` | ``evader_*``; one shared prefix is split in halves) and plays every ordered
pair of policies, the row policy on one side; each cell holds both sides' mean returns. Both
orders of a pair play the same episode seeds, so every pairing plays both seats equally often
on paired seeds. The games are then rated (:mod:`parcat.eval.ratings`): a Bradley–Terry
rating per policy with its interval and P(best), and win/draw/loss rates, illegal moves and
the environment's numbers per policy and side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import Any

import numpy as np

from parcat.core.errors import ConfigError
from parcat.envs.missions import Mission
from parcat.episode.probe import EnvCheck
from parcat.episode.results import EpisodeResult
from parcat.eval import alpharank
from parcat.eval.compare import OVERALL, compare
from parcat.eval.evaluate import EvalConfig, EvalReport, check_policies, evaluate, unreproducible
from parcat.eval.rating_model import RatingModel
from parcat.eval.ratings import RatingTable, Seats, SideRow, model_dict, rate, side_rows
from parcat.eval.report import agent_role, reproducible
from parcat.eval.stats import (
    Interval,
    aggregate_iqm,
    aggregate_mean,
    normalised,
    stratified_bootstrap,
)
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import PolicySpec, parse_policy_spec

Scores = dict[str, np.ndarray]
OnResult = Callable[[EpisodeResult], None]
REPS = 1000
"""Bootstrap resamples of every interval."""


def episode_scores(episodes: Sequence[EpisodeResult], agents: set[str] | None = None) -> Scores:
    """Per mission, each finished episode's mean agent return (of ``agents`` if given)."""
    found: dict[str, list[float]] = {}
    for episode in episodes:
        rewards = [a.reward for a in episode.agents if agents is None or a.agent_id in agents]
        if episode.ok and rewards and all(math.isfinite(r) for r in rewards):
            found.setdefault(episode.mission, []).append(sum(rewards) / len(rewards))
    return {mission: np.asarray(values) for mission, values in found.items()}


@dataclass(frozen=True)
class EachRow:
    """One policy on one mission (or ``overall``, in normalised scores)."""

    mission: str
    policy: str
    episodes: int
    failed: int
    mean: Interval
    iqm: Interval
    difference: Interval | None
    """Mean of this policy minus the baseline's (``None`` for the baseline)."""
    improvement: Interval | None
    """P(this policy > the baseline) (``None`` for the baseline)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``improvement`` is ``p_improvement``)."""
        data = asdict(self)
        data["p_improvement"] = data.pop("improvement")
        return data


@dataclass
class EachResult:
    """``--each``: every policy's runs and the rows comparing them."""

    baseline: str
    reports: dict[str, list[EvalReport]]
    """Each policy's runs: one alone, and two per mission played against ``against``."""
    rows: list[EachRow] = field(default_factory=list)
    against: str | None = None
    """The opponent of the missions in ``against_missions``."""
    against_missions: list[str] = field(default_factory=list)

    @property
    def episodes(self) -> list[EpisodeResult]:
        """Every episode of every run."""
        return [e for runs in self.reports.values() for r in runs for e in r.episodes]

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C stopped it (the rows are of what ran)."""
        return any(interrupted(runs) for runs in self.reports.values())

    @property
    def warnings(self) -> list[str]:
        """Every run's warnings (an env that ignores its seed, ...), each once."""
        return list(dict.fromkeys(line for runs in self.reports.values() for run in runs
                                  for line in run.warnings))

    def to_document(self) -> dict[str, Any]:
        """JSON-ready: the rows and each policy's full results documents."""
        return {"each": {"baseline": self.baseline, "rows": [r.to_dict() for r in self.rows],
                         "against": self.against, "against_missions": self.against_missions},
                "runs": {name: [r.to_document() for r in runs]
                         for name, runs in self.reports.items()}}


DEFAULT_AGAINST = "random"
"""The opponent ``--each`` gives every policy on a turn-based game unless told another."""


def plays_against(mission: Mission, against: PolicySpec | None) -> bool:
    """Whether ``--each`` plays ``mission`` against an opponent: a turn-based game (where
    playing oneself scores nothing), or any mission once an opponent is named."""
    return against is not None or mission.turn_based


def check_each(config: EvalConfig, against: PolicySpec | None) -> list[Mission]:
    """The missions ``--each`` plays against an opponent, checked before anything runs:
    each has two sides (``ConfigError``) and the opponent builds for its agents
    (``PolicyError``)."""
    duels = [m for m in config.missions if plays_against(m, against)]
    for duel in duels:
        sides(duel)
    if duels:
        opponent = against or parse_policy_spec(DEFAULT_AGAINST)
        check_policies(replace(config, missions=tuple(duels), policies=(opponent,)))
    return duels


def evaluate_each(config: EvalConfig, options: RunOptions | None = None,
                  on_result: OnResult | None = None, seed: int = 0,
                  against: PolicySpec | None = None) -> EachResult:
    """Evaluate every policy of ``config`` on its own (module docstring); on the missions
    :func:`plays_against` names, against ``against`` (default :data:`DEFAULT_AGAINST`) in
    both seats on the same seeds, scoring the policy's own agents."""
    opponent = against or parse_policy_spec(DEFAULT_AGAINST)
    duels = [m for m in config.missions if plays_against(m, against)]
    for duel in duels:
        sides(duel)  # two sides on every mission, before any runs
    reports, scores = {}, []
    for spec in config.policies:
        runs, own = _each_runs(config, replace(spec, weight=1.0), duels, opponent, options,
                               on_result)
        reports[spec.name] = runs
        scores.append(own)
        if interrupted(runs):
            break  # Ctrl-C: the rows of what ran
    names = list(reports)
    result = EachResult(names[0], reports, against=opponent.name if duels else None,
                        against_missions=[m.name for m in duels])
    missions = [m.name for m in config.missions]
    for mission in missions:
        for name, own in zip(names, scores, strict=True):
            result.rows.append(_each_row(mission, name, {mission: own.get(mission, np.zeros(0))},
                                         {mission: scores[0].get(mission, np.zeros(0))},
                                         reports[name], name == names[0], seed))
    if len(missions) > 1:
        norm = normalised(scores)
        for name, own in zip(names, norm, strict=True):
            result.rows.append(_each_row(OVERALL, name, own, norm[0], reports[name],
                                         name == names[0], seed))
    return result


def _each_runs(config: EvalConfig, spec: PolicySpec, duels: list[Mission],
               opponent: PolicySpec, options: RunOptions | None, on_result: OnResult | None
               ) -> tuple[list[EvalReport], Scores]:
    """``spec``'s runs (alone on the other missions, both seats against ``opponent`` on
    ``duels``) and its per-episode scores per mission."""
    runs, scores = [], {}
    alone = [m for m in config.missions if m not in duels]
    if alone:
        runs.append(evaluate(replace(config, missions=tuple(alone), policies=(spec,)),
                             options, on_result=on_result))
        scores.update(episode_scores(runs[-1].episodes))
    for mission in duels if not interrupted(runs) else ():
        ids = [str(a.agent_id) for a in mission.agents()]
        pair = (spec,) if spec.name == opponent.name else (spec, opponent)
        found: list[np.ndarray] = []
        for mine in sides(mission):
            seating = tuple(0 if k in mine else len(pair) - 1 for k in range(len(ids)))
            runs.append(evaluate(replace(config, missions=(mission,), policies=pair),
                                 options, on_result=on_result, seating=seating))
            found.append(episode_scores(runs[-1].episodes, {ids[k] for k in mine}).get(
                mission.name, np.zeros(0)))
            if interrupted(runs):
                break
        scores[mission.name] = np.concatenate(found)
        if interrupted(runs):
            break
    return runs, scores


def interrupted(runs: Sequence[EvalReport]) -> bool:
    """Whether Ctrl-C (or SIGTERM) ended one of ``runs``: a comparison stops there."""
    return any(r.status == "interrupted" for r in runs)


def _each_row(mission: str, name: str, own: Scores, base: Scores, runs: list[EvalReport],
              is_baseline: bool, seed: int) -> EachRow:
    failed = sum(1 for r in runs for e in r.episodes
                 if not e.ok and mission in (OVERALL, e.mission))
    count = sum(v.size for v in own.values())
    if not count:
        nan = Interval(math.nan, math.nan, math.nan)
        return EachRow(mission, name, 0, failed, nan, nan, None, None)
    mean = stratified_bootstrap(own, aggregate_mean, reps=1000, seed=seed)
    iqm = stratified_bootstrap(own, aggregate_iqm, reps=1000, seed=seed)
    difference = improvement = None
    if not is_baseline and all(v.size for v in base.values()):
        # the overall row's scores are normalised over every policy already
        row = compare(base, own, seed=seed, reps=1000, normalise=False)[-1]
        difference, improvement = row.difference, row.improvement
    return EachRow(mission, name, count, failed, mean, iqm, difference, improvement)


# -- cross-play ------------------------------------------------------------------------------


def sides(mission: Mission) -> tuple[list[int], list[int]]:
    """The two sides of ``mission``'s agents, as agent positions (``ConfigError`` for one
    agent)."""
    ids = [str(spec.agent_id) for spec in mission.agents()]
    if len(ids) < 2:
        raise ConfigError(f"mission '{mission.name}' has one agent: --cross and --against "
                          "need two sides; give a mission with two or more agents")
    prefixes = [agent_role(agent) for agent in ids]
    if len(set(prefixes)) > 1:
        row = [i for i, p in enumerate(prefixes) if p == prefixes[0]]
    else:
        row = list(range((len(ids) + 1) // 2))
    return row, [i for i in range(len(ids)) if i not in row]


@dataclass(frozen=True)
class CrossCell:
    """The row policy on the row side against the column policy on the column side."""

    row: Interval
    """The row side's mean return per agent."""
    col: Interval
    episodes: int


@dataclass
class CrossTable:
    """Cross-play on one mission."""

    mission: str
    row_agents: list[str]
    col_agents: list[str]
    policies: list[str]
    cells: list[list[CrossCell]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@dataclass
class CrossResult:
    """``--cross``: one table per mission, every run's episodes, and their ratings."""

    tables: list[CrossTable]
    episodes: list[EpisodeResult]
    ratings: list[RatingTable] = field(default_factory=list)
    sides: list[SideRow] = field(default_factory=list)
    seed: int = 0
    """The bootstrap's seed."""
    interrupted: bool = False
    """Whether Ctrl-C stopped it (the pairs not played have no episodes)."""
    rating: RatingModel = RatingModel.BRADLEY_TERRY
    """What ranks the policies; the Bradley–Terry ratings are always there (``--precision``
    schedules by them)."""
    alpharank: list[RatingTable] = field(default_factory=list)
    """With :attr:`RatingModel.ALPHARANK`: each policy's mass, as a rating table."""
    checks: dict[str, EnvCheck] = field(default_factory=dict)
    """What the start-of-run check found about each mission's environment."""

    @property
    def warnings(self) -> list[str]:
        """One line per mission whose environment ignores its seed."""
        return unreproducible(self.checks)

    def to_document(self) -> dict[str, Any]:
        """JSON-ready."""
        masses = {"alpharank_model": alpharank.model_dict(REPS, self.seed),
                  "alpharank": [t.to_dict() for t in self.alpharank]} if self.alpharank else {}
        environments = {name: check.to_dict() for name, check in self.checks.items()}
        return {"cross": [t.to_dict() for t in self.tables],
                "reproducible": reproducible(environments), "environments": environments,
                "ratings_model": model_dict(REPS, self.seed),
                "ratings": [t.to_dict() for t in self.ratings], **masses,
                "sides": [r.to_dict() for r in self.sides],
                "episodes": [e.to_dict() for e in self.episodes]}

    @property
    def ranking(self) -> list[RatingTable]:
        """The tables of :attr:`rating`'s model."""
        return self.alpharank if self.rating is RatingModel.ALPHARANK else self.ratings

    def rated(self) -> CrossResult:
        """This result with its ratings and per-side rows computed from its episodes."""
        seats = [Seats(t.mission, tuple(t.row_agents), tuple(t.col_agents))
                 for t in self.tables]
        policies = self.tables[0].policies if self.tables else []
        masses = (alpharank.alpharank(seats, self.episodes, policies, REPS, self.seed)
                  if self.rating is RatingModel.ALPHARANK else [])
        return replace(self, ratings=rate(seats, self.episodes, policies, REPS, self.seed),
                       sides=side_rows(seats, self.episodes, REPS, self.seed),
                       alpharank=masses)


Pair = tuple[int, int, int]
"""A mission's index, the row policy's and the column policy's."""


def cross_play(config: EvalConfig, options: RunOptions | None = None,
               on_result: OnResult | None = None, seed: int = 0,
               precision: float | None = None, max_episodes: int = 10_000,
               rating: RatingModel = RatingModel.BRADLEY_TERRY) -> CrossResult:
    """Play every ordered pair of ``config``'s policies on every mission (module docstring).

    Args:
        rating: What ranks the policies (the Bradley–Terry ratings are there whatever it is).
        precision: Then add ``config.episodes`` episodes at a time, both seats on the same
            seeds, to every two neighbours in a ranking whose order is still open (the 95%
            interval of their rating difference holds 0) and whose interval is wider than
            ± ``precision`` Elo points, until none is (or each such pair has played
            ``max_episodes``). The schedule is a function of the seed and the results so
            far, so the run is reproducible.
    """
    if precision is not None and not precision > 0:
        raise ConfigError(f"--precision must be > 0, got {precision}")
    specs = [replace(s, weight=1.0) for s in config.policies]
    seats = [sides(mission) for mission in config.missions]  # every mission's, before any runs
    n = len(specs)
    todo = {(m, i, j): config.episodes for m in range(len(seats)) for i in range(n)
            for j in range(n)}
    played: dict[Pair, list[EpisodeResult]] = {}
    checks: dict[str, EnvCheck] = {}
    while True:
        for (m, i, j), count in todo.items():
            mission = config.missions[m]
            pair = (specs[i],) if i == j else (specs[i], specs[j])
            seating = tuple(0 if k in seats[m][0] or i == j else 1
                            for k in range(len(mission.agents())))
            kept = {(e.mission, e.episode_index): e for e in played.get((m, i, j), [])}
            report = evaluate(
                replace(config, missions=(mission,), policies=pair, episodes=count), options,
                on_result=on_result, keep=kept, seating=seating)
            played[(m, i, j)] = report.episodes
            checks.update(report.checks)
            if interrupted([report]):
                return replace(_cross_result(config, specs, seats, played, seed, rating),
                               interrupted=True, checks=checks)
        result = replace(_cross_result(config, specs, seats, played, seed, rating), checks=checks)
        todo = {} if precision is None else _uncertain(result, played, precision,
                                                       config.episodes, max_episodes)
        if not todo:
            return result


def _cross_result(config: EvalConfig, specs: list[PolicySpec],
                  seats: list[tuple[list[int], list[int]]],
                  played: dict[Pair, list[EpisodeResult]], seed: int,
                  rating: RatingModel) -> CrossResult:
    tables, episodes = [], []
    for m, (mission, (row_side, col_side)) in enumerate(zip(config.missions, seats,
                                                             strict=True)):
        ids = [str(spec.agent_id) for spec in mission.agents()]
        row, col = [ids[k] for k in row_side], [ids[k] for k in col_side]
        cells = [[_cell(played.get((m, i, j), []), set(row), set(col), seed)
                  for j in range(len(specs))] for i in range(len(specs))]
        episodes += [e for i in range(len(specs)) for j in range(len(specs))
                     for e in played.get((m, i, j), [])]
        tables.append(CrossTable(mission.name, row, col, [s.name for s in specs], cells))
    return CrossResult(tables, episodes, seed=seed, rating=rating).rated()


def _uncertain(result: CrossResult, played: dict[Pair, list[EpisodeResult]],
               precision: float, step: int, cap: int) -> dict[Pair, int]:
    """The pairs to play more, and their new episode counts (``cross_play``'s precision):
    neighbours in a mission's ranking whose difference's interval holds 0 and is wider
    than ``precision`` on either side."""
    todo = {}
    for m, table in enumerate(result.ratings[:len(result.tables)]):
        index = {name: i for i, name in enumerate(result.tables[m].policies)}
        for rating, below in pairwise(table.ratings):
            gap = rating.ahead
            if gap is None or gap.low > 0 or (gap.high - gap.low) / 2 < precision:
                continue
            i, j = index[rating.policy], index[below.policy]
            count = min(cap, len(played[(m, i, j)]) + step)
            if count > len(played[(m, i, j)]):
                todo[(m, i, j)] = todo[(m, j, i)] = count
    return todo


def _cell(episodes: list[EpisodeResult], row: set[str], col: set[str], seed: int) -> CrossCell:
    out = [stratified_bootstrap(scores, aggregate_mean, reps=1000, seed=seed) if scores
           else Interval(math.nan, math.nan, math.nan)
           for scores in (episode_scores(episodes, agents) for agents in (row, col))]
    return CrossCell(out[0], out[1], sum(1 for e in episodes if e.ok))
