"""Environments in a Ray actor (``parcat train --backend ray``).

Each actor hosts one :class:`~parcat.train.envslice.EnvSlice` — the same code that steps
environments in-process and in local workers — over its own arrays, and returns the
arrays the trainer reads after every command. Seeds depend on global environment
indices only, so a Ray layout collects the same data as a local one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parcat.core.raycluster import import_ray
from parcat.envs.missions import Mission
from parcat.train.envslice import ArraySpecs, EnvSlice
from parcat.train.lanes.base import Command, EnvLane, LaneLostError, zero_arrays


class EnvActor:
    """The body of a Ray actor: a slice of environments and its arrays."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        self.arrays = zero_arrays(specs)
        self.envs = EnvSlice(mission, first, count, seed, self.arrays)

    def run(self, command: Command, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Write the inputs (actions, episodes, hold), run ``command``, return the arrays."""
        for key, value in inputs.items():
            self.arrays[key][:] = value
        if command is Command.RESET:
            self.envs.reset_all()
        else:
            self.envs.step()
        return {k: v for k, v in self.arrays.items() if not _is_input(k)}


def _is_input(key: str) -> bool:
    """Arrays the trainer writes (``episode`` is also read back: the episodes running)."""
    return key.startswith("act") or key == "hold"


class RayLane(EnvLane):
    """Environments hosted by one Ray actor (the cluster must be initialised)."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        super().__init__(first, count)
        self.arrays = zero_arrays(specs)
        self.ray = import_ray()
        actor_class = self.ray.remote(num_cpus=1)(EnvActor)
        self.actor = actor_class.remote(mission, first, count, seed, specs)
        self.pending: Any = None

    def submit(self, command: Command) -> None:
        """Send a reset or step with the lane's inputs; do not wait."""
        inputs = {k: v.copy() for k, v in self.arrays.items()
                  if _is_input(k) or k == "episode"}
        self.pending = self.actor.run.remote(command, inputs)

    def finish(self) -> None:
        """Wait for the last command and copy its results into the arrays."""
        try:
            results = self.ray.get(self.pending)
        except self.ray.exceptions.RayError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise LaneLostError(f"Ray environment actor failed: {first_line}") from exc
        for key, value in results.items():
            self.arrays[key][...] = value

    def close(self) -> None:
        """Stop the actor."""
        self.ray.kill(self.actor)
