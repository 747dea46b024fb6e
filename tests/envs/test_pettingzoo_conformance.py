"""The built-in missions pass PettingZoo's own conformance tests, and ``check_env`` names
every way an environment breaks the Parallel API with a ConformanceError."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test
from pettingzoo.utils.conversions import parallel_to_aec

from parcat.core.errors import ConformanceError
from parcat.envs.missions import load_mission
from parcat.testing import check_env

SETTINGS = [
    ("harvest", {}), ("harvest", {"agents": 7, "max_steps": 40}),
    ("evade", {}), ("goal_tasks", {}), ("goal_tasks", {"agents": 3, "task_kind": "direction"}),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("name", "params"), SETTINGS)
def test_builtin_missions_pass_pettingzoos_parallel_api_and_seed_tests(
        name: str, params: dict[str, Any]) -> None:
    mission = load_mission(name, params)
    parallel_api_test(mission.make_env(), num_cycles=300)
    parallel_seed_test(mission.make_env, num_cycles=100)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ["harvest", "evade", "goal_tasks"])
def test_builtin_missions_convert_to_aec_and_pass_pettingzoos_api_test(name: str) -> None:
    env = load_mission(name).make_env()
    assert env.unwrapped is env
    api_test(parallel_to_aec(env), num_cycles=100)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_check_env_refuses_an_aec_env_with_a_conformance_error() -> None:
    aec = parallel_to_aec(load_mission("harvest").make_env())
    message = ("is a PettingZoo AEC (turn-based) environment, not a parallel one; wrap it "
               "with pettingzoo.utils.conversions.aec_to_parallel(env)")
    with pytest.raises(ConformanceError, match=re.escape(message)):
        check_env(aec)


class _Broken:
    """A one-agent environment broken in the way ``how`` says."""

    possible_agents = ["a"]

    def __init__(self, how: str) -> None:
        self.how = how
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> Any:
        import gymnasium

        if self.how == "space":
            raise KeyError(agent)
        return gymnasium.spaces.Box(0.0, 1.0, (2,))

    def action_space(self, agent: str) -> Any:
        import gymnasium

        return gymnasium.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        import numpy as np

        self.agents = ["a"]
        if self.how == "reset-none":
            return None
        if self.how == "reset-raises":
            raise RuntimeError("no map loaded")
        return {"a": np.zeros(2, np.float32)}, {"a": {}}

    def step(self, actions: Any) -> Any:
        import numpy as np

        if self.how == "step-four":
            return {}, {}, {}, {}
        self.agents = []
        return {"a": np.zeros(2, np.float32)}, {"a": 0.0}, {"a": True}, {"a": False}, {"a": {}}


@pytest.mark.parametrize(("how", "message"), [
    ("reset-none", "env.reset(seed=0) must return a tuple of 2, got NoneType"),
    ("reset-raises", "env.reset(seed=0) raised RuntimeError: no map loaded"),
    ("step-four", "env.step(actions) must return a tuple of 5, got tuple of 4"),
    ("space", "env.observation_space('a') raised KeyError: 'a'"),
])
def test_check_env_turns_every_breakage_into_a_conformance_error(how: str, message: str) -> None:
    with pytest.raises(ConformanceError, match=re.escape(message)):
        check_env(_Broken(how))


def test_a_working_env_of_the_same_shape_passes() -> None:
    check_env(_Broken("none"))
