"""The step handoff between a process and one worker, over a shared-memory header.

The parent bumps ``REQUEST``; the worker does the work and sets ``DONE`` to the same
number. While the plan allows a spinner per core both sides spin on the header (a handoff
costs a few microseconds); otherwise, or after spinning for a while, the waiting side sets
its ``PARKED`` flag, re-checks, and blocks on the pipe until the other side, seeing the
flag, sends a wake-up. The re-check after setting the flag closes the race: whichever side
moves second sees the other's write. Control messages share the pipe.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np

from parcat.parallel import procs
from parcat.parallel.shm import DONE, ERROR, MAIN_PARKED, REQUEST, WORKER_PARKED

PARENT_SPIN_S = 0.05
"""How long the parent spins for a result before parking (a long step: free the core)."""
WORKER_SPIN_S = 0.02
"""How long an idle worker spins before it parks on its pipe."""
POLL_EVERY = 1024
"""Spin iterations between two looks at the clock and the pipe."""


class WorkerLostError(Exception):
    """The worker process ended (or its pipe broke) while we waited for it."""


class Handoff:
    """The parent's side of one worker's handoff."""

    def __init__(self, header: np.ndarray, conn: Connection, process: BaseProcess,
                 spin: bool) -> None:
        self.header = header
        self.conn = conn
        self.process = process
        self.spin = spin
        self.requested = int(header[REQUEST])

    @property
    def busy(self) -> bool:
        """Whether the worker has not finished the last request yet."""
        return int(self.header[DONE]) != self.requested

    @property
    def failed(self) -> bool:
        """Whether the worker flagged an error with its last result."""
        return bool(self.header[ERROR])

    def clear_error(self) -> None:
        """Forget the error flag (after its message was read)."""
        self.header[ERROR] = 0

    def request(self) -> None:
        """Ask for the next piece of work (its inputs are already in shared memory)."""
        self.requested += 1
        self.header[REQUEST] = self.requested
        if self.header[WORKER_PARKED]:
            try:
                self.conn.send(("wake",))
            except OSError as exc:
                raise WorkerLostError(self.describe()) from exc

    def wait_done(self, deadline: float | None = None) -> bool:
        """Wait for the result of the last request; False if ``deadline`` passed first.

        Raises:
            WorkerLostError: the worker died meanwhile.
        """
        header, target = self.header, self.requested
        if self.spin:
            give_up = time.perf_counter() + PARENT_SPIN_S
            n = 0
            while header[DONE] != target:
                n += 1
                if n % 256 == 0:
                    now = time.perf_counter()
                    if deadline is not None and now > deadline:
                        return False
                    if now > give_up:
                        break
        if header[DONE] == target:
            return True
        return self._park(target, deadline)

    def _park(self, target: int, deadline: float | None) -> bool:
        header = self.header
        header[MAIN_PARKED] = 1
        try:
            while header[DONE] != target:
                remaining = 1.0 if deadline is None else deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                ready = wait([self.conn, self.process.sentinel], min(remaining, 1.0))
                if self.conn in ready:
                    if header[ERROR]:
                        return True  # the error message waits on the pipe for the caller
                    try:
                        self.conn.recv()  # a "done" wake-up
                    except (EOFError, OSError) as exc:
                        raise WorkerLostError(self.describe()) from exc
                elif ready and not self.process.is_alive():
                    raise WorkerLostError(self.describe())
        finally:
            header[MAIN_PARKED] = 0
        return True

    def recv(self, timeout: float, skip: tuple[str, ...] = ("done", "wake")) -> tuple[Any, ...]:
        """The next message that is not a wake-up, waiting at most ``timeout`` seconds.

        Raises:
            WorkerLostError: the worker died, or said nothing in time.
        """
        end = time.perf_counter() + timeout
        while True:
            remaining = end - time.perf_counter()
            if remaining <= 0:
                raise WorkerLostError(f"did not answer in {timeout:.0f} s")
            ready = wait([self.conn, self.process.sentinel], remaining)
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError) as exc:
                    raise WorkerLostError(self.describe()) from exc
                if message[0] not in skip:
                    return tuple(message)
            elif ready:
                raise WorkerLostError(self.describe())

    def discard_messages(self) -> None:
        """Drop whatever an earlier, abandoned exchange left on the pipe."""
        try:
            while self.conn.poll():
                self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerLostError(self.describe()) from exc
        self.header[ERROR] = 0

    def describe(self) -> str:
        """How the worker ended, e.g. ``died (signal SIGKILL)``."""
        self.process.join(0.5)
        return f"died ({procs.describe_exit(self.process)})"


class Serving:
    """The worker's side of the handoff."""

    def __init__(self, header: np.ndarray, conn: Connection, spin: bool) -> None:
        self.header = header
        self.conn = conn
        self.spin = spin
        self.last = int(header[REQUEST])

    def wait_request(self) -> bool:
        """True when work is requested, False when a message waits on the pipe."""
        header, last = self.header, self.last
        if self.spin:
            end = time.perf_counter() + WORKER_SPIN_S
            n = 0
            while True:
                if header[REQUEST] != last:
                    return True
                n += 1
                if n % POLL_EVERY == 0 and (self.conn.poll() or time.perf_counter() > end):
                    break
        header[WORKER_PARKED] = 1
        try:
            while True:
                if header[REQUEST] != last:
                    return True
                if self.conn.poll(1.0):
                    return False
        finally:
            header[WORKER_PARKED] = 0

    def take(self) -> int:
        """Accept the pending request; returns its number."""
        self.last = int(self.header[REQUEST])
        return self.last

    def finish(self, request: int, error: tuple[object, ...] | None = None) -> None:
        """Publish the result of ``request`` (an error message goes first, on the pipe)."""
        if error is not None:
            self.conn.send(("error", *error))
            self.header[ERROR] = 1
        self.header[DONE] = request
        if self.header[MAIN_PARKED]:
            self.conn.send(("done",))
