"""The environment contract: the PettingZoo Parallel API with gymnasium spaces, which the
built-in environments implement natively and any PettingZoo parallel environment meets."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium
import numpy as np

AgentID = Hashable
"""Agent ids may be any hashable: strings such as ``"agent_0"`` or plain ints."""


@dataclass(frozen=True)
class AgentSpec:
    """Everything a policy factory may know about the agent it will play."""

    mission: str
    """Name of the mission, e.g. ``"harvest"``."""
    agent_id: Any
    """The environment's id of the agent (any hashable)."""
    agent_index: int
    """Position of the agent in ``env.possible_agents``."""
    observation_space: gymnasium.spaces.Space[Any]
    """What the agent observes."""
    action_space: gymnasium.spaces.Space[Any]
    """What the agent may do."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """The mission's environment parameters (map size, number of agents, ...)."""


@runtime_checkable
class ParallelEnv(Protocol):
    """What parcat needs from an environment (PettingZoo's Parallel API).

    ``agents`` lists the agents alive now; ``possible_agents`` every agent that can ever
    appear, in a fixed order that parcat derives per-agent seeds from.
    """

    agents: list[Any]
    possible_agents: list[Any]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, dict[str, Any]]]:
        """Start an episode; ``options={"task": task}`` resets to that task."""
        ...

    def step(self, actions: Mapping[Any, Any]) -> tuple[
        dict[Any, Any], dict[Any, float], dict[Any, bool], dict[Any, bool],
        dict[Any, dict[str, Any]],
    ]:
        """Apply one action per live agent; return obs, rewards, terms, truncs, infos."""
        ...

    def observation_space(self, agent: Any) -> gymnasium.spaces.Space[Any]:
        """The observation space of ``agent``."""
        ...

    def action_space(self, agent: Any) -> gymnasium.spaces.Space[Any]:
        """The action space of ``agent``."""
        ...


@runtime_checkable
class TaskEnv(Protocol):
    """Optional: an environment with a distribution of tasks (meta-learning)."""

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        """Draw one task from the environment's task distribution."""
        ...


@runtime_checkable
class StatsEnv(Protocol):
    """Optional: an environment that reports statistics of the episode so far."""

    def episode_stats(self) -> dict[str, float]:
        """Numbers that describe the episode so far (deliveries, capture time, ...)."""
        ...
