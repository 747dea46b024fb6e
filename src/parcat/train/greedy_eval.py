"""Greedy evaluation of the learners at every checkpoint: what picks ``RUN/best``.

The episodes run in this process on environments of their own (never the training ones),
each learner acting with ``act(obs, explore=False)``. Their seeds and tasks come from the
run seed on streams of their own, so the set of episodes is the same at every checkpoint,
on every worker layout and in both learning modes, and evaluating never changes training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import numpy as np

from parcat.core import seeding
from parcat.envs.missions import Mission
from parcat.ipc.process import call_in_worker
from parcat.train.learner import Learner
from parcat.train.recipes import SHARED, LearnerRecipe, with_agent_id

EVAL_STREAM = 103
EVAL_TASK_STREAM = 104
TOTAL = "total"
"""The key of the mean summed return over all agents in :func:`evaluate_greedy`'s result."""


LearnerObs = Callable[[Any, np.ndarray], np.ndarray]
"""``(agent, observation) -> what the agent's learner observes``."""


def evaluate_greedy(mission: Mission, learners: Mapping[Any, Learner], seed: int,
                    episodes: int, learner_obs: LearnerObs | None = None) -> dict[str, float]:
    """Mean greedy return per agent (by ``str(agent_id)``) and in total over ``episodes``.

    ``learner_obs`` turns an agent's observation into its learner's input (a shared
    learner's one-hot agent id); by default the learner sees the observation itself.

    Episode ``i`` resets with ``derive_seed(seed, EVAL_STREAM, i)`` (and, for a meta-RL
    environment, a task drawn from ``derive_seed(seed, EVAL_TASK_STREAM, i)``). With
    ``episodes`` 0 the result is empty.
    """
    if episodes <= 0:
        return {}
    agents = [spec.agent_id for spec in mission.agents()]
    sums = np.zeros(len(agents))
    for index in range(episodes):
        with mission.open_env() as env:
            returns = _episode(env, mission, learners, seed, index,
                               learner_obs or (lambda agent, obs: obs))
        sums += [returns.get(agent, 0.0) for agent in agents]
    means = {str(agent): float(total / episodes) for agent, total in zip(agents, sums, strict=True)}
    means[TOTAL] = float(sums.sum() / episodes)
    return means


def evaluate_greedy_in_a_worker(mission: Mission, recipes: Mapping[str, LearnerRecipe],
                                learners: Mapping[Any, Learner], seed: int,
                                episodes: int) -> dict[str, float]:
    """:func:`evaluate_greedy` in a worker process, for environments from outside parcat
    (their crash must not end training): the learners are rebuilt there from their
    ``recipes`` (by ``str(agent_id)``, or ``shared``) and loaded with their policy arrays.

    Raises:
        SetupFailedError: the environment (or a learner) raised, ended its process or froze.
    """
    arrays = {name: next(iter(learners.values())).policy_arrays() if name == SHARED
              else learners[_agent_of(learners, name)].policy_arrays() for name in recipes}
    result = call_in_worker(_evaluate_rebuilt, (mission, dict(recipes), arrays, seed, episodes),
                            "parcat-greedy-eval", timeout_s=math.inf)
    return cast(dict[str, float], result)


def _agent_of(learners: Mapping[Any, Learner], name: str) -> Any:
    return next(agent for agent in learners if str(agent) == name)


def _evaluate_rebuilt(mission: Mission, recipes: dict[str, LearnerRecipe],
                      arrays: dict[str, dict[str, np.ndarray]], seed: int,
                      episodes: int) -> dict[str, float]:
    built = {name: recipe.build() for name, recipe in recipes.items()}
    for name, learner in built.items():
        learner.load_policy_arrays(arrays[name])
    agents = [spec.agent_id for spec in mission.agents()]
    if SHARED not in built:
        return evaluate_greedy(mission, {a: built[str(a)] for a in agents}, seed, episodes)
    index = {agent: i for i, agent in enumerate(agents)}
    return evaluate_greedy(mission, dict.fromkeys(agents, built[SHARED]), seed, episodes,
                           lambda agent, obs: with_agent_id(obs, index[agent], len(agents)))


def _episode(env: Any, mission: Mission, learners: Mapping[Any, Learner], seed: int,
             index: int, learner_obs: LearnerObs) -> dict[Any, float]:
    options = None
    sample_task = getattr(env, "sample_task", None)
    if sample_task is not None:
        rng = np.random.default_rng(seeding.derive_seed(seed, EVAL_TASK_STREAM, index))
        options = {"task": sample_task(rng)}
    obs, _ = env.reset(seed=seeding.derive_seed(seed, EVAL_STREAM, index), options=options)
    returns: dict[Any, float] = {agent: 0.0 for agent in env.possible_agents}
    for _ in range(mission.max_steps):
        if not env.agents:
            break
        actions = {agent: _greedy(learners[agent], learner_obs(
            agent, np.asarray(obs[agent], dtype=np.float32).reshape(1, -1)))
            for agent in env.agents}
        obs, rewards, *_ = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] = returns.get(agent, 0.0) + float(reward)
    return returns


def _greedy(learner: Learner, obs: np.ndarray) -> Any:
    action = learner.act(obs, explore=False)[0]
    return action.item() if np.ndim(action) == 0 else np.asarray(action)


def nan_returns(episodes: int, agents: Iterable[Any]) -> dict[str, float]:
    """The ``eval_return`` of an epoch that was not evaluated: the same keys, NaN (none
    when ``episodes`` is 0)."""
    if episodes <= 0:
        return {}
    return {**{str(agent): math.nan for agent in agents}, TOTAL: math.nan}
