"""The one command loop every worker kind runs: named commands, one reply, one error shape."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from parcat.ipc.process import (
    START_METHODS,
    Handlers,
    Terminated,
    Worker,
    WorkerLostError,
    WorkerRaisedError,
    WorkerState,
    describe_exit,
    mark_acting,
    start_worker,
)

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals"),
              pytest.mark.usefixtures("clean_machine")]

TIMEOUT_S = 60.0
"""Upper bound on any wait (never reached when things work)."""


# -- worker kinds (module level: the fork server imports them by name) ---------------------


def make_counter(start: int) -> Handlers:
    """``add(n)`` adds to a total and returns it; ``fail(text)`` raises; ``lambda`` cannot
    be sent back; ``hold`` waits for SIGTERM, which hands back the total as partial work."""
    total = [start]

    def add(n: int) -> int:
        total[0] += n
        return total[0]

    def fail(text: str) -> None:
        raise ValueError(text)

    def hold() -> None:
        mark_acting(0)  # the parent sees the command has started
        try:
            threading.Event().wait(TIMEOUT_S)
        except Terminated as stop:
            stop.partial = total[0]
            raise

    return Handlers({"add": add, "fail": fail, "lambda": lambda: (lambda: None),
                     "exit": lambda: sys.exit(3), "hold": hold}, ready=os.getpid())


def refuse_to_start(text: str) -> Handlers:
    raise RuntimeError(text)


@pytest.fixture(params=START_METHODS)
def counter(request: pytest.FixtureRequest) -> Iterator[Worker]:
    worker = start_worker(make_counter, (10,), "test-counter", start_method=request.param)
    yield worker
    worker.stop(grace_s=0.5)


# -- tests ------------------------------------------------------------------------------


def test_the_set_up_reply_is_the_handshake_and_commands_reply_ok(counter: Worker) -> None:
    assert counter.state is WorkerState.STARTING
    assert counter.wait_ready(TIMEOUT_S) == counter.pid
    assert counter.state is WorkerState.READY
    assert counter.call("add", 5, timeout=TIMEOUT_S) == 15
    assert counter.call("add", 1, timeout=TIMEOUT_S) == 16
    counter.stop(grace_s=TIMEOUT_S)
    assert describe_exit(counter.process) == "exit code 0"  # "close" ends the loop


def test_a_first_call_reads_the_handshake_on_its_way(counter: Worker) -> None:
    assert counter.call("add", 1, timeout=TIMEOUT_S) == 11
    assert counter.state is WorkerState.READY


def test_a_handler_that_raises_replies_with_the_error_and_the_worker_serves_on(
        counter: Worker) -> None:
    with pytest.raises(WorkerRaisedError, match=re.escape("test-counter raised ValueError: no")) \
            as raised:
        counter.call("fail", "no", timeout=TIMEOUT_S)
    assert 'raise ValueError(text)' in raised.value.report.traceback
    with pytest.raises(WorkerRaisedError, match=re.escape("raised KeyError: 'nonesuch'")):
        counter.call("nonesuch", timeout=TIMEOUT_S)
    with pytest.raises(WorkerRaisedError, match=re.escape("raised SystemExit: called sys.exit(3)")):
        counter.call("exit", timeout=TIMEOUT_S)
    assert counter.call("add", 1, timeout=TIMEOUT_S) == 11


def test_a_result_that_cannot_be_pickled_is_the_commands_error(counter: Worker) -> None:
    with pytest.raises(WorkerRaisedError, match=r"raised (PicklingError|AttributeError)"):
        counter.call("lambda", timeout=TIMEOUT_S)
    assert counter.call("add", 2, timeout=TIMEOUT_S) == 12


def test_sigterm_hands_back_the_partial_work_then_the_worker_exits(counter: Worker) -> None:
    assert counter.call("add", 5, timeout=TIMEOUT_S) == 15
    counter.send(("hold",))
    deadline = time.monotonic() + TIMEOUT_S
    while counter.acting() != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    counter.process.terminate()
    assert counter.recv(TIMEOUT_S) == ("partial", 15)
    counter.process.join(TIMEOUT_S)
    assert counter.process.exitcode == 0


def test_a_set_up_that_raises_fails_the_handshake_and_ends_the_worker() -> None:
    worker = start_worker(refuse_to_start, ("no environment",), "test-refuse")
    try:
        with pytest.raises(WorkerRaisedError,
                           match=re.escape("test-refuse raised RuntimeError: no environment")):
            worker.wait_ready(TIMEOUT_S)
        worker.process.join(TIMEOUT_S)
        assert worker.process.exitcode == 0
        with pytest.raises(WorkerLostError):
            worker.call("add", 1, timeout=TIMEOUT_S)
    finally:
        worker.stop(grace_s=0.5)


def test_a_worker_whose_parent_pipe_closes_cleans_up_and_exits(counter: Worker) -> None:
    assert counter.wait_ready(TIMEOUT_S) == counter.pid
    counter.conn.close()
    counter.process.join(TIMEOUT_S)
    assert counter.process.exitcode == 0


def make_stream() -> Handlers:
    """Serves ``echo(n)`` as a stream: holds each command and, each time it is told nothing
    new is waiting, answers the latest one held (so replies come back in another order);
    ``boom`` raises in the stream. A ``None`` while nothing is held would be a bug: it is
    answered ``"idle none"``."""

    def stream(commands: Iterator[tuple[str, list[int]] | None]) -> Iterator[object]:
        held: list[int] = []
        for command in commands:
            if command is None:
                yield held.pop() if held else "idle none"
            elif command[0] == "boom":
                raise RuntimeError("the stream broke")
            else:
                held.append(command[1][0])
    return Handlers({"echo": lambda n: n}, stream=stream)


def test_a_stream_gets_every_command_and_answers_each_with_its_own_tag() -> None:
    worker = start_worker(make_stream, (), "parcat-test-stream")
    try:
        worker.wait_ready(TIMEOUT_S)
        for n in (1, 2, 3):
            worker.send(("echo", n))
        replies = {worker.recv(TIMEOUT_S)[1] for _ in range(3)}
        assert replies == {1, 2, 3}
        time.sleep(0.3)  # nothing unanswered: the stream waits, it is not told "nothing new"
        worker.send(("echo", 4))
        assert worker.recv(TIMEOUT_S) == ("ok", 4)
    finally:
        worker.stop()
    assert worker.process.exitcode == 0


def test_a_stream_that_breaks_ends_its_worker_so_the_parent_replaces_it() -> None:
    worker = start_worker(make_stream, (), "parcat-test-stream")
    try:
        worker.wait_ready(TIMEOUT_S)
        worker.send(("boom",))
        with pytest.raises(WorkerLostError, match="died"):
            worker.recv(TIMEOUT_S)
    finally:
        worker.stop()
