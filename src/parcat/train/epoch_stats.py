"""What one epoch did: the record every logger writes and the live display shows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from parcat.core.jsontext import finite


@dataclass
class EpochStats:
    """One epoch of a run; one line of the metrics log.

    Episodes run across epochs: an epoch's rewards are those of the episodes that finished
    in it, whenever they began.
    """

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
    """The exploration rate at the epoch's end (NaN, null in the log: the learner explores
    otherwise, as PPO does by sampling its policy)."""
    collect_s: float
    """Seconds collecting."""
    train_s: float
    """Seconds training (async: the last round's, in the learner process)."""
    idle_s: float
    """Async: seconds collection waited for the learner."""
    env_steps_per_s: float
    """Collection speed."""
    discarded_episodes: int = 0
    """Episodes lost with an environment worker that was restarted."""
    overlap_steps: list[int] = field(default_factory=list)
    """Async: collection steps taken while each learning round that finished ran."""
    reward_min: dict[str, float] = field(default_factory=dict)
    """Per agent: the lowest return of the episodes that finished."""
    reward_max: dict[str, float] = field(default_factory=dict)
    """Per agent: the highest return of the episodes that finished."""
    episode_length: float = math.nan
    """The mean length of the episodes that finished (steps)."""
    total_env_steps: int = 0
    """Environment steps since the run began (all environments, resumed epochs included)."""
    time_s: float = 0.0
    """Wall-clock seconds since the run began (across resumes)."""
    timestamp: str = ""
    """When the epoch ended: ISO 8601, UTC."""
    learner_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per learner: the other metrics its last training step reported (PPO's
    ``policy_loss``, ``value_loss``, ``entropy``, ``approx_kl``; DQN's ``q_mean``, ...)."""
    eval_return: dict[str, float] = field(default_factory=dict)
    """Mean greedy evaluation return per agent and ``total`` (NaN between checkpoints;
    empty with ``eval_episodes`` 0)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN becomes null)."""
        return {
            "epoch": self.epoch, "env_steps": self.env_steps,
            "total_env_steps": self.total_env_steps, "episodes": self.episodes,
            "reward": finite(self.reward),
            "reward_min": finite(self.reward_min),
            "reward_max": finite(self.reward_max),
            "episode_length": None if math.isnan(self.episode_length) else self.episode_length,
            "loss": finite(self.loss),
            "epsilon": None if math.isnan(self.epsilon) else self.epsilon,
            "collect_s": self.collect_s, "train_s": self.train_s,
            "idle_s": self.idle_s, "env_steps_per_s": self.env_steps_per_s,
            "discarded_episodes": self.discarded_episodes,
            "overlap_steps": self.overlap_steps,
            "time_s": self.time_s, "timestamp": self.timestamp,
            "learner_metrics": {name: finite(m) for name, m in self.learner_metrics.items()},
            "eval_return": finite(self.eval_return),
        }


class EpisodeTally:
    """The episodes that finished in one epoch: (length, per-agent returns) each."""

    def __init__(self, agents: list[Any]) -> None:
        self.agents = [str(a) for a in agents]
        self.lengths: list[int] = []
        self.returns: list[list[float]] = []

    def add(self, finished: list[tuple[int, list[float]]]) -> None:
        """Count episodes that ended in a step."""
        for length, returns in finished:
            self.lengths.append(length)
            self.returns.append(returns)

    def summary(self) -> dict[str, Any]:
        """``episodes``, ``reward`` (mean), ``reward_min``, ``reward_max``, ``episode_length``."""
        per_agent = {a: [r[i] for r in self.returns] for i, a in enumerate(self.agents)}
        return {
            "episodes": len(self.lengths),
            "reward": {a: _mean(v) for a, v in per_agent.items()},
            "reward_min": {a: min(v, default=math.nan) for a, v in per_agent.items()},
            "reward_max": {a: max(v, default=math.nan) for a, v in per_agent.items()},
            "episode_length": _mean([float(n) for n in self.lengths]),
        }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
