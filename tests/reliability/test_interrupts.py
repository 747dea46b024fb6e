"""Ctrl-C at any moment: one line, exit 130, never a traceback, never exit 0; a second
Ctrl-C is immediate; a hung policy never keeps parcat from exiting."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from tests.reliability.helpers import (
    kill_group,
    loaded_numpy,
    session_processes,
    wait_until,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")

BIN = Path(sys.executable).parent
PARCAT = str(BIN / "parcat") if (BIN / "parcat").exists() else shutil.which("parcat")
ROOT = Path(__file__).resolve().parents[2]
RUNS = 100
AT_ONCE = 4


def start(args: list[str], cwd: Path, stderr: Any = subprocess.PIPE,
          stdout: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    assert PARCAT is not None, "the parcat console script is not installed"
    return subprocess.Popen([PARCAT, *args], cwd=cwd, stdout=stdout,
                            stderr=stderr, text=True, start_new_session=True)


EARLY = {
    "eval": (RUNS, ["eval", "-m", "harvest", "-n", "100000", "--jobs", "2"]),
    "train": (RUNS // 2, ["train", "-m", "goal_tasks", "--epochs", "100000", "--env-workers",
                          "1", "--eval-episodes", "1"]),
}
"""Each command: how many runs, and its arguments (train's ``-o`` is added per run)."""


@pytest.mark.parametrize("command", list(EARLY))
def test_ctrl_c_in_the_first_second_never_shows_a_traceback_nor_exits_0(
        tmp_path: Path, command: str) -> None:
    runs, args = EARLY[command]
    rng = random.Random(11)
    delays = [rng.uniform(0.0, 1.0) for _ in range(runs)]
    outcomes = interrupt_each(delays, lambda i: [*args, *(["-o", f"run{i}"] if command ==
                                                         "train" else [])], tmp_path)
    # one line, whichever part of the run the Ctrl-C cut
    bad = [(round(d, 3), code, err[-300:]) for d, code, err in outcomes
           if code != 130 or len(err.splitlines()) != 1 or "interrupted" not in err]
    assert not bad, bad


def interrupt_each(delays: list[float], args: Callable[[int], list[str]],
                   cwd: Path) -> list[tuple[float, int, str]]:
    """Run ``parcat ARGS(i)`` once per delay, ``AT_ONCE`` runs at a time (a new one starts
    as one ends); Ctrl-C each its delay after it loaded numpy. Returns (delay, exit code,
    stderr) of every run."""
    queue, live = list(enumerate(delays)), list[Run]()
    outcomes: list[tuple[float, int, str]] = []
    try:
        while queue or live:
            while queue and len(live) < AT_ONCE:
                i, delay = queue.pop(0)
                err = (cwd / f"stderr{i}").open("w+")
                proc = start(args(i), cwd, stderr=err, stdout=subprocess.DEVNULL)
                live.append(Run(delay, proc, err))
            for run in list(live):
                if run.tick():
                    live.remove(run)
                    outcomes.append((run.delay, run.proc.returncode, run.stderr()))
            time.sleep(0.005)
    finally:
        for run in live:
            kill_group(run.proc)
            run.err.close()
    return outcomes


class Run:
    """One run of :func:`interrupt_each`: started, then Ctrl-C its delay after numpy loaded."""

    def __init__(self, delay: float, proc: subprocess.Popen[str], err: IO[str]) -> None:
        self.delay, self.proc, self.err = delay, proc, err
        self.started = self.looked = time.monotonic()
        self.due: float | None = None
        self.sent: float | None = None

    def tick(self) -> bool:
        """Move the run on; True once it has exited after its Ctrl-C."""
        now = time.monotonic()
        if self.due is None:
            if now < self.looked + 0.05:  # reading its memory map costs: 20 times a second
                return False
            self.looked = now
            if loaded_numpy(self.proc.pid):
                self.due = now + self.delay
            assert self.due is not None or now < self.started + 30, "never loaded numpy"
        elif self.sent is None and now >= self.due:
            os.killpg(self.proc.pid, signal.SIGINT)
            self.sent = now
        elif self.sent is not None:
            assert self.proc.poll() is not None or now < self.sent + 60, "no exit after Ctrl-C"
            return self.proc.poll() is not None
        return False

    def stderr(self) -> str:
        """What the run wrote to stderr (its stdout goes elsewhere)."""
        kill_group(self.proc)
        self.err.seek(0)
        text = self.err.read()
        self.err.close()
        return text


def test_a_second_ctrl_c_stops_at_once_even_with_a_hung_policy(tmp_path: Path) -> None:
    # every agent's policy hangs for an hour on its third step, on policy threads
    hung, err_file = tmp_path / "hung", tmp_path / "stderr"
    with err_file.open("w") as stderr:
        proc = start(["eval", "-m", "harvest", "--set", "agents=2", "-n", "2", "--jobs", "2",
                      "--parallel-policy", "--policy-strategy", "thread", "--executor",
                      "inline", "-p", f"tests.fakes:HangingPolicy,at_step=2,marker={hung}"],
                     ROOT, stderr=stderr)
    try:
        assert wait_until(hung.exists, 120), "the policy never hung"
        os.killpg(proc.pid, signal.SIGINT)
        # the first Ctrl-C is handled (its line printed) before the second comes
        assert wait_until(lambda: said_interrupted(err_file), 60), "the first Ctrl-C unseen"
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=30)
        err = err_file.read_text()
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert wait_until(lambda: not session_processes(proc.pid), 30)
    finally:
        kill_group(proc)


def test_one_ctrl_c_ends_a_run_whose_policy_thread_hangs(tmp_path: Path) -> None:
    hung = tmp_path / "hung"
    proc = start(["eval", "-m", "harvest", "--set", "agents=2", "-n", "1", "--jobs", "2",
                  "--parallel-policy", "--policy-strategy", "thread", "--executor", "inline",
                  "--action-timeout-ms", "20", "--set", "max_steps=100000",
                  "-p", f"tests.fakes:HangingPolicy,at_step=2,marker={hung}"], ROOT)
    try:
        # the policies hang; late actions let the episode run on
        assert wait_until(hung.exists, 120), "the policy never hung"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert wait_until(lambda: not session_processes(proc.pid), 30)
    finally:
        kill_group(proc)


@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_ends_an_inline_run_whose_policy_swallows_every_exception(
        tmp_path: Path, signals: int) -> None:
    # one SIGTERM: the run has not stopped a few seconds later; two: at once
    hung = tmp_path / "hung"
    proc = start(["eval", "-m", "harvest", "--set", "agents=2", "-n", "2", "--executor",
                  "inline", "-p", f"tests.fakes:StubbornPolicy,at_step=2,marker={hung}"], ROOT)
    try:
        assert wait_until(hung.exists, 120), "the policy never hung"
        for _ in range(signals):
            os.kill(proc.pid, signal.SIGTERM)
            time.sleep(0.2)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, err
        assert len(err.splitlines()) == 1 and "stopping now" in err, err
        assert wait_until(lambda: not session_processes(proc.pid), 30)
    finally:
        kill_group(proc)


def said_interrupted(err: Path) -> bool:
    """Whether the run has printed a line saying it was interrupted."""
    return err.is_file() and "interrupted" in err.read_text()


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0
