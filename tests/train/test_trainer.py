"""parcat train: determinism across layouts, async overlap, checkpoints, resume, crashes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.errors import ConfigError
from parcat.eval.evaluate import evaluate, make_config
from parcat.parallel.planner import Workload, make_train_plan
from parcat.policies import checkpoint
from parcat.train.config import TrainConfig
from parcat.train.metrics import read_metrics
from parcat.train.trainer import Trainer
from tests.train.flags import load

GOALS = {"agents": 2, "task_kind": "direction", "max_steps": 20}
SMALL = {"width": 16, "depth": 1, "learning_starts": 64, "batch_size": 32,
         "eps_decay_steps": 2000, "buffer_size": 5000}


def config(tmp: Path, **changes: object) -> TrainConfig:
    base = TrainConfig(mission="goal_tasks", overrides=GOALS, epochs=3, steps_per_epoch=20,
                       env_workers=0, envs_per_worker=4, gradient_steps=10, learner=SMALL,
                       seed=5, checkpoint_every=1, run_dir=str(tmp / "run"))
    return TrainConfig(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def saved_arrays(run: Path) -> dict[str, np.ndarray]:
    out = {}
    for agent_dir in sorted(p for p in run.iterdir() if p.is_dir() and p.name != "best"):
        for name in ("arrays.npz", "state.npz"):
            if not (agent_dir / name).exists():  # a shared learner's state: the first agent's
                continue
            with np.load(agent_dir / name) as data:
                out.update({f"{agent_dir.name}/{name}/{k}": data[k] for k in data.files})
    return out


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key


@pytest.mark.parametrize("layout", [(1, 4), (2, 2), (4, 1)])
def test_sync_checkpoints_are_bit_identical_for_every_layout(
    tmp_path: Path, layout: tuple[int, int]
) -> None:
    Trainer(config(tmp_path / "ref")).run()
    workers, per_worker = layout
    Trainer(config(tmp_path / "other", env_workers=workers, envs_per_worker=per_worker)).run()
    assert_same(saved_arrays(tmp_path / "ref" / "run"), saved_arrays(tmp_path / "other" / "run"))


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    Trainer(config(tmp_path / "full", epochs=4, checkpoint_every=2)).run()
    Trainer(config(tmp_path / "cut", epochs=2, checkpoint_every=2)).run()
    resumed = Trainer(config(tmp_path / "cut", epochs=4, checkpoint_every=2), resume=True)
    assert resumed.start_epoch == 2
    resumed.run()
    assert_same(saved_arrays(tmp_path / "full" / "run"), saved_arrays(tmp_path / "cut" / "run"))
    epochs = [r["epoch"] for r in read_metrics(tmp_path / "cut" / "run" / "metrics.jsonl")]
    assert epochs == [1, 2, 3, 4]


def test_async_learning_overlaps_collection(tmp_path: Path) -> None:
    """The learner process reads a counter that collection bumps every step when a round
    starts and when it ends: a larger count at the end shows collection went on while the
    learner trained (event order, not timing)."""
    events: list[tuple[str, int]] = []
    cfg = config(tmp_path, mode="async", epochs=6, gradient_steps=400, checkpoint_every=10)
    report = Trainer(cfg, on_event=lambda event, epoch: events.append((event, epoch))).run()
    overlaps = [n for stats in report.epochs for n in stats.overlap_steps]
    assert overlaps and any(n > 0 for n in overlaps), overlaps
    starts = [e for e, _ in events if e == "train_start"]
    ends = [e for e, _ in events if e == "train_end"]
    assert len(starts) == len(ends) == 6
    run = tmp_path / "run"
    assert checkpoint.read_manifest(run)["epoch"] == 6  # a checkpoint of the trained copies
    report = evaluate(make_config(["goal_tasks"], [str(run)], episodes=1, overrides=GOALS))
    assert report.status == "complete"


def test_checkpoint_loads_in_eval_and_acts_like_the_learner(tmp_path: Path) -> None:
    trainer = Trainer(config(tmp_path))
    trainer.run()
    run = tmp_path / "run"
    manifest = checkpoint.read_manifest(run)
    assert manifest["epoch"] == 3 and manifest["mission"] == "goal_tasks"
    overrides = dict(GOALS)
    report = evaluate(make_config(["goal_tasks"], [str(run)], episodes=2, overrides=overrides))
    assert report.status == "complete"
    single = evaluate(make_config(["goal_tasks"], [str(run / "agent_0")], episodes=1,
                                  overrides=overrides))
    assert single.status == "complete"
    obs = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    from parcat.policies.builtin import MLPPolicy
    from parcat.policies.specs import make_policy, parse_policy_spec
    from tests.test_specs import agent_spec

    policy = make_policy(parse_policy_spec(str(run)), trainer.mission,
                         agent_spec("goal_tasks", 0).__class__(
                             "goal_tasks", "agent_0", 0,
                             trainer.mission.make_env().observation_space("agent_0"),
                             trainer.mission.make_env().action_space("agent_0")))
    assert isinstance(policy, MLPPolicy)
    assert policy.step_batch(list(obs)) == list(trainer.learners["agent_0"].act(obs, False))


def test_crashed_env_worker_is_restarted_and_training_goes_on(tmp_path: Path) -> None:
    mission = tmp_path / "dying.yaml"
    marker = tmp_path / "died"
    mission.write_text(
        "name: dying\nenv: tests.fakes:DyingEnv\n"
        f"params: {{agents: 2, max_steps: 10, how: sigkill, at_step: 4, marker: '{marker}', "
        f"spare_pid: {os.getpid()}}}\n"
    )
    cfg = config(tmp_path, mission=str(mission), overrides={}, env_workers=2, envs_per_worker=2)
    report = Trainer(cfg).run()
    assert marker.exists()
    assert len(report.epochs) == 3
    assert sum(e.discarded_episodes for e in report.epochs) >= 1


def test_learning_smoke_beats_random(tmp_path: Path) -> None:
    cfg = config(tmp_path, epochs=15, steps_per_epoch=20, gradient_steps=40,
                 learner={**SMALL, "width": 32, "eps_decay_steps": 3000, "gamma": 0.9})
    Trainer(cfg).run()
    trained = evaluate(make_config(["goal_tasks"], [str(tmp_path / "run")], episodes=20,
                                   overrides=GOALS)).to_document()["summary"][0]["mean"]
    random = evaluate(make_config(["goal_tasks"], ["random"], episodes=20,
                                  overrides=GOALS)).to_document()["summary"][0]["mean"]
    # random walks make no progress along the goal direction (~0); the heuristic makes ~1.8
    assert trained > random + 0.6, (trained, random)


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("mission: goal_tasks\nepoch: 3\n")
    with pytest.raises(ConfigError, match=re.escape(f"--config '{bad}': unknown key 'epoch'")):
        load(bad)
    with pytest.raises(ConfigError, match=re.escape("mode must be sync or async, got 'fast'")):
        TrainConfig(mode="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=re.escape("epochs must be an integer between 1 and "
                                                    "1,000,000,000, got 0")):
        load(None, "--epochs", "0")


def test_train_plan_splits_jobs() -> None:
    plan = make_train_plan(Workload(agents=4, asynchronous=True, parallel_training=True), 8,
                           jobs=8)
    assert (plan.env_workers, plan.train_workers) == (3, 4)
    assert plan.env_workers + plan.train_workers + 1 <= 8
    assert make_train_plan(Workload(agents=2), 2, jobs=1).env_workers == 0


def test_cli_train_smoke(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [
        "train", "-m", "goal_tasks", "--set", "agents=2", "--set", "max_steps=10",
        "--epochs", "2", "--steps-per-epoch", "10", "--env-workers", "1", "--gradient-steps", "5",
        "--run-dir", str(tmp_path / "r"), "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "manifest.json").exists()
    assert (tmp_path / "r" / "metrics.jsonl").exists()


def test_stateful_learners_are_reset_at_episode_boundaries(tmp_path: Path) -> None:
    cfg = config(tmp_path, overrides={**GOALS, "max_steps": 10}, steps_per_epoch=25, epochs=2,
                 env_workers=1)
    trainer = Trainer(cfg)
    calls: list[np.ndarray] = []
    for learner in trainer.learners.values():
        learner.reset_states = lambda mask: calls.append(mask.copy())  # type: ignore[attr-defined]
    trainer.run()
    per_learner = len(calls) // 2
    assert per_learner == 1 + 5  # the run's start, then episodes end at steps 10, 20, .., 50
    assert all(mask.shape == (4,) and mask.all() for mask in calls)


def test_render_shows_one_environment_in_process(tmp_path: Path) -> None:
    frames: list[str] = []
    cfg = config(tmp_path, render=True, env_workers=2, epochs=1, steps_per_epoch=3)
    assert cfg.env_workers == 0  # rendering runs everything in one process
    Trainer(cfg, on_frame=frames.append).run()
    assert len(frames) == 3 and all(isinstance(f, str) and f for f in frames)
