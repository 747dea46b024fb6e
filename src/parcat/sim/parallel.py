"""The parallel simulation: the environment and every agent in its own process, in real time.

The parent creates the shared block (and alone unlinks it), starts the environment process
and one process per non-lockstep agent (:mod:`parcat.sim.workers`), waits until every one is
ready, sends them all the same start instant, and then only watches the pipes and the
processes, with a timeout on every wait. A failure anywhere (an agent that raises or dies, an
environment that makes no progress) is a :class:`~parcat.core.errors.WorkerError` naming the
agent; whatever happens, every process is stopped and the block unlinked before this returns.
Ctrl-C (or the CLI's SIGTERM) returns the steps done so far, marked ``interrupted``.

Against the sequential twin, real time adds what a robot would see: an action lands in the
first step after its computation ends, so a fast agent whose cycle boundary coincides with a
step races it and its action is 0-1 steps older than in simulated time; a slow agent acts on
observations as old as its compute time; and the first steps may run on the neutral action.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any

from parcat.core.errors import WorkerError
from parcat.ipc.process import (
    SHUTTING_DOWN,
    ErrorReport,
    Worker,
    get_context,
    start_worker,
    stop_all,
    wait_any,
)
from parcat.sim.agent import describe_agent
from parcat.sim.config import SimConfig
from parcat.sim.progress import PROGRESS_EVERY_S, SimProgress
from parcat.sim.record import SimRecord, make_record
from parcat.sim.slots import H_EPISODE, H_STEP, SimBlock
from parcat.sim.workers import attach_block, make_agent, make_env
from parcat.sim.world import WorldResult, empty_result

READY_TIMEOUT_S = 120.0  # for every process to build its environment or policy
START_MARGIN_NS = 50_000_000  # so that every process has the start instant before it comes
STALL_TIMEOUT_S = 30.0  # an environment whose step counter does not move this long is hung
COLLECT_TIMEOUT_S = 10.0  # for the environment's record after a stop (Ctrl-C)


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a simulation process."""


class StalledError(WorkerError):
    """The environment made no progress; ``record`` holds the steps it made before, when its
    process could still send them."""

    def __init__(self, message: str, record: SimRecord | None = None) -> None:
        super().__init__(message)
        self.record = record


@dataclass(eq=False)  # compared by identity: fields hold processes and pipes
class _Child:
    label: str
    """How messages name the process."""
    worker: Worker


def run_parallel(config: SimConfig, fast: bool = False,
                 on_progress: Callable[[SimProgress], None] | None = None,
                 start_method: str | None = None) -> SimRecord:
    """Run the simulation with the environment and every agent in its own process.

    Args:
        fast: Step the environment as fast as it goes instead of once per period.
        on_progress: Called about once a second while the environment runs.
        start_method: ``forkserver`` (default where available) or ``spawn``.

    Raises:
        WorkerError: a process raised, died or hung (the agent is named).
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the mask to restore, read first
    children: list[_Child] = []
    block: SimBlock | None = None
    try:
        block = _create_block(config)
        result, interrupted = _run(config, block, held, children, fast, on_progress,
                                   start_method)
    except KeyboardInterrupt:
        if block is not None:
            raise
        return make_record(config, "parallel", fast, empty_result(config), True)  # nothing yet
    except StalledError as stall:
        stall.record = _stopped_record(children[0], config, fast)
        raise
    finally:
        try:
            if block is not None:
                block.stop()
                stop_all(c.worker for c in children)
                block.close()
        finally:  # after the block is gone: a signal still held arrives here
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return make_record(config, "parallel", fast, result, interrupted)


def _stopped_record(env: _Child, config: SimConfig, fast: bool) -> SimRecord | None:
    """The steps a stalled environment made: SIGTERM ends the step it hangs in (Python code;
    a native call or a stopped process does not answer) and it sends what it has."""
    env.worker.process.terminate()
    try:
        return make_record(config, "parallel", fast, _collect(env), True)
    except KeyboardInterrupt:  # nothing came
        return None


def _create_block(config: SimConfig) -> SimBlock:
    """The run's shared block, created with Ctrl-C and SIGTERM held back (an interrupt in
    the middle would leave a block no one unlinks) until :func:`_run` or the caller
    restores the mask. The resource tracker is started first: starting it unblocks both."""
    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    return attach_block(config)


def _run(config: SimConfig, block: SimBlock, held: set[int | signal.Signals],
         children: list[_Child], fast: bool,
         on_progress: Callable[[SimProgress], None] | None, start_method: str | None,
         ) -> tuple[WorldResult, bool]:
    """Start the processes (into ``children``) and run; return the environment's result and
    whether the run was interrupted."""
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held signal is raised here
        ctx = get_context(start_method)
        env = start_worker(make_env, (config, block.name, fast), "parcat-sim-env", ctx=ctx)
        children.append(_Child("the environment", env))
        for slot, agent in enumerate(config.process_agents):
            worker = start_worker(make_agent, (config, slot, block.name),
                                  f"parcat-sim-agent-{slot}", ctx=ctx)
            children.append(_Child(describe_agent(agent), worker))
        _await_ready(children)
        t0_ns = time.monotonic_ns() + START_MARGIN_NS
        for child in children:
            child.worker.send(("start", t0_ns))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the processes start
        return empty_result(config), True
    try:
        return _monitor(children, block, config, t0_ns, on_progress), False
    except KeyboardInterrupt:
        SHUTTING_DOWN.set()
        block.stop()
        return _collect(children[0]), True


def _await_ready(children: list[_Child]) -> None:
    waiting = {id(c): c for c in children}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            labels = ", ".join(c.label for c in waiting.values())
            raise WorkerError(f"not ready after {READY_TIMEOUT_S:.0f} s: {labels}")
        wait_any([c.worker for c in waiting.values()], timeout=min(remaining, 1.0))
        for child in list(waiting.values()):
            if _reply(child, 0) is not None:
                del waiting[id(child)]


def _monitor(children: list[_Child], block: SimBlock, config: SimConfig, t0_ns: int,
             on_progress: Callable[[SimProgress], None] | None) -> WorldResult:
    last_step, last_move = -1, time.monotonic()
    next_report = time.monotonic() + PROGRESS_EVERY_S
    while True:
        wait_any([c.worker for c in children], timeout=0.25)
        step = int(block.header[H_STEP])
        for child in children:
            reply = _reply(child, step)
            if reply is not None and child is children[0]:  # an agent replies only once stopped
                result: WorldResult = reply[1]
                return result
        now = time.monotonic()
        if step != last_step:
            last_step, last_move = step, now
        elif now - last_move > max(STALL_TIMEOUT_S, 3 * config.period):
            raise StalledError(f"the environment made no progress for {now - last_move:.0f} s "
                               f"(stuck at step {step} of {config.iters})")
        if on_progress is not None and now >= next_report:
            next_report = now + PROGRESS_EVERY_S
            elapsed = max(0.0, (time.monotonic_ns() - t0_ns) / 1e9)
            on_progress(SimProgress(step, config.iters, int(block.header[H_EPISODE]), elapsed))


def _reply(child: _Child, step: int) -> tuple[Any, ...] | None:
    """The child's ``ok`` reply if one came; raise if it failed or died."""
    alive = child.worker.alive
    message = _poll(child)  # after alive: a child that replied and exited is read
    if message is not None:
        if message[0] == "ok":
            return message
        if message[0] == "error":
            report: ErrorReport = message[1]
            raise WorkerError(report.message) from RemoteTraceback(report.traceback)
        raise WorkerError(f"{child.label} sent an unexpected message {message[0]!r} at step "
                          f"{step}")
    if not alive:
        raise WorkerError(f"{child.label} process {child.worker.describe()} at env step {step}")
    return None


def _collect(env: _Child) -> WorldResult:
    """The environment's record after a stop; Ctrl-C again if it does not come."""
    deadline = time.monotonic() + COLLECT_TIMEOUT_S
    while time.monotonic() < deadline:
        wait_any([env.worker], timeout=0.25)
        message = _poll(env)
        if message is not None and message[0] == "ok":
            result: WorldResult = message[1]
            return result
        if message is not None or not env.worker.alive:
            break
    raise KeyboardInterrupt


def _poll(child: _Child) -> tuple[Any, ...] | None:
    """The child's next message, if one is waiting (``None`` on a broken pipe too)."""
    conn = child.worker.conn
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None
