"""One writer per run, in real concurrent processes: two trains, evals or sims aimed at the
same run never both write it; the second is one line, exit 2, and no run is lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from parcat.core.runlock import LOCK_FILE, lock_beside
from parcat.policies import checkpoint
from parcat.train.metrics import read_metrics
from tests.reliability.helpers import ROOT, start_cli, wait_until, write_slow_mission

TIMEOUT_S = 300
TRAIN = ["train", "-m", "goal_tasks", "--set", "max_steps=10", "--steps-per-epoch", "20",
         "--env-workers", "0", "--envs-per-worker", "2", "--gradient-steps", "2",
         "--eval-episodes", "1", "--format", "json", "--no-progress"]
LONG = ["--epochs", "100000", "--checkpoint-every", "1"]


@contextlib.contextmanager
def running(args: list[str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """A parcat process, killed (with its group) if the test leaves it running."""
    proc = start_cli(args, cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=TIMEOUT_S)


def holds(lock: Path, proc: subprocess.Popen[str]) -> bool:
    """Whether ``proc`` has taken ``lock`` (its pid is written in it)."""
    assert proc.poll() is None, proc.communicate()[1]
    with contextlib.suppress(OSError):
        return lock.read_text().strip() == str(proc.pid)
    return False


def wait_holding(lock: Path, proc: subprocess.Popen[str]) -> None:
    assert wait_until(lambda: holds(lock, proc), TIMEOUT_S), "the run never took its lock"


def parcat(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parcat", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"})


def error_line(proc: subprocess.CompletedProcess[str] | tuple[int, str]) -> str:
    err = proc.stderr if isinstance(proc, subprocess.CompletedProcess) else proc[1]
    lines = [line for line in err.splitlines() if not line.startswith("epoch ")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def refused_as_in_use(other: subprocess.CompletedProcess[str], what: str,
                      holder: subprocess.Popen[str], fix: str) -> None:
    assert other.returncode == 2, other.stderr
    assert error_line(other) == (f"parcat: error: {what} is in use by another parcat process "
                                 f"(pid {holder.pid}); wait for it to end, or {fix}")


def interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, err


def together(commands: list[list[str]], cwd: Path,
             ) -> tuple[list[subprocess.Popen[str]], list[tuple[str, str]]]:
    """Start every command at once; wait for all (killing what is left if a wait fails)."""
    procs = [start_cli(args, cwd) for args in commands]
    try:
        return procs, [proc.communicate(timeout=TIMEOUT_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()


def epochs(run: Path) -> list[int]:
    log = run / "metrics.jsonl"
    return [record["epoch"] for record in read_metrics(log)] if log.is_file() else []


def test_trains_started_together_with_the_default_name_each_get_their_own_run(
    tmp_path: Path
) -> None:
    procs, results = together([[*TRAIN, "--epochs", "3"]] * 3, tmp_path)
    assert [proc.returncode for proc in procs] == [0, 0, 0], results
    runs = sorted(json.loads(out)["checkpoint"] for out, _ in results)
    assert runs == ["runs/goal_tasks", "runs/goal_tasks-2", "runs/goal_tasks-3"]
    for run in runs:  # none lost, none mixed
        assert epochs(tmp_path / run) == [1, 2, 3]
        assert checkpoint.read_manifest(tmp_path / run)["epoch"] == 3
        assert not (tmp_path / run / LOCK_FILE).exists()  # the lock goes with the run


@pytest.mark.parametrize("second", ["same-o", "resume", "force"])
def test_a_second_train_into_a_running_run_is_one_line_and_the_run_goes_on(
    tmp_path: Path, second: str
) -> None:
    run = tmp_path / "run"
    with running([*TRAIN, *LONG, "-o", str(run)], tmp_path) as first:
        wait_holding(run / LOCK_FILE, first)
        extra = {"same-o": [], "resume": ["--resume"], "force": ["--force"]}[second]
        refused_as_in_use(parcat([*TRAIN, "--epochs", "2", "-o", str(run), *extra], tmp_path),
                          f"run directory '{run}'", first, "give another --run-dir")
        wait_until(lambda: len(epochs(run)) >= 2, TIMEOUT_S)
        code, _ = interrupt(first)
    assert code == 130
    logged = epochs(run)
    assert logged == list(range(1, len(logged) + 1))  # one writer: 1, 2, 3, ... in order
    assert checkpoint.read_manifest(run)["epoch"] == logged[-1]
    assert not (run / LOCK_FILE).exists()


def test_two_resumes_started_together_never_mix_the_log(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert parcat([*TRAIN, "--epochs", "1", "-o", str(run)], tmp_path).returncode == 0
    procs, results = together([[*TRAIN, "--epochs", "4", "-o", str(run), "--resume"]] * 2,
                              tmp_path)
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 2], results
    # the loser either found the run in use, or (if it came after) already at epoch 4
    assert error_line(next(r for p, r in zip(procs, results, strict=True)
                           if p.returncode == 2)).startswith("parcat: error: ")
    assert epochs(run) == [1, 2, 3, 4]


def test_a_sigkilled_runs_lock_does_not_block_the_next(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with running([*TRAIN, *LONG, "-o", str(run)], tmp_path) as first:
        wait_holding(run / LOCK_FILE, first)
        wait_until(lambda: (run / checkpoint.MANIFEST).is_file(), TIMEOUT_S)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=TIMEOUT_S)
    assert (run / LOCK_FILE).exists()  # left behind by the kill, but no longer locked
    saved = checkpoint.read_manifest(run)["epoch"]
    resumed = parcat([*TRAIN, "--epochs", str(saved + 1), "-o", str(run), "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert checkpoint.read_manifest(run)["epoch"] == saved + 1
    assert not (run / LOCK_FILE).exists()  # the next run took it over and removed it


def test_a_second_eval_into_the_same_results_file_is_one_line(tmp_path: Path) -> None:
    mission = write_slow_mission(tmp_path)
    out = tmp_path / "r.json"
    args = ["eval", "-m", str(mission), "-p", "random", "-n", "2000", "--jobs", "1",
            "--no-progress", "-f", "json", "-o", str(out)]
    with running(args, tmp_path) as first:
        wait_holding(lock_beside(out), first)
        for extra in ([], ["--resume"]):
            refused_as_in_use(parcat([*args, *extra], tmp_path), f"--output '{out}'",
                              first, "give another --output")
        code, _ = interrupt(first)
    assert code == 130
    assert json.loads(out.read_text())["status"] == "interrupted"  # the first run's, whole
    assert not lock_beside(out).exists()


def test_a_second_sim_into_the_same_folder_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    args = ["sim", "-c", str(ROOT / "configs" / "sim.yaml"), "--iters", "1000000",
            "--no-progress", "-o", str(out)]
    with running(args, tmp_path) as first:
        wait_holding(out / LOCK_FILE, first)
        refused_as_in_use(parcat(args, tmp_path), f"--output '{out}'", first,
                          "give another -o DIR")
        code, _ = interrupt(first)
    assert code == 130
    assert sorted(p.name for p in out.iterdir()) == ["record.npz", "summary.json"]


SIM = ["sim", "-c", str(ROOT / "configs" / "sim.yaml"), "--mode", "sequential"]
EVAL = ["eval", "-m", "harvest", "-p", "random", "-n", "2", "--set", "max_steps=5", "--jobs",
        "1", "--no-progress"]


@pytest.mark.parametrize("command", ["train", "eval", "sim"])
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_lock_file_that_is_not_a_file_is_refused_and_never_written_through(
    tmp_path: Path, command: str, kind: str
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    out = tmp_path / ("r.json" if command == "eval" else "out")
    if command != "eval":
        out.mkdir()
    lock = lock_beside(out) if command == "eval" else out / LOCK_FILE
    if kind == "symlink":
        lock.symlink_to(victim)
    else:
        os.mkfifo(lock)
    args = {"train": [*TRAIN, "--epochs", "1"], "eval": EVAL, "sim": SIM}[command]
    proc = parcat([*args, "-o", str(out)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    what = f"run directory '{out}'" if command == "train" else f"--output '{out}'"
    shown = "a symlink, not a regular file" if kind == "symlink" else "not a regular file"
    line = error_line(proc)
    assert line.startswith(f"parcat: error: {what}: the lock file "), line
    assert line.endswith(f"' is {shown}; parcat writes its pid there and removes it, so "
                         "remove it or give another output"), line
    assert victim.read_text() == "mine\n"
    assert lock.is_symlink() if kind == "symlink" else lock.is_fifo()


def test_a_second_eval_into_the_same_replay_dir_is_one_line(tmp_path: Path) -> None:
    mission = write_slow_mission(tmp_path)
    folder = tmp_path / "rd"
    args = ["eval", "-m", str(mission), "-p", "random", "-n", "2000", "--jobs", "1",
            "--no-progress", "-f", "json", "--replay-dir", str(folder)]
    with running(args, tmp_path) as first:
        wait_holding(folder / LOCK_FILE, first)
        refused_as_in_use(parcat([*EVAL, "--replay-dir", str(folder)], tmp_path),
                          f"--replay-dir '{folder}'", first, "give another --replay-dir")
        # episodes run one after the other: a second replay means the first was recorded
        assert wait_until(lambda: len(list(folder.glob("slow-*.npz"))) >= 2, TIMEOUT_S)
        code, _ = interrupt(first)
    assert code == 130
    index = json.loads((folder / "index.json").read_text())
    assert index["episodes"] and all((folder / e["file"]).is_file() for e in index["episodes"])
    assert not list(folder.glob("harvest-*"))  # the refused run wrote nothing there
    assert not (folder / LOCK_FILE).exists()
