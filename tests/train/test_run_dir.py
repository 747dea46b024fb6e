"""Runs are safe: a run directory holding another run is never replaced unasked, and a
folder of the user's is never emptied (the locking between processes:
tests/reliability/test_run_lock.py)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from parcat.cli.main import main
from parcat.core.errors import ConfigError
from parcat.core.settings import merge_settings, split_learner_settings
from parcat.policies import checkpoint
from tests.train.flags import load

MISSION = ["-m", "goal_tasks", "--set", "max_steps=10", "--set", "agents=2"]
TRAIN = ["train", "--steps-per-epoch", "8", "--env-workers", "0", "--envs-per-worker", "2",
         "--gradient-steps", "2", "--eval-episodes", "2", "--format", "json"]


def train(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main([*TRAIN, *args])
    # with --format json the epoch lines go to stderr; the rest is what these tests check
    err = capsys.readouterr().err
    return code, "".join(line for line in err.splitlines(keepends=True)
                         if not line.startswith("epoch "))


def agents_of(run: Path) -> list[str]:
    return sorted(checkpoint.read_manifest(run)["agents"])


def test_a_rerun_with_the_default_name_goes_to_the_next_numbered_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert train(capsys, *MISSION, "--epochs", "1") == (0, "")
    first = checkpoint.read_manifest("runs/goal_tasks")
    assert train(capsys, "-m", "goal_tasks", "--epochs", "1") == (
        0, "'runs/goal_tasks' holds another run; this one goes to 'runs/goal_tasks-2' "
        "(--resume continues 'runs/goal_tasks', --force replaces it)\n")
    assert checkpoint.read_manifest("runs/goal_tasks") == first  # untouched: 2 agents
    assert agents_of(Path("runs/goal_tasks")) == ["agent_0", "agent_1"]
    assert agents_of(Path("runs/goal_tasks-2")) == ["agent_0"]
    assert train(capsys, "-m", "goal_tasks", "--epochs", "1")[1].endswith(
        "this one goes to 'runs/goal_tasks-3' (--resume continues 'runs/goal_tasks', "
        "--force replaces it)\n")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_explicit_run_dir_holding_a_run_is_refused_without_resume_or_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    run = tmp_path / "run"
    assert train(capsys, *MISSION, "--epochs", "1", "--run-dir", str(run))[0] == 0
    before = checkpoint.read_manifest(run)
    assert train(capsys, *MISSION, "--epochs", "2", "--run-dir", str(run), "--mode", mode) == (
        2, f"parcat: error: run directory '{run}' holds another run; give --resume to continue "
        "it, --force to replace it, or another --run-dir\n")
    assert checkpoint.read_manifest(run) == before


def test_a_metrics_log_alone_is_a_run_too(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n')
    assert train(capsys, *MISSION, "--epochs", "1", "--run-dir", str(run))[0] == 2
    assert (run / "metrics.jsonl").read_text() == '{"epoch": 1}\n'


def test_force_replaces_the_run_and_its_best(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert train(capsys, *MISSION, "--epochs", "2", "--run-dir", str(run))[0] == 0
    assert (run / "best").is_dir()
    code, err = train(capsys, "-m", "goal_tasks", "--set", "max_steps=10", "--epochs", "1",
                      "--run-dir", str(run), "--force", "--eval-episodes", "0")
    assert (code, err) == (0, f"--force: removed the run in '{run}'; starting afresh\n")
    assert agents_of(run) == ["agent_0"]
    assert not (run / "best").exists()
    assert (run / "metrics.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_of_the_users_is_never_emptied(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                force: bool) -> None:
    user = tmp_path / "u"
    (user / "data").mkdir(parents=True)
    (user / "thesis.tex").write_text("precious\n")
    (user / "data" / "x.csv").write_text("1,2\n")
    args = ["--force"] if force else []
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(user), *args) == (
        2, f"parcat: error: run directory '{user}' holds files parcat did not write (e.g. "
        f"'data') and no run{' to replace' if force else ''}; parcat never writes a run among "
        f"them: give a new or empty folder, e.g. -o {user / 'run'}\n")
    assert sorted(p.name for p in user.rglob("*")) == ["data", "thesis.tex", "x.csv"]
    assert (user / "thesis.tex").read_text() == "precious\n"


def test_force_and_checkpoints_keep_the_files_parcat_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(run))[0] == 0
    (run / "notes.txt").write_text("mine\n")  # dropped into a run: checkpoints leave it
    assert train(capsys, *MISSION, "--epochs", "3", "-o", str(run), "--resume",
                 "--checkpoint-every", "1")[0] == 0
    assert (run / "notes.txt").read_text() == "mine\n"
    code, err = train(capsys, *MISSION, "--epochs", "1", "-o", str(run), "--force")
    assert (code, err) == (0, f"--force: removed the run in '{run}' (kept 1 file(s) parcat did "
                           "not write, e.g. 'notes.txt'); starting afresh\n")
    assert (run / "notes.txt").read_text() == "mine\n"
    assert checkpoint.read_manifest(run)["epoch"] == 1
    assert sorted(p.name for p in run.iterdir()) == [
        "agent_0", "agent_1", "best", "envs.npz", "manifest.json", "metrics.jsonl", "notes.txt"]


def test_files_inside_agent_folders_and_best_survive_resume_checkpoints_and_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(run))[0] == 0
    mine = {run / "agent_0" / "NOTES.txt": "my notes\n", run / "best" / "mine.txt": "mine\n",
            run / "best" / "agent_1" / "deep" / "plot.png": "png\n"}
    for file, text in mine.items():
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    # an ordinary checkpoint every epoch, and --resume, replace agent_0/ and best/ around them
    assert train(capsys, *MISSION, "--epochs", "3", "-o", str(run), "--resume",
                 "--checkpoint-every", "1")[0] == 0
    assert {f: f.read_text() for f in mine} == mine
    assert checkpoint.read_manifest(run)["epoch"] == 3
    code, err = train(capsys, *MISSION, "--epochs", "1", "-o", str(run), "--force")
    assert (code, err) == (0, f"--force: removed the run in '{run}' (kept 2 file(s) parcat did "
                           "not write, e.g. 'agent_0/NOTES.txt'); starting afresh\n")
    assert {f: f.read_text() for f in mine} == mine
    assert checkpoint.read_manifest(run)["epoch"] == 1
    checkpoint.load_policy(run / "best" / "agent_1", "agent_1")
    assert not [p for p in run.rglob(".checkpoint.*")]


def test_a_file_changed_since_the_checkpoint_is_kept_by_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(run))[0] == 0
    (run / "agent_0" / "arrays.npz").unlink()  # best/'s copy is a hard link: it stays parcat's
    (run / "agent_0" / "arrays.npz").write_bytes(b"the user's own bytes")  # no longer parcat's
    code, err = train(capsys, *MISSION, "--epochs", "1", "-o", str(run), "--force")
    assert (code, err) == (0, f"--force: removed the run in '{run}' (kept 1 file(s) parcat did "
                           "not write, e.g. 'agent_0/arrays.npz'); starting afresh\n")
    assert (run / "agent_0" / "arrays.npz.kept").read_bytes() == b"the user's own bytes"
    checkpoint.load_policy(run / "agent_0", "agent_0")


@pytest.mark.parametrize("via", ["agents", "files"])
def test_a_manifest_naming_a_foreign_folder_never_gets_it_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], via: str
) -> None:
    run = tmp_path / "run"
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(run))[0] == 0
    (run / "thesis").mkdir()
    (run / "thesis" / "chapter1.tex").write_text("2 years of work\n")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"]["thesis/chapter1.tex"] = {"sha256": "0" * 64, "size": 16}
    if via == "agents":
        manifest["agents"]["agent_1"] = "thesis"
    (run / "manifest.json").write_text(json.dumps(manifest))
    code, err = train(capsys, *MISSION, "--epochs", "1", "-o", str(run), "--force")
    assert (code, err) == (0, f"--force: removed the run in '{run}' (kept 1 file(s) parcat did "
                           "not write, e.g. 'thesis/chapter1.tex'); starting afresh\n")
    assert (run / "thesis" / "chapter1.tex").read_text() == "2 years of work\n"
    # and an ordinary checkpoint over such a manifest moves it aside and back, whole
    (run / "manifest.json").write_text(json.dumps(manifest))
    agents = {"agent_0": checkpoint.PolicyCheckpoint("parcat.policies.builtin:MLPPolicy", {},
                                                     {"w": __import__("numpy").ones(3)})}
    checkpoint.save_run(run, agents, {"mission": "goal_tasks", "epoch": 5})
    assert (run / "thesis" / "chapter1.tex").read_text() == "2 years of work\n"


def test_the_default_name_passes_over_a_folder_of_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("runs/goal_tasks").mkdir(parents=True)
    Path("runs/goal_tasks/todo.txt").write_text("x\n")
    assert train(capsys, *MISSION, "--epochs", "1") == (
        0, "'runs/goal_tasks' holds files parcat did not write; this one goes to "
        "'runs/goal_tasks-2'\n")
    assert sorted(p.name for p in Path("runs/goal_tasks").iterdir()) == ["todo.txt"]
    assert agents_of(Path("runs/goal_tasks-2")) == ["agent_0", "agent_1"]


def test_an_empty_folder_is_used_and_run_folders_get_the_usual_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "empty"
    run.mkdir()
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(run))[0] == 0
    umask = os.umask(0)
    os.umask(umask)
    fresh = tmp_path / "fresh"
    assert train(capsys, *MISSION, "--epochs", "1", "-o", str(fresh))[0] == 0
    for folder in (fresh, fresh / "agent_0", fresh / "best"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask, folder


def test_a_refused_run_leaves_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "new" / "deep" / "run"
    assert train(capsys, *MISSION, "--set", "learner.lrx=1", "-o", str(run))[0] == 2
    assert not (tmp_path / "new").exists()


def test_resume_and_force_together_are_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert train(capsys, *MISSION, "--run-dir", str(tmp_path / "r"), "--resume", "--force") == (
        2, "parcat: error: --resume and --force contradict each other: --resume continues the "
        "run, --force replaces it; give one\n")


# ---- --set learner.KEY=VALUE and the precedence rule

def test_set_learner_keys_go_to_the_learner_and_win_over_the_file(tmp_path: Path) -> None:
    file = tmp_path / "train.yaml"
    file.write_text("learner: {lr: 0.5, gamma: 0.9}\noverrides: {agents: 2}\nepochs: 3\n")
    cfg = load(file, "--set", "learner.lr=0.01", "--set", "max_steps=10")
    assert dict(cfg.learner) == {"lr": 0.01, "gamma": 0.9}  # file < flag, key by key
    assert dict(cfg.overrides) == {"agents": 2, "max_steps": 10}
    assert cfg.epochs == 3 and cfg.steps_per_epoch == 100  # the file, the built-in default


def test_merge_settings_is_one_rule() -> None:
    assert merge_settings({"a": 1, "m": {"x": 1, "y": 2}}, {"m": {"y": 3}, "b": 2},
                          nested=("m",)) == {"a": 1, "b": 2, "m": {"x": 1, "y": 3}}
    assert merge_settings({"m": {"x": 1}}, {"m": {"y": 3}}) == {"m": {"y": 3}}


def test_an_unknown_learner_key_is_one_line_naming_the_valid_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = train(capsys, *MISSION, "--set", "learner.lrx=0.1", "--run-dir",
                      str(tmp_path / "r"))
    assert (code, err) == (2, "parcat: error: dqn: unknown option 'lrx'; known: width, depth, "
                           "lr, gamma, batch_size, buffer_size, learning_starts, "
                           "target_update_interval, eps_start, eps_end, eps_decay_steps, lr_end, "
                           "lr_decay_steps, ema, double, huber, grad_clip, init, seed\n")


def test_a_learner_set_reaches_the_checkpoint(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r"
    assert train(capsys, *MISSION, "--set", "learner.lr=0.01", "--epochs", "1",
                 "--run-dir", str(run))[0] == 0
    assert checkpoint.read_manifest(run)["config"]["learner"] == {"lr": 0.01}
    with pytest.raises(ConfigError, match=re.escape("--set learner.KEY=VALUE needs a key")):
        split_learner_settings({"learner.": 1})


def test_a_refused_rerun_names_no_folder_and_a_missing_init_is_said_to_be_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert train(capsys, *MISSION, "--epochs", "1")[0] == 0
    # the rerun would go to runs/goal_tasks-2, but it is refused: only its error is shown
    assert train(capsys, *MISSION, "--epochs", "1", "--init-from", "runs/old") == (
        2, "parcat: error: --init-from: checkpoint 'runs/old' does not exist; give a run "
        "directory (runs/NAME) or one agent's folder in it\n")
    assert not Path("runs/goal_tasks-2").exists()
