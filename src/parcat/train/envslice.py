"""A slice of training environments stepped in one process, writing into arrays.

The same :class:`EnvSlice` steps environments in the trainer's own process (``--env-workers
0``) and inside every environment worker, so there is one code path for collection.
Outputs go into preallocated arrays (plain numpy in-process, shared memory in a worker).

Seeds and tasks depend only on (run seed, global environment index, episode number of that
environment), never on the epoch or on which worker hosts an environment, so every worker
layout collects the same data and episodes run on across epochs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from parcat.core import seeding
from parcat.envs.missions import Mission, close_env

RESET_STREAM = 101
TASK_STREAM = 102


@dataclass(frozen=True)
class AgentLayout:
    """Shapes and dtypes of one agent's arrays."""

    agent_id: Any
    obs_shape: tuple[int, ...]
    obs_dtype: Any
    act_shape: tuple[int, ...]
    act_dtype: Any


def agent_layouts(mission: Mission) -> list[AgentLayout]:
    """The array layout of every agent of ``mission`` (Box observations required)."""
    layouts = []
    for spec in mission.agents():
        agent, obs_space, act_space = spec.agent_id, spec.observation_space, spec.action_space
        if not isinstance(obs_space, gymnasium.spaces.Box):
            raise TypeError(f"agent {agent!r}: training needs Box observations: {obs_space}")
        act_shape: tuple[int, ...] = ()
        act_dtype: Any = np.int64
        if isinstance(act_space, gymnasium.spaces.Box):
            act_shape, act_dtype = tuple(act_space.shape), act_space.dtype
        elif not isinstance(act_space, gymnasium.spaces.Discrete):
            raise TypeError(f"agent {agent!r}: unsupported action space {act_space}")
        layouts.append(
            AgentLayout(agent, tuple(obs_space.shape), obs_space.dtype, act_shape, act_dtype)
        )
    return layouts


ArraySpecs = dict[str, tuple[tuple[int, ...], Any]]


def array_specs(layouts: list[AgentLayout], num_envs: int) -> ArraySpecs:
    """Every array a slice of ``num_envs`` environments reads or writes."""
    specs: ArraySpecs = {}
    for i, lay in enumerate(layouts):
        specs[f"act{i}"] = ((num_envs, *lay.act_shape), lay.act_dtype)
        specs[f"obs{i}"] = ((num_envs, *lay.obs_shape), lay.obs_dtype)
        specs[f"final{i}"] = ((num_envs, *lay.obs_shape), lay.obs_dtype)
        specs[f"rew{i}"] = ((num_envs,), np.float32)
        specs[f"term{i}"] = ((num_envs,), np.bool_)
        specs[f"trunc{i}"] = ((num_envs,), np.bool_)
        specs[f"alive{i}"] = ((num_envs,), np.bool_)
    specs["episode"] = ((num_envs,), np.int64)
    specs["hold"] = ((num_envs,), np.bool_)
    specs["ep_done"] = ((num_envs,), np.bool_)
    specs["ep_len"] = ((num_envs,), np.int64)
    specs["ep_ret"] = ((num_envs, len(layouts)), np.float64)
    specs["run_ret"] = ((num_envs, len(layouts)), np.float64)
    return specs


class EnvSlice:
    """Environments ``first .. first + count - 1`` of a training run, with autoreset.

    Args:
        mission: What to build.
        first: Global index of the first environment.
        count: How many environments.
        seed: The run's seed.
        arrays: The arrays (see :func:`array_specs`), ``count`` rows each. Inputs: the
            actions (``act*``), ``episode`` (the episode :meth:`reset_all` starts; it then
            holds the episode running) and ``hold`` (environments :meth:`step` leaves alone).
    """

    def __init__(
        self, mission: Mission, first: int, count: int, seed: int, arrays: dict[str, np.ndarray]
    ) -> None:
        self.mission = mission
        self.first = first
        self.seed = seed
        self.arrays = arrays
        self.envs = [mission.make_env() for _ in range(count)]
        self.agents = list(self.envs[0].possible_agents)
        self.episode = [0] * count
        self.steps = [0] * count
        self.returns = arrays["run_ret"]  # each episode's return so far
        # per agent: (id, act, obs, final, rew, term, trunc, alive) arrays, looked up once
        self.columns = [
            (
                agent,
                *(
                    arrays[f"{kind}{i}"]
                    for kind in ("act", "obs", "final", "rew", "term", "trunc", "alive")
                ),
            )
            for i, agent in enumerate(self.agents)
        ]

    def reset_all(self) -> None:
        """Start every environment's episode numbered in the ``episode`` array."""
        for e in range(len(self.envs)):
            self.episode[e] = int(self.arrays["episode"][e])
            self._reset(e)
        self.arrays["ep_done"][:] = False

    def _reset(self, e: int) -> None:
        env, g = self.envs[e], self.first + e
        key = (g, self.episode[e])
        options = None
        sample_task = getattr(env, "sample_task", None)
        if sample_task is not None:
            rng = np.random.default_rng(seeding.derive_seed(self.seed, TASK_STREAM, *key))
            options = {"task": sample_task(rng)}
        obs, _ = env.reset(seed=seeding.derive_seed(self.seed, RESET_STREAM, *key), options=options)
        self.steps[e] = 0
        self.returns[e] = 0.0
        for agent, _, obs_array, *_ in self.columns:
            if agent in obs:
                obs_array[e] = obs[agent]

    def step(self) -> None:
        """Step every environment with the actions in the arrays; autoreset finished ones.

        Environments marked in ``hold`` are not stepped (replaying a resumed run's
        episodes of different lengths).
        """
        self.arrays["ep_done"][:] = False
        hold = self.arrays["hold"]
        held = hold.tolist() if hold.any() else None
        max_steps = self.mission.max_steps
        returns = self.returns
        # one conversion per agent per step, not one numpy scalar per environment
        chosen = [act.tolist() if act.ndim == 1 else act for _, act, *_ in self.columns]
        for e, env in enumerate(self.envs):
            if held is not None and held[e]:
                continue
            live = set(env.agents)
            actions = {}
            for column, (agent, act, _, _, _, _, _, alive) in zip(chosen, self.columns,
                                                                   strict=True):
                alive[e] = agent in live
                if agent in live:
                    actions[agent] = column[e] if act.ndim == 1 else act[e].copy()
            obs, rewards, terms, truncs, _ = env.step(actions)
            self.steps[e] += 1
            over = not env.agents or self.steps[e] >= max_steps
            for i, (agent, _, obs_array, final, rew, term, trunc, _) in enumerate(self.columns):
                reward = float(rewards.get(agent, 0.0))
                rew[e] = reward
                returns[e, i] += reward
                terminated = bool(terms.get(agent, False))
                term[e] = terminated
                trunc[e] = bool(truncs.get(agent, False)) or (over and not terminated)
                if agent in obs:
                    obs_array[e] = obs[agent]
                    final[e] = obs[agent]
            if over:
                self._finish(e)

    def _finish(self, e: int) -> None:
        arrays = self.arrays
        arrays["ep_done"][e] = True
        arrays["ep_len"][e] = self.steps[e]
        arrays["ep_ret"][e] = self.returns[e]
        self.episode[e] += 1
        arrays["episode"][e] = self.episode[e]
        self._reset(e)

    def close(self) -> None:
        """Close the environments."""
        for env in self.envs:
            close_env(env)
