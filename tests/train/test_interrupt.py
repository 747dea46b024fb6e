"""Ctrl-C and SIGTERM end ``parcat train`` with a checkpoint of the last finished epoch, in
real subprocesses sent real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parcat.policies import checkpoint
from parcat.train.metrics import read_metrics
from tests.reliability.helpers import kill_group, loaded_numpy, session_processes, wait_until

TIMEOUT_S = 300
TRAIN = ["-m", "parcat", "train", "-m", "goal_tasks", "--set", "max_steps=10",
         "--steps-per-epoch", "20", "--envs-per-worker", "2", "--gradient-steps", "2",
         "--eval-episodes", "1", "--checkpoint-every", "1000", "--epochs", "100000",
         "--format", "json"]


def start(run: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *TRAIN, "--run-dir", str(run), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for_epochs(proc: subprocess.Popen[str], run: Path, epochs: int) -> None:
    """Until the metrics log has ``epochs`` lines (polling; the test asserts no time)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        log = run / "metrics.jsonl"
        if log.is_file() and len(read_metrics(log)) >= epochs:
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"training did not log {epochs} epochs: {proc.communicate()[1]}")


def stop(proc: subprocess.Popen[str], *signals: signal.Signals) -> tuple[int, str]:
    try:
        for number in signals:
            os.kill(proc.pid, number)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except BaseException:
        kill_group(proc)
        raise
    return proc.returncode, err


def load_every_agent(run: Path) -> int:
    manifest = checkpoint.read_manifest(run)
    for folder in manifest["agents"].values():
        checkpoint.load_policy(run / folder)
        checkpoint.load_state(run / folder)
    return int(manifest["epoch"])


@pytest.mark.parametrize(("signum", "code", "layout"), [
    (signal.SIGINT, 130, ["--env-workers", "0"]),
    (signal.SIGTERM, 143, ["--env-workers", "1"]),
])
def test_a_signal_writes_the_last_finished_epoch_and_resume_goes_on_from_it(
    tmp_path: Path, signum: signal.Signals, code: int, layout: list[str]
) -> None:
    run = tmp_path / "run"
    proc = start(run, *layout)
    wait_for_epochs(proc, run, 3)
    stopped, err = stop(proc, signum)
    assert stopped == code
    logged = [record["epoch"] for record in read_metrics(run / "metrics.jsonl")]
    assert load_every_agent(run) == logged[-1] >= 3  # checkpoint_every 1000: only the final one
    assert err.splitlines()[-1] == (
        f"parcat: interrupted after epoch {logged[-1]} of 100000; its checkpoint (epoch "
        f"{logged[-1]}) is in {run}; to continue, run the same command with -o {run} --resume")
    resumed = subprocess.run(
        [sys.executable, *TRAIN[:-4], "--epochs", str(logged[-1] + 1), "--format", "json",
         "--run-dir", str(run), "--resume", *layout],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert resumed.returncode == 0, resumed.stderr
    # with --format json the epoch lines go to stderr: nothing else may
    assert all(line.startswith("epoch ") for line in resumed.stderr.splitlines())
    assert [r["epoch"] for r in read_metrics(run / "metrics.jsonl")] == [*logged, logged[-1] + 1]


def test_async_mode_syncs_the_learners_before_the_final_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = start(run, "--mode", "async", "--env-workers", "1")
    try:
        wait_for_epochs(proc, run, 2)
        code, err = stop(proc, signal.SIGTERM)
        assert code == 143, err
        logged = [record["epoch"] for record in read_metrics(run / "metrics.jsonl")]
        assert load_every_agent(run) == logged[-1]
        assert wait_until(lambda: not session_processes(proc.pid), 30)
    finally:
        kill_group(proc)


ASYNC_DELAYS_S = [0.0, 0.05, 0.2, 0.5, 0.8, 1.2, 1.6, 2.0, 2.5, 3.0]
"""When the signal comes after the interpreter has loaded numpy: start-up (imports, the
fork server, the environment worker, the learner process) and then the first epochs."""


@pytest.mark.parametrize("delay_s", ASYNC_DELAYS_S)
def test_async_training_stops_cleanly_whenever_the_signal_comes(tmp_path: Path,
                                                                   delay_s: float) -> None:
    signum, code = ((signal.SIGINT, 130), (signal.SIGTERM, 143))[
        ASYNC_DELAYS_S.index(delay_s) % 2]
    run = tmp_path / "run"
    proc = start(run, "--mode", "async", "--env-workers", "1", "--format", "table")
    try:
        assert wait_until(lambda: loaded_numpy(proc.pid), TIMEOUT_S)
        time.sleep(delay_s)
        returncode, err = stop(proc, signum)
        # one line: where it stopped and how to go on, once the trainer got to run
        assert returncode == code and len(err.splitlines()) == 1, err
        assert err.startswith("parcat: interrupted"), err
        log = run / "metrics.jsonl"
        logged = [r["epoch"] for r in read_metrics(log)] if log.is_file() else []
        if logged:  # an epoch finished: the checkpoint holds the last one
            assert load_every_agent(run) == logged[-1]
        assert wait_until(lambda: not session_processes(proc.pid), 30), \
            session_processes(proc.pid)
    finally:
        kill_group(proc)


def test_a_second_ctrl_c_never_leaves_half_a_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = start(run, "--env-workers", "0", "--checkpoint-every", "1")
    wait_for_epochs(proc, run, 2)  # so epoch 1's checkpoint is written
    code, _ = stop(proc, signal.SIGINT, signal.SIGINT)
    assert code == 130
    # whichever write the second Ctrl-C cut, the run directory is a whole checkpoint
    assert load_every_agent(run) >= 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_whole_process_group_still_checkpoints_the_last_async_epoch(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """``kill -- -PGID`` (systemd, a job control shell) reaches the fork server and the
    learner process too: neither may go before the trainer has the learners' state."""
    run = tmp_path / "run"
    proc = start(run, "--mode", "async", "--env-workers", "1")
    try:
        wait_for_epochs(proc, run, 2)
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=TIMEOUT_S)
        # --format json: the epoch lines go to stderr, then one line for the signal
        assert proc.returncode == 128 + signum
        assert err.splitlines()[-1].startswith("parcat: interrupted after epoch ")
        logged = [record["epoch"] for record in read_metrics(run / "metrics.jsonl")]
        assert load_every_agent(run) == logged[-1]  # checkpoint_every 1000: the final one
        assert wait_until(lambda: not session_processes(proc.pid), 30), \
            session_processes(proc.pid)
    finally:
        kill_group(proc)


DEFERRED_BLOCK = """
import os, signal, subprocess, threading, time
import numpy  # its BLAS pool: threads that take a signal the main thread blocks
from parcat.ipc.start import postpone_interrupt
from parcat.policies.checkpoint import signals_deferred

def on_signal(signum, frame):  # as the CLI's handlers do
    if postpone_interrupt(signum):
        return
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, on_signal)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # one more, surely
try:
    with signals_deferred():
        subprocess.run(["kill", "-TERM", str(os.getpid())], check=True)  # a user's kill
        time.sleep(0.5)
        print("the block ended", flush=True)
except KeyboardInterrupt:
    print("then the interrupt", flush=True)
"""


def test_a_deferred_block_ends_before_a_signal_another_thread_took() -> None:
    """The trainer's epoch bookkeeping (log, capture, report) runs in such a block: cut in
    the middle, the stop line named an epoch the log and checkpoint did not have."""
    done = subprocess.run([sys.executable, "-c", DEFERRED_BLOCK], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert done.stdout.splitlines() == ["the block ended", "then the interrupt"], done.stderr
