"""The measured layout: chosen by the environment's step, and training exactly as the others.

Sync mode with a fixed seed is bit-identical for every worker layout, so a planned layout
(in-process for cheap goal_tasks, a worker for a 0.5 ms step on free CPUs) must save the
same checkpoint as the layout it did not choose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.resources import FREE_CPUS_VARIABLE
from parcat.parallel.planner import FOREIGN_REASON
from parcat.train.config import TrainConfig
from parcat.train.plan import plan_training
from parcat.train.trainer import Trainer
from tests.train.flags import load
from tests.train.slowenv import write_slow_mission
from tests.train.test_trainer import SMALL, assert_same, saved_arrays

GOALS = {"agents": 2, "task_kind": "direction", "max_steps": 20}


def test_goal_tasks_plans_in_process_and_trains_as_a_worker_does(tmp_path: Path) -> None:
    def config(run: str, **layout: int) -> TrainConfig:
        return TrainConfig(mission="goal_tasks", overrides=GOALS, epochs=3, steps_per_epoch=20,
                           envs_per_worker=8, gradient_steps=10, learner=SMALL, seed=5,
                           run_dir=str(tmp_path / run), **layout)  # type: ignore[arg-type]

    # --jobs 2 leaves one job for a worker; goal_tasks' step is too cheap to hand over
    planned = Trainer(config("planned", jobs=2))
    assert planned.plan.env_workers == 0 and planned.vec.layout == [("local", 8)]
    planned.run()
    worker = Trainer(config("worker", env_workers=1))
    assert worker.vec.layout == [("worker", 4), ("local", 4)]
    worker.run()
    assert_same(saved_arrays(tmp_path / "planned"), saved_arrays(tmp_path / "worker"))


def slow_config(folder: Path) -> Path:
    """A train YAML on the 0.5 ms-step mission, long enough for a worker to pay."""
    path = folder / "train.yaml"
    learner = ", ".join(f"{k}: {v}" for k, v in SMALL.items())
    path.write_text(f"mission: {write_slow_mission(folder)}\nepochs: 2\nsteps_per_epoch: 120\n"
                    f"envs_per_worker: 8\ngradient_steps: 5\nseed: 3\nlearner: {{{learner}}}\n")
    return path


def test_a_costly_step_on_free_cpus_plans_a_worker_and_trains_as_env_workers_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FREE_CPUS_VARIABLE, "2")
    config = slow_config(tmp_path)
    runs = {}
    for name, flags in (("planned", []), ("in-process", ["--env-workers", "0"])):
        result = CliRunner().invoke(app, ["train", "-c", str(config), *flags, "--run-dir",
                                          str(tmp_path / name), "--format", "json"])
        assert result.exit_code == 0, result.output
        runs[name] = json.loads(result.stdout)["plan"]
    assert (runs["planned"]["env_workers"], runs["planned"]["num_envs"]) == (1, 8)
    assert runs["planned"]["reasons"][1].startswith("1 environment worker(s) would take ~")
    # code from outside parcat never steps in the trainer's process: one worker hosts all
    assert (runs["in-process"]["env_workers"], runs["in-process"]["num_envs"]) == (1, 8)
    assert runs["in-process"]["reasons"][-1] == FOREIGN_REASON
    assert_same(saved_arrays(tmp_path / "planned"), saved_arrays(tmp_path / "in-process"))


def test_a_costly_step_with_one_free_cpu_gets_no_core_but_one_worker_as_foreign_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FREE_CPUS_VARIABLE, "1")
    plan = plan_training(load(slow_config(tmp_path)), cpus=2)
    assert plan.env_step_s is not None and plan.env_step_s >= 500e-6
    assert (plan.env_workers, plan.spin, plan.num_envs) == (1, False, 8)
    assert plan.reasons[1] == ("1 free CPU(s), 1 kept for the trainer: no core left for an "
                               "environment worker: environments step in-process")
    assert plan.reasons[-1] == FOREIGN_REASON


def test_an_environment_that_fails_while_timed_is_planned_unmeasured(tmp_path: Path) -> None:
    mission = tmp_path / "failing.yaml"
    mission.write_text("name: failing\nenv: tests.fakes:ScriptedEnv\n"
                       "params: {agents: 2, max_steps: 10, fail_at: 1}\n")
    plan = plan_training(TrainConfig(mission=str(mission), envs_per_worker=3), cpus=2)
    assert (plan.env_workers, plan.num_envs, plan.env_step_s) == (1, 3, None)
    assert plan.reasons == (  # timed in a worker: code from outside parcat
        "timing the environment failed (it raised RuntimeError: scripted failure at step 1)",
        "environments step in-process (no step time measured, no --jobs)",
        FOREIGN_REASON,
    )
