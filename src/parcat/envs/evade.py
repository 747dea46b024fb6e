"""Evade: continuous 2-D pursuit-evasion in a walled square arena.

``pursuers`` pursuers chase one evader in ``[0, arena]^2``. Positions move by ``velocity * dt``
clipped to the arena, and the state keeps the velocity achieved (zero across a wall). The
episode terminates when a pursuer comes within ``capture_radius`` of the evader. Every step the
evader gets +0.01 and each pursuer -0.01 times its distance to the evader; on capture, every
pursuer also gets +1 and the evader -1. The step is a few numpy operations on ``(agents, 2)``
arrays, because this environment also drives the real-time simulator.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
from numpy.typing import NDArray

from parcat.core.errors import MissionError, brief
from parcat.core.limits import MAX_AGENTS
from parcat.envs._common import (
    BuiltinEnv,
    invalid_parameter,
    require_int,
    require_observation_size,
    require_positive,
)

EVADER = "evader"
STEP_BONUS = 0.01
CAPTURE_REWARD = 1.0


class EvadeEnv(BuiltinEnv, name="evade", legend={
        "E": "evader", "0-9": "pursuer (index mod 10)"}):
    """Pursuit-evasion with continuous actions (PettingZoo Parallel API).

    Agents: ``pursuer_0 .. pursuer_{n-1}``, then ``evader``. Observation of every agent (flat
    float32): own position, own velocity, every *other* agent's position relative to this one
    in ``possible_agents`` order (the evader last for a pursuer), then a role flag (1.0 for the
    evader). Action: the desired velocity as a fraction of the agent's maximum speed
    (``Box(-1, 1, (2,))``, norm clipped to 1). Episodes start at rest, with every pursuer at
    least ``arena / 4`` from the evader, or at reset option ``"positions"`` (one ``(x, y)`` per
    agent).

    ``pursuer_speed`` and ``evader_speed`` are distances per unit time, ``dt`` the time of a
    step.
    """

    def __init__(self, *, pursuers: int = 3, arena: float = 1.0, pursuer_speed: float = 0.04,
                 evader_speed: float = 0.05, capture_radius: float = 0.08, dt: float = 1.0,
                 max_steps: int = 200) -> None:
        self.num_pursuers = require_int("evade", "pursuers", pursuers, 1, MAX_AGENTS - 1)
        # every agent observes every other: the observations grow with the square of agents
        require_observation_size("evade", self.num_pursuers + 1,
                                 4 + 2 * self.num_pursuers + 1, "fewer pursuers")
        self.arena = require_positive("evade", "arena", arena)
        self.pursuer_speed = require_positive("evade", "pursuer_speed", pursuer_speed)
        self.evader_speed = require_positive("evade", "evader_speed", evader_speed)
        self.capture_radius = require_positive("evade", "capture_radius", capture_radius)
        if self.capture_radius >= self.arena / 4:
            limit = f"< arena / 4 = {self.arena / 4:g}"
            raise invalid_parameter("evade", "capture_radius", limit, capture_radius)
        self.dt = require_positive("evade", "dt", dt)
        self._set_agents([*(f"pursuer_{i}" for i in range(self.num_pursuers)), EVADER], max_steps)
        count = len(self.possible_agents)
        self._speeds = np.array([self.pursuer_speed] * self.num_pursuers + [self.evader_speed])
        self._others = np.array([[j for j in range(count) if j != i] for i in range(count)])
        self._obs_space = self._make_obs_space()
        self._act_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self._pos = np.zeros((count, 2))
        self._vel = np.zeros((count, 2))
        self._capture_step: int | None = None
        self._min_distance = math.inf

    def _make_obs_space(self) -> gymnasium.spaces.Box:
        count = len(self.possible_agents)
        vmax = max(self.pursuer_speed, self.evader_speed)
        high = np.full(4 + 2 * (count - 1) + 1, self.arena, dtype=np.float32)
        low = -high
        low[0:2] = 0.0
        low[2:4], high[2:4] = -vmax, vmax
        low[-1], high[-1] = 0.0, 1.0
        return gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)

    def _start(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        if "positions" in options:
            self._pos = self._positions_from(options["positions"])
        else:
            self._pos = self._random_positions(rng)
        self._vel = np.zeros_like(self._pos)
        self.agents = list(self.possible_agents)
        self._steps = 0
        self._capture_step = None
        self._min_distance = float(self._distances().min())

    def _random_positions(self, rng: np.random.Generator) -> NDArray[np.float64]:
        pos = rng.uniform(0.0, self.arena, (len(self.possible_agents), 2))
        for _ in range(1000):
            close = np.flatnonzero(np.hypot(*(pos[:-1] - pos[-1]).T) < self.arena / 4)
            if len(close) == 0:
                break
            pos[close] = rng.uniform(0.0, self.arena, (len(close), 2))
        return pos

    def _positions_from(self, positions: Any) -> NDArray[np.float64]:
        try:
            pos = np.asarray(positions, dtype=np.float64)
        except (TypeError, ValueError):
            pos = np.zeros(0)
        if pos.shape != self._pos.shape or (pos < 0).any() or (pos > self.arena).any():
            raise MissionError(f"evade: option 'positions' must hold {len(self.possible_agents)} "
                               f"(x, y) pairs inside [0, {self.arena:g}], got {brief(positions)}")
        return pos

    def _advance(self, actions: dict[str, Any]) -> tuple[NDArray[np.float64], bool]:
        agents = self.agents
        wish = np.array([actions[a] for a in agents], dtype=np.float64).reshape(len(agents), 2)
        norm = np.sqrt((wish * wish).sum(axis=1, keepdims=True))
        speed = self._speeds[:, None]
        target = self._pos + wish / np.maximum(norm, 1.0) * (speed * self.dt)
        # np.minimum/np.maximum: cheaper than np.clip on arrays this small
        moved = np.minimum(np.maximum(target, 0.0), self.arena)
        self._vel = np.minimum(np.maximum((moved - self._pos) / self.dt, -speed), speed)
        self._pos = moved
        self._steps += 1
        distances = self._distances()
        self._min_distance = min(self._min_distance, float(distances.min()))
        captured = bool(distances.min() <= self.capture_radius)
        rewards = np.append(-STEP_BONUS * distances, STEP_BONUS)
        if captured:
            self._capture_step = self._steps
            rewards += np.append(np.full(self.num_pursuers, CAPTURE_REWARD), -CAPTURE_REWARD)
        return rewards, captured

    def _distances(self) -> NDArray[np.float64]:
        diff = self._pos[:-1] - self._pos[-1]
        distances: NDArray[np.float64] = np.sqrt((diff * diff).sum(axis=1))
        return distances

    def _observe(self) -> NDArray[np.float32]:
        count = len(self.possible_agents)
        obs = np.empty((count, self._obs_space.shape[0]), dtype=np.float32)
        obs[:, 0:2] = self._pos
        obs[:, 2:4] = self._vel
        relative = self._pos[self._others] - self._pos[:, None, :]
        obs[:, 4:-1] = relative.reshape(count, -1)
        obs[:, -1] = 0.0
        obs[-1, -1] = 1.0
        return obs

    def state(self) -> NDArray[np.float32]:
        """Global state: all positions (``x, y`` per agent), then all velocities."""
        return np.concatenate([self._pos.ravel(), self._vel.ravel()]).astype(np.float32)

    def episode_stats(self) -> dict[str, float]:
        """``captured`` (0/1), ``capture_step`` (``max_steps`` if none) and ``min_distance``."""
        capture_step = self.max_steps if self._capture_step is None else self._capture_step
        return {
            "captured": float(self._capture_step is not None),
            "capture_step": float(capture_step),
            "min_distance": self._min_distance,
        }

    def render(self) -> str:
        """An ansi picture of the arena on a 20x20 character grid: pursuer index, ``E`` evader."""
        side = 20
        chars = np.full((side, side), ".", dtype="<U1")
        cells = np.minimum((self._pos / self.arena * side).astype(int), side - 1)
        labels = [str(i % 10) for i in range(self.num_pursuers)] + ["E"]
        for (x, y), label in zip(cells.tolist(), labels, strict=True):
            chars[side - 1 - y, x] = label
        border = "+" + "-" * side + "+"
        body = "\n".join("|" + "".join(row) + "|" for row in chars)
        return f"{border}\n{body}\n{border}\n"
