"""The record of a simulation: per-step arrays plus a JSON description, saved as ``.npz``.

Arrays (``T`` steps, ``N`` agents in ``possible_agents`` order):

===================  ===========  ==========================================================
``time_s``           (T,)         when the step applied its actions, seconds from the start
                                  (simulated ``k * period`` in sequential mode)
``step_cost_s``      (T,)         wall time of the step (lockstep agents, ``env.step``, record)
``episode``          (T,)         episode index; ``episode_step`` the step within it
``state``            (T, S)       ``env.state()`` before the step, if the env has one
``action_<i>``       (T, ...)     agent ``i``'s action in force (its space's shared-memory code)
``based_on``         (T, N)       the step whose observation that action came from (-1: default)
``age_steps``        (T, N)       ``k - based_on`` (-1 for the default action)
``age_s``            (T, N)       ``time_s[k] - time_s[based_on]`` (NaN for the default action)
``compute_s``        (T, N)       seconds the policy took to compute the action in force
``reward``           (T, N)       the reward of the step
``obs_<i>``          (T, ...)     agent ``i``'s observation at each step (``log_agent_state``)
===================  ===========  ==========================================================

Timing arrays (``step_cost_s``, ``compute_s``, and in parallel mode ``time_s``, ``age_*``)
are measurements; everything else of a sequential run is a pure function of the config.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.atomic import write_atomically
from parcat.sim.agent import CycleStats
from parcat.sim.config import SimConfig
from parcat.sim.world import WorldResult

RECORD_FILE = "record.npz"


@dataclass(frozen=True)
class SimRecord:
    """A finished (or interrupted) simulation run."""

    meta: dict[str, Any]
    """Mission, mode, period, agents (with their cycle statistics), episodes, wall time."""
    arrays: dict[str, np.ndarray] = field(repr=False)
    """The per-step arrays (see the module docstring)."""
    files: tuple[str, ...] = ()
    """Files written for this run."""

    @property
    def steps(self) -> int:
        """Environment steps recorded."""
        return int(self.meta["steps"])

    @property
    def agent_ids(self) -> list[str]:
        """The agents' ids (as strings), in record order."""
        return [a["agent"] for a in self.meta["agents"]]

    def agent_index(self, agent_id: Any) -> int:
        """The record column of ``agent_id``."""
        return self.agent_ids.index(str(agent_id))

    def save(self, folder: str | Path) -> Path:
        """Write ``record.npz`` (arrays and a ``meta`` JSON string) atomically into ``folder``."""
        path = Path(folder) / RECORD_FILE
        payload = dict(self.arrays)
        payload["meta"] = np.array(json.dumps(jsonable(self.meta)))
        write_npz_atomically(path, payload)
        return path

    @classmethod
    def load(cls, path: str | Path) -> SimRecord:
        """Read a record written by :meth:`save` (a file or its folder)."""
        path = Path(path)
        if path.is_dir():
            path = path / RECORD_FILE
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files if key != "meta"}
            meta = json.loads(str(data["meta"]))
        return cls(meta, arrays, (str(path),))


def make_record(config: SimConfig, mode: str, fast: bool, result: WorldResult,
                interrupted: bool) -> SimRecord:
    """Build the record from the world's arrays and every agent's cycle statistics."""
    arrays = dict(result.arrays)
    arrays["age_steps"], arrays["age_s"] = _ages(arrays["based_on"], arrays["time_s"])
    elapsed_ns = _elapsed_ns(config, mode, result.steps, result.wall_s)
    agents = []
    for agent in config.agents:
        stats = result.cycles.get(agent.spec.agent_index, CycleStats())
        due = None if agent.lockstep else due_cycles(agent.cycle_ns, elapsed_ns)
        agents.append({
            "agent": str(agent.agent_id),
            "index": agent.spec.agent_index,
            "policy": agent.policy.name,
            "kind": "lockstep" if agent.lockstep else "cycled",
            "cycle_time_s": agent.cycle_time,
            **stats.to_dict(due, agent.cycle_ns),
        })
    meta = {
        "schema": "parcat.sim.record",
        "version": 1,
        "mission": config.mission.name,
        "env": config.mission.env,
        "mission_params": dict(config.mission.params),
        "source": config.source,
        "mode": mode,
        "fast": fast,
        "period_s": config.period,
        "iters": config.iters,
        "steps": result.steps,
        "seed": config.seed,
        "interrupted": interrupted,
        "wall_s": result.wall_s,
        "agents": agents,
        "episodes": result.episodes,
    }
    return SimRecord(meta, arrays)


def _elapsed_ns(config: SimConfig, mode: str, steps: int, wall_s: float) -> int | None:
    """The run's clock at its end: the last step's simulated time in sequential mode, the
    wall time in parallel mode; ``None`` if no step ran."""
    if not steps:
        return None
    return (steps - 1) * config.period_ns if mode == "sequential" else round(wall_s * 1e9)


def due_cycles(cycle_ns: int, elapsed_ns: int | None) -> int:
    """How many cycles an agent's rate should have produced in a run that lasted
    ``elapsed_ns`` (``None``: no step ran): one per cycle boundary ``m * cycle_ns`` in it."""
    return 0 if elapsed_ns is None else max(0, elapsed_ns) // cycle_ns + 1


def _ages(based_on: np.ndarray, time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(len(based_on))[:, None]
    known = based_on >= 0
    age_steps = np.where(known, steps - based_on, -1).astype(np.int64)
    if not len(time_s):  # no step ran (stopped before the first): empty, same shapes
        return age_steps, np.zeros(based_on.shape)
    age_s = np.where(known, time_s[:, None] - time_s[np.clip(based_on, 0, None)], np.nan)
    return age_steps, age_s


def write_npz_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Replace ``path`` with a compressed ``.npz`` so readers never see half a file."""
    write_atomically(path, lambda handle: np.savez_compressed(handle, **arrays))  # type: ignore[arg-type]


def jsonable(value: Any) -> Any:
    """``value`` with NaN and infinities as ``None`` and numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
