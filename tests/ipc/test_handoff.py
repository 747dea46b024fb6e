"""Handoff and Serving between this process and a real worker process, spinning or parked."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from parcat.ipc.handoff import Handoff, Serving
from parcat.ipc.layout import HandoffSlots
from parcat.ipc.process import (
    START_METHODS,
    ErrorReport,
    Handlers,
    Worker,
    WorkerLostError,
    start_worker,
    worker_pipe,
)
from parcat.ipc.shm import ArrayBlock

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals"),
              pytest.mark.usefixtures("clean_machine")]

TIMEOUT_S = 60.0
"""Upper bound on any wait (never reached when things work)."""
"""A generous bound on noticing a dead worker (it takes milliseconds)."""

SPECS: dict[str, tuple[tuple[int, ...], Any]] = {
    "command": ((1,), np.int64),
    "x": ((8,), np.int64),
    "y": ((8,), np.int64),
    "taken": ((1,), np.int64),  # the request number the worker took last
    "saw_parked": ((1,), np.int64),  # MAIN_PARKED as the worker saw it when it finished
    "release": ((1,), np.int64),  # lets a HANG request finish
}
DONE, WORKER_PARKED, MAIN_PARKED = (HandoffSlots.DONE, HandoffSlots.WORKER_PARKED,
                                     HandoffSlots.MAIN_PARKED)
ECHO, FAIL, AWAIT_PARKED_PARENT, HANG, DIE, FAIL_LONG = range(6)
LONG_MESSAGE = "x" * 4_000_000
"""More than a socket buffer holds: sending it blocks until the parent reads."""
SKIP_WAKE_UPS = ("done", "wake")
"""Handoff wake-ups that may wait on the pipe before any other message."""


def failure(request: int) -> ErrorReport:
    """What the worker reports for a FAIL request."""
    return ErrorReport("ValueError", f"boom {request}", "Traceback ...", agent="agent_1")


LONG_FAILURE = ErrorReport("ValueError", LONG_MESSAGE, "", agent="agent_1")
"""What the worker reports for a FAIL_LONG request."""


def serve_requests(block_name: str, spin: bool) -> Handlers:
    """A worker: each request runs the command in the block, then flags it done."""
    block = ArrayBlock(SPECS, name=block_name)
    serving = Serving(block.header, worker_pipe(), spin)

    def idle() -> bool:
        if not serving.wait_request():
            return False
        request = serving.take()
        block.arrays["taken"][0] = request
        _run(block, serving, request)
        return True

    return Handlers(idle=idle, close=block.close)


def _run(block: ArrayBlock, serving: Serving, request: int) -> None:
    arrays, header = block.arrays, block.header
    command = int(arrays["command"][0])
    if command == ECHO:
        arrays["y"][:] = arrays["x"] * 2 + request
    elif command == FAIL:
        serving.finish(request, failure(request))
        return
    elif command == AWAIT_PARKED_PARENT:
        _wait_for(lambda: header[MAIN_PARKED] == 1)
        arrays["saw_parked"][0] = header[MAIN_PARKED]
    elif command == HANG:
        _wait_for(lambda: arrays["release"][0] == 1)
    elif command == DIE:
        os.kill(os.getpid(), signal.SIGKILL)
    elif command == FAIL_LONG:
        serving.finish(request, LONG_FAILURE)
        return
    serving.finish(request)


def _wait_for(condition: Any) -> None:
    end = time.monotonic() + TIMEOUT_S
    while not condition() and time.monotonic() < end:
        time.sleep(0.001)


@dataclass
class Served:
    """This process's side of one worker."""

    block: ArrayBlock
    handoff: Handoff
    worker: Worker

    def command(self, command: int) -> None:
        self.block.arrays["command"][0] = command
        self.handoff.request()

    def wait(self) -> bool:
        return self.handoff.wait_done(time.perf_counter() + TIMEOUT_S)


@contextmanager
def serve(spin: bool, method: str = "forkserver") -> Iterator[Served]:
    """A worker serving requests, stopped (and its block freed) at the end."""
    block = ArrayBlock(SPECS)
    try:
        worker = start_worker(serve_requests, (block.name, spin), "test-handoff",
                              start_method=method)
        try:
            served = Served(block, Handoff(block.header, worker, spin), worker)
            assert worker.wait_ready(TIMEOUT_S) is None
            yield served
        finally:
            block.arrays["release"][0] = 1
            worker.stop()
    finally:
        block.close()


@pytest.fixture(params=[True, False], ids=["spin", "park"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    with serve(request.param) as served:
        yield served


@pytest.mark.parametrize("method", START_METHODS)
@pytest.mark.parametrize("spin", [True, False], ids=["spin", "park"])
def test_requests_are_done_in_order(spin: bool, method: str) -> None:
    with serve(spin, method) as served:
        arrays = served.block.arrays
        for n in range(1, 301):
            arrays["x"][:] = np.arange(8) * n
            served.command(ECHO)
            assert served.handoff.busy or served.block.header[DONE] == n
            assert served.wait()
            assert not served.handoff.busy and not served.handoff.failed
            assert served.handoff.requested == n == arrays["taken"][0]
            assert np.array_equal(arrays["y"], np.arange(8) * n * 2 + n)


def test_a_parked_worker_is_woken_by_a_request(served: Served) -> None:
    header = served.block.header
    for n in range(1, 6):
        # an idle worker parks at once (park) or after WORKER_SPIN_S (spin)
        _wait_for(lambda: header[WORKER_PARKED] == 1)
        assert header[WORKER_PARKED] == 1
        served.block.arrays["x"][:] = n
        served.command(ECHO)
        assert served.wait()
        assert served.block.arrays["y"][0] == 3 * n


def test_an_error_flag_delivers_the_message_and_the_next_request_works(served: Served) -> None:
    served.command(FAIL)
    # the result is complete before the parent looks (the test below covers a parent
    # that is parked on the pipe while the message arrives)
    _wait_for(lambda: not served.handoff.busy)
    assert served.wait()
    assert served.handoff.failed
    report = served.handoff.error(TIMEOUT_S)
    assert report == failure(1)
    assert report.summary == "ValueError: boom 1"
    assert not served.handoff.failed  # reading the report cleared the flag
    served.block.arrays["x"][:] = 5
    served.command(ECHO)
    assert served.wait() and not served.handoff.failed
    assert served.block.arrays["y"][0] == 12


def test_an_error_message_reaching_a_parked_parent_is_not_lost(served: Served) -> None:
    # Serving.finish sends the message before it raises the flag; a long message keeps the
    # worker in send() until the parked parent reads it, so the parent sees no flag yet
    served.command(FAIL_LONG)
    assert served.wait() and served.handoff.failed
    assert served.handoff.error(3.0) == LONG_FAILURE


def test_a_slow_worker_finds_the_parent_parked_and_wakes_it(served: Served) -> None:
    for n in range(1, 4):
        served.command(AWAIT_PARKED_PARENT)
        assert served.wait()
        assert served.block.arrays["saw_parked"][0] == 1
        assert served.block.header[MAIN_PARKED] == 0  # unparked again
        assert served.handoff.requested == n and not served.handoff.busy


def test_wait_done_gives_up_at_the_deadline_and_can_wait_again(served: Served) -> None:
    served.command(HANG)
    deadline = time.perf_counter() + 0.2
    assert served.handoff.wait_done(deadline) is False
    assert time.perf_counter() >= deadline
    assert served.handoff.busy and served.block.header[MAIN_PARKED] == 0
    served.block.arrays["release"][0] = 1
    assert served.wait() and not served.handoff.busy
    served.block.arrays["release"][0] = 0
    served.block.arrays["x"][:] = 1
    served.command(ECHO)
    assert served.wait() and served.block.arrays["y"][0] == 4


def test_a_worker_killed_mid_request_is_reported_promptly(served: Served) -> None:
    served.command(DIE)
    with pytest.raises(WorkerLostError, match=re.escape("died (signal SIGKILL)")):
        served.wait()
    assert served.handoff.describe() == "died (signal SIGKILL)"
    assert served.worker.process.exitcode == -signal.SIGKILL


def test_a_worker_killed_while_idle_fails_the_next_wait(served: Served) -> None:
    os.kill(served.worker.process.pid, signal.SIGKILL)
    served.worker.process.join(TIMEOUT_S)
    with pytest.raises(WorkerLostError, match=re.escape("died (signal SIGKILL)")):
        served.command(ECHO)  # may already fail here: the worker parked, its pipe is gone
        served.wait()


def test_recv_gives_up_on_a_silent_worker(served: Served) -> None:
    with pytest.raises(WorkerLostError, match=re.escape("did not answer in 1 s")):
        served.worker.recv(1.0, skip=SKIP_WAKE_UPS)
    served.command(ECHO)  # the worker is still fine
    assert served.wait()


def test_recv_reports_a_dead_worker(served: Served) -> None:
    # become_worker turns SIGTERM into Terminated; the worker cleans up and exits with 0
    os.kill(served.worker.process.pid, signal.SIGTERM)
    with pytest.raises(WorkerLostError, match=re.escape("died (exit code 0)")):
        served.worker.recv(TIMEOUT_S, skip=SKIP_WAKE_UPS)


def test_discard_messages_drops_leftovers_and_the_error_flag(served: Served) -> None:
    served.command(FAIL)
    _wait_for(lambda: not served.handoff.busy)
    assert served.wait() and served.handoff.failed
    served.handoff.discard_messages()
    assert not served.handoff.failed and not served.worker.conn.poll()
    served.block.arrays["x"][:] = 2
    served.command(ECHO)
    assert served.wait() and served.block.arrays["y"][0] == 6
