"""A run's folder when the disk fills up, a file stands where a folder should, or a writer is
killed halfway through a checkpoint: one line, the last checkpoint whole, nothing left
behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parcat.core.runlock import LOCK_FILE
from parcat.policies import checkpoint
from tests.reliability.helpers import ROOT, wait_until
from tests.reliability.test_outputs import ROOT_USER, one_error_line, parcat, tiny_filesystem
from tests.reliability.test_run_lock import LONG, TIMEOUT_S, TRAIN, running
from tests.train.test_interrupt import load_every_agent as whole

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file systems")


def fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to the last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.skipif(not ROOT_USER, reason="mounting a tiny tmpfs needs root")
def test_a_disk_that_fills_up_mid_training_is_one_line_and_the_checkpoint_survives(
    tmp_path: Path
) -> None:
    with tiny_filesystem(tmp_path / "tiny", "8m") as tiny:
        run = tiny / "run"
        with running([*TRAIN, *LONG, "-o", str(run)], tmp_path) as proc:
            assert wait_until(lambda: (run / checkpoint.MANIFEST).is_file(), TIMEOUT_S)
            fill(tiny)
            _, err = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 1, err
        line = [x for x in err.splitlines() if not x.startswith("epoch ")]
        assert "Traceback" not in err and len(line) == 1, err
        assert "(No space left on device)" in line[0]
        assert "the last checkpoint" in line[0] and "intact" in line[0], line[0]
        assert whole(run) >= 1
        assert not [p for p in run.iterdir() if p.name.startswith(".checkpoint.")]
        assert not (run / LOCK_FILE).exists()


@pytest.mark.skipif(not ROOT_USER, reason="mounting a tiny tmpfs needs root")
@pytest.mark.parametrize("command", ["train", "sim"])
def test_a_run_refused_on_a_full_disk_leaves_no_folder(tmp_path: Path, command: str) -> None:
    with tiny_filesystem(tmp_path / "tiny", "64k") as tiny:
        out = tiny / "new" / "run"
        args = [*TRAIN, "--epochs", "1"] if command == "train" else [
            "sim", "-c", str(ROOT / "configs" / "sim.yaml")]
        proc = parcat(*args, "-o", str(out))
        assert proc.returncode == 2
        assert "is full" in one_error_line(proc)
        assert not list(tiny.iterdir())


def test_a_file_in_place_of_the_tensorboard_folder_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    board = [*TRAIN, "--logger", "jsonl", "--logger", "tensorboard", "-o", str(run)]
    assert parcat(*board, "--epochs", "1", cwd=tmp_path).returncode == 0
    shutil.rmtree(run / "tensorboard")
    (run / "tensorboard").write_text("not a folder")
    proc = parcat(*board, "--epochs", "2", "--resume", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        f"parcat: error: --logger tensorboard: '{run / 'tensorboard'}' is not a folder; parcat "
        "writes its event files there: move that file away")
    # mid-run: the next epoch's event cannot be written
    shutil.rmtree(run)
    with running([*board[:-2], *LONG, "-o", str(run)], tmp_path) as proc_:
        assert wait_until(lambda: (run / checkpoint.MANIFEST).is_file(), TIMEOUT_S)
        shutil.rmtree(run / "tensorboard")
        (run / "tensorboard").write_text("not a folder")
        _, err = proc_.communicate(timeout=TIMEOUT_S)
    assert proc_.returncode == 1, err
    lines = [x for x in err.splitlines() if not x.startswith("epoch ")]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"parcat: error: could not write '{run / 'tensorboard'}/events.")
    assert whole(run) >= 1


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import numpy as np
    from parcat.policies import checkpoint

    run, kill_at = Path(sys.argv[1]), int(sys.argv[2])
    renames = [0]
    real = Path.rename

    def rename(self, target):
        renames[0] += 1
        if renames[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, target)

    Path.rename = rename
    agents = {f"agent_{i}": checkpoint.PolicyCheckpoint(
        "parcat.policies.builtin:MLPPolicy", {}, {"w": np.full(3, 2.0)}) for i in range(2)}
    checkpoint.save_run(run, agents, {"mission": "harvest", "epoch": 2},
                        arrays={"envs.npz": {"e": np.arange(2)}}, copy_to="best")
""")


@pytest.mark.parametrize("kill_at", range(1, 17))
def test_a_writer_killed_at_any_rename_leaves_a_whole_checkpoint_and_the_users_files(
    tmp_path: Path, kill_at: int
) -> None:
    run = tmp_path / "run"
    agents = {f"agent_{i}": checkpoint.PolicyCheckpoint(
        "parcat.policies.builtin:MLPPolicy", {}, {"w": __import__("numpy").ones(3)})
        for i in range(2)}
    checkpoint.save_run(run, agents, {"mission": "harvest", "epoch": 1}, copy_to="best")
    mine = {run / "notes.txt": "mine\n", run / "agent_0" / "NOTES.txt": "in agent_0\n",
            run / "best" / "mine.txt": "in best\n", run / "best" / "plots" / "a.png": "png\n"}
    for file, text in mine.items():  # beside the run, and inside the folders a swap replaces
        file.parent.mkdir(exist_ok=True)
        file.write_text(text)
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])  # this tree's parcat, not another
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(run), str(kill_at)],
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
    epoch = whole(run)  # a reader finishes (or drops) what the killed writer left
    assert epoch in (1, 2)
    if proc.returncode == 0 or epoch == 2:
        assert whole(run / "best") == 2
    assert {f: f.read_text() for f in mine} == mine
    leftovers = sorted(p.name for p in run.rglob(".*"))
    assert leftovers == [], leftovers


SIM = ["sim", "-c", str(ROOT / "configs" / "sim.yaml"), "--mode", "sequential", "--render"]
QUICK_EVAL = ["eval", "-m", "harvest", "-p", "random", "-n", "2", "--set", "max_steps=5",
              "--jobs", "1", "--no-progress"]


def refused(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == f"parcat: error: {message}"


@pytest.mark.parametrize("name", ["index.json", "harvest-000001.npz"])
def test_a_replay_dir_never_replaces_the_users_files(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "rd"
    folder.mkdir()
    (folder / name).write_text('{"mine": true}\n')
    proc = parcat(*QUICK_EVAL, "--replay-dir", str(folder), cwd=tmp_path)
    refused(proc, f"--replay-dir '{folder}': '{name}' there is not parcat's (parcat-replay) "
            "and the run would replace it; move it away or give another --replay-dir")
    assert sorted(p.name for p in folder.iterdir()) == [name]  # nothing written, no lock left
    assert (folder / name).read_text() == '{"mine": true}\n'


def test_a_replay_dir_of_an_earlier_run_is_written_again(tmp_path: Path) -> None:
    folder = tmp_path / "rd"
    for _ in range(2):
        proc = parcat(*QUICK_EVAL, "--replay-dir", str(folder), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    (folder / "notes.txt").write_text("mine\n")  # a file the run does not write is left alone
    proc = parcat(*QUICK_EVAL, "--replay-dir", str(folder), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == [
        "harvest-000000.npz", "harvest-000001.npz", "index.json", "notes.txt"]


@pytest.mark.parametrize("name", ["summary.json", "record.npz", "trajectories.svg"])
def test_sim_never_replaces_the_users_files_in_its_folder(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("mine\n")
    refused(parcat(*SIM, "-o", str(out), cwd=tmp_path),
            f"--output '{out}': '{name}' there is not parcat's and the run would replace it; "
            "move it away or give another -o DIR")
    assert sorted(p.name for p in out.iterdir()) == [name]
    assert (out / name).read_text() == "mine\n"


def test_sim_replaces_its_own_earlier_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for _ in range(2):
        proc = parcat(*SIM, "-o", str(out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "record.npz", "summary.json", "trajectories.svg"]


@pytest.mark.parametrize("resume", [[], ["--resume"]])
@pytest.mark.parametrize("kind", ["file", "symlink", "fifo"])
def test_eval_never_takes_over_a_journal_that_is_not_parcats(
    tmp_path: Path, kind: str, resume: list[str]
) -> None:
    out, victim = tmp_path / "res.json", tmp_path / "victim.txt"
    journal = tmp_path / "res.json.episodes.jsonl"
    victim.write_text("mine\n")
    if kind == "file":
        journal.write_text("my own journal\n")
    elif kind == "symlink":
        journal.symlink_to(victim.name)
    else:
        os.mkfifo(journal)
    backup = tmp_path / ".res.json.backup.tmp"
    backup.write_text("mine\n")
    refused(parcat(*QUICK_EVAL, "-o", str(out), *resume, cwd=tmp_path),
            f"--output '{out}': '{journal}' is not a parcat eval journal, and the run would "
            "replace it; move it away or give another --output")
    assert victim.read_text() == backup.read_text() == "mine\n"
    assert kind != "file" or journal.read_text() == "my own journal\n"
    assert journal.is_symlink() == (kind == "symlink") and not out.exists()


def test_eval_takes_its_own_journal_over_and_leaves_the_users_temp_files(
    tmp_path: Path
) -> None:
    out = tmp_path / "res.json"
    backup = tmp_path / ".res.json.backup.tmp"
    backup.write_text("mine\n")
    journal = tmp_path / "res.json.episodes.jsonl"
    journal.write_text('{"schema":"parcat.eval.journal","version":1,"config":{}}\n')
    proc = parcat(*QUICK_EVAL, "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not journal.exists() and backup.read_text() == "mine\n"
    assert len(json.loads(out.read_text())["episodes"]) == 2
