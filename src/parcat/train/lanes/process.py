"""Environments in a worker process, stepped through shared memory.

The trainer writes the lane's actions into the worker's block and requests the command
through the handoff (:mod:`parcat.ipc.handoff`); the worker's :class:`EnvSlice` writes the
results straight into the block. A set-up or step error comes back with its traceback.
"""

from __future__ import annotations

from multiprocessing.context import BaseContext
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS
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
from parcat.train.lanes.base import Command, EnvLane, LaneLostError

SETUP_TIMEOUT_S = 120.0
CMD = EnvCommandSlots.CMD


class ProcessLane(EnvLane):
    """Environments hosted by one worker process.

    Args:
        mission: The mission to train on.
        first: Global index of the first environment.
        count: Environments in this lane.
        seed: The run seed.
        specs: The arrays' layout.
        spin: Whether the worker spins while it waits for a command.
        parent_spin: Whether this process spins while it waits for the worker.
        ctx: The multiprocessing context.
    """

    def __init__(self, mission: Mission, first: int, count: int, seed: int, specs: ArraySpecs,
                 spin: bool, parent_spin: bool, ctx: BaseContext) -> None:
        super().__init__(first, count)
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
        self.handoff = Handoff(self.block.header, self.worker, parent_spin)
        try:
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
                report = self.handoff.error()
                raise LaneLostError(f"raised {report.summary}")
        except WorkerLostError as exc:
            raise LaneLostError(str(exc)) from exc

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        return self.worker.pid

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
    reset = int(Command.RESET)  # a plain int: numpy compares one with an enum in ~4 us

    def idle() -> bool:
        if not serving.wait_request():
            return False
        request = serving.take()
        try:
            if int(block.header[CMD]) == reset:
                envs.reset_all()
            else:
                envs.step()
        except USER_CODE_ERRORS as exc:
            serving.finish(request, ErrorReport.from_exception(exc))
            return True
        serving.finish(request)
        return True

    def close() -> None:
        envs.close()
        block.close()

    return Handlers(idle=idle, close=close)
