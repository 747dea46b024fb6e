"""Tests of the scripted heuristics: they act inside the spaces and clearly beat random."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from parcat.core.errors import PolicyError
from parcat.envs.evade import EvadeEnv
from parcat.envs.goal_tasks import GoalTasksEnv
from parcat.envs.harvest import HarvestEnv
from parcat.policies.base import AgentSpec
from parcat.policies.heuristics import EvadeGreedy, GoalSeeker, HarvestGreedy

EPISODES = 20


class _Random:
    """Uniform random actions from the agent's own seeded action space."""

    def __init__(self, spec: AgentSpec) -> None:
        self.space = spec.action_space

    def reset(self, seed: int) -> None:
        self.space.seed(seed)

    def step(self, obs: Any) -> Any:
        action = self.space.sample()
        return int(action) if np.ndim(action) == 0 else action


def _spec(env: Any, index: int, params: dict[str, Any]) -> AgentSpec:
    agent = env.possible_agents[index]
    return AgentSpec(
        mission=env.metadata["name"],
        agent_id=agent,
        agent_index=index,
        observation_space=env.observation_space(agent),
        action_space=env.action_space(agent),
        params=params,
    )


def _returns(
    make_env: Callable[..., Any],
    params: dict[str, Any],
    choose: Callable[[str], Callable[[AgentSpec], Any]],
) -> list[tuple[str, float]]:
    """Each agent's return in each of ``EPISODES`` seeded episodes, as (agent, return)."""
    env = make_env(**params)
    returns = []
    for episode in range(EPISODES):
        policies = {}
        for index, agent in enumerate(env.possible_agents):
            policies[agent] = choose(agent)(_spec(env, index, params))
            policies[agent].reset(1000 * episode + index)
        obs, _ = env.reset(seed=episode)
        total = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            actions = {a: policies[a].step(obs[a]) for a in env.agents}
            for agent, action in actions.items():
                # a sample of the space is inside it: only the heuristics' actions need checking
                if not isinstance(policies[agent], _Random):
                    assert env.action_space(agent).contains(action)
            obs, rewards, _, _, _ = env.step(actions)
            for agent, reward in rewards.items():
                total[agent] += reward
        returns += list(total.items())
    return returns


@functools.cache
def _random_returns(make_env: Callable[..., Any],
                    params: tuple[tuple[str, Any], ...]) -> list[tuple[str, float]]:
    """``_returns`` with every agent random, run once per mission and parameters (the
    tests that score different roles against it share it)."""
    return _returns(make_env, dict(params), lambda a: _Random)


def _mean_return(
    make_env: Callable[..., Any],
    params: dict[str, Any],
    choose: Callable[[str], Callable[[AgentSpec], Any]] | None = None,
    scored: Callable[[str], bool] = lambda agent: True,
) -> float:
    """Mean per-agent return of the ``scored`` agents over ``EPISODES`` seeded episodes, each
    agent's policy chosen by ``choose`` (random for all when it is None)."""
    returns = _returns(make_env, params, choose) if choose is not None \
        else _random_returns(make_env, tuple(sorted(params.items())))
    return float(np.mean([r for agent, r in returns if scored(agent)]))


def test_harvest_greedy_beats_random() -> None:
    params = {"size": 16, "agents": 4, "resources": 12, "view": 2, "max_steps": 200}
    greedy = _mean_return(HarvestEnv, params, lambda a: HarvestGreedy)
    random = _mean_return(HarvestEnv, params)
    # Measured: greedy 14.4 (about 13 deliveries per agent), random 0.8.
    assert greedy > random + 5.0


def _is_pursuer(agent: str) -> bool:
    return agent != "evader"


def _is_evader(agent: str) -> bool:
    return agent == "evader"


@pytest.mark.parametrize(
    ("role", "margin"),
    [
        # Measured: greedy 0.97 (every capture within ~8 steps); random -0.77 on these 20 seeds,
        # -0.30 over 200 episodes.
        pytest.param(_is_pursuer, 0.5, id="pursuers"),
        # Measured: greedy 2.0 (never captured in 200 steps, the most an evader can get); random
        # 1.40 on these 20 seeds, 0.87 over 200 episodes (random pursuers catch it about half
        # the time).
        pytest.param(_is_evader, 0.4, id="evader"),
    ],
)
def test_evade_greedy_beats_random_in_its_role(role: Callable[[str], bool], margin: float) -> None:
    """Greedy agents in ``role`` (the others random) earn more than random ones in it."""
    greedy = _mean_return(EvadeEnv, {}, lambda a: EvadeGreedy if role(a) else _Random, role)
    random = _mean_return(EvadeEnv, {}, scored=role)
    assert greedy > random + margin


@pytest.mark.parametrize(
    ("kind", "observe_goal", "margin"),
    [
        # Measured seeker vs random: -4.8 vs -42.8, -15.8 vs -42.8, 4.5 vs 0.03, 3.3 vs 0.03.
        ("position", True, 20.0),
        ("position", False, 10.0),
        ("direction", True, 2.5),
        ("direction", False, 2.0),
    ],
)
def test_goal_seeker_beats_random(kind: str, observe_goal: bool, margin: float) -> None:
    params = {"agents": 2, "task_kind": kind, "observe_goal": observe_goal}
    seeker = _mean_return(GoalTasksEnv, params, lambda a: GoalSeeker)
    random = _mean_return(GoalTasksEnv, params)
    assert seeker > random + margin


def test_heuristics_are_deterministic_per_seed() -> None:
    env = HarvestEnv()
    obs, _ = env.reset(seed=0)
    spec = _spec(env, 0, {})
    actions = []
    for _ in range(2):
        policy = HarvestGreedy(spec, explore=0.5)
        policy.reset(42)
        actions.append([policy.step(obs["agent_0"]) for _ in range(30)])
    assert actions[0] == actions[1]
    assert all(type(a) is int for a in actions[0])


def test_evade_greedy_plays_both_roles() -> None:
    env = EvadeEnv(pursuers=1)
    obs, _ = env.reset(seed=0, options={"positions": [[0.1, 0.5], [0.5, 0.5]]})
    pursuer, evader = EvadeGreedy(_spec(env, 0, {})), EvadeGreedy(_spec(env, 1, {}))
    chase, flee = pursuer.step(obs["pursuer_0"]), evader.step(obs["evader"])
    assert chase.dtype == np.float32 and chase.tolist() == [1.0, 0.0]
    assert flee.tolist() == [1.0, 0.0]  # straight away: the walls balance at the centre


def test_goal_seeker_stops_on_the_goal() -> None:
    env = GoalTasksEnv()
    obs, _ = env.reset(seed=0, options={"task": {"kind": "position", "goals": [[0.02, 0.0]]}})
    policy = GoalSeeker(_spec(env, 0, {"task_kind": "position", "step_size": 0.1}))
    policy.reset(0)
    assert policy.step(obs["agent_0"]) == 0


def test_bad_arguments_and_missing_reset_fail_clearly() -> None:
    spec = _spec(HarvestEnv(), 0, {})
    message = "HarvestGreedy: argument 'explore' must be a number in [0, 1], got 2"
    with pytest.raises(PolicyError, match=re.escape(message)):
        HarvestGreedy(spec, explore=2)
    obs, _ = HarvestEnv().reset(seed=0)
    with pytest.raises(RuntimeError, match=re.escape("call reset(seed) before step()")):
        HarvestGreedy(spec, explore=1.0).step(obs["agent_0"])
