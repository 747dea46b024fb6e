"""Value over replacement (``parcat eval --candidate SPEC``): how much a candidate raises the
mean score of a pool of policies (the ``-p`` policies, sharing the agents by weight) when it
takes one member's place, as cogames' ``pickup`` scores it, but paired and parallel.

The pool plays once, then once per member with the candidate in that member's place (with
its weight, so the agents are seated alike); every run plays the same episode seeds, so each
difference is taken episode by episode. A row per member says what replacing it does; the
``mean`` row averages over members, episode by episode. Intervals: the stratified bootstrap
of :mod:`parcat.eval.stats` over the paired differences.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from parcat.core.errors import ConfigError
from parcat.episode.results import EpisodeResult
from parcat.eval.evaluate import EvalConfig, EvalReport, evaluate
from parcat.eval.stats import Interval, aggregate_mean, stratified_bootstrap
from parcat.eval.tournament import OnResult, interrupted
from parcat.parallel.run_options import RunOptions
from parcat.policies.specs import PolicySpec

MEAN = "mean"
"""The row averaged over every member replaced."""


@dataclass(frozen=True)
class ReplacementRow:
    """The candidate in place of one member (or of each, on average) on one mission."""

    mission: str
    replaced: str
    episodes: int
    """Episodes both runs finished (the pairs)."""
    pool: Interval
    """The pool's mean score per agent."""
    with_candidate: Interval
    difference: Interval
    """With the candidate minus the pool, episode by episode."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@dataclass
class ReplacementResult:
    """``--candidate``: the pool's run, one run per member replaced, and the rows."""

    candidate: str
    reports: dict[str, EvalReport]
    """``pool``'s run, then each replaced member's, by its name."""
    rows: list[ReplacementRow] = field(default_factory=list)

    @property
    def episodes(self) -> list[EpisodeResult]:
        """Every episode of every run."""
        return [e for report in self.reports.values() for e in report.episodes]

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C stopped it (the rows are of what ran)."""
        return interrupted(list(self.reports.values()))

    def to_document(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"replacement": {"candidate": self.candidate,
                                "rows": [r.to_dict() for r in self.rows]},
                "runs": {name: r.to_document() for name, r in self.reports.items()}}


def value_over_replacement(config: EvalConfig, candidate: PolicySpec,
                           options: RunOptions | None = None, on_result: OnResult | None = None,
                           seed: int = 0) -> ReplacementResult:
    """Play ``config``'s pool, then ``candidate`` in each member's place (module docstring)."""
    members = [spec.name for spec in config.policies]
    if candidate.name in members:
        raise ConfigError(f"--candidate '{candidate.name}' is in the pool already (-p); give "
                          "a policy the pool does not have")
    result = ReplacementResult(candidate.name, {"pool": evaluate(config, options, on_result)})
    for k, replaced in enumerate(config.policies):
        if result.interrupted:
            break  # Ctrl-C: the rows of the members replaced so far
        swapped = tuple(replace(candidate, weight=replaced.weight) if i == k else spec
                        for i, spec in enumerate(config.policies))
        result.reports[replaced.name] = evaluate(replace(config, policies=swapped), options,
                                                 on_result)
    members = [m for m in members if m in result.reports]
    base = _by_episode(result.reports["pool"].episodes)
    for mission in config.missions:
        pool = base.get(mission.name, {})
        swaps = [_by_episode(result.reports[m].episodes).get(mission.name, {}) for m in members]
        for member, swap in zip(members, swaps, strict=True):
            result.rows.append(_row(mission.name, member, pool, [swap], seed))
        if len(members) > 1:
            result.rows.append(_row(mission.name, MEAN, pool, swaps, seed))
    return result


def _by_episode(episodes: list[EpisodeResult]) -> dict[str, dict[int, float]]:
    """Per mission, each finished episode's mean agent return by its index."""
    found: dict[str, dict[int, float]] = {}
    for e in episodes:
        rewards = [a.reward for a in e.agents]
        if e.ok and rewards and all(math.isfinite(r) for r in rewards):
            found.setdefault(e.mission, {})[e.episode_index] = sum(rewards) / len(rewards)
    return found


def _row(mission: str, replaced: str, pool: dict[int, float], swaps: list[dict[int, float]],
         seed: int) -> ReplacementRow:
    common = sorted(set(pool).intersection(*swaps))
    if not common:
        nan = Interval(math.nan, math.nan, math.nan)
        return ReplacementRow(mission, replaced, 0, nan, nan, nan)
    before = np.array([pool[i] for i in common])
    after = np.mean([[swap[i] for i in common] for swap in swaps], axis=0)

    def interval(values: np.ndarray) -> Interval:
        return stratified_bootstrap({mission: values}, aggregate_mean, reps=1000, seed=seed)
    return ReplacementRow(mission, replaced, len(common), interval(before), interval(after),
                          interval(after - before))
