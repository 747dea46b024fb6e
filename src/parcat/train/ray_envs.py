"""Environment workers as Ray actors (``parcat train --backend ray``).

Each actor hosts one :class:`~parcat.train.envslice.EnvSlice` — the same code that steps
environments in-process and in local workers — over its own arrays, and returns the
arrays the trainer reads after every command. Seeds depend on global environment
indices only, so a Ray layout collects the same data as a local one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parcat.missions import Mission
from parcat.train.envslice import ArraySpecs, EnvSlice

OUTPUTS = ("obs", "final", "rew", "term", "trunc", "alive")


class EnvActor:
    """The body of a Ray actor: a slice of environments and its arrays."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        self.arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in specs.items()}
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


class RaySlot:
    """The trainer's handle on one environment actor."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        from parcat.parallel.ray_executor import import_ray

        self.ray = import_ray()
        actor_class = self.ray.remote(num_cpus=1)(EnvActor)
        self.actor = actor_class.remote(mission, first, count, seed, specs)
        self.pending: Any = None

    def submit(self, cmd: str, arrays: dict[str, np.ndarray], epoch: int) -> None:
        """Send a reset or step (with the slice's actions); do not wait."""
        if cmd == "reset":
            self.pending = self.actor.reset.remote(epoch)
        else:
            actions = {k: v.copy() for k, v in arrays.items() if k.startswith("act")}
            self.pending = self.actor.step.remote(actions)

    def collect(self, arrays: dict[str, np.ndarray]) -> None:
        """Wait for the last command and copy its results into ``arrays``.

        Raises:
            RuntimeError: the actor died or raised (the message says which).
        """
        try:
            results = self.ray.get(self.pending)
        except self.ray.exceptions.RayError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RuntimeError(f"Ray environment actor failed: {first_line}") from exc
        for key, value in results.items():
            arrays[key][...] = value

    def close(self) -> None:
        """Stop the actor."""
        self.ray.kill(self.actor)
