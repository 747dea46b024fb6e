"""A slice of training environments stepped in one process, writing into arrays: the one
code path of collection, in the trainer's process and in every environment worker.

Seeds and tasks depend only on (run seed, global environment index, episode number of that
environment), never on the epoch or the worker hosting it, so every layout collects the
same data.
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
        layouts.append(AgentLayout(agent, tuple(obs_space.shape), obs_space.dtype, act_shape,
                                   act_dtype))
    return layouts


def reset_seeded(env: Any, seed: int, streams: tuple[int, int], *key: int) -> Any:
    """Reset ``env`` seeded from ``seed`` and ``key`` on the (reset, task) ``streams`` (a
    meta-RL environment's task too); return the observations."""
    options = None
    sample_task = getattr(env, "sample_task", None)
    if sample_task is not None:
        rng = np.random.default_rng(seeding.derive_seed(seed, streams[1], *key))
        options = {"task": sample_task(rng)}
    return env.reset(seed=seeding.derive_seed(seed, streams[0], *key), options=options)[0]


ArraySpecs = dict[str, tuple[tuple[int, ...], Any]]


def array_specs(layouts: list[AgentLayout], num_envs: int) -> ArraySpecs:
    """Every array a slice of ``num_envs`` environments reads or writes."""
    n, flag, per_agent = (num_envs,), np.bool_, (num_envs, len(layouts))
    specs: ArraySpecs = {}
    for i, lay in enumerate(layouts):
        specs |= {f"act{i}": ((*n, *lay.act_shape), lay.act_dtype),
                  f"obs{i}": ((*n, *lay.obs_shape), lay.obs_dtype),
                  f"final{i}": ((*n, *lay.obs_shape), lay.obs_dtype), f"rew{i}": (n, np.float32),
                  f"term{i}": (n, flag), f"trunc{i}": (n, flag), f"alive{i}": (n, flag)}
    return specs | {"episode": (n, np.int64), "hold": (n, flag), "ep_done": (n, flag),
                    "ep_len": (n, np.int64), "ep_ret": (per_agent, np.float64),
                    "run_ret": (per_agent, np.float64)}


class EnvSlice:
    """Environments ``first .. first + count - 1`` of a training run, with autoreset.

    ``arrays`` (:func:`array_specs`) hold the inputs too: ``act*``, ``episode`` (the episode
    :meth:`reset_all` starts, then the one running) and ``hold`` (envs left unstepped)."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 arrays: dict[str, np.ndarray]) -> None:
        self.mission, self.first, self.seed, self.arrays = mission, first, seed, arrays
        self.envs = [mission.make_env() for _ in range(count)]
        self.agents = list(self.envs[0].possible_agents)
        self.episode = [0] * count
        self.steps = [0] * count
        self.returns = arrays["run_ret"]  # each episode's return so far
        # per agent: (id, act, obs, final, rew, term, trunc, alive) arrays, looked up once
        kinds = ("act", "obs", "final", "rew", "term", "trunc", "alive")
        self.columns = [(agent, *(arrays[f"{kind}{i}"] for kind in kinds))
                        for i, agent in enumerate(self.agents)]

    def reset_all(self) -> None:
        """Start every environment's episode numbered in the ``episode`` array."""
        for e in range(len(self.envs)):
            self.episode[e] = int(self.arrays["episode"][e])
            self._reset(e)
        self.arrays["ep_done"][:] = False

    def _reset(self, e: int) -> None:
        obs = reset_seeded(self.envs[e], self.seed, (RESET_STREAM, TASK_STREAM), self.first + e,
                           self.episode[e])
        self.steps[e] = 0
        self.returns[e] = 0.0
        for agent, _, obs_array, *_ in self.columns:
            if agent in obs:
                obs_array[e] = obs[agent]

    def step(self) -> None:
        """Step every environment not on ``hold`` with the actions in the arrays;
        autoreset finished ones."""
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
                self.arrays["ep_done"][e] = True
                self.arrays["ep_len"][e] = self.steps[e]
                self.arrays["ep_ret"][e] = self.returns[e]
                self.episode[e] += 1
                self.arrays["episode"][e] = self.episode[e]
                self._reset(e)

    def close(self) -> None:
        """Close the environments."""
        for env in self.envs:
            close_env(env)
