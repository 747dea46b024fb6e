"""Tests of the harvest environment: API, determinism, validation and mechanics."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from parcat.core.errors import MissionError
from parcat.envs.harvest import DELIVERY_REWARD, PICKUP_REWARD, HarvestEnv
from tests.envs.helpers import assert_step_follows_spaces, same, trajectory

NOOP, UP, DOWN, LEFT, RIGHT = range(5)


def _random_action(rng: np.random.Generator) -> int:
    return int(rng.integers(5))


def test_reset_and_step_follow_the_spaces() -> None:
    env = HarvestEnv()
    obs, infos = env.reset(seed=0)
    assert list(obs) == env.agents == env.possible_agents == [f"agent_{i}" for i in range(4)]
    assert infos == {a: {} for a in env.agents}
    space = env.observation_space("agent_0")
    assert space is env.observation_space("agent_3")
    assert env.action_space("agent_0") is env.action_space("agent_1")
    assert space.shape == (4 * 25 + 3,)
    for _ in range(20):
        assert_step_follows_spaces(env, env.step(dict.fromkeys(env.agents, RIGHT)))


def test_crowded_observations_stay_in_space() -> None:
    env = HarvestEnv(size=6, agents=9, resources=3, view=3)
    obs, _ = env.reset(seed=3)
    space = env.observation_space("agent_0")
    actions_rng = np.random.default_rng(0)
    for _ in range(50):
        obs, *_ = env.step({a: actions_rng.integers(5) for a in env.agents})
        assert all(space.contains(o) for o in obs.values())


def test_same_seed_same_trajectory_and_seeds_differ() -> None:
    env = HarvestEnv(size=10, agents=3, resources=5)
    first = trajectory(env, 7, _random_action)
    assert same(first, trajectory(HarvestEnv(size=10, agents=3, resources=5), 7, _random_action))
    assert not same(first, trajectory(env, 8, _random_action))


def test_reset_without_seed_works() -> None:
    obs, _ = HarvestEnv().reset()
    assert len(obs) == 4


def test_truncates_at_max_steps() -> None:
    env = HarvestEnv(max_steps=3)
    env.reset(seed=0)
    for step in range(3):
        _, _, terms, truncs, _ = env.step({a: NOOP for a in env.agents})
        assert not any(terms.values())
        assert all(truncs.values()) == (step == 2)
    assert env.agents == []
    assert env.step({}) == ({}, {}, {}, {}, {})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"agents": 0},
         "harvest: parameter 'agents' must be an integer between "
         "1 and 4,096, got 0"),
        ({"size": 4}, "harvest: parameter 'size' must be an integer between 5 and 1,024, got 4"),
        ({"view": 0}, "harvest: parameter 'view' must be an integer between 1 and 64, got 0"),
        ({"max_steps": 2.5},
         "harvest: parameter 'max_steps' must be an integer "
         "between 1 and 100,000,000, got 2.5"),
        ({"agents": True},
         "harvest: parameter 'agents' must be an integer between "
         "1 and 4,096, got True"),
        (
            {"size": 6, "resources": 13},
            "harvest: parameter 'resources' must be an integer between 1 and 12 "
            "(free cells of a size-6 map), got 13",
        ),
    ],
)
def test_invalid_parameters_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(MissionError, match=re.escape(message)):
        HarvestEnv(**params)


def test_pickup_goes_to_the_lowest_index_and_delivery_pays() -> None:
    # Map of size 8: walls on rows/cols 0 and 7, base on rows/cols 3-4.
    env = HarvestEnv(size=8, agents=2, resources=1, view=2)
    env.reset(seed=0, options={"agent_cells": [(1, 3), (1, 3)], "resource_cells": [(2, 3)]})
    obs, rewards, *_ = env.step({"agent_0": DOWN, "agent_1": DOWN})
    assert rewards == {"agent_0": PICKUP_REWARD, "agent_1": 0.0}
    assert HarvestEnv.extras(obs["agent_0"])[0] and not HarvestEnv.extras(obs["agent_1"])[0]
    assert env.state()[: 8 * 8].sum() == 1  # the resource respawned somewhere
    obs, rewards, *_ = env.step({"agent_0": DOWN, "agent_1": UP})
    assert rewards["agent_0"] == DELIVERY_REWARD
    assert not HarvestEnv.extras(obs["agent_0"])[0]
    assert env.episode_stats()["deliveries"] == 1.0
    assert env.episode_stats()["pickups"] >= 1.0


def test_walls_block_and_window_layout() -> None:
    env = HarvestEnv(size=8, agents=2, resources=1, view=2)
    obs, _ = env.reset(
        seed=0, options={"agent_cells": [(1, 1), (1, 1)], "resource_cells": [(1, 2)]}
    )
    window = HarvestEnv.window(obs["agent_0"])
    assert window.shape == (4, 5, 5)
    assert window[0, :2].all() and window[0, :, :2].all() and not window[0, 2:, 2:].any()
    assert window[1, 2, 3] == 1.0  # the resource just right of the agent
    assert window[3, 2, 2] == 1.0  # one other agent on the same cell
    carrying, dy, dx = HarvestEnv.extras(obs["agent_0"])
    assert (carrying, dy, dx) == (False, 2.5 / 8, 2.5 / 8)
    env.step({"agent_0": UP, "agent_1": LEFT})
    assert env.state()[64:68].tolist() == [1.0, 1.0, 1.0, 1.0]  # rows then cols: unmoved


def test_bad_actions_and_step_before_reset_fail_clearly() -> None:
    env = HarvestEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("actions must be integers in 0..4")):
        env.step(dict.fromkeys(env.agents, 5))


def test_render_state_and_stats() -> None:
    env = HarvestEnv(size=6, agents=2, resources=2)
    env.reset(seed=0)
    picture = env.render()
    assert picture.count("\n") == 6 and "#" in picture and "B" in picture
    assert env.state().shape == (36 + 3 * 2,) and env.state().dtype == np.float32
    assert env.episode_stats() == {"deliveries": 0.0, "pickups": 0.0}


@pytest.mark.parametrize("cells", [[(1, 1)], [(0, 1), (1, 1)], "nowhere", [(1, 1, 1)]])
def test_bad_agent_cells_option_is_named(cells: Any) -> None:
    message = "harvest: option 'agent_cells' must hold 2 (row, col) cells inside the walls (1..6)"
    with pytest.raises(MissionError, match=re.escape(message)):
        HarvestEnv(size=8, agents=2).reset(seed=0, options={"agent_cells": cells})
