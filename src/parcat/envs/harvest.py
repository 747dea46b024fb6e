"""Harvest: agents gather resources on a grid and deliver them to a base.

The map is a square of ``size`` cells whose border is wall, with a 2x2 base at its centre
where every agent starts. An empty-handed agent that ends a step on a resource picks it up
(+0.1; of several, the lowest index) and the resource respawns on a random free cell; a carrying
agent that ends a step on the base delivers (+1.0). Agents may share cells. Episodes end by
truncation after ``max_steps`` steps. Positions are flat indices into a grid padded by ``view``
cells of wall, so every agent's window is one fancy-indexing gather.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
from numpy.typing import NDArray

from parcat.core.errors import MissionError, brief
from parcat.core.limits import MAX_AGENTS, MAX_GRID_SIDE, MAX_VIEW_RADIUS
from parcat.envs._common import BuiltinEnv, require_int, require_observation_size

NUM_CHANNELS = 4
NUM_EXTRAS = 3
ACTION_MOVES = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))
PICKUP_REWARD = 0.1
DELIVERY_REWARD = 1.0


class HarvestEnv(BuiltinEnv, name="harvest", legend={
        "#": "wall", "B": "base", "*": "resource", "0-9": "agent (index mod 10)"}):
    """Multi-agent resource gathering on a grid (PettingZoo Parallel API).

    Observation of each agent (flat float32): the ``w x w`` window centred on it
    (``w = 2*view+1``, row 0 northernmost), channels first: walls (outside the map too),
    resources, base, and the number of *other* agents per cell; then 1.0 if it carries, and
    (dy, dx) to the base centre divided by ``size``. :meth:`window` and :meth:`extras` split
    it. Actions: 0 noop, 1 up, 2 down, 3 left, 4 right. Reset options for a hand-built start:
    ``"agent_cells"`` (one ``(row, col)`` per agent), ``"resource_cells"`` (``resources``
    distinct free cells). ``size`` is the side of the map in cells, wall border included.
    """

    def __init__(self, *, size: int = 16, agents: int = 4, resources: int = 12, view: int = 2,
                 max_steps: int = 200) -> None:
        self.size = require_int("harvest", "size", size, 5, MAX_GRID_SIDE)
        self.num_agents = require_int("harvest", "agents", agents, 1, MAX_AGENTS)
        free = (self.size - 2) ** 2 - 4
        why = f" (free cells of a size-{self.size} map)"
        self.num_resources = require_int("harvest", "resources", resources, 1, free, why)
        self.view = require_int("harvest", "view", view, 1, MAX_VIEW_RADIUS)
        obs_length = NUM_CHANNELS * (2 * self.view + 1) ** 2 + NUM_EXTRAS
        require_observation_size("harvest", self.num_agents, obs_length,
                                 "fewer agents or a smaller view")
        self._set_agents([f"agent_{i}" for i in range(self.num_agents)], max_steps)
        self._build_static()
        self._obs_space = self._make_obs_space()
        self._act_space = gymnasium.spaces.Discrete(len(ACTION_MOVES))
        self._resource_layer = np.zeros_like(self._wall_layer)
        self._cells = np.zeros(self.num_agents, dtype=np.intp)
        self._carrying = np.zeros(self.num_agents, dtype=bool)
        self._deliveries = self._pickups = 0

    def _build_static(self) -> None:
        v, n = self.view, self.size
        self._width = n + 2 * v
        walls = np.ones((self._width, self._width), dtype=np.float32)
        walls[v + 1 : v + n - 1, v + 1 : v + n - 1] = 0.0
        base = np.zeros_like(walls)
        c = v + n // 2
        base[c - 1 : c + 1, c - 1 : c + 1] = 1.0
        self._wall_layer = walls.ravel()
        self._base_layer = base.ravel()
        self._free_mask = (self._wall_layer == 0) & (self._base_layer == 0)
        self._base_cells = np.flatnonzero(self._base_layer)
        self._base_centre = np.array([n // 2 - 0.5, n // 2 - 0.5])
        offsets = np.arange(-v, v + 1)
        self._window_offsets = (offsets[:, None] * self._width + offsets[None, :]).ravel()
        self._moves = np.array([dy * self._width + dx for dy, dx in ACTION_MOVES], dtype=np.intp)

    def _make_obs_space(self) -> gymnasium.spaces.Box:
        cells = (2 * self.view + 1) ** 2
        high = np.ones(NUM_CHANNELS * cells + NUM_EXTRAS, dtype=np.float32)
        high[3 * cells : 4 * cells] = self.num_agents - 1
        low = np.zeros_like(high)
        low[-2:] = -1.0
        return gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)

    @staticmethod
    def window(obs: NDArray[np.float32]) -> NDArray[np.float32]:
        """Return the ``(4, w, w)`` window part of one observation (a view, no copy)."""
        side = round(math.sqrt((obs.shape[-1] - NUM_EXTRAS) / NUM_CHANNELS))
        return obs[: NUM_CHANNELS * side * side].reshape(NUM_CHANNELS, side, side)

    @staticmethod
    def extras(obs: NDArray[np.float32]) -> tuple[bool, float, float]:
        """Return ``(carrying, dy, dx)`` of one observation; (dy, dx) point to the base."""
        return bool(obs[-3] > 0.5), float(obs[-2]), float(obs[-1])

    def _start(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        self.agents = list(self.possible_agents)
        self._steps = self._deliveries = self._pickups = 0
        self._carrying[:] = False
        self._cells = self._base_cells[np.arange(self.num_agents) % len(self._base_cells)]
        if "agent_cells" in options:
            self._cells = self._cells_from(options["agent_cells"], self.num_agents, "agent_cells")
        self._resource_layer[:] = 0.0
        if "resource_cells" in options:
            spots = self._cells_from(options["resource_cells"], self.num_resources,
                                     "resource_cells")
            if not self._free_mask[spots].all() or len(set(spots.tolist())) != len(spots):
                raise MissionError("harvest: option 'resource_cells' must be distinct free cells")
        else:
            spots = rng.choice(np.flatnonzero(self._free_mask), self.num_resources, False)
        self._resource_layer[spots] = 1.0

    def _cells_from(self, cells: Any, count: int, option: str) -> NDArray[np.intp]:
        try:
            rc = np.asarray(cells, dtype=np.intp).reshape(-1, 2)
        except (TypeError, ValueError):
            rc = np.zeros((0, 2), dtype=np.intp)
        if len(rc) != count or (rc < 1).any() or (rc > self.size - 2).any():
            raise MissionError(f"harvest: option '{option}' must hold {count} (row, col) cells "
                               f"inside the walls (1..{self.size - 2}), got {brief(cells)}")
        result: NDArray[np.intp] = (rc[:, 0] + self.view) * self._width + rc[:, 1] + self.view
        return result

    def _advance(self, actions: dict[str, Any]) -> tuple[NDArray[np.float64], bool]:
        acts = np.fromiter((actions[a] for a in self.agents), dtype=np.intp, count=len(self.agents))
        if acts.min() < 0 or acts.max() >= len(ACTION_MOVES):
            raise ValueError(f"harvest: actions must be integers in 0..4, got {acts.tolist()}")
        target = self._cells + self._moves[acts]
        self._cells = np.where(self._wall_layer[target] > 0, self._cells, target)
        rewards = self._deliver() + self._pick_up()
        self._steps += 1
        return rewards, False

    def _deliver(self) -> NDArray[np.float64]:
        delivering = self._carrying & (self._base_layer[self._cells] > 0)
        self._carrying &= ~delivering
        self._deliveries += int(delivering.sum())
        rewards = np.zeros(self.num_agents)
        rewards[delivering] = DELIVERY_REWARD
        return rewards

    def _pick_up(self) -> NDArray[np.float64]:
        rewards = np.zeros(self.num_agents)
        candidates = np.flatnonzero(~self._carrying & (self._resource_layer[self._cells] > 0))
        if len(candidates) == 0:
            return rewards
        # np.unique keeps each cell's first occurrence, i.e. its lowest-index agent.
        cells, first = np.unique(self._cells[candidates], return_index=True)
        winners = candidates[first]
        self._carrying[winners] = True
        rewards[winners] = PICKUP_REWARD
        self._pickups += len(winners)
        self._resource_layer[cells] = 0.0
        assert self._rng is not None
        free = np.flatnonzero(self._free_mask & (self._resource_layer == 0))
        self._resource_layer[self._rng.choice(free, len(cells), replace=False)] = 1.0
        return rewards

    def _observe(self) -> NDArray[np.float32]:
        cells = len(self._window_offsets)
        obs = np.empty((self.num_agents, self._obs_space.shape[0]), dtype=np.float32)
        index = self._cells[:, None] + self._window_offsets[None, :]
        occupancy = np.bincount(self._cells, minlength=len(self._wall_layer)).astype(np.float32)
        layers = (self._wall_layer, self._resource_layer, self._base_layer, occupancy)
        for channel, layer in enumerate(layers):
            obs[:, channel * cells : (channel + 1) * cells] = layer[index]
        obs[:, 3 * cells + cells // 2] -= 1.0  # an agent does not count itself
        rows, cols = np.divmod(self._cells, self._width)
        obs[:, -3] = self._carrying
        obs[:, -2] = (self._base_centre[0] - (rows - self.view)) / self.size
        obs[:, -1] = (self._base_centre[1] - (cols - self.view)) / self.size
        return obs

    def state(self) -> NDArray[np.float32]:
        """Global state: resource map (``size*size``), then agent rows, cols and carrying flags."""
        v, n = self.view, self.size
        grid = self._resource_layer.reshape(self._width, self._width)[v : v + n, v : v + n]
        rows, cols = np.divmod(self._cells, self._width)
        parts = (grid.ravel(), rows - v, cols - v, self._carrying)
        return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts])

    def episode_stats(self) -> dict[str, float]:
        """Deliveries and pickups of all agents so far."""
        return {"deliveries": float(self._deliveries), "pickups": float(self._pickups)}

    def render(self) -> str:
        """An ansi picture: ``#`` wall, ``B`` base, ``*`` resource, agent index mod 10."""
        v, n = self.view, self.size
        chars = np.full((n, n), ".", dtype="<U1")
        padded = (self._width, self._width)
        chars[self._wall_layer.reshape(padded)[v : v + n, v : v + n] > 0] = "#"
        chars[self._base_layer.reshape(padded)[v : v + n, v : v + n] > 0] = "B"
        chars[self._resource_layer.reshape(padded)[v : v + n, v : v + n] > 0] = "*"
        rows, cols = np.divmod(self._cells, self._width)
        for i in range(self.num_agents):
            chars[rows[i] - v, cols[i] - v] = str(i % 10)
        return "\n".join("".join(row) for row in chars) + "\n"
