"""Starting and stopping worker processes: escalation, exit descriptions, orphan watch."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import psutil
import pytest

from parcat.parallel.procs import (
    START_METHODS,
    become_worker,
    default_start_method,
    describe_exit,
    get_context,
    parent_alive,
    start_worker,
    stop_worker,
)

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals"),
              pytest.mark.usefixtures("clean_machine")]

TIMEOUT_S = 60.0
"""Upper bound on any wait (never reached when things work)."""
GONE_WITHIN_S = 10.0
"""A generous bound on an orphaned worker noticing its parent died (it checks every 1 s)."""


# -- worker bodies (module level: the fork server imports them by name) ----------------------


def obey_close(conn: Connection, parent_pid: int) -> None:
    """Exit 0 on the polite ``close`` message."""
    become_worker(parent_pid)
    conn.send(("ready",))
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
    conn.send(("ready",))
    end = time.monotonic() + TIMEOUT_S
    while time.monotonic() < end:
        time.sleep(0.01)


def answer_pings(conn: Connection, parent_pid: int) -> None:
    """Say who started us, then answer ``ping`` with ``pong`` until ``close``."""
    become_worker(parent_pid)
    conn.send(("ready", parent_pid))
    while conn.poll(TIMEOUT_S):
        if conn.recv()[0] != "ping":
            return
        conn.send(("pong",))


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
    process, theirs = start_worker(get_context("forkserver"), clean_up_when_orphaned,
                                   (marker,), "test-grandchild")
    conn.send(("grandchild", process.pid))
    conn.poll(TIMEOUT_S)
    stop_worker(process, theirs)


# -- helpers ------------------------------------------------------------------------------


def start(target: object, *args: object) -> tuple[BaseProcess, Connection]:
    process, conn = start_worker(get_context("forkserver"), target, args,  # type: ignore[arg-type]
                                 "test-procs")
    return process, conn


def receive(conn: Connection) -> tuple[object, ...]:
    assert conn.poll(TIMEOUT_S), "the worker said nothing"
    return tuple(conn.recv())


@pytest.fixture
def deaf() -> Iterator[list[BaseProcess]]:
    """Processes a test started; killed if the test left them running."""
    started: list[BaseProcess] = []
    yield started
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(TIMEOUT_S)


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
def test_a_worker_gets_our_pid_and_a_pipe_and_leaves_on_close(method: str) -> None:
    process, conn = start_worker(get_context(method), answer_pings, (), "test-ping")
    assert process.name == "test-ping" and not process.daemon
    assert receive(conn) == ("ready", os.getpid())
    conn.send(("ping",))
    assert receive(conn) == ("pong",)
    assert psutil.Process(process.pid).ppid() in {os.getpid(),  # spawn
                                                  *(p.pid for p in psutil.Process().children())}
    stop_worker(process, conn)
    assert process.exitcode == 0 and describe_exit(process) == "exit code 0"
    assert conn.closed


def test_stop_worker_asks_politely_first() -> None:
    process, conn = start(obey_close)
    assert receive(conn) == ("ready",)
    stop_worker(process, conn, grace_s=TIMEOUT_S)
    assert process.exitcode == 0


def test_stop_worker_terminates_a_worker_that_does_not_listen(deaf: list[BaseProcess]) -> None:
    process, conn = start(sleep_deaf, False, False)
    deaf.append(process)
    assert receive(conn) == ("ready",)
    stop_worker(process, conn, grace_s=1.0)  # a deaf worker dies of SIGTERM at once
    assert describe_exit(process) == "signal SIGTERM"


def test_stop_worker_kills_a_worker_that_ignores_sigterm(deaf: list[BaseProcess]) -> None:
    process, conn = start(sleep_deaf, True, False)
    deaf.append(process)
    assert receive(conn) == ("ready",)  # SIGTERM is ignored from here on
    stop_worker(process, conn, grace_s=0.2)
    assert process.exitcode == -signal.SIGKILL
    assert describe_exit(process) == "signal SIGKILL"
    assert conn.closed


def test_become_worker_turns_sigterm_into_system_exit(deaf: list[BaseProcess]) -> None:
    process, conn = start(sleep_deaf, False, True)
    deaf.append(process)
    assert receive(conn) == ("ready",)
    process.terminate()
    process.join(TIMEOUT_S)
    conn.close()
    # become_worker turns SIGTERM into SystemExit(128 + 15), which runs finally blocks
    assert describe_exit(process) == "exit code 143"


def test_stop_worker_on_a_dead_worker_just_reaps_it() -> None:
    process, conn = start(exit_with, 3)
    process.join(TIMEOUT_S)
    stop_worker(process, conn)
    assert describe_exit(process) == "exit code 3" and conn.closed
    stop_worker(process, None)  # twice, and without a pipe: harmless


@pytest.mark.parametrize(("how", "expected"), [
    (signal.SIGKILL, "signal SIGKILL"),
    (signal.SIGSEGV, "signal SIGSEGV"),
    (signal.SIGRTMIN + 1, f"signal {signal.SIGRTMIN + 1}"),  # no name in signal.Signals
])
def test_describe_exit_names_the_signal(how: int, expected: str,
                                        deaf: list[BaseProcess]) -> None:
    process, conn = start(sleep_deaf, False, False)
    deaf.append(process)
    assert receive(conn) == ("ready",)
    assert describe_exit(process) == "still running"
    os.kill(process.pid, how)
    process.join(TIMEOUT_S)
    assert process.exitcode == -how
    assert describe_exit(process) == expected
    conn.close()


def test_a_worker_ignores_ctrl_c() -> None:
    process, conn = start(answer_pings)
    assert receive(conn) == ("ready", os.getpid())
    os.kill(process.pid, signal.SIGINT)
    conn.send(("ping",))  # the signal is delivered before the worker can read this
    assert receive(conn) == ("pong",)
    assert process.is_alive()
    stop_worker(process, conn)
    assert process.exitcode == 0


def test_parent_alive_tells_live_from_dead_pids() -> None:
    process, conn = start(exit_with, 0)
    process.join(TIMEOUT_S)
    conn.close()
    assert parent_alive(os.getpid())
    assert not parent_alive(process.pid)


def test_a_worker_whose_parent_is_killed_cleans_up_and_exits(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned-up"
    middle, conn = start(start_grandchild, str(marker))
    try:
        kind, grandchild = receive(conn)
        assert kind == "grandchild" and isinstance(grandchild, int)
        assert psutil.Process(grandchild).is_running() and not gone(grandchild)
        os.kill(middle.pid, signal.SIGKILL)  # no chance to stop its own worker
        middle.join(TIMEOUT_S)
        assert describe_exit(middle) == "signal SIGKILL"
        started = time.monotonic()
        assert wait_until(lambda: gone(grandchild), TIMEOUT_S), "the orphan kept running"
        assert time.monotonic() - started < GONE_WITHIN_S
        assert marker.read_text() == str(grandchild), "the orphan's finally block did not run"
    finally:
        if middle.is_alive():
            middle.kill()
        middle.join(TIMEOUT_S)
        conn.close()
