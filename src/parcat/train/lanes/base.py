"""The interface of a lane of training environments, and the in-process lane."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod

import numpy as np

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.train.envslice import ArraySpecs, EnvSlice


class Command(enum.IntEnum):
    """What a lane is asked to do with its environments."""

    STEP = 1
    """Step every environment with the actions in the ``act*`` arrays (autoreset)."""
    RESET = 2
    """Start in every environment the episode its ``episode`` array entry numbers."""


class LaneLostError(Exception):
    """A lane's environments raised, or the process or actor hosting them was lost."""


class EnvLane(ABC):
    """Environments ``first .. first + count - 1`` and the arrays they read and write.

    A command is started with :meth:`submit` and awaited with :meth:`finish`, so a
    :class:`~parcat.train.vecenv.VecEnv` starts every lane before it waits for any.
    """

    local = False
    """Whether the environments step in this process."""

    def __init__(self, first: int, count: int) -> None:
        self.first = first
        self.count = count
        self.arrays: dict[str, np.ndarray] = {}

    @abstractmethod
    def submit(self, command: Command) -> None:
        """Start ``command`` (its inputs are in :attr:`arrays` already).

        Raises:
            LaneLostError: the lane failed.
        """

    @abstractmethod
    def finish(self) -> None:
        """Wait until the last command is done and its results are in :attr:`arrays`.

        Raises:
            LaneLostError: the lane failed.
        """

    @property
    def pid(self) -> int | None:
        """The id of the process hosting the environments, when it is not this one."""
        return None

    def render(self) -> str | None:
        """The first environment drawn as text, where it can draw itself here."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Close the environments and release the process, actor or memory."""


def zero_arrays(specs: ArraySpecs) -> dict[str, np.ndarray]:
    """Plain arrays laid out as ``specs``."""
    return {k: np.zeros(shape, dtype) for k, (shape, dtype) in specs.items()}


class LocalLane(EnvLane):
    """Environments stepped in this process (``--env-workers 0``, or the trainer's share)."""

    local = True

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        super().__init__(first, count)
        self.arrays = zero_arrays(specs)
        self.envs = EnvSlice(mission, first, count, seed, self.arrays)

    def submit(self, command: Command) -> None:
        """Run the command now."""
        try:
            if command is Command.RESET:
                self.envs.reset_all()
            else:
                self.envs.step()
        except USER_CODE_ERRORS as exc:
            raise LaneLostError(f"raised {type(exc).__name__}: {exc}") from exc

    def finish(self) -> None:
        """Nothing to wait for."""

    def render(self) -> str | None:
        """The first environment's text rendering, if it has one."""
        render = getattr(self.envs.envs[0], "render", None) if self.envs.envs else None
        frame = render() if render is not None else None
        return frame if isinstance(frame, str) else None

    def close(self) -> None:
        """Close the environments."""
        self.envs.close()
