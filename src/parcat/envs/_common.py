"""What the built-in environments share: parameter checks and PettingZoo bookkeeping.

Every check raises :class:`MissionError` worded ``"<env>: parameter '<name>' must be <what>,
got <value>"``, so all three environments report bad parameters the same way. The result
helpers key per-agent arrays by agent id, in the order of the agents they are given.
:class:`BuiltinEnv` is the Parallel API around an environment's own episode start, step and
observation.
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
"""What ``step`` returns: observations, rewards, terminations, truncations, infos."""

ResetResult = tuple[dict[str, NDArray[np.float32]], dict[str, dict[str, Any]]]
"""What ``reset`` returns: observations and infos."""


def make_metadata(env: str) -> dict[str, Any]:
    """PettingZoo ``metadata`` of a built-in environment: its name and ansi rendering."""
    return {"name": env, "render_modes": ["ansi"]}


def invalid_parameter(env: str, name: str, expected: str, value: Any) -> MissionError:
    """The error for parameter ``name`` of ``env``: it ``must be {expected}``, got ``value``."""
    return MissionError(f"{env}: parameter '{name}' must be {expected}, got {brief(value)}")


def require_int(
    env: str, name: str, value: Any, low: int, high: int | None = None, why: str = ""
) -> int:
    """Return ``value`` as an int in ``low..high`` or raise :func:`invalid_parameter`.

    Args:
        env: Environment name that starts the message.
        name: Parameter name.
        value: What the user gave.
        low: Smallest allowed value.
        high: Largest allowed value; ``None`` for no bound.
        why: Said after the bounds (when there is a ``high``) to explain where it comes from.
    """
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if ok and value >= low and (high is None or value <= high):
        return int(value)
    bounds = f">= {low}" if high is None else f"between {low} and {high:,}{why}"
    raise invalid_parameter(env, name, f"an integer {bounds}", value)


def require_positive(env: str, name: str, value: Any) -> float:
    """Return ``value`` as a float in ``(0, MAX_ENV_NUMBER]`` or raise :func:`invalid_parameter`."""
    number = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if number and math.isfinite(value) and 0 < value <= MAX_ENV_NUMBER:
        return float(value)
    raise invalid_parameter(env, name, f"a number > 0 and <= {MAX_ENV_NUMBER:g}", value)


def require_observation_size(env: str, agents: int, length: int, fix: str) -> None:
    """Refuse an environment whose agents together observe more than
    :data:`~parcat.core.limits.MAX_OBSERVATION_FLOATS` numbers a step, before it allocates them.

    Args:
        env: Environment name that starts the message.
        agents: Number of agents.
        length: Length of one agent's observation.
        fix: What to lower, e.g. ``"fewer agents or a smaller view"``.
    """
    total = agents * length
    if total > MAX_OBSERVATION_FLOATS:
        raise MissionError(
            f"{env}: {agents:,} agents observing {length:,} numbers each make {total:,} numbers "
            f"a step, more than the limit of {MAX_OBSERVATION_FLOATS:,}; use {fix}"
        )


def make_rng(seed: int | None, current: np.random.Generator | None) -> np.random.Generator:
    """The generator of a new episode: a fresh one when seeded or at first, else ``current``."""
    if seed is not None or current is None:
        return np.random.default_rng(seed)
    return current


def reset_result(agents: list[str], obs: NDArray[np.float32]) -> ResetResult:
    """Key the rows of ``obs`` by agent id, with an empty info per agent."""
    return {a: obs[i] for i, a in enumerate(agents)}, {a: {} for a in agents}


def step_result(
    agents: list[str],
    obs: NDArray[np.float32],
    rewards: NDArray[np.float64],
    *,
    terminated: bool,
    truncated: bool,
) -> StepResult:
    """Key one step's observation rows and rewards by agent id; every agent ends together."""
    return (
        {a: obs[i] for i, a in enumerate(agents)},
        dict(zip(agents, rewards.tolist(), strict=True)),
        dict.fromkeys(agents, terminated),
        dict.fromkeys(agents, truncated),
        {a: {} for a in agents},
    )


class BuiltinEnv(ABC):
    """The PettingZoo Parallel API of a built-in environment, around its own mechanics.

    A subclass names itself in its class statement (``class HarvestEnv(BuiltinEnv,
    name="harvest")``), which gives its ``metadata`` and starts its runtime errors. Its
    constructor calls :meth:`_set_agents` and sets ``_obs_space`` (one Box for every agent) and
    ``_act_space``; it implements :meth:`_start`, :meth:`_advance` and :meth:`_observe`.
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

    def __init_subclass__(cls, *, name: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.metadata = make_metadata(name)

    def _set_agents(self, possible_agents: list[str], max_steps: Any) -> None:
        """Set the agents and the step limit (checked), before any episode."""
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

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start an episode.

        Args:
            seed: Seeds the episode's generator; ``None`` keeps the current one (fresh entropy
                on the first reset).
            options: The environment's reset options (see its class docstring).

        Returns:
            Observations and (empty) infos keyed by agent id.
        """
        self._rng = make_rng(seed, self._rng)
        self._start(self._rng, options or {})
        return reset_result(self.agents, self._observe())

    def step(self, actions: dict[str, Any]) -> StepResult:
        """Apply one action per live agent; once the episode is over, return empty dicts.

        Args:
            actions: One action per live agent, from its action space.

        Returns:
            Observations, rewards, terminations, truncations and infos keyed by agent id.
        """
        if self._rng is None:
            raise RuntimeError(f"{self.metadata['name']}: call reset() before step()")
        if not self.agents:
            return {}, {}, {}, {}, {}
        agents = self.agents
        rewards, terminated = self._advance(actions)
        truncated = not terminated and self._steps >= self.max_steps
        obs = self._observe()
        result = step_result(agents, obs, rewards, terminated=terminated, truncated=truncated)
        if terminated or truncated:
            self.agents = []
        return result

    def close(self) -> None:
        """Nothing to release."""
        return None

    @abstractmethod
    def _start(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Lay out a new episode (drawing from ``rng``), make every agent live, zero ``_steps``.

        Raises:
            MissionError: an option is invalid.
        """

    @abstractmethod
    def _advance(self, actions: dict[str, Any]) -> tuple[NDArray[np.float64], bool]:
        """Apply the live agents' actions and count the step in ``_steps``.

        Returns:
            The reward of every live agent, and whether the episode has terminated.
        """

    @abstractmethod
    def _observe(self) -> NDArray[np.float32]:
        """Every agent's observation, one row per agent, in a freshly allocated array."""
