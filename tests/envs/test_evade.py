"""Tests of the evade environment: API, determinism, validation and mechanics."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

from parcat.core.errors import MissionError
from parcat.envs.evade import EvadeEnv
from tests.envs.helpers import assert_step_follows_spaces, same, trajectory

STILL = np.zeros(2, dtype=np.float32)


def _random_velocity(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, 2).astype(np.float32)


def test_reset_and_step_follow_the_spaces() -> None:
    env = EvadeEnv(capture_radius=0.01)
    obs, infos = env.reset(seed=0)
    assert env.possible_agents == ["pursuer_0", "pursuer_1", "pursuer_2", "evader"]
    assert list(obs) == env.agents and list(infos) == env.agents
    space = env.observation_space("evader")
    assert space is env.observation_space("pursuer_0") and space.shape == (4 + 2 * 3 + 1,)
    assert env.action_space("evader") is env.action_space("pursuer_1")
    actions_rng = np.random.default_rng(0)
    for _ in range(30):
        actions = {a: _random_velocity(actions_rng) for a in env.agents}
        assert_step_follows_spaces(env, env.step(actions))


def test_same_seed_same_trajectory_and_seeds_differ() -> None:
    first = trajectory(EvadeEnv(), 5, _random_velocity)
    assert same(first, trajectory(EvadeEnv(), 5, _random_velocity))
    assert not same(first, trajectory(EvadeEnv(), 6, _random_velocity))


def test_reset_without_seed_keeps_pursuers_away() -> None:
    env = EvadeEnv()
    env.reset()
    assert env.episode_stats()["min_distance"] >= 0.25


def test_truncates_at_max_steps() -> None:
    env = EvadeEnv(max_steps=4)
    env.reset(seed=0, options={"positions": [[0, 0], [0, 1], [1, 0], [1, 1]]})
    for step in range(4):
        _, _, terms, truncs, _ = env.step(dict.fromkeys(env.agents, STILL))
        assert not any(terms.values())
        assert all(truncs.values()) == (step == 3)
    assert env.agents == []
    assert env.episode_stats() == {"captured": 0.0, "capture_step": 4.0, "min_distance": 1.0}


def test_capture_terminates_with_rewards() -> None:
    env = EvadeEnv(pursuers=2)
    env.reset(seed=0, options={"positions": [[0.4, 0.5], [0.0, 0.0], [0.5, 0.5]]})
    right = np.array([1.0, 0.0], dtype=np.float32)
    _, rewards, terms, truncs, _ = env.step(
        {"pursuer_0": right, "pursuer_1": STILL, "evader": STILL}
    )
    assert all(terms.values()) and not any(truncs.values())
    assert rewards["pursuer_0"] == pytest.approx(1.0 - 0.01 * 0.06)
    assert rewards["pursuer_1"] == pytest.approx(1.0 - 0.01 * math.hypot(0.5, 0.5))
    assert rewards["evader"] == pytest.approx(-1.0 + 0.01)
    assert env.agents == []
    stats = env.episode_stats()
    assert stats["captured"] == 1.0 and stats["capture_step"] == 1.0
    assert stats["min_distance"] == pytest.approx(0.06)


def test_speed_is_clipped_and_walls_stop_motion() -> None:
    env = EvadeEnv(pursuers=1)
    env.reset(seed=0, options={"positions": [[0.5, 0.5], [0.0, 1.0]]})
    obs, rewards, *_ = env.step({"pursuer_0": np.float32([1, 1]), "evader": np.float32([-1, 1])})
    assert math.hypot(*obs["pursuer_0"][2:4]) == pytest.approx(0.04, rel=1e-6)
    assert obs["evader"][0:4].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert rewards["evader"] == pytest.approx(0.01)
    assert env.state().shape == (8,)


def test_observation_layout() -> None:
    env = EvadeEnv(pursuers=2)
    positions = [[0.1, 0.2], [0.3, 0.4], [0.9, 0.8]]
    obs, _ = env.reset(seed=0, options={"positions": positions})
    np.testing.assert_allclose(obs["pursuer_1"], [0.3, 0.4, 0, 0, -0.2, -0.2, 0.6, 0.4, 0.0])
    np.testing.assert_allclose(obs["evader"], [0.9, 0.8, 0, 0, -0.8, -0.6, -0.6, -0.4, 1.0])
    assert "E" in env.render()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pursuers": 0},
         "evade: parameter 'pursuers' must be an integer between "
         "1 and 4,095, got 0"),
        ({"arena": -1.0}, "evade: parameter 'arena' must be a number > 0 and <= 1e+09, got -1.0"),
        ({"dt": "1"}, "evade: parameter 'dt' must be a number > 0 and <= 1e+09, got '1'"),
        ({"max_steps": 0},
         "evade: parameter 'max_steps' must be an integer "
         "between 1 and 100,000,000, got 0"),
        (
            {"capture_radius": 0.3},
            "evade: parameter 'capture_radius' must be < arena / 4 = 0.25, got 0.3",
        ),
    ],
)
def test_invalid_parameters_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(MissionError, match=re.escape(message)):
        EvadeEnv(**params)


@pytest.mark.parametrize("positions", [[[0, 0]], [[0, 0]] * 3 + [[2, 0]], "centre", [[0, "a"]]])
def test_bad_positions_option_is_named(positions: Any) -> None:
    with pytest.raises(MissionError, match=re.escape("evade: option 'positions' must hold 4")):
        EvadeEnv().reset(seed=0, options={"positions": positions})
