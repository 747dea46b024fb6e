"""Greedy evaluation of the learners at every checkpoint: what picks ``RUN/best``.

The episodes run in this process on environments of their own (never the training ones),
each learner acting with ``act(obs, explore=False)``. Their seeds and tasks come from the
run seed on streams of their own, so the set of episodes is the same at every checkpoint,
on every worker layout and in both learning modes, and evaluating never changes training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from parcat import seeding
from parcat.missions import Mission
from parcat.train.learner import Learner

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
