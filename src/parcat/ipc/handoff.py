"""The request/done handoff between a process and one worker, over a shared-memory header.

The parent bumps ``REQUEST``; the worker does the work and sets ``DONE`` to the same number.
Each side spins on the header for a while when the plan gave it a core to spin on (never
more spinners than free CPUs: a contested spin is paid by the process it waits for), then
sets its ``PARKED`` flag, re-checks (whichever side moves second sees the other's
write) and blocks on the pipe until the other side, seeing the flag, sends a wake-up.
Control messages share the pipe.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection, wait

import numpy as np

from parcat.ipc.layout import HandoffSlots
from parcat.ipc.process import ErrorReport, Worker, WorkerLostError

REQUEST, DONE, WORKER_PARKED, ERROR, MAIN_PARKED = (
    HandoffSlots.REQUEST, HandoffSlots.DONE, HandoffSlots.WORKER_PARKED, HandoffSlots.ERROR,
    HandoffSlots.MAIN_PARKED)

PARENT_SPIN_S = 0.05  # the longest the parent spins for a result before parking
WORKER_SPIN_S = 0.02  # the longest an idle worker spins before it parks on its pipe
CLOCK_EVERY = 64  # spin iterations between two looks at the clock (a few microseconds)
POLL_EVERY = 1024  # spin iterations between two looks at the worker's pipe


class Handoff:
    """The parent's side of one worker's handoff."""

    def __init__(self, header: np.ndarray, worker: Worker, spin: bool,
                 spin_s: float = PARENT_SPIN_S) -> None:
        self.header = header
        self.worker = worker
        self.conn = worker.conn
        self.spin_s = spin_s if spin else 0.0
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
        """Wait for the last request's result; False if ``deadline`` passed first."""
        header, target = self.header, self.requested
        if header[DONE] == target:
            return True
        if self.spin_s > 0:
            give_up = time.perf_counter() + self.spin_s
            n = 0
            while header[DONE] != target:
                n += 1
                if n % CLOCK_EVERY == 0:
                    now = time.perf_counter()
                    if deadline is not None and now > deadline:
                        return False
                    if now > give_up:
                        break
        return bool(header[DONE] == target) or self._park(target, deadline)

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
        """The report of the failure flagged with the last result (clears the flag)."""
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
        return self.worker.describe()


class Serving:
    """The worker's side of the handoff."""

    def __init__(self, header: np.ndarray, conn: Connection, spin: bool,
                 spin_s: float = WORKER_SPIN_S) -> None:
        self.header = header
        self.conn = conn
        self.spin_s = spin_s if spin else 0.0
        self.last = int(header[REQUEST])

    def wait_request(self) -> bool:
        """True when work is requested, False when a message waits on the pipe."""
        header, last = self.header, self.last
        if header[REQUEST] != last:
            return True
        if self.spin_s > 0:
            end = time.perf_counter() + self.spin_s
            n = 0
            while header[REQUEST] == last:
                n += 1
                if n % CLOCK_EVERY == 0 and (time.perf_counter() > end or (
                        n % POLL_EVERY == 0 and self.conn.poll())):
                    break
        return bool(header[REQUEST] != last) or self._park(last)

    def _park(self, last: int) -> bool:
        header = self.header
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
        self.last = int(self.header[REQUEST])
        return self.last

    def finish(self, request: int, error: ErrorReport | None = None) -> None:
        """Publish the result of ``request``; an error report goes first, on the pipe, after
        the flag (a parked parent woken by the report must not take it for a wake-up)."""
        if error is not None:
            self.header[ERROR] = 1
            self.conn.send(("error", error))
        self.header[DONE] = request
        if self.header[MAIN_PARKED]:
            self.conn.send(("done",))
