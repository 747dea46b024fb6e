"""Comparing policies in one command: each on its own (``--each``) and every pair against
each other (``--cross``).

``--each`` evaluates every ``-p`` with all agents playing it, on the same episode seeds; each
policy gets, per mission and overall (normalised per mission, as rliable does), its mean and
IQM and, against the first policy, the difference of means and P(policy > baseline), all
with bootstrap 95% intervals.

``--cross`` splits each mission's agents into two sides (by agent-id prefix, e.g.
``pursuer_*`` | ``evader_*``; one shared prefix is split in halves) and plays every ordered
pair of policies, the row policy on one side; each cell holds both sides' mean returns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from parcat.envs.missions import Mission
from parcat.episode.results import EpisodeResult
from parcat.eval.compare import OVERALL, compare
from parcat.eval.evaluate import EvalConfig, EvalReport, evaluate
from parcat.eval.stats import (
    Interval,
    aggregate_iqm,
    aggregate_mean,
    normalised,
    stratified_bootstrap,
)
from parcat.parallel.run_options import RunOptions

Scores = dict[str, np.ndarray]
OnResult = Callable[[EpisodeResult], None]


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
        """JSON-ready."""
        return {"mission": self.mission, "policy": self.policy, "episodes": self.episodes,
                "failed": self.failed, "mean": vars(self.mean), "iqm": vars(self.iqm),
                "difference": None if self.difference is None else vars(self.difference),
                "p_improvement": None if self.improvement is None else vars(self.improvement)}


@dataclass
class EachResult:
    """``--each``: every policy's own run and the rows comparing them."""

    baseline: str
    reports: dict[str, EvalReport]
    rows: list[EachRow] = field(default_factory=list)

    @property
    def episodes(self) -> list[EpisodeResult]:
        """Every episode of every run."""
        return [e for report in self.reports.values() for e in report.episodes]

    def to_document(self) -> dict[str, Any]:
        """JSON-ready: the rows and each policy's full results document."""
        return {"each": {"baseline": self.baseline, "rows": [r.to_dict() for r in self.rows]},
                "runs": {name: report.to_document() for name, report in self.reports.items()}}


def evaluate_each(config: EvalConfig, options: RunOptions | None = None,
                  on_result: OnResult | None = None, seed: int = 0) -> EachResult:
    """Evaluate every policy of ``config`` on its own (see the module docstring)."""
    reports = {}
    for spec in config.policies:
        alone = replace(config, policies=(replace(spec, weight=1.0),))
        reports[spec.name] = evaluate(alone, options, on_result=on_result)
    names = list(reports)
    scores = [episode_scores(reports[n].episodes) for n in names]
    result = EachResult(names[0], reports)
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


def _each_row(mission: str, name: str, own: Scores, base: Scores, report: EvalReport,
              is_baseline: bool, seed: int) -> EachRow:
    failed = sum(1 for e in report.episodes if not e.ok and mission in (OVERALL, e.mission))
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
    """The two sides of ``mission``'s agents, as agent positions (``ValueError`` for one)."""
    ids = [str(spec.agent_id) for spec in mission.agents()]
    if len(ids) < 2:
        raise ValueError(f"mission '{mission.name}' has one agent: cross-play needs two sides")
    prefixes = [re.sub(r"[_\-]?\d+$", "", agent) for agent in ids]
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"row": vars(self.row), "col": vars(self.col), "episodes": self.episodes}


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
        return {"mission": self.mission, "row_agents": self.row_agents,
                "col_agents": self.col_agents, "policies": self.policies,
                "cells": [[c.to_dict() for c in row] for row in self.cells]}


@dataclass
class CrossResult:
    """``--cross``: one table per mission, and every run's episodes."""

    tables: list[CrossTable]
    episodes: list[EpisodeResult]

    def to_document(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"cross": [t.to_dict() for t in self.tables],
                "episodes": [e.to_dict() for e in self.episodes]}


def cross_play(config: EvalConfig, options: RunOptions | None = None,
               on_result: OnResult | None = None, seed: int = 0) -> CrossResult:
    """Play every ordered pair of ``config``'s policies on every mission (module docstring)."""
    tables, episodes = [], []
    specs = [replace(s, weight=1.0) for s in config.policies]
    for mission in config.missions:
        row_side, col_side = sides(mission)
        ids = [str(spec.agent_id) for spec in mission.agents()]
        cells = []
        for i, mine in enumerate(specs):
            line = []
            for j, theirs in enumerate(specs):
                pair = (mine,) if i == j else (mine, theirs)
                seating = tuple(0 if k in row_side or i == j else 1 for k in range(len(ids)))
                report = evaluate(replace(config, missions=(mission,), policies=pair), options,
                                  on_result=on_result, seating=seating)
                episodes += report.episodes
                line.append(_cell(report.episodes, {ids[k] for k in row_side},
                                  {ids[k] for k in col_side}, seed))
            cells.append(line)
        tables.append(CrossTable(mission.name, [ids[k] for k in row_side],
                                 [ids[k] for k in col_side], [s.name for s in specs], cells))
    return CrossResult(tables, episodes)


def _cell(episodes: list[EpisodeResult], row: set[str], col: set[str], seed: int) -> CrossCell:
    out = [stratified_bootstrap(scores, aggregate_mean, reps=1000, seed=seed) if scores
           else Interval(math.nan, math.nan, math.nan)
           for scores in (episode_scores(episodes, agents) for agents in (row, col))]
    return CrossCell(out[0], out[1], sum(1 for e in episodes if e.ok))
