"""Starting and stopping worker processes: escalation, exit descriptions, orphan watch."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import psutil
import pytest

from parcat.ipc.process import (
    START_METHODS,
    Worker,
    WorkerState,
    become_worker,
    default_start_method,
    describe_exit,
    get_context,
    parent_alive,
)

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals"),
              pytest.mark.usefixtures("clean_machine")]

TIMEOUT_S = 60.0
"""Upper bound on any wait (never reached when things work)."""
GONE_WITHIN_S = 10.0
"""A generous bound on an orphaned worker noticing its parent died (it checks every 1 s)."""


# -- worker bodies (module level: the fork server imports them by name) ----------------------


def say_excepthook(conn: Connection, parent_pid: int) -> None:
    become_worker(parent_pid)
    hook = sys.excepthook
    try:
        raise EOFError  # what a worker's start raises when its parent left meanwhile
    except EOFError:
        kind, value, traceback = sys.exc_info()
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        hook(kind, value, traceback)  # type: ignore[arg-type]
        hook(ValueError, ValueError("kept"), None)
    conn.send(("ok", (hook.__module__, printed.getvalue())))


def obey_close(conn: Connection, parent_pid: int) -> None:
    """Exit 0 on the polite ``close`` message."""
    become_worker(parent_pid)
    conn.send(("ok", None))
    if conn.poll(TIMEOUT_S):
        conn.recv()


def exit_with(conn: Connection, parent_pid: int, code: int) -> None:
    sys.exit(code)


def sleep_deaf(conn: Connection, parent_pid: int, ignore_sigterm: bool, worker: bool) -> None:
    """Never read the pipe; optionally ignore SIGTERM, or become a worker."""
    if worker:
        become_worker(parent_pid)
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn.send(("ok", None))
    end = time.monotonic() + TIMEOUT_S
    while time.monotonic() < end:
        time.sleep(0.01)


def answer_pings(conn: Connection, parent_pid: int) -> None:
    """Say who started us, then answer ``ping`` with ``pong`` until ``close``."""
    become_worker(parent_pid)
    conn.send(("ok", parent_pid))
    while conn.poll(TIMEOUT_S):
        if conn.recv()[0] != "ping":
            return
        conn.send(("ok", "pong"))


def clean_up_when_orphaned(conn: Connection, parent_pid: int, marker: str) -> None:
    """Never read the pipe; write ``marker`` in ``finally`` when SIGTERM ends the wait."""
    become_worker(parent_pid)
    try:
        end = time.monotonic() + TIMEOUT_S
        while time.monotonic() < end:
            time.sleep(0.01)
    finally:
        Path(marker).write_text(str(os.getpid()))


def start_grandchild(conn: Connection, parent_pid: int, marker: str) -> None:
    """Start a worker of our own, report its pid, then wait to be killed."""
    become_worker(parent_pid)
    grandchild = Worker(clean_up_when_orphaned, (marker,), "test-grandchild",
                        start_method="forkserver")
    conn.send(("grandchild", grandchild.pid))
    conn.poll(TIMEOUT_S)
    grandchild.stop()


# -- helpers ------------------------------------------------------------------------------

Start = Callable[..., Worker]


@pytest.fixture
def start() -> Iterator[Start]:
    """``start(target, *args, method=..., name=...)`` starts a worker; every worker a test
    started is stopped (and reaped) at the end, also when the test failed half-way."""
    started: list[Worker] = []

    def start_one(target: object, *args: object, method: str = "forkserver",
                  name: str = "test-procs") -> Worker:
        worker = Worker(target, args, name, start_method=method)  # type: ignore[arg-type]
        started.append(worker)
        return worker

    yield start_one
    for worker in started:
        worker.stop(grace_s=0.5)  # idempotent: a no-op for a worker the test stopped


def receive(worker: Worker) -> tuple[object, ...]:
    return worker.recv(TIMEOUT_S)  # raises WorkerLostError if the worker says nothing


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(predicate: object, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(predicate())  # type: ignore[operator]


# -- tests --------------------------------------------------------------------------------


def test_start_methods_are_forkserver_or_spawn() -> None:
    assert default_start_method() == "forkserver"
    assert {get_context(m).get_start_method() for m in START_METHODS} == set(START_METHODS)
    with pytest.raises(ValueError, match=re.escape(
            "start method must be one of forkserver, spawn, got 'fork'")):
        get_context("fork")


@pytest.mark.parametrize("method", START_METHODS)
def test_a_worker_gets_our_pid_and_a_pipe_and_leaves_on_close(method: str, start: Start) -> None:
    worker = start(answer_pings, method=method, name="test-ping")
    process = worker.process
    assert process.name == "test-ping" and not process.daemon
    assert worker.pid == process.pid and worker.alive and worker.state is WorkerState.STARTING
    assert worker.wait_ready(TIMEOUT_S) == os.getpid()
    assert worker.state is WorkerState.READY
    assert worker.call("ping", timeout=TIMEOUT_S) == "pong"
    assert psutil.Process(process.pid).ppid() in {os.getpid(),  # spawn
                                                  *(p.pid for p in psutil.Process().children())}
    worker.stop()
    assert process.exitcode == 0 and describe_exit(process) == "exit code 0"
    assert worker.conn.closed
    assert worker.state is WorkerState.STOPPED and not worker.alive


def test_stop_asks_politely_first(start: Start) -> None:
    worker = start(obey_close)
    assert worker.wait_ready(TIMEOUT_S) is None
    worker.stop(grace_s=TIMEOUT_S)
    assert worker.process.exitcode == 0


def test_stop_terminates_a_worker_that_does_not_listen(start: Start) -> None:
    worker = start(sleep_deaf, False, False)
    assert worker.wait_ready(TIMEOUT_S) is None
    worker.stop(grace_s=1.0)  # a deaf worker dies of SIGTERM at once
    assert describe_exit(worker.process) == "signal SIGTERM"


def test_stop_kills_a_worker_that_ignores_sigterm(start: Start) -> None:
    worker = start(sleep_deaf, True, False)
    assert worker.wait_ready(TIMEOUT_S) is None  # SIGTERM is ignored from here on
    worker.stop(grace_s=0.2)
    assert worker.process.exitcode == -signal.SIGKILL
    assert describe_exit(worker.process) == "signal SIGKILL"
    assert worker.describe() == "died (signal SIGKILL)"
    assert worker.conn.closed


def test_become_worker_turns_sigterm_into_system_exit(start: Start) -> None:
    worker = start(sleep_deaf, False, True)
    assert worker.wait_ready(TIMEOUT_S) is None
    worker.process.terminate()
    worker.process.join(TIMEOUT_S)
    worker.stop()
    # become_worker turns SIGTERM into SystemExit(128 + 15), which runs finally blocks
    assert describe_exit(worker.process) == "exit code 143"


def test_stop_with_terminate_sends_sigterm_at_once(start: Start) -> None:
    worker = start(sleep_deaf, False, True)  # a worker: SIGTERM ends it with exit code 143
    assert worker.wait_ready(TIMEOUT_S) is None
    worker.stop(grace_s=TIMEOUT_S, terminate=True)
    assert describe_exit(worker.process) == "exit code 143"
    assert worker.conn.closed and worker.state is WorkerState.STOPPED


def test_stop_on_a_dead_worker_just_reaps_it(start: Start) -> None:
    worker = start(exit_with, 3)
    worker.process.join(TIMEOUT_S)
    assert worker.state is WorkerState.DEAD and not worker.alive
    worker.stop()
    assert describe_exit(worker.process) == "exit code 3" and worker.conn.closed
    assert worker.state is WorkerState.STOPPED
    worker.stop()  # twice: harmless


@pytest.mark.parametrize(("how", "expected"), [
    (signal.SIGKILL, "signal SIGKILL"),
    (signal.SIGSEGV, "signal SIGSEGV"),
    (signal.SIGRTMIN + 1, f"signal {signal.SIGRTMIN + 1}"),  # no name in signal.Signals
])
def test_describe_exit_names_the_signal(how: int, expected: str, start: Start) -> None:
    worker = start(sleep_deaf, False, False)
    process = worker.process
    assert worker.wait_ready(TIMEOUT_S) is None
    assert describe_exit(process) == "still running"
    os.kill(process.pid, how)
    process.join(TIMEOUT_S)
    assert process.exitcode == -how
    assert describe_exit(process) == expected
    assert worker.describe() == f"died ({expected})"
    worker.stop()


def test_a_worker_ignores_ctrl_c(start: Start) -> None:
    worker = start(answer_pings)
    assert worker.wait_ready(TIMEOUT_S) == os.getpid()
    os.kill(worker.pid, signal.SIGINT)
    # the signal is delivered before the worker can read the ping
    assert worker.call("ping", timeout=TIMEOUT_S) == "pong"
    assert worker.process.is_alive()
    worker.stop()
    assert worker.process.exitcode == 0


def test_parent_alive_tells_live_from_dead_pids(start: Start) -> None:
    worker = start(exit_with, 0)
    worker.process.join(TIMEOUT_S)
    worker.stop()
    assert parent_alive(os.getpid())
    assert worker.pid is not None and not parent_alive(worker.pid)


def test_a_worker_whose_parent_is_killed_cleans_up_and_exits(tmp_path: Path,
                                                             start: Start) -> None:
    marker = tmp_path / "cleaned-up"
    middle = start(start_grandchild, str(marker))
    kind, grandchild = receive(middle)
    assert kind == "grandchild" and isinstance(grandchild, int)
    assert psutil.Process(grandchild).is_running() and not gone(grandchild)
    os.kill(middle.process.pid, signal.SIGKILL)  # no chance to stop its own worker
    middle.process.join(TIMEOUT_S)
    assert describe_exit(middle.process) == "signal SIGKILL"
    assert wait_until(lambda: gone(grandchild), GONE_WITHIN_S), "the orphan kept running"
    assert marker.read_text() == str(grandchild), "the orphan's finally block did not run"


def test_a_worker_start_cut_off_by_its_parent_leaving_prints_no_traceback() -> None:
    """The fork server's children report an error of their start through sys.excepthook;
    an EOFError there means the parent is gone (a run stopped on purpose): silent."""
    worker = Worker(say_excepthook, (), "hook", ctx=get_context("forkserver"))
    try:
        module, printed = worker.wait_ready(TIMEOUT_S)
    finally:
        worker.stop()
    assert module == "parcat.ipc.quiet_start"
    assert "EOFError" not in printed and "ValueError: kept" in printed
    # this process's own hook is not parcat's (another library may have set its own)
    assert getattr(sys.excepthook, "__module__", "") != "parcat.ipc.quiet_start"
