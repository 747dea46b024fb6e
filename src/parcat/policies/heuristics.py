"""Scripted heuristic policies (``greedy``) for the built-in missions; any randomness comes
from a generator made in ``reset``, so episodes are reproducible wherever they run."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from parcat.core.errors import PolicyError
from parcat.envs.harvest import ACTION_MOVES as HARVEST_MOVES
from parcat.envs.harvest import HarvestEnv
from parcat.policies.base import AgentSpec

NOOP, UP, DOWN, LEFT, RIGHT = range(5)
"""Harvest's actions (rows grow downwards)."""


def _require_rng(rng: np.random.Generator | None, name: str) -> np.random.Generator:
    if rng is None:
        raise RuntimeError(f"{name}: call reset(seed) before step()")
    return rng


class HarvestGreedy:
    """Harvest: deliver when carrying, else fetch the nearest visible resource, else explore
    in one random direction, changed with probability ``explore`` each step or at a wall."""

    def __init__(self, spec: AgentSpec, explore: float = 0.1) -> None:
        if (not isinstance(explore, int | float) or isinstance(explore, bool)
                or not 0.0 <= explore <= 1.0):
            raise PolicyError(
                f"HarvestGreedy: argument 'explore' must be a number in [0, 1], got {explore!r}"
            )
        self.spec = spec
        self.explore = float(explore)
        self._rng: np.random.Generator | None = None
        self._heading = UP

    def reset(self, seed: int) -> None:
        """Reseed the exploration generator and draw a first heading."""
        self._rng = np.random.default_rng(seed)
        self._heading = int(self._rng.integers(UP, RIGHT + 1))

    def step(self, obs: NDArray[np.float32]) -> int:
        """Return the action (0 noop, 1 up, 2 down, 3 left, 4 right) for one observation."""
        rng = _require_rng(self._rng, "HarvestGreedy")
        window = HarvestEnv.window(obs)
        walls = window[0]
        carrying, dy, dx = HarvestEnv.extras(obs)
        if carrying:
            return _toward(dy, dx, walls)
        rows, cols = np.nonzero(window[1])
        if len(rows):
            centre = walls.shape[0] // 2
            nearest = int(np.argmin(np.abs(rows - centre) + np.abs(cols - centre)))
            return _toward(float(rows[nearest] - centre), float(cols[nearest] - centre), walls)
        if _blocked(self._heading, walls) or rng.random() < self.explore:
            choices = [a for a in (UP, DOWN, LEFT, RIGHT) if not _blocked(a, walls)]
            self._heading = int(rng.choice(choices)) if choices else NOOP
        return self._heading


def _blocked(action: int, walls: NDArray[np.float32]) -> bool:
    """Whether a wall stands next to the window's centre in the direction of ``action``."""
    centre = walls.shape[0] // 2
    dy, dx = HARVEST_MOVES[action]
    return bool(walls[centre + dy, centre + dx] > 0)


def _toward(dy: float, dx: float, walls: NDArray[np.float32]) -> int:
    """Step along the longer axis towards ``(dy, dx)``, or the other axis when walled."""
    order = [(abs(dy), DOWN if dy > 0 else UP), (abs(dx), RIGHT if dx > 0 else LEFT)]
    for length, action in sorted(order, key=lambda item: -item[0]):
        if length > 0 and not _blocked(action, walls):
            return action
    return NOOP


class EvadeGreedy:
    """Evade: pursuers head straight for the evader; the evader runs along the sum of
    inverse-square repulsions from every pursuer and the walls (weighted by ``wall_weight``).
    The observation's role flag picks the side."""

    def __init__(self, spec: AgentSpec, wall_weight: float = 2.0) -> None:
        if not isinstance(wall_weight, int | float) or isinstance(wall_weight, bool):
            raise PolicyError(
                f"EvadeGreedy: argument 'wall_weight' must be a number, got {wall_weight!r}"
            )
        self.spec = spec
        self.wall_weight = float(wall_weight)
        self.arena = float(spec.params.get("arena", 1.0))

    def reset(self, seed: int) -> None:
        """Nothing to reset."""

    def step(self, obs: NDArray[np.float32]) -> NDArray[np.float32]:
        """Return the desired velocity (norm 1, float32) for one observation."""
        # A pursuer's last relative position is the evader's (it is the last agent).
        direction = self._flee(obs) if obs[-1] > 0.5 else obs[-3:-1].astype(np.float64)
        norm = math.hypot(float(direction[0]), float(direction[1]))
        if norm < 1e-12:
            return np.zeros(2, dtype=np.float32)
        return np.clip(direction / norm, -1.0, 1.0).astype(np.float32)

    def _flee(self, obs: NDArray[np.float32]) -> NDArray[np.float64]:
        relative = obs[4:-1].astype(np.float64).reshape(-1, 2)
        distance = np.maximum(np.sqrt((relative * relative).sum(axis=1)), 1e-6)
        force = -(relative / distance[:, None] ** 3).sum(axis=0)
        near = np.maximum(obs[0:2].astype(np.float64), 1e-3)
        far = np.maximum(self.arena - near, 1e-3)
        return force + self.wall_weight * (1.0 / near**2 - 1.0 / far**2)


class GoalSeeker:
    """Goal tasks: step along the axis of the goal's larger component when the goal is
    observed; else keep a direction while the reward improves, otherwise try another."""

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.kind = str(spec.params.get("task_kind", "position"))
        self.step_size = float(spec.params.get("step_size", 0.1))
        self._rng: np.random.Generator | None = None
        self._action: int | None = None
        self._previous: float | None = None

    def reset(self, seed: int) -> None:
        """Reseed the generator and forget the previous direction and reward."""
        self._rng = np.random.default_rng(seed)
        self._action = None
        self._previous = None

    def step(self, obs: NDArray[np.float32]) -> int:
        """Return the action (0 noop, 1 +y, 2 -y, 3 -x, 4 +x) for one observation."""
        goal = obs[3:5].astype(np.float64)
        if goal.any():
            offset = goal if self.kind == "direction" else goal - obs[0:2]
            return self._seek(float(offset[0]), float(offset[1]))
        return self._climb(float(obs[2]))

    def _seek(self, dx: float, dy: float) -> int:
        if self.kind == "position" and max(abs(dx), abs(dy)) < self.step_size / 2:
            return 0
        if abs(dx) >= abs(dy):
            return 4 if dx > 0 else 3
        return 1 if dy > 0 else 2

    def _climb(self, reward: float) -> int:
        rng = _require_rng(self._rng, "GoalSeeker")
        if self._action is None:
            self._action = int(rng.integers(1, 5))
            return self._action
        if self.kind == "direction":
            improving = reward > 0
        else:
            # The first reward has nothing to compare with: keep going once.
            improving = self._previous is None or reward > self._previous
            self._previous = reward
        if not improving:
            self._action = int(rng.choice([a for a in range(1, 5) if a != self._action]))
        return self._action
