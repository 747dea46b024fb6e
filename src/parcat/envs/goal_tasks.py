"""Goal tasks: point agents reach goals drawn from a task distribution (meta-learning).

Every agent is a point that starts at the origin and moves ``step_size`` along one axis per
step. A *task* gives each agent its own goal, as a JSON-serialisable dict:

* ``{"kind": "position", "goals": [[x, y], ...]}``: goals uniform in a disc of radius
  ``goal_radius``; a step's reward is minus the distance to the goal after the move.
* ``{"kind": "direction", "directions": [angle, ...]}``: angles (radians) uniform on the
  circle; the reward is the step's displacement projected on the goal direction.

Agents never terminate early (a lattice walker cannot always come within a fixed distance of
a goal, so "reached" would be arbitrary); episodes are truncated after ``max_steps`` steps.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
from numpy.typing import NDArray

from parcat.core.errors import MissionError, brief
from parcat.core.limits import MAX_AGENTS
from parcat.envs._common import BuiltinEnv, invalid_parameter, require_int, require_positive

TASK_KINDS = ("position", "direction")
ACTION_MOVES = ((0, 0), (0, 1), (0, -1), (-1, 0), (1, 0))
OBS_SIZE = 5


class GoalTasksEnv(BuiltinEnv, name="goal_tasks"):
    """Goal reaching with a distribution of tasks (PettingZoo Parallel API).

    Observation of each agent (float32, length 5): position ``(x, y)``, the previous step's
    reward (0.0 after reset), and, when ``observe_goal``, the goal position or unit direction,
    else zeros (a meta-learner must infer the goal from rewards). Actions: 0 noop, 1 +y, 2 -y,
    3 -x, 4 +x. Reset option ``"task"`` resets to that task, else one is sampled.
    """

    def __init__(self, *, agents: int = 1, task_kind: str = "position", goal_radius: float = 1.0,
                 step_size: float = 0.1, observe_goal: bool = True, max_steps: int = 50) -> None:
        self.num_agents = require_int("goal_tasks", "agents", agents, 1, MAX_AGENTS)
        if task_kind not in TASK_KINDS:
            kinds = ", ".join(repr(kind) for kind in TASK_KINDS)
            raise invalid_parameter("goal_tasks", "task_kind", f"one of {kinds}", task_kind)
        self.task_kind: str = task_kind
        self.goal_radius = require_positive("goal_tasks", "goal_radius", goal_radius)
        self.step_size = require_positive("goal_tasks", "step_size", step_size)
        if not isinstance(observe_goal, bool):
            raise invalid_parameter("goal_tasks", "observe_goal", "true or false", observe_goal)
        self.observe_goal = observe_goal
        self._set_agents([f"agent_{i}" for i in range(self.num_agents)], max_steps)
        self.task: dict[str, Any] | None = None
        """The task of the current episode (``None`` before the first reset)."""
        self._obs_space = self._make_obs_space()
        self._act_space = gymnasium.spaces.Discrete(len(ACTION_MOVES))
        self._moves = np.array(ACTION_MOVES, dtype=np.int64)
        self._lattice = np.zeros((self.num_agents, 2), dtype=np.int64)
        self._goals = np.zeros((self.num_agents, 2))
        self._last_reward = np.zeros(self.num_agents)

    def _make_obs_space(self) -> gymnasium.spaces.Box:
        reach = self.max_steps * self.step_size
        if self.task_kind == "position":
            reward, goal = self.goal_radius + reach, self.goal_radius
        else:
            reward, goal = self.step_size, 1.0
        # a little loose, so that rounding never leaves the box
        high = np.array([reach, reach, reward, goal, goal], dtype=np.float64) * 1.001 + 1e-6
        return gymnasium.spaces.Box(-high.astype(np.float32), high.astype(np.float32))

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        """Draw one task (one goal per agent) from this environment's task distribution."""
        if self.task_kind == "direction":
            angles = rng.uniform(-math.pi, math.pi, self.num_agents)
            return {"kind": "direction", "directions": angles.tolist()}
        radius = self.goal_radius * np.sqrt(rng.uniform(0.0, 1.0, self.num_agents))
        angle = rng.uniform(-math.pi, math.pi, self.num_agents)
        goals = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
        return {"kind": "position", "goals": goals.tolist()}

    def _start(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        task = options.get("task")
        self._goals = self._goals_of(self.sample_task(rng) if task is None else task)
        self.agents = list(self.possible_agents)
        self._lattice[:] = 0
        self._last_reward[:] = 0.0
        self._steps = 0

    def _goals_of(self, task: Any) -> NDArray[np.float64]:
        key = "goals" if self.task_kind == "position" else "directions"
        shape = (self.num_agents, 2) if key == "goals" else (self.num_agents,)
        try:
            values = np.asarray(task[key], dtype=np.float64)
            ok = task["kind"] == self.task_kind and values.shape == shape
            if ok and key == "goals":
                ok = bool((np.hypot(*values.T) <= self.goal_radius * (1 + 1e-9)).all())
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok or not np.isfinite(values).all():
            within = f" with goals within radius {self.goal_radius:g}" if key == "goals" else ""
            raise MissionError(f"goal_tasks: task must be {{'kind': '{self.task_kind}', '{key}': "
                               f"[one per agent, {self.num_agents} in all]}}{within}, got "
                               f"{brief(task)}")
        self.task = {"kind": self.task_kind, key: values.tolist()}
        if key == "goals":
            return values
        return np.stack([np.cos(values), np.sin(values)], axis=1)

    def _advance(self, actions: dict[str, Any]) -> tuple[NDArray[np.float64], bool]:
        agents = self.agents
        acts = np.fromiter((actions[a] for a in agents), dtype=np.int64, count=len(agents))
        if acts.min() < 0 or acts.max() >= len(ACTION_MOVES):
            raise ValueError(f"goal_tasks: actions must be integers in 0..4, got {acts.tolist()}")
        moves = self._moves[acts]
        self._lattice += moves
        if self.task_kind == "position":
            self._last_reward = -self._distances()
        else:
            self._last_reward = (moves * self.step_size * self._goals).sum(axis=1)
        self._steps += 1
        return self._last_reward, False

    def _positions(self) -> NDArray[np.float64]:
        return self._lattice.astype(np.float64) * self.step_size

    def _distances(self) -> NDArray[np.float64]:
        distances: NDArray[np.float64] = np.hypot(*(self._positions() - self._goals).T)
        return distances

    def _observe(self) -> NDArray[np.float32]:
        obs = np.zeros((self.num_agents, OBS_SIZE), dtype=np.float32)
        obs[:, 0:2] = self._positions()
        obs[:, 2] = self._last_reward
        if self.observe_goal:
            obs[:, 3:5] = self._goals
        return obs

    def state(self) -> NDArray[np.float32]:
        """Global state: positions of all agents, then their goals (position or unit vector)."""
        return np.concatenate([self._positions().ravel(), self._goals.ravel()]).astype(np.float32)

    def episode_stats(self) -> dict[str, float]:
        """Mean ``final_distance`` or ``progress`` over agents, then the task's numbers."""
        if self.task_kind == "position":
            stats = {"final_distance": float(self._distances().mean())}
            for i, (x, y) in enumerate(self._goals.tolist()):
                stats[f"goal_{i}_x"], stats[f"goal_{i}_y"] = x, y
            return stats
        progress = (self._positions() * self._goals).sum(axis=1)
        stats = {"progress": float(progress.mean())}
        directions = (self.task or {}).get("directions", [])
        stats.update({f"direction_{i}": float(a) for i, a in enumerate(directions)})
        return stats

    def render(self) -> str:
        """One text line per agent: position, goal and last reward."""
        lines = []
        for i, agent in enumerate(self.possible_agents):
            x, y = self._positions()[i].tolist()
            gx, gy = self._goals[i].tolist()
            reward = float(self._last_reward[i])
            where = f"at ({x:+.2f}, {y:+.2f}) goal ({gx:+.2f}, {gy:+.2f})"
            lines.append(f"{agent}: {where} r={reward:+.3f}")
        return "\n".join(lines) + "\n"
