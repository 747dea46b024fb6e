"""One worker for a run's start: a worker that finished a check is kept, idle, and the next
check, the calibration and the first episode worker are that process, not one each."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from parcat.ipc import process
from parcat.ipc.process import (
    Handlers,
    SetupFailedError,
    call_in_worker,
    release_spare,
    start_worker,
    take_spare,
)
from parcat.parallel.calibration import measure_in_a_worker
from parcat.parallel.process_executor import ProcessExecutor
from parcat.policies.specs import parse_policy_spec
from tests.fakes import scripted_mission
from tests.reliability.helpers import gone

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals"),
              pytest.mark.usefixtures("clean_machine")]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0


@pytest.fixture(autouse=True)
def no_spare_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(process, "SPARE_S", TIMEOUT_S)  # a loaded machine starts slowly
    release_spare()
    yield
    release_spare()


def fail(how: str) -> None:
    if how == "sys.exit":
        sys.exit(3)
    if how == "os._exit":
        os._exit(3)
    raise ValueError("no such thing")


def pid_worker() -> Handlers:
    return Handlers({"pid": os.getpid}, ready=os.getpid())


def test_checks_in_a_row_run_in_one_worker_which_stops_when_unused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = call_in_worker(os.getpid, (), "check-1")
    assert call_in_worker(os.getpid, (), "check-2") == first
    spare = take_spare()
    assert spare is not None and spare.pid == first and spare.name == "check-2"
    spare.stop()
    monkeypatch.setattr(process, "SPARE_S", 0.2)
    kept = call_in_worker(os.getpid, (), "check-3")
    assert kept != first
    # stopped by its timer, reaped: no zombie left (already gone, on a loaded machine)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(kept).wait(TIMEOUT_S)
    assert take_spare() is None


@pytest.mark.parametrize(("how", "said"), [
    ("raise", "raised ValueError: no such thing"), ("sys.exit", r"called sys\.exit\(3\)"),
    ("os._exit", "ended its process with exit code 3")])
def test_a_worker_whose_code_failed_is_never_reused(how: str, said: str) -> None:
    kept = call_in_worker(os.getpid, (), "check")
    with pytest.raises(SetupFailedError, match=said):
        call_in_worker(fail, (how,), "check")
    assert gone([kept])
    assert take_spare() is None
    assert call_in_worker(os.getpid, (), "check") != kept


def test_a_kept_worker_killed_while_idle_is_replaced() -> None:
    kept = call_in_worker(os.getpid, (), "check")
    worker = psutil.Process(kept)  # before the kill: the fork server may reap it at once
    os.kill(kept, signal.SIGKILL)
    worker.wait(TIMEOUT_S)
    assert call_in_worker(os.getpid, (), "check") != kept


def test_a_kept_worker_of_another_start_method_is_not_taken() -> None:
    kept = call_in_worker(os.getpid, (), "check")
    other = start_worker(pid_worker, (), "other", start_method="spawn", reuse=True)
    try:
        assert other.wait_ready(TIMEOUT_S) != kept
    finally:
        other.stop()
    assert take_spare() is not None  # still there for a forkserver worker


def test_the_check_the_calibration_and_the_first_episode_worker_are_one_process() -> None:
    waiting = (parse_policy_spec("tests.fakes:WaitingPolicy,ms=1"),)
    mission = scripted_mission(agents=2, max_steps=4)
    checked = call_in_worker(os.getpid, (), "parcat-policy-setup")
    step = measure_in_a_worker(mission, waiting)
    assert step is not None and step.waits
    executor = ProcessExecutor(1, episodes_per_worker=2)
    try:
        from parcat.episode.rollout import EpisodeTask

        results = executor.run([EpisodeTask(mission, waiting, 1, i) for i in range(2)])
        assert [r.ok for r in results] == [True, True]
        assert executor.worker_pids() == [checked]
    finally:
        executor.close()


def test_a_program_that_ends_with_a_worker_kept_exits_at_once_and_leaves_none() -> None:
    code = textwrap.dedent("""
        import os
        from parcat.ipc.process import call_in_worker
        if __name__ == "__main__":
            print(call_in_worker(os.getpid, (), "check"), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0 and proc.stderr == ""
    kept = int(proc.stdout)
    # it was stopped before the program ended (an orphan would outlive it for a second)
    assert gone([kept])


def test_a_program_that_ends_with_a_worker_it_never_stopped_exits_and_leaves_none() -> None:
    # what an interrupt between a worker's start and the code that would stop it leaves:
    # multiprocessing's own exit hook would wait forever for a worker that waits for commands
    code = textwrap.dedent("""
        import os, sys
        from parcat.ipc.process import start_worker
        from tests.ipc.test_spare import pid_worker
        if __name__ == "__main__":
            forgotten = [start_worker(pid_worker, (), f"forgotten-{i}") for i in range(2)]
            for worker in forgotten:
                print(worker.wait_ready(60), flush=True)
            sys.exit(130)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 130 and proc.stderr == ""
    for pid in map(int, proc.stdout.split()):
        assert gone([pid])


def test_a_forked_child_that_exits_leaves_its_parents_workers_running() -> None:
    # a library user's os.fork(): the child's exit must not stop workers that are not its own
    code = textwrap.dedent("""
        import os
        from parcat.ipc.process import call_in_worker, start_worker, take_spare
        from tests.ipc.test_spare import pid_worker
        if __name__ == "__main__":
            worker = start_worker(pid_worker, (), "mine")
            worker.wait_ready(60)
            call_in_worker(os.getpid, (), "check")  # and a kept spare
            child = os.fork()
            if child == 0:
                raise SystemExit(0)  # the exit hooks run in the child
            os.waitpid(child, 0)
            print(worker.call("pid", timeout=60) == worker.pid, take_spare() is not None)
            worker.stop()
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]
