"""Tests of the goal_tasks environment: API, tasks, determinism, validation and rewards."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest

from parcat.core.errors import MissionError
from parcat.envs.goal_tasks import GoalTasksEnv
from tests.envs.helpers import assert_step_follows_spaces, same, trajectory

NOOP, PLUS_Y, MINUS_Y, MINUS_X, PLUS_X = range(5)


def _random_action(rng: np.random.Generator) -> int:
    return int(rng.integers(5))


@pytest.mark.parametrize("kind", ["position", "direction"])
def test_reset_and_step_follow_the_spaces(kind: str) -> None:
    env = GoalTasksEnv(agents=3, task_kind=kind, max_steps=50)
    obs, infos = env.reset(seed=0)
    assert list(obs) == env.agents == ["agent_0", "agent_1", "agent_2"] == list(infos)
    space = env.observation_space("agent_0")
    assert space is env.observation_space("agent_2") and space.shape == (5,)
    assert env.action_space("agent_0") is env.action_space("agent_1")
    for _ in range(50):  # always the same action: the farthest an agent can get
        result = env.step(dict.fromkeys(env.agents, PLUS_X))
        assert_step_follows_spaces(env, result)
    _, _, terms, truncs, _ = result
    assert not any(terms.values()) and all(truncs.values()) and env.agents == []


def test_same_seed_same_task_and_trajectory() -> None:
    first = trajectory(GoalTasksEnv(agents=2), 11, _random_action)
    assert same(first, trajectory(GoalTasksEnv(agents=2), 11, _random_action))
    assert not same(first, trajectory(GoalTasksEnv(agents=2), 12, _random_action))


def test_reset_without_seed_samples_a_task() -> None:
    env = GoalTasksEnv()
    env.reset()
    assert env.task is not None and env.task["kind"] == "position"


def test_sample_task_is_json_and_follows_the_distribution() -> None:
    env = GoalTasksEnv(agents=50, goal_radius=2.0)
    task = env.sample_task(np.random.default_rng(0))
    assert json.loads(json.dumps(task)) == task
    assert task == env.sample_task(np.random.default_rng(0))
    assert max(math.hypot(x, y) for x, y in task["goals"]) <= 2.0
    directions = GoalTasksEnv(task_kind="direction").sample_task(np.random.default_rng(0))
    assert set(directions) == {"kind", "directions"} and len(directions["directions"]) == 1


def test_position_task_rewards_and_stats() -> None:
    env = GoalTasksEnv()
    task = {"kind": "position", "goals": [[0.3, 0.4]]}
    obs, _ = env.reset(seed=0, options={"task": task})
    assert env.task == task
    np.testing.assert_allclose(obs["agent_0"], [0, 0, 0, 0.3, 0.4])
    obs, rewards, *_ = env.step({"agent_0": PLUS_X})
    assert rewards["agent_0"] == pytest.approx(-math.hypot(0.2, 0.4))
    np.testing.assert_allclose(obs["agent_0"], [0.1, 0, rewards["agent_0"], 0.3, 0.4], rtol=1e-6)
    stats = env.episode_stats()
    assert stats["final_distance"] == pytest.approx(math.hypot(0.2, 0.4))
    assert (stats["goal_0_x"], stats["goal_0_y"]) == (0.3, 0.4)


def test_direction_task_rewards_and_hidden_goal() -> None:
    env = GoalTasksEnv(task_kind="direction", observe_goal=False, step_size=0.5)
    env.reset(seed=0, options={"task": {"kind": "direction", "directions": [math.pi / 2]}})
    obs, rewards, *_ = env.step({"agent_0": PLUS_Y})
    assert rewards["agent_0"] == pytest.approx(0.5)
    assert obs["agent_0"][3:].tolist() == [0.0, 0.0]
    _, rewards, *_ = env.step({"agent_0": PLUS_X})
    assert rewards["agent_0"] == pytest.approx(0.0)
    assert env.episode_stats() == pytest.approx({"progress": 0.5, "direction_0": math.pi / 2})
    assert "agent_0" in env.render()
    assert env.state().shape == (4,)


@pytest.mark.parametrize(
    "task",
    [
        {"kind": "direction", "directions": [0.0]},
        {"kind": "position", "goals": [[0.1, 0.1], [0.2, 0.2]]},
        {"kind": "position", "goals": [[2.0, 0.0]]},
        {"kind": "position"},
        "position",
    ],
)
def test_invalid_tasks_are_rejected(task: Any) -> None:
    message = "goal_tasks: task must be {'kind': 'position', 'goals': [one per agent, 1 in all]}"
    with pytest.raises(MissionError, match=re.escape(message)):
        GoalTasksEnv().reset(seed=0, options={"task": task})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"agents": 0},
         "goal_tasks: parameter 'agents' must be an integer "
         "between 1 and 4,096, got 0"),
        (
            {"task_kind": "pos"},
            "goal_tasks: parameter 'task_kind' must be one of 'position', 'direction', got 'pos'",
        ),
        ({"step_size": 0},
         "goal_tasks: parameter 'step_size' must be a number > 0 "
         "and <= 1e+09, got 0"),
        ({"goal_radius": -1},
         "goal_tasks: parameter 'goal_radius' must be a number > "
         "0 and <= 1e+09, got -1"),
        (
            {"observe_goal": "yes"},
            "goal_tasks: parameter 'observe_goal' must be true or false, got 'yes'",
        ),
        ({"max_steps": 0},
         "goal_tasks: parameter 'max_steps' must be an integer "
         "between 1 and 100,000,000, got 0"),
    ],
)
def test_invalid_parameters_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(MissionError, match=re.escape(message)):
        GoalTasksEnv(**params)
