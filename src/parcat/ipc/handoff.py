"""The request/done handoff between a process and one worker, over a shared-memory header.

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

import numpy as np

from parcat.ipc.layout import HandoffSlots
from parcat.ipc.process import ErrorReport, Worker, WorkerLostError

REQUEST = HandoffSlots.REQUEST
DONE = HandoffSlots.DONE
WORKER_PARKED = HandoffSlots.WORKER_PARKED
ERROR = HandoffSlots.ERROR
MAIN_PARKED = HandoffSlots.MAIN_PARKED

PARENT_SPIN_S = 0.05
"""How long the parent spins for a result before parking (a long step: free the core)."""
WORKER_SPIN_S = 0.02
"""How long an idle worker spins before it parks on its pipe."""
POLL_EVERY = 1024
"""Spin iterations between two looks at the clock and the pipe."""


class Handoff:
    """The parent's side of one worker's handoff."""

    def __init__(self, header: np.ndarray, worker: Worker, spin: bool) -> None:
        self.header = header
        self.worker = worker
        self.conn = worker.conn
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

    def request(self) -> None:
        """Ask for the next piece of work (its inputs are already in shared memory)."""
        self.requested += 1
        self.header[REQUEST] = self.requested
        if self.header[WORKER_PARKED]:
            self.worker.send(("wake",))

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
                ready = wait([self.conn, self.worker.process.sentinel], min(remaining, 1.0))
                if not ready and self.worker.frozen():
                    raise WorkerLostError(self.describe())
                if self.conn in ready:
                    if header[ERROR]:
                        return True  # the error report waits on the pipe for the caller
                    try:
                        self.conn.recv()  # a "done" wake-up
                    except (EOFError, OSError) as exc:
                        raise WorkerLostError(self.describe()) from exc
                elif ready and not self.worker.process.is_alive():
                    raise WorkerLostError(self.describe())
        finally:
            header[MAIN_PARKED] = 0
        return True

    def error(self, timeout: float = 10.0) -> ErrorReport:
        """The report of the failure flagged with the last result (clears the flag).

        Raises:
            WorkerLostError: the worker died, or sent no report in time.
        """
        self.header[ERROR] = 0
        message = self.worker.recv(timeout, skip=("done", "wake"))
        if message[0] != "error":
            raise WorkerLostError(f"{self.worker.name} sent {message[0]!r}, not its error")
        report: ErrorReport = message[1]
        return report

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
        return self.worker.describe()


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

    def finish(self, request: int, error: ErrorReport | None = None) -> None:
        """Publish the result of ``request`` (an error report goes first, on the pipe).

        The error flag is raised before the report is sent: a parked parent woken by the
        report must see the flag, or it would take the report for a wake-up.
        """
        if error is not None:
            self.header[ERROR] = 1
            self.conn.send(("error", error))
        self.header[DONE] = request
        if self.header[MAIN_PARKED]:
            self.conn.send(("done",))
