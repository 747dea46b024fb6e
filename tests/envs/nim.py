"""Nim as an outsider would write a turn-based (PettingZoo AEC) game, without PettingZoo.

Two players take 1-3 stones in turn from a pile whose size the seed draws; whoever takes
the last stone wins (+1, the other -1). Each turn also pays the mover a small reward
(0.01 per stone taken), so rewards arrive between turns too. An illegal move (more stones
than are left) raises: a policy that ignores the ``action_mask`` fails its episode.
Referenced as ``tests.envs.nim:NimEnv`` so worker processes can import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class NimEnv:
    """The AEC API: ``agent_iter``, ``last``, ``observe``, ``step``, ``reset``."""

    metadata: dict[str, Any] = {"name": "nim"}

    def __init__(self, low: int = 5, high: int = 15) -> None:
        self.low, self.high = low, high
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        self._obs = spaces.Dict({"observation": spaces.Box(0, high, (1,), np.float32),
                                 "action_mask": spaces.Box(0, 1, (3,), np.int8)})
        self._act = spaces.Discrete(3)  # take action + 1 stones
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._act

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.pile = int(self._rng.integers(self.low, self.high + 1))
        self.agents = list(self.possible_agents)
        self.agent_selection = self.agents[0]
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        mask = np.array([self.pile >= k for k in (1, 2, 3)], dtype=np.int8)
        return {"observation": np.array([self.pile], np.float32), "action_mask": mask}

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        agent = self.agent_selection
        return (self.observe(agent) if observe else None, self._cumulative_rewards[agent],
                self.terminations[agent], self.truncations[agent], self.infos[agent])

    def agent_iter(self, max_iter: int = 2**63) -> Any:
        for _ in range(max_iter):
            if not self.agents:
                return
            yield self.agent_selection

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self.agents.remove(agent)  # a done agent's last step
            if self.agents:
                self.agent_selection = self.agents[0]
            return
        take = int(action) + 1
        if take > self.pile:
            raise ValueError(f"{agent} took {take} stones from a pile of {self.pile}")
        self._cumulative_rewards[agent] = 0.0
        self.pile -= take
        other = self.possible_agents[1 - self.possible_agents.index(agent)]
        self.rewards = {agent: 0.01 * take, other: 0.0}
        if self.pile == 0:
            self.rewards[agent] += 1.0
            self.rewards[other] -= 1.0
            self.terminations = {a: True for a in self.agents}
        for a, r in self.rewards.items():
            self._cumulative_rewards[a] += r
        self.agent_selection = other
