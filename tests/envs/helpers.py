"""Helpers shared by the environment tests: seeded trajectories and per-step API checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def trajectory(
    env: Any, seed: int, draw_action: Callable[[np.random.Generator], Any], steps: int = 30
) -> list[Any]:
    """Obs and rewards of up to ``steps`` steps; ``draw_action`` draws each agent's action."""
    obs, _ = env.reset(seed=seed)
    actions_rng = np.random.default_rng(1234)
    record: list[Any] = [obs]
    for _ in range(steps):
        if not env.agents:
            break
        obs, rewards, *_ = env.step({a: draw_action(actions_rng) for a in env.agents})
        record += [obs, rewards]
    return record


def same(a: list[Any], b: list[Any]) -> bool:
    """Whether two trajectories are bit-identical."""
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


def assert_step_follows_spaces(env: Any, result: tuple[dict[str, Any], ...]) -> None:
    """Assert that one step of every agent returned what the PettingZoo API promises.

    Every part of ``result`` is keyed by every agent in ``possible_agents`` order, observations
    are float32 and inside their space, and rewards are plain floats.
    """
    obs, rewards, *_ = result
    for part in result:
        assert list(part) == env.possible_agents
    for agent, o in obs.items():
        assert o.dtype == np.float32 and env.observation_space(agent).contains(o)
    assert all(type(r) is float for r in rewards.values())
