"""What the built-in environments share: parameter checks and the Parallel API.

Every check raises :class:`MissionError` worded ``"<env>: parameter '<name>' must be <what>,
got <value>"``, so all three environments report bad parameters the same way.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import gymnasium
import numpy as np
from numpy.typing import NDArray

from parcat.core.errors import MissionError, brief
from parcat.core.limits import MAX_ENV_NUMBER, MAX_EPISODE_STEPS, MAX_OBSERVATION_FLOATS

StepResult = tuple[
    dict[str, NDArray[np.float32]],
    dict[str, float],
    dict[str, bool],
    dict[str, bool],
    dict[str, dict[str, Any]],
]
ResetResult = tuple[dict[str, NDArray[np.float32]], dict[str, dict[str, Any]]]


def invalid_parameter(env: str, name: str, expected: str, value: Any) -> MissionError:
    """The error for parameter ``name`` of ``env``: it ``must be {expected}``, got ``value``."""
    return MissionError(f"{env}: parameter '{name}' must be {expected}, got {brief(value)}")


def require_int(env: str, name: str, value: Any, low: int, high: int | None = None,
                why: str = "") -> int:
    """``value`` as an int in ``low..high`` (``None``: unbounded); ``why`` follows the bounds."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if ok and value >= low and (high is None or value <= high):
        return int(value)
    bounds = f">= {low}" if high is None else f"between {low} and {high:,}{why}"
    raise invalid_parameter(env, name, f"an integer {bounds}", value)


def require_positive(env: str, name: str, value: Any) -> float:
    """``value`` as a float in ``(0, MAX_ENV_NUMBER]``."""
    number = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if number and math.isfinite(value) and 0 < value <= MAX_ENV_NUMBER:
        return float(value)
    raise invalid_parameter(env, name, f"a number > 0 and <= {MAX_ENV_NUMBER:g}", value)


def require_observation_size(env: str, agents: int, length: int, fix: str) -> None:
    """Refuse agents that together observe more than ``MAX_OBSERVATION_FLOATS`` numbers a
    step, before they are allocated; ``fix`` says what to lower."""
    total = agents * length
    if total > MAX_OBSERVATION_FLOATS:
        raise MissionError(f"{env}: {agents:,} agents observing {length:,} numbers each make "
                           f"{total:,} numbers a step, more than the limit of "
                           f"{MAX_OBSERVATION_FLOATS:,}; use {fix}")


class BuiltinEnv(ABC):
    """The PettingZoo Parallel API of a built-in environment, around its own mechanics.

    A subclass names itself in its class statement (``class HarvestEnv(BuiltinEnv,
    name="harvest", legend={...})``, the legend saying what its picture's characters mean).
    Its constructor calls :meth:`_set_agents` and sets ``_obs_space`` (one Box for every
    agent) and ``_act_space``; it implements ``_start``, ``_advance`` and ``_observe``.
    """

    metadata: dict[str, Any]
    render_mode: str | None = None
    """PettingZoo's render mode: none chosen (:meth:`render` draws text whenever asked)."""
    possible_agents: list[str]
    agents: list[str]
    max_steps: int
    _obs_space: gymnasium.spaces.Box
    _act_space: gymnasium.spaces.Space[Any]
    _rng: np.random.Generator | None
    _steps: int

    def __init_subclass__(cls, *, name: str, legend: dict[str, str] | None = None,
                          **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the legend: what the characters of render()'s picture mean (parcat replay shows it)
        cls.metadata = {"name": name, "render_modes": ["ansi"], "legend": legend or {}}

    def _set_agents(self, possible_agents: list[str], max_steps: Any) -> None:
        name = self.metadata["name"]
        self.max_steps = require_int(name, "max_steps", max_steps, 1, MAX_EPISODE_STEPS)
        self.possible_agents = possible_agents
        self.agents = []
        self._rng = None
        self._steps = 0

    @property
    def unwrapped(self) -> BuiltinEnv:
        """The environment itself (PettingZoo's wrappers and tests ask for it)."""
        return self

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        """The observation space of ``agent`` (the same object for every agent)."""
        return self._obs_space

    def action_space(self, agent: str) -> gymnasium.spaces.Space[Any]:
        """The action space of ``agent`` (the same object for every agent)."""
        return self._act_space

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> ResetResult:
        """Start an episode; ``seed=None`` keeps the current generator (fresh at first)."""
        if seed is not None or self._rng is None:
            self._rng = np.random.default_rng(seed)
        self._start(self._rng, options or {})
        obs = self._observe()
        return {a: obs[i] for i, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> StepResult:
        """Apply one action per live agent; once the episode is over, return empty dicts."""
        if self._rng is None:
            raise RuntimeError(f"{self.metadata['name']}: call reset() before step()")
        if not self.agents:
            return {}, {}, {}, {}, {}
        agents = self.agents
        rewards, terminated = self._advance(actions)
        truncated = not terminated and self._steps >= self.max_steps
        obs = self._observe()
        if terminated or truncated:
            self.agents = []
        return (
            {a: obs[i] for i, a in enumerate(agents)},
            dict(zip(agents, rewards.tolist(), strict=True)),
            dict.fromkeys(agents, terminated),
            dict.fromkeys(agents, truncated),
            {a: {} for a in agents},
        )

    def close(self) -> None:
        """Nothing to release."""
        return None

    @abstractmethod
    def _start(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Lay out a new episode from ``rng``, make every agent live, zero ``_steps``."""

    @abstractmethod
    def _advance(self, actions: dict[str, Any]) -> tuple[NDArray[np.float64], bool]:
        """Apply the live agents' actions, count the step; return rewards and termination."""

    @abstractmethod
    def _observe(self) -> NDArray[np.float32]:
        """Every agent's observation, one row per agent, in a freshly allocated array."""
