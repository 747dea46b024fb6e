"""What one epoch did: the record every logger writes and the live display shows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from parcat.core.jsontext import finite

_ORDER = ("epoch", "env_steps", "total_env_steps", "episodes", "reward", "reward_min",
          "reward_max", "episode_length", "loss", "epsilon", "collect_s", "train_s", "idle_s",
          "env_steps_per_s", "discarded_episodes", "overlap_steps", "time_s", "timestamp",
          "learner_metrics", "eval_return", "best_eval_return", "best")
"""The keys of a metrics record, in the order the log has always written them."""


@dataclass
class EpochStats:
    """One epoch of a run; one line of the metrics log. Episodes run across epochs: an
    epoch's rewards are those of the episodes that finished in it."""

    epoch: int
    """The epoch's number, from 1."""
    env_steps: int
    """Environment steps taken in this epoch (all environments)."""
    episodes: int
    """Episodes that finished in this epoch."""
    reward: dict[str, float]
    """Per agent: the mean return of those episodes (NaN: none finished)."""
    loss: dict[str, float]
    """Per learner: the last training loss (NaN: none yet)."""
    epsilon: float
    """The exploration rate at the epoch's end (NaN: the learner explores otherwise)."""
    collect_s: float
    train_s: float
    """Seconds training (async: the last round's, in the learner process)."""
    idle_s: float
    """Async: seconds collection waited for the learner."""
    env_steps_per_s: float
    discarded_episodes: int = 0
    """Episodes lost with an environment worker that was restarted."""
    overlap_steps: list[int] = field(default_factory=list)
    """Async: collection steps taken while each learning round that finished ran."""
    reward_min: dict[str, float] = field(default_factory=dict)
    reward_max: dict[str, float] = field(default_factory=dict)
    episode_length: float = math.nan
    """The mean length of the episodes that finished (steps)."""
    total_env_steps: int = 0
    """Environment steps since the run began (resumed epochs included)."""
    time_s: float = 0.0
    """Wall-clock seconds since the run began (across resumes)."""
    timestamp: str = ""
    """When the epoch ended: ISO 8601, UTC."""
    learner_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per learner: the other metrics its last training step reported."""
    eval_return: dict[str, float] = field(default_factory=dict)
    """Mean greedy evaluation return per agent and ``total``, their sum over the agents
    (NaN between checkpoints)."""
    best_eval_return: float = math.nan
    """The highest ``eval_return.total`` so far (the one ``RUN/best`` holds; NaN: none, or
    a mission with sides, which ``best`` has)."""
    best: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per side (``total`` where the agents share a role): ``RUN/best``'s ``epoch``, its
    evaluation ``return`` and its confirmation's ``mean``, ``low``, ``high``, ``episodes``
    (NaN: none)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN becomes null)."""
        return {key: finite(getattr(self, key)) for key in _ORDER}


def episode_summary(finished: list[tuple[int, list[float]]],
                    agents: list[Any]) -> dict[str, Any]:
    """``episodes``, ``reward`` (mean), ``reward_min``, ``reward_max`` and ``episode_length``
    of the episodes that finished, each (length, per-agent returns)."""
    per_agent = {str(a): [r[i] for _, r in finished] for i, a in enumerate(agents)}
    return {
        "episodes": len(finished),
        "reward": {a: _mean(v) for a, v in per_agent.items()},
        "reward_min": {a: min(v, default=math.nan) for a, v in per_agent.items()},
        "reward_max": {a: max(v, default=math.nan) for a, v in per_agent.items()},
        "episode_length": _mean([float(n) for n, _ in finished]),
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
