"""Environments in a worker process, stepped through shared memory.

The trainer writes the lane's actions into the worker's block and requests the command
through the handoff (:mod:`parcat.ipc.handoff`); the worker's :class:`EnvSlice` writes the
results straight into the block. A set-up or step error comes back with its traceback.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.ipc.handoff import Handoff, Serving
from parcat.ipc.layout import EnvCommandSlots
from parcat.ipc.process import (
    ErrorReport,
    Worker,
    WorkerLostError,
    WorkerRaisedError,
    become_worker,
    report_error,
    serve,
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
            self.worker = Worker(
                env_worker_main, (mission, first, count, seed, specs, self.block.name, spin),
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


def env_worker_main(
    conn: Connection,
    parent_pid: int,
    mission: Mission,
    first: int,
    count: int,
    seed: int,
    specs: Any,
    block_name: str,
    spin: bool,
) -> None:
    """Run ``count`` environments on request until told to close or the parent is gone."""
    become_worker(parent_pid)
    block = ArrayBlock(specs, name=block_name)
    envs: EnvSlice | None = None

    def loop() -> None:
        nonlocal envs
        try:
            envs = EnvSlice(mission, first, count, seed, block.arrays)
        except USER_CODE_ERRORS as exc:  # could not even build the environments
            report_error(conn, exc)
            return
        serving = Serving(block.header, conn, spin)  # before "ready": no request is missed
        conn.send(("ready",))
        reset = int(Command.RESET)  # a plain int: numpy compares one with an enum in ~4 us
        while True:
            if not serving.wait_request():
                if conn.recv()[0] == "close":
                    return
                continue
            request = serving.take()
            try:
                if int(block.header[CMD]) == reset:
                    envs.reset_all()
                else:
                    envs.step()
            except USER_CODE_ERRORS as exc:
                serving.finish(request, ErrorReport.from_exception(exc))
                continue
            serving.finish(request)

    def cleanup() -> None:
        if envs is not None:
            envs.close()
        block.close()

    serve(conn, loop, cleanup)
