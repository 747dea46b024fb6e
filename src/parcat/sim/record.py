"""The record of a simulation: per-step arrays plus a JSON description, saved as ``.npz``.

Arrays over ``T`` steps and ``N`` agents: ``time_s`` (when the step applied its actions;
simulated ``k * period`` in sequential mode), ``step_cost_s``, ``episode``, ``episode_step``,
``state`` (``env.state()`` before the step, if any), ``action_<i>`` (agent ``i``'s action in
force, in its space's code), ``based_on`` (the step that action was computed from; -1 for the
default), ``age_steps`` and ``age_s`` (how old it is), ``compute_s``, ``reward``, and
``obs_<i>`` with ``log_agent_state``. The timing arrays are measurements; everything else of
a sequential run is a pure function of the config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.atomic import write_atomically
from parcat.core.jsontext import finite
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
        payload: dict[str, Any] = dict(self.arrays)
        payload["meta"] = np.array(json.dumps(finite(self.meta)))
        write_atomically(path, lambda file: np.savez_compressed(file, **payload))
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
    # the run's clock at its last step: simulated in sequential mode, wall time in parallel
    elapsed_ns = ((result.steps - 1) * config.period_ns if mode == "sequential"
                  else round(result.wall_s * 1e9))
    agents = []
    for agent in config.agents:
        stats = result.cycles.get(agent.spec.agent_index, CycleStats())
        due = None
        if not agent.lockstep:  # the cycles its rate should have produced: one a boundary
            due = max(0, elapsed_ns) // agent.cycle_ns + 1 if result.steps else 0
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


def _ages(based_on: np.ndarray, time_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(len(based_on))[:, None]
    known = based_on >= 0
    age_steps = np.where(known, steps - based_on, -1).astype(np.int64)
    if not len(time_s):  # no step ran (stopped before the first): empty, same shapes
        return age_steps, np.zeros(based_on.shape)
    age_s = np.where(known, time_s[:, None] - time_s[np.clip(based_on, 0, None)], np.nan)
    return age_steps, age_s
