"""The training layout is planned in the library: Trainer(config) is laid out like parcat train."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.train.config import TrainConfig, load_train_config
from parcat.train.plan import make_train_plan, plan_training
from parcat.train.trainer import Trainer

GOALS = {"agents": 2, "task_kind": "direction", "max_steps": 10}


def test_jobs_are_split_by_the_planner_unless_env_workers_is_given() -> None:
    planned = plan_training(TrainConfig(overrides=GOALS, jobs=4, mode="async",  # type: ignore[arg-type]
                                        parallel_training=True), cpus=8)
    assert planned == make_train_plan(4, 8, 2, asynchronous=True, parallel_training=True)
    given = plan_training(TrainConfig(overrides=GOALS, jobs=4, env_workers=1), cpus=8)
    assert (given.env_workers, given.train_workers) == (1, 1)
    assert given.reasons == ("env_workers is given (1): jobs (4) is not split",)
    default = plan_training(TrainConfig(overrides=GOALS, parallel_training=True), cpus=8)
    assert (default.env_workers, default.train_workers) == (0, 2)


def test_trainer_from_python_runs_the_planned_layout(tmp_path: Path) -> None:
    config = TrainConfig(overrides=GOALS, jobs=3, envs_per_worker=2, epochs=1,
                         steps_per_epoch=2, run_dir=str(tmp_path / "run"))
    trainer = Trainer(config)
    try:
        assert trainer.plan.env_workers == 2 and trainer.config.env_workers == 2
        assert trainer.vec.num_envs == 2 * 2  # without the plan: 2, all in this process
    finally:
        trainer.close()


def test_a_layout_flag_replaces_the_files_layout(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("env_workers: 3\nseed: 4\n")
    assert load_train_config(path, {}).env_workers == 3
    planned = load_train_config(path, {"jobs": 4, "seed": None})
    assert (planned.jobs, planned.env_workers, planned.seed) == (4, None, 4)
    path.write_text("jobs: 4\n")
    given = load_train_config(path, {"env_workers": 1})
    assert (given.jobs, given.env_workers) == (None, 1)


def test_cli_prints_the_plan(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10", "--jobs", "2",
        "--epochs", "1", "--steps-per-epoch", "5", "--train-steps", "2",
        "--run-dir", str(tmp_path / "r"), "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    assert "plan: 1 environment worker(s) with the remaining jobs" in result.stderr
