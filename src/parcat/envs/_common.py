"""What the built-in environments share: parameter checks and PettingZoo bookkeeping.

Every check raises :class:`MissionError` worded ``"<env>: parameter '<name>' must be <what>,
got <value>"``, so all three environments report bad parameters the same way. The result
helpers key per-agent arrays by agent id, in the order of the agents they are given.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from parcat.errors import MissionError

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
    return MissionError(f"{env}: parameter '{name}' must be {expected}, got {value!r}")


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
    bounds = f">= {low}" if high is None else f"between {low} and {high}{why}"
    raise invalid_parameter(env, name, f"an integer {bounds}", value)


def require_positive(env: str, name: str, value: Any) -> float:
    """Return ``value`` as a finite float ``> 0`` or raise :func:`invalid_parameter`."""
    number = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if number and math.isfinite(value) and value > 0:
        return float(value)
    raise invalid_parameter(env, name, "a number > 0", value)


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
