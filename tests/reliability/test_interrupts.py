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
from pathlib import Path

import pytest

from tests.reliability.helpers import descendants, gone, kill_group, wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")

BIN = Path(sys.executable).parent
PARCAT = str(BIN / "parcat") if (BIN / "parcat").exists() else shutil.which("parcat")
ROOT = Path(__file__).resolve().parents[2]
RUNS = 100
AT_ONCE = 4


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    assert PARCAT is not None, "the parcat console script is not installed"
    return subprocess.Popen([PARCAT, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def importing_numpy(pid: int) -> bool:
    """Whether the process has loaded numpy: parcat's own code runs, its handler is set.

    Before that, Python itself starts (interpreter, site, the console script: ~10-25 ms
    on a quiet machine, far longer on a loaded one); a Ctrl-C there is Python's to handle.
    """
    try:
        return "numpy" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return True  # it has already exited


def test_ctrl_c_in_the_first_second_never_shows_a_traceback_nor_exits_0(tmp_path: Path) -> None:
    rng = random.Random(11)
    outcomes: list[tuple[float, int, str]] = []
    for _ in range(RUNS // AT_ONCE):
        batch = [(rng.uniform(0.0, 1.0), start(
            ["eval", "-m", "harvest", "-n", "100000", "--jobs", "2"], tmp_path))
            for _ in range(AT_ONCE)]
        for _, proc in batch:
            assert wait_until(lambda p=proc: importing_numpy(p.pid), 30)
        began = time.monotonic()
        for delay, proc in sorted(batch, key=lambda b: b[0]):
            time.sleep(max(0.0, began + delay - time.monotonic()))
            os.killpg(proc.pid, signal.SIGINT)
        for delay, proc in batch:
            try:
                _, err = proc.communicate(timeout=30)
            finally:
                kill_group(proc)
            outcomes.append((delay, proc.returncode, err))
    bad = [(round(d, 3), code, err[-300:]) for d, code, err in outcomes
           if code != 130 or "Traceback" in err or "Exception ignored" in err]
    assert not bad, bad


def test_a_second_ctrl_c_stops_at_once_even_with_a_hung_policy(tmp_path: Path) -> None:
    # every agent's policy hangs for an hour on its third step, on policy threads
    proc = start(["eval", "-m", "harvest", "--set", "agents=2", "-n", "2", "--jobs", "2",
                  "--parallel-policy", "--policy-strategy", "thread", "--executor", "inline",
                  "-p", "tests.fakes:HangingPolicy,at_step=2"], ROOT)
    try:
        assert wait_until(lambda: _threads(proc.pid) >= 2, 30), "policy threads never started"
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
    finally:
        kill_group(proc)


def test_one_ctrl_c_ends_a_run_whose_policy_thread_hangs(tmp_path: Path) -> None:
    proc = start(["eval", "-m", "harvest", "--set", "agents=2", "-n", "1", "--jobs", "2",
                  "--parallel-policy", "--policy-strategy", "thread", "--executor", "inline",
                  "--action-timeout-ms", "20", "--set", "max_steps=100000",
                  "-p", "tests.fakes:HangingPolicy,at_step=2"], ROOT)
    try:
        time.sleep(2.0)  # the policies hang; late actions let the episode run on
        children = [p.pid for p in descendants(proc.pid)]
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert wait_until(lambda: gone(children), 10)
    finally:
        kill_group(proc)


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0
