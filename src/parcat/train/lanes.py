"""Where a share of the training environments steps: :class:`LocalLane` in the trainer's
process, :class:`ProcessLane` in a worker through shared memory, :class:`RayLane` in a Ray
actor, each running the same :class:`~parcat.train.envslice.EnvSlice`."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

from parcat.core.errors import USER_CODE_ERRORS
from parcat.core.raycluster import import_ray
from parcat.envs.missions import Mission
from parcat.ipc.handoff import Handoff, Serving
from parcat.ipc.layout import EnvCommandSlots
from parcat.ipc.process import (
    ErrorReport,
    Handlers,
    WorkerLostError,
    WorkerRaisedError,
    start_worker,
    worker_pipe,
)
from parcat.ipc.shm import ArrayBlock
from parcat.train.envslice import ArraySpecs, EnvSlice

SETUP_TIMEOUT_S = 120.0
CMD = EnvCommandSlots.CMD


class Command(enum.IntEnum):
    """What a lane does: step every environment with its ``act*`` arrays (autoreset), or
    start the episode each ``episode`` entry numbers."""

    STEP = 1
    RESET = 2


class LaneLostError(Exception):
    """A lane's environments raised, or the process or actor hosting them was lost."""


class EnvLane(ABC):
    """Environments ``first .. first + count - 1`` and the arrays they read and write.

    :meth:`submit` starts a command and :meth:`finish` awaits it (both raise
    :class:`LaneLostError`), so a ``VecEnv`` starts every lane before it waits for any.
    """

    local = False  # the environments step in this process
    pid: int | None = None  # of the process hosting them, when it is not this one

    def __init__(self, first: int, count: int, specs: ArraySpecs) -> None:
        self.first, self.count = first, count
        self.arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in specs.items()}

    @abstractmethod
    def submit(self, command: Command) -> None:
        """Start ``command`` (its inputs are in :attr:`arrays` already)."""

    def finish(self) -> None:  # noqa: B027 (a lane that runs at submit has nothing to wait for)
        """Wait until the last command's results are in :attr:`arrays`."""

    def render(self) -> str | None:
        """The first environment drawn as text, where it can draw itself here."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Close the environments and release the process, actor or memory."""


def _run(envs: EnvSlice, command: int) -> None:
    if command == Command.RESET:
        envs.reset_all()
    else:
        envs.step()


class LocalLane(EnvLane):
    """Environments stepped in this process (``--env-workers 0``, or the trainer's share)."""

    local = True

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        super().__init__(first, count, specs)
        self.envs = EnvSlice(mission, first, count, seed, self.arrays)

    def submit(self, command: Command) -> None:
        """Run the command now."""
        try:
            _run(self.envs, command)
        except USER_CODE_ERRORS as exc:
            raise LaneLostError(f"raised {type(exc).__name__}: {exc}") from exc

    def render(self) -> str | None:
        """The first environment's text rendering, if it has one."""
        render = getattr(self.envs.envs[0], "render", None) if self.envs.envs else None
        frame = render() if render is not None else None
        return frame if isinstance(frame, str) else None

    def close(self) -> None:
        """Close the environments."""
        self.envs.close()


class ProcessLane(EnvLane):
    """Environments in a worker process: the trainer writes the actions into the shared
    block and requests the command through the handoff (:mod:`parcat.ipc.handoff`); an
    error comes back with its traceback."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int, specs: ArraySpecs,
                 spin: bool, parent_spin: bool, ctx: BaseContext) -> None:
        self.first, self.count = first, count
        self.block = ArrayBlock(specs)
        self.arrays = self.block.arrays
        try:
            self.worker = start_worker(
                make_env_worker, (mission, first, count, seed, specs, self.block.name, spin),
                f"parcat-env-{first // max(1, count)}", ctx=ctx,
            )
        except BaseException:  # a refused start or an interrupt: the block is still ours
            self.block.close()
            raise
        try:  # from here an interrupt must stop the worker too
            self.pid = self.worker.pid
            self.handoff = Handoff(self.block.header, self.worker, parent_spin)
            self.worker.wait_ready(SETUP_TIMEOUT_S)
        except (WorkerLostError, WorkerRaisedError) as exc:
            self.close()
            raise LaneLostError(f"environment worker failed to start: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def submit(self, command: Command) -> None:
        """Write the command into the header and request it."""
        self.block.header[CMD] = command.value
        try:
            self.handoff.request()
        except WorkerLostError as exc:
            raise LaneLostError(str(exc)) from exc

    def finish(self) -> None:
        """Wait for the worker's done flag."""
        try:
            self.handoff.wait_done()
            if self.handoff.failed:
                raise LaneLostError(f"raised {self.handoff.error().summary}")
        except WorkerLostError as exc:
            raise LaneLostError(str(exc)) from exc

    def close(self) -> None:
        """Stop the worker and free the block."""
        self.worker.stop()
        self.block.close()


def make_env_worker(mission: Mission, first: int, count: int, seed: int, specs: Any,
                    block_name: str, spin: bool) -> Handlers:
    """Build ``count`` environments; step or reset them on each request in the block."""
    block = ArrayBlock(specs, name=block_name)
    try:
        envs = EnvSlice(mission, first, count, seed, block.arrays)
    except BaseException:
        block.close()
        raise
    serving = Serving(block.header, worker_pipe(), spin)  # before "ok": no request is missed

    def idle() -> bool:
        if not serving.wait_request():
            return False
        request = serving.take()
        try:
            _run(envs, int(block.header[CMD]))  # a plain int: an enum compare costs ~4 us
        except USER_CODE_ERRORS as exc:
            serving.finish(request, ErrorReport.from_exception(exc))
            return True
        serving.finish(request)
        return True

    def close() -> None:
        envs.close()
        block.close()

    return Handlers(idle=idle, close=close)


def _is_input(key: str) -> bool:
    """Arrays the trainer writes (``episode`` is also read back: the episodes running)."""
    return key.startswith("act") or key == "hold"


class EnvActor:
    """The body of a Ray actor: a slice of environments and its arrays."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        self.arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in specs.items()}
        self.envs = EnvSlice(mission, first, count, seed, self.arrays)

    def run(self, command: Command, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Write the inputs (actions, episodes, hold), run ``command``, return the arrays."""
        for key, value in inputs.items():
            self.arrays[key][:] = value
        _run(self.envs, command)
        return {k: v for k, v in self.arrays.items() if not _is_input(k)}


class RayLane(EnvLane):
    """Environments in one Ray actor (``--backend ray``; the cluster must be initialised)."""

    def __init__(self, mission: Mission, first: int, count: int, seed: int,
                 specs: ArraySpecs) -> None:
        super().__init__(first, count, specs)
        self.ray = import_ray()
        self.actor = self.ray.remote(num_cpus=1)(EnvActor).remote(mission, first, count, seed,
                                                                  specs)
        self.pending: Any = None

    def submit(self, command: Command) -> None:
        """Send a reset or step with the lane's inputs; do not wait."""
        inputs = {k: v.copy() for k, v in self.arrays.items() if _is_input(k) or k == "episode"}
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
