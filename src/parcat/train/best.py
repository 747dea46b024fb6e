"""The best checkpoint of each side of a run (``RUN/best``): what it scored, read back from
its manifest on ``--resume``. Agents of several roles (evade's pursuers and evader) have a
side each, with its own best; agents of one role have one side, ``total``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.errors import CheckpointError
from parcat.policies import checkpoint

TOTAL = "total"
"""The key of the mean summed return over all agents in an ``eval_return``; the one side of
agents that share a role."""


@dataclass(frozen=True)
class SideBest:
    """One side's best checkpoint so far (``best/`` holds its agents)."""

    eval_return: float = -math.inf
    """Its evaluation return: per agent of the side, or summed over agents for ``total``."""
    epoch: int = 0
    interval: Mapping[str, float] = field(default_factory=dict)
    """Its confirmation on ``best_episodes`` (``mean``, ``low``, ``high``, ``episodes``)."""

    @property
    def confirmed(self) -> float:
        """The mean of its confirmation (``-inf``: none)."""
        mean = _number(self.interval.get("mean"))
        return mean if math.isfinite(mean) else -math.inf

    def record(self) -> dict[str, float]:
        """The metrics log's record of it (NaN: none)."""
        finite = math.isfinite(self.eval_return)
        return {"epoch": self.epoch if finite else math.nan,
                "return": self.eval_return if finite else math.nan,
                **{key: _number(self.interval.get(key))
                   for key in ("mean", "low", "high", "episodes")}}

    def manifest(self, agents: list[str], side: str) -> dict[str, Any]:
        """``best/manifest.json``'s ``sides`` entry."""
        return {"agents": agents, "epoch": self.epoch, "eval_return": self.eval_return,
                "label": side_label(side), **({"best_return": dict(self.interval)}
                                             if self.interval else {})}


def _number(value: Any) -> float:
    """A number a manifest holds (``null``, or none: NaN)."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def side_label(side: str) -> str:
    """What a side's return is: ``total`` is summed over agents, a side's per agent."""
    return "sum over agents" if side == TOTAL else "mean per agent"


def side_score(eval_return: Mapping[str, float], side: str, agents: list[str]) -> float:
    """A side's evaluation return: ``total``'s, or the mean of its agents' (NaN: none)."""
    if side == TOTAL:
        return float(eval_return.get(TOTAL, math.nan))
    return float(np.mean([eval_return.get(a, math.nan) for a in agents]))


def read_best(run: Path, names: Iterable[str]) -> dict[str, SideBest]:
    """The best in ``run/best`` of each side ``names`` names (none: ``-inf``), from its
    manifest's ``sides`` or, written before sides, its total."""
    try:
        manifest = checkpoint.read_manifest(run / checkpoint.BEST)
    except CheckpointError:
        manifest = {}
    saved = manifest.get("sides") or {TOTAL: {
        "eval_return": (manifest.get("eval_return") or {}).get(TOTAL),
        "epoch": manifest.get("epoch", 0), "best_return": manifest.get("best_return")}}
    best = {}
    for side in names:
        entry = saved.get(side) or {}
        score, interval = _number(entry.get("eval_return")), entry.get("best_return")
        best[side] = SideBest() if math.isnan(score) else SideBest(
            score, int(entry.get("epoch") or 0), interval if isinstance(interval, dict) else {})
    return best


def interval(values: np.ndarray, seed: int) -> dict[str, float]:
    """The mean of ``values`` with a bootstrap 95% interval (``low``, ``high``) and their
    number (``episodes``)."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (2000, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"mean": float(values.mean()), "low": float(low), "high": float(high),
            "episodes": len(values)}
