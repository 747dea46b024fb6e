"""Continuous collection: episodes run across epochs, and a resumed run continues them.

Episodes here are longer than an epoch (``max_steps`` 30, 20 steps an epoch), so every
checkpoint is written with episodes in flight; resuming must replay them and give the
very files and metrics of a run never stopped, whatever the environment-worker layout.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parcat.policies import checkpoint
from parcat.train.metrics import read_metrics
from parcat.train.trainer import Trainer
from tests.train.test_trainer import assert_same, config, saved_arrays

LONG = {"agents": 2, "task_kind": "direction", "max_steps": 30}
# wall-clock fields: the only ones two runs may differ in
TIMING = ("collect_s", "train_s", "idle_s", "env_steps_per_s", "time_s", "timestamp")
LAYOUTS = {"in-process": (0, 4), "1 worker": (1, 4), "2 workers": (2, 2)}


def run_files(run: Path) -> dict[str, np.ndarray]:
    """Every array of the checkpoint: the agents' and the episodes in flight."""
    files = saved_arrays(run)
    with np.load(run / "envs.npz") as data:
        files.update({f"envs.npz/{k}": data[k] for k in data.files})
    return files


def metrics(run: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in read_metrics(run / "metrics.jsonl")]


def test_episodes_run_across_epochs_and_every_epoch_counts_what_finished(
    tmp_path: Path,
) -> None:
    report = Trainer(config(tmp_path, overrides=LONG, epochs=3)).run()
    # 4 environments, episodes of 30 steps, epochs of 20: they end at steps 30 and 60
    assert [e.episodes for e in report.epochs] == [0, 4, 4]
    assert [e.total_env_steps for e in report.epochs] == [80, 160, 240]
    last = report.epochs[-1]
    assert last.episode_length == 30.0
    for agent, mean in last.reward.items():
        assert last.reward_min[agent] <= mean <= last.reward_max[agent]
    times = [e.time_s for e in report.epochs]
    assert times == sorted(times) and times[0] > 0
    assert all(e.timestamp.endswith("+00:00") for e in report.epochs)
    record = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert record["episodes"] == 0 and record["episode_length"] is None
    assert record["reward_min"] == {"agent_0": None, "agent_1": None}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=list(LAYOUTS))
def test_resume_with_episodes_in_flight_equals_an_uninterrupted_run(
    tmp_path: Path, layout: tuple[int, int]
) -> None:
    workers, per_worker = layout

    def cfg(folder: str, epochs: int) -> Any:
        return config(tmp_path / folder, overrides=LONG, epochs=epochs, checkpoint_every=1,
                      env_workers=workers, envs_per_worker=per_worker)

    Trainer(cfg("full", 4)).run()
    Trainer(cfg("cut", 2)).run()  # after 40 steps: every episode 10 steps in
    saved = checkpoint.load_run_arrays(tmp_path / "cut" / "run", "envs.npz")
    assert saved is not None and saved["lengths"].tolist() == [10] * 4
    resumed = Trainer(cfg("cut", 4), resume=True)
    assert resumed.start_epoch == 2 and resumed.in_flight is not None
    resumed.run()
    full, cut = tmp_path / "full" / "run", tmp_path / "cut" / "run"
    assert_same(run_files(full), run_files(cut))
    assert metrics(full) == metrics(cut)
    assert [r["episodes"] for r in metrics(cut)] == [0, 4, 4, 0]


def test_a_replay_that_takes_another_course_is_logged_once_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seedless = tmp_path / "seedless.yaml"  # rewards from an unseeded generator
    seedless.write_text("name: seedless\nenv: tests.fakes:SeedlessEnv\n"
                        "params: {agents: 2, max_steps: 30}\n")
    cfg = config(tmp_path, mission=str(seedless), overrides={}, epochs=1)
    Trainer(cfg).run()
    with caplog.at_level(logging.WARNING, logger="parcat.train"):
        report = Trainer(config(tmp_path, mission=str(seedless), overrides={}, epochs=2),
                         resume=True).run()
    warnings = [r.getMessage() for r in caplog.records if r.name == "parcat.train"]
    assert warnings == [
        "4 of 4 environment(s) took another course when their episodes were replayed (is "
        "the environment deterministic?); resuming is not exact for them; training goes on"
    ]
    assert [e.epoch for e in report.epochs] == [2]
    assert report.epochs[0].episodes == 4  # the replayed episodes finished all the same


def test_a_restarted_worker_starts_the_next_episodes_and_resets_learner_state(
    tmp_path: Path,
) -> None:
    import os

    mission = tmp_path / "dying.yaml"
    marker = tmp_path / "died"
    mission.write_text(
        "name: dying\nenv: tests.fakes:DyingEnv\n"
        f"params: {{agents: 2, max_steps: 30, how: sigkill, at_step: 4, marker: '{marker}', "
        f"spare_pid: {os.getpid()}}}\n"
    )
    cfg = config(tmp_path, mission=str(mission), overrides={}, env_workers=2,
                 envs_per_worker=2, epochs=1)
    trainer = Trainer(cfg)
    masks: list[np.ndarray] = []
    for learner in trainer.learners.values():
        learner.reset_states = lambda mask: masks.append(mask.copy())  # type: ignore[attr-defined]
    report = trainer.run()
    lost = report.epochs[0].discarded_episodes  # the lane's environments: 2 or 1
    assert marker.exists() and lost in (1, 2)
    restarted = [m for m in masks if 0 < m.sum() < 4]  # the run's start resets all 4
    assert restarted and all(m.sum() == lost for m in restarted)
    saved = checkpoint.load_run_arrays(tmp_path / "run", "envs.npz")
    assert saved is not None  # the lost episodes' numbers are skipped, not played again
    assert sorted(saved["episodes"].tolist()) == [0] * (4 - lost) + [1] * lost
