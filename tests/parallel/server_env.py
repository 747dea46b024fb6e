"""An environment that waits on a game server, written as someone outside parcat would:
a PettingZoo ``ParallelEnv`` that knows nothing of parcat. Each ``step`` sleeps ``ms``
milliseconds (the round trip to the server) and then plays a seeded, deterministic turn.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class GameServerEnv(ParallelEnv):  # type: ignore[misc]
    """``agents`` players; the reward is the action plus seeded noise, after ``ms`` ms."""

    metadata = {"name": "game_server_v0"}

    def __init__(self, agents: int = 2, ms: float = 5.0, max_steps: int = 20) -> None:
        self.possible_agents = [f"player_{i}" for i in range(agents)]
        self.agents: list[str] = []
        self.seconds = ms / 1000
        self.max_steps = max_steps
        self._rng = np.random.default_rng(0)
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Box(-1e6, 1e6, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Discrete(4)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        time.sleep(self.seconds)  # the server answers: no CPU spent here
        self._t += 1
        noise = self._rng.random(len(self.agents))
        rewards = {a: float(actions[a]) + float(n)
                   for a, n in zip(self.agents, noise, strict=True)}
        done = self._t >= self.max_steps
        observations = {a: self._observe(a) for a in self.agents}
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, done)
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _observe(self, agent: str) -> np.ndarray:
        return np.array([self._t, self.possible_agents.index(agent)], np.float32)
