"""The training layout is planned in the library: Trainer(config) is laid out like parcat train."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.resources import FREE_CPUS_VARIABLE
from parcat.parallel.planner import (
    PARKED_HANDOFF_S,
    Workload,
    choose_env_workers,
    make_train_plan,
)
from parcat.train.config import TrainConfig
from parcat.train.plan import plan_training
from parcat.train.trainer import Trainer
from tests.train.flags import load

GOALS = {"agents": 2, "task_kind": "direction", "max_steps": 10}
CHEAP_S = 20e-6
"""About goal_tasks' step (17-32 us measured on the development machine)."""
COSTLY_S = 500e-6
COSTLY = Workload(agents=2, envs_per_worker=8, step_s=COSTLY_S, steps=1500)


def test_jobs_are_split_by_the_planner_unless_env_workers_is_given() -> None:
    config = TrainConfig(overrides=GOALS, jobs=4, mode="async",  # type: ignore[arg-type]
                         parallel_training=True)
    planned = plan_training(config, cpus=8)
    assert planned.env_step_s is not None and planned.env_step_s > 0
    work = Workload(agents=2, envs_per_worker=4, asynchronous=True, parallel_training=True,
                    learners=2, step_s=planned.env_step_s, steps=20 * 100)
    assert planned == make_train_plan(work, free=8, jobs=4)
    given = plan_training(TrainConfig(overrides=GOALS, jobs=4, env_workers=1), cpus=8)
    assert (given.env_workers, given.train_workers, given.num_envs) == (1, 1, 4)
    assert given.reasons == ("env_workers is given (1): jobs (4) is not split",)
    default = plan_training(TrainConfig(overrides=GOALS, parallel_training=True), cpus=8)
    assert (default.env_workers, default.train_workers, default.num_envs) == (0, 2, 4)


def test_jobs_split_the_budget_and_set_the_number_of_environments() -> None:
    unmeasured = make_train_plan(Workload(agents=4, envs_per_worker=2, asynchronous=True,
                                             parallel_training=True), free=8, jobs=8)
    assert (unmeasured.env_workers, unmeasured.train_workers) == (3, 4)
    assert unmeasured.num_envs == 3 * 2
    cheap = make_train_plan(Workload(agents=4, envs_per_worker=2, asynchronous=True,
                                     parallel_training=True, step_s=CHEAP_S, steps=10_000),
                            free=8, jobs=8)
    assert (cheap.env_workers, cheap.train_workers, cheap.num_envs) == (0, 4, 3 * 2)
    assert make_train_plan(Workload(agents=2), free=2, jobs=1).env_workers == 0


def test_a_cheap_step_plans_no_environment_workers() -> None:
    plan = make_train_plan(Workload(agents=2, envs_per_worker=8, step_s=CHEAP_S,
                                    steps=1_000_000), free=16)
    assert (plan.env_workers, plan.spin, plan.num_envs) == (0, False, 8)
    assert plan.reasons == (
        "one environment step measured 20 µs: 8 environment(s) take 160 µs a vector step "
        "in-process",
        "an environment worker would cost more than it saves (handoff ~150 µs a step): "
        "environments step in-process",
    )


def test_a_costly_step_plans_workers_on_the_free_cpus_but_one() -> None:
    plan = make_train_plan(COSTLY, free=4)
    # 3 workers and this process step 2 environments each: 1.0 ms + 3 handoffs < 4.0 ms
    assert (plan.env_workers, plan.spin, plan.num_envs) == (3, True, 8)
    assert plan.reasons[1] == ("3 environment worker(s) would take ~1.4 ms a step "
                               "(~150 µs handoff each): ~3.5 s saved over 1500 steps")
    two = make_train_plan(COSTLY, free=2)
    assert (two.env_workers, two.spin, two.num_envs) == (1, True, 8)


def test_a_costly_step_with_one_free_cpu_stays_in_process() -> None:
    plan = make_train_plan(COSTLY, free=1)
    assert (plan.env_workers, plan.num_envs) == (0, 8)
    assert plan.reasons[1] == ("1 free CPU(s), 1 kept for the trainer: no core left for an "
                               "environment worker: environments step in-process")


def test_async_keeps_a_core_for_the_learner_and_short_runs_skip_the_start_up() -> None:
    asynchronous = replace(COSTLY, asynchronous=True)
    assert make_train_plan(asynchronous, free=2).env_workers == 0
    # without the trainer's share, one worker only moves the work: async needs two
    assert make_train_plan(asynchronous, free=3).env_workers == 0
    assert make_train_plan(asynchronous, free=4).env_workers == 2
    short = make_train_plan(replace(COSTLY, steps=50), free=4)
    assert short.env_workers == 0
    assert "saves less than starting them (~0.36 s)" in short.reasons[1]


@given(
    step_s=st.floats(1e-7, 1e-1), envs_per_worker=st.integers(1, 64),
    free=st.integers(1, 64), jobs=st.one_of(st.none(), st.integers(1, 64)),
    asynchronous=st.booleans(), vector_steps=st.integers(1, 10**7),
)
def test_a_plan_fits_the_free_cpus_and_the_jobs_and_never_changes_the_environments(
    step_s: float, envs_per_worker: int, free: int, jobs: int | None, asynchronous: bool,
    vector_steps: int,
) -> None:
    work = Workload(agents=2, envs_per_worker=envs_per_worker, asynchronous=asynchronous,
                    step_s=step_s, steps=vector_steps)
    plan = make_train_plan(work, free, jobs)
    unmeasured = make_train_plan(Workload(agents=2, envs_per_worker=envs_per_worker,
                                              asynchronous=asynchronous), free, jobs)
    assert plan.num_envs == unmeasured.num_envs  # the measurement moves, never adds
    assert plan.env_workers == 0 or plan.env_workers + 1 + asynchronous <= free
    if jobs is not None:
        assert plan.env_workers <= unmeasured.env_workers
    if plan.spin:
        assert plan.env_workers + 1 + asynchronous <= free


def test_choose_env_workers_weighs_the_handoff() -> None:
    # two environments of 300 us: a worker saves 300 us a step and costs 150 us of handoff
    assert choose_env_workers(300e-6, 2, 1, 100_000)[0] == 1
    assert choose_env_workers(PARKED_HANDOFF_S, 2, 1, 100_000)[0] == 0


@pytest.mark.parametrize(("free", "spin"), [("1", False), ("2", True)])
def test_given_workers_spin_only_on_free_cpus(monkeypatch: pytest.MonkeyPatch, free: str,
                                              spin: bool) -> None:
    monkeypatch.setenv(FREE_CPUS_VARIABLE, free)
    plan = plan_training(TrainConfig(overrides=GOALS, env_workers=1), cpus=2)
    assert (plan.env_workers, plan.spin) == (1, spin)


def test_trainer_from_python_runs_the_planned_layout(tmp_path: Path) -> None:
    config = TrainConfig(overrides=GOALS, jobs=3, envs_per_worker=2, epochs=1,
                         steps_per_epoch=2, run_dir=str(tmp_path / "run"))
    trainer = Trainer(config)
    try:
        # goal_tasks is cheap: the 2 x 2 environments jobs 3 gives step in this process
        assert trainer.plan.env_workers == 0 and trainer.config.env_workers == 0
        assert trainer.vec.num_envs == 2 * 2 and trainer.vec.layout == [("local", 4)]
    finally:
        trainer.close()


def test_a_layout_flag_replaces_the_files_layout(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("env_workers: 3\nseed: 4\n")
    assert load(path).env_workers == 3
    planned = load(path, "--jobs", "4")
    assert (planned.jobs, planned.env_workers, planned.seed) == (4, None, 4)
    path.write_text("jobs: 4\n")
    given = load(path, "--env-workers", "1")
    assert (given.jobs, given.env_workers) == (None, 1)


def test_configs_train_yaml_leaves_the_layout_to_the_planner() -> None:
    root = Path(__file__).resolve().parents[2]
    config = load(root / "configs" / "train.yaml")
    assert config.env_workers is None and config.jobs is None
    plan = plan_training(config, cpus=2)
    assert (plan.env_workers, plan.num_envs) == (0, 8)


def test_cli_prints_the_plan(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10", "--jobs", "2",
        "--epochs", "1", "--steps-per-epoch", "5", "--gradient-steps", "2",
        "--run-dir", str(tmp_path / "r"), "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    assert "plan: 1 job(s) left for environment workers: 1 x envs_per_worker 4 environments\n" \
        in result.stderr
    assert "plan: one environment step measured " in result.stderr
    assert "environments step in-process\n" in result.stderr
