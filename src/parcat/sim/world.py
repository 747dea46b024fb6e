"""The environment's side of a simulation: stepping, episodes, lockstep agents, the record.

:class:`World` is the one place a simulation's environment is stepped, in the sequential
simulation and in the environment's process alike; the two twins differ only in where the
actions in force (:attr:`World.in_force`) come from. Step ``k`` records the state it starts
from (``env.state()`` when there is one) and every agent's action in force, then steps the
environment. An episode that ends (no live agents, or the mission's ``max_steps``) is followed
at once by a reset with the next episode's seed, so the record covers exactly ``iters`` steps.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parcat.core import seeding
from parcat.envs.missions import close_env
from parcat.ipc.shm import Codec
from parcat.policies.base import close_policies
from parcat.policies.builtin import noop_action
from parcat.sim.agent import AgentRunner, CycleStats, InForce
from parcat.sim.config import SimConfig


@dataclass
class WorldResult:
    """What the environment's side hands back at the end of a run."""

    steps: int
    arrays: dict[str, np.ndarray]
    """The per-step record (see :mod:`parcat.sim.record`)."""
    episodes: list[dict[str, Any]]
    """Per episode: index, steps, complete, and the env's ``episode_stats()``."""
    cycles: dict[int, CycleStats] = field(default_factory=dict)
    """Cycle statistics by agent index."""
    wall_s: float = 0.0


def env_error(config: SimConfig, step: int, exc: BaseException) -> str:
    """How both twins word an exception the environment raised."""
    return (f"the environment of mission '{config.mission.name}' raised at step {step}: "
            f"{type(exc).__name__}: {exc}")


class Recorder:
    """Preallocated per-step arrays, filled row by row."""

    def __init__(self, iters: int, config: SimConfig, state_size: int | None) -> None:
        self.act_codecs = [Codec.for_space(a.spec.action_space) for a in config.agents]
        self.obs_codecs = ([Codec.for_space(a.spec.observation_space) for a in config.agents]
                           if config.debug.log_agent_state else [])
        n = len(self.act_codecs)
        self.arrays: dict[str, np.ndarray] = {
            "time_s": np.zeros(iters),
            "step_cost_s": np.zeros(iters),
            "episode": np.zeros(iters, np.int32),
            "episode_step": np.zeros(iters, np.int32),
            "based_on": np.full((iters, n), -1, np.int64),
            "compute_s": np.full((iters, n), np.nan),
            "reward": np.zeros((iters, n)),
        }
        if state_size is not None:
            self.arrays["state"] = np.full((iters, state_size), np.nan, np.float32)
        for i, codec in enumerate(self.act_codecs):
            self.arrays[f"action_{i}"] = np.zeros((iters, *codec.shape), codec.dtype)
        for i, codec in enumerate(self.obs_codecs):
            self.arrays[f"obs_{i}"] = np.zeros((iters, *codec.shape), codec.dtype)

    def add(self, k: int, in_force: Sequence[InForce], obs: Sequence[Any]) -> None:
        """Record the actions in force (and observations) at step ``k``."""
        arrays = self.arrays
        for i, item in enumerate(in_force):
            arrays["based_on"][k, i] = item.based_on
            arrays["compute_s"][k, i] = item.compute_s
            self.act_codecs[i].write(arrays[f"action_{i}"][k], item.action)
        for i, codec in enumerate(self.obs_codecs):
            if obs[i] is not None:
                codec.write(arrays[f"obs_{i}"][k], obs[i])

    def take(self, steps: int) -> dict[str, np.ndarray]:
        """The first ``steps`` rows of every array."""
        return {key: value[:steps].copy() for key, value in self.arrays.items()}


class World:
    """The environment, its episodes, its lockstep agents and the record of a run."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.mission = config.mission
        self.env = config.mission.make_env()
        self.agent_ids = [a.agent_id for a in config.agents]
        self.lockstep = {a.spec.agent_index: AgentRunner(a, config.mission, config.seed)
                         for a in config.agents if a.lockstep}
        self.in_force = [InForce(noop_action(a.spec.action_space)) for a in config.agents]
        """Every agent's action in force; the neutral action of its space before its first."""
        self.steps = 0
        self.episode = 0
        self.episode_step = 0
        self.episodes: list[dict[str, Any]] = []
        self.obs: list[Any] = [None] * len(self.agent_ids)
        self._reset()
        state_fn = getattr(self.env, "state", None)
        self._state_fn = state_fn if callable(state_fn) else None
        self.recorder = Recorder(config.iters, config, self._state_size())

    def _state_size(self) -> int | None:
        if self._state_fn is None:
            return None
        try:
            return int(np.asarray(self._state_fn(), dtype=np.float32).size)
        except Exception:
            self._state_fn = None  # no usable state(): the record goes without one
            return None

    def _reset(self) -> None:
        seed = seeding.episode_seed(self.config.seed, self.mission.key, self.episode)
        obs, _ = self.env.reset(seed=seed)
        self._take_obs(obs)
        self.episode_step = 0

    def _take_obs(self, obs: dict[Any, Any]) -> None:
        for i, agent_id in enumerate(self.agent_ids):
            if agent_id in obs:
                self.obs[i] = obs[agent_id]

    def step(self, time_ns: int) -> None:
        """Run the next environment step at ``time_ns`` (from the run's start), lockstep
        agents acting on the current observation first.

        Raises:
            AgentFailure: a lockstep agent's policy raised.
        """
        begin = time.perf_counter_ns()
        k, in_force = self.steps, self.in_force
        for index, runner in self.lockstep.items():
            in_force[index] = runner.act(self.obs[index], k, self.episode, time_ns)
        arrays = self.recorder.arrays
        arrays["time_s"][k] = time_ns / 1e9
        arrays["episode"][k] = self.episode
        arrays["episode_step"][k] = self.episode_step
        if self._state_fn is not None:
            state = np.asarray(self._state_fn(), dtype=np.float32).ravel()
            if state.size == arrays["state"].shape[1]:
                arrays["state"][k] = state
        self.recorder.add(k, in_force, self.obs)
        live = set(self.env.agents)
        actions = {a: in_force[i].action for i, a in enumerate(self.agent_ids) if a in live}
        obs, rewards, _, _, _ = self.env.step(actions)
        for i, agent_id in enumerate(self.agent_ids):
            arrays["reward"][k, i] = float(rewards.get(agent_id, 0.0))
        self._take_obs(obs)
        self.episode_step += 1
        if not self.env.agents or self.episode_step >= self.mission.max_steps:
            self._end_episode(complete=True)
            self.episode += 1
            self._reset()
        arrays["step_cost_s"][k] = (time.perf_counter_ns() - begin) / 1e9
        self.steps = k + 1

    def _end_episode(self, complete: bool) -> None:
        stats_fn = getattr(self.env, "episode_stats", None)
        stats = {str(k): float(v) for k, v in stats_fn().items()} if callable(stats_fn) else {}
        self.episodes.append({"episode": self.episode, "steps": self.episode_step,
                              "complete": complete, **stats})

    def result(self, cycles: dict[int, CycleStats], wall_s: float) -> WorldResult:
        """The record so far (the running episode counted incomplete), with the cycle
        statistics of the agents outside this process."""
        if self.episode_step > 0:
            self._end_episode(complete=False)
        cycles = {**cycles, **{index: r.stats for index, r in self.lockstep.items()}}
        return WorldResult(self.steps, self.recorder.take(self.steps), self.episodes, cycles,
                           wall_s)

    def close(self) -> None:
        """Close the environment and the lockstep agents' policies."""
        with contextlib.suppress(Exception):
            close_env(self.env)
        close_policies(runner.policy for runner in self.lockstep.values())


def empty_result(config: SimConfig, wall_s: float = 0.0) -> WorldResult:
    """The record of a run stopped before its first step (built without the environment,
    which may never have been made, so it has no ``state`` array)."""
    return WorldResult(0, Recorder(0, config, None).take(0), [], {}, wall_s)
