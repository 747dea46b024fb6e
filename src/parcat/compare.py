"""``parcat compare A.json B.json``: is B better than A, per mission and overall?

Each episode's score is the mean per-agent return of one policy (default: all agents).
Per mission and overall: A's and B's mean and IQM, the difference B − A with a stratified
bootstrap 95% interval, and the probability of improvement P(B > A) with its interval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parcat.errors import ConfigError
from parcat.report import SCHEMA
from parcat.results import EpisodeResult
from parcat.stats import (
    Interval,
    aggregate_iqm,
    aggregate_mean,
    average_improvement_probability,
    mean_difference,
    paired_bootstrap,
    stratified_bootstrap,
)

OVERALL = "overall"


@dataclass(frozen=True)
class Comparison:
    """One row: a mission (or ``overall``)."""

    mission: str
    episodes_a: int
    episodes_b: int
    mean_a: float
    mean_b: float
    iqm_a: float
    iqm_b: float
    difference: Interval
    improvement: Interval

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "mission": self.mission, "episodes_a": self.episodes_a,
            "episodes_b": self.episodes_b, "mean_a": self.mean_a, "mean_b": self.mean_b,
            "iqm_a": self.iqm_a, "iqm_b": self.iqm_b,
            "difference": vars(self.difference), "p_improvement": vars(self.improvement),
        }


def load_scores(path: str | Path, policy: str = "*") -> dict[str, np.ndarray]:
    """Per mission, the per-episode score of ``policy`` in a results file.

    Raises:
        ConfigError: not a parcat results file, or the policy played no finished episode.
    """
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read results file '{path}': {exc}") from exc
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ConfigError(f"'{path}' is not a parcat eval results file")
    scores: dict[str, list[float]] = {}
    for index, data in enumerate(document.get("episodes", [])):
        try:
            episode = EpisodeResult.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"'{path}': episode {index} is malformed ({exc!r})") from exc
        if not episode.ok:
            continue
        rewards = [a.reward for a in episode.agents if policy in ("*", a.policy)]
        if rewards:
            scores.setdefault(episode.mission, []).append(sum(rewards) / len(rewards))
    if not scores:
        raise ConfigError(f"'{path}' has no finished episodes of policy '{policy}'")
    return {k: np.asarray(v) for k, v in scores.items()}


def compare(a: dict[str, np.ndarray], b: dict[str, np.ndarray], seed: int = 0,
            reps: int = 2000) -> list[Comparison]:
    """Rows for every mission both sides evaluated, then ``overall``.

    Raises:
        ConfigError: the two files share no mission.
    """
    common = sorted(set(a) & set(b))
    if not common:
        raise ConfigError(f"the results share no mission (A: {sorted(a)}, B: {sorted(b)})")
    rows = [_row(m, {m: a[m]}, {m: b[m]}, seed, reps) for m in common]
    if len(common) > 1:
        rows.append(_row(OVERALL, {m: a[m] for m in common}, {m: b[m] for m in common},
                         seed, reps))
    return rows


def _row(name: str, a: dict[str, np.ndarray], b: dict[str, np.ndarray], seed: int,
         reps: int) -> Comparison:
    def diff(x: Any, y: Any) -> float:
        return mean_difference(y, x)

    def improve(x: Any, y: Any) -> float:
        return average_improvement_probability(y, x)

    return Comparison(
        mission=name,
        episodes_a=sum(v.size for v in a.values()),
        episodes_b=sum(v.size for v in b.values()),
        mean_a=aggregate_mean(a), mean_b=aggregate_mean(b),
        iqm_a=stratified_bootstrap(a, aggregate_iqm, reps=200, seed=seed).value,
        iqm_b=stratified_bootstrap(b, aggregate_iqm, reps=200, seed=seed).value,
        difference=paired_bootstrap(a, b, diff, reps=reps, seed=seed),
        improvement=paired_bootstrap(a, b, improve, reps=reps, seed=seed + 1),
    )
