"""What ``parcat train`` tells people as it runs: lines per epoch, clean JSON, loggers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.errors import ConfigError
from parcat.train.config import TrainConfig
from parcat.train.metrics import read_metrics
from tests.reliability.helpers import ROOT, kill_group

TRAIN = ["train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=30",
         "--steps-per-epoch", "20", "--env-workers", "0", "--envs-per-worker", "2",
         "--gradient-steps", "2"]
LINE = re.compile(r"epoch (\d+)/(\d+) episodes (\d+) reward agent_0=\S+ \[\S+, \S+\] "
                  r"agent_1=\S+ \[\S+, \S+\] length \S+ steps (\d+) epsilon \S+ loss "
                  r"agent_0=\S+ agent_1=\S+ \d+ steps/s time \d+\.\ds"
                  r"(; eval agent_0 \(mean\) \S+; eval agent_1 \(mean\) \S+; eval total "
                  r"\(sum over agents\) \S+; best total \(sum over agents\) \S+ at epoch \d+)?")


def test_piped_train_prints_each_epoch_as_it_finishes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parcat", *TRAIN, "--epochs", "1000000",
         "--checkpoint-every", "1000000", "--run-dir", str(tmp_path / "run")],
        cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        # a run of a million epochs is far from done: the lines came as epochs finished
        assert proc.poll() is None
    finally:
        kill_group(proc)
        proc.communicate()
    matches = [LINE.fullmatch(line.rstrip("\n")) for line in lines]
    assert all(matches), lines
    assert [m.group(1, 2, 4) for m in matches if m] == [
        ("1", "1000000", "40"), ("2", "1000000", "80"), ("3", "1000000", "120")]
    assert [m.group(3) for m in matches if m] == ["0", "2", "2"]  # 30-step episodes: at 30, 60


def test_json_format_keeps_stdout_one_document_and_epoch_lines_on_stderr(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, [*TRAIN, "--epochs", "2", "--run-dir",
                                      str(tmp_path / "run"), "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [e["episodes"] for e in document["epochs"]] == [0, 2]
    assert [line.split(" episodes")[0] for line in result.stderr.splitlines()] == [
        "epoch 1/2", "epoch 2/2"]


def test_tensorboard_event_files_load_in_tensorboard_across_a_resume(tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    run = tmp_path / "run"
    args = [*TRAIN, "--run-dir", str(run), "--logger", "tensorboard", "--logger", "csv",
            "--checkpoint-every", "1"]
    assert CliRunner().invoke(app, [*args, "--epochs", "2"]).exit_code == 0
    result = CliRunner().invoke(app, [*args, "--epochs", "3", "--resume"])
    assert result.exit_code == 0, result.output
    events = accumulator.EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"episodes", "reward/agent_0", "reward_max/agent_1", "episode_length",
            "epsilon", "time_s"} <= set(tags)
    assert [(e.step, e.value) for e in events.Scalars("episodes")] == [
        (40, 0.0), (80, 2.0), (120, 2.0)]
    assert [r["epoch"] for r in read_metrics(run / "metrics.csv")] == [1, 2, 3]
    assert not (run / "metrics.jsonl").exists()  # --logger csv chose the file


def test_wandb_logs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")  # CI installs it (parcat[wandb])
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    # a real process: wandb's service writes the run's log by the time the process ends
    result = subprocess.run([sys.executable, "-m", "parcat", *TRAIN, "--epochs", "2",
                             "--logger", "wandb", "--run-dir", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (log,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    # the run's log is protobuf records: each epoch's tags are in it as plain strings
    data = log.read_bytes()
    assert data.count(b"total_env_steps") >= 2 and b"reward/agent_0" in data


@pytest.mark.parametrize("package", ["tensorboard", "wandb"])
def test_a_logger_whose_package_is_missing_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import raises ImportError
    result = CliRunner().invoke(app, [*TRAIN, "--epochs", "1", "--logger", package,
                                      "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"parcat: error: --logger {package} needs the '{package}' package, which is not "
        f"installed: pip install 'parcat[{package}]' (or pip install {package})\n")
    assert not list((tmp_path / "run").glob("*"))  # refused before anything started


def test_loggers_config_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=re.escape(
            "loggers: expected jsonl, csv, tensorboard or wandb, got 'mlflow'")):
        TrainConfig(loggers=("jsonl", "mlflow"))  # type: ignore[arg-type]
    assert TrainConfig(loggers=["csv", "csv"]).to_dict()["loggers"] == ["csv"]  # type: ignore[arg-type]


def test_plot_draws_the_rewards_of_episodes_longer_than_an_epoch(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert CliRunner().invoke(app, [*TRAIN, "--epochs", "4", "--run-dir", str(run)]).exit_code == 0
    for field in ("reward", "reward_max", "episode_length", "total_env_steps"):
        result = CliRunner().invoke(app, ["plot", str(run), "--field", field])
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"{field} per epoch (4 epochs)")
        assert "(no data)" not in result.stdout
