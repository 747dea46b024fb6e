"""Environments in a Ray actor (``parcat train --backend ray``).

Each actor hosts one :class:`~parcat.train.envslice.EnvSlice` — the same code that steps
environments in-process and in local workers — over its own arrays, and returns the
arrays the trainer reads after every command. Seeds depend on global environment
indices only, so a Ray layout collects the same data as a local one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parcat.missions import Mission
from parcat.raycluster import import_ray
from parcat.train.envslice import ArraySpecs, EnvSlice
from parcat.train.lanes.base import Command, EnvLane, LaneLostError, zero_arrays


class EnvActor:
    """The body of a Ray actor: a slice of environments and its arrays."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        self.arrays = zero_arrays(specs)
        self.envs = EnvSlice(mission, first, count, seed, self.arrays)

    def reset(self, epoch: int) -> dict[str, np.ndarray]:
        """Reset every environment for ``epoch``; return the arrays."""
        self.envs.reset_all(epoch)
        return self._outputs()

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Write the actions, step, return the arrays."""
        for key, value in actions.items():
            self.arrays[key][:] = value
        self.envs.step()
        return self._outputs()

    def _outputs(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.arrays.items() if not k.startswith("act")}


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

    def submit(self, command: Command, epoch: int) -> None:
        """Send a reset or step (with the lane's actions); do not wait."""
        if command is Command.RESET:
            self.pending = self.actor.reset.remote(epoch)
        else:
            actions = {k: v.copy() for k, v in self.arrays.items() if k.startswith("act")}
            self.pending = self.actor.step.remote(actions)

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
