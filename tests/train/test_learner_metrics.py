"""Every metric a learner reports reaches the epoch log: jsonl, csv and TensorBoard tags."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from parcat.train.metrics import read_metrics, scalars
from parcat.train.trainer import Trainer
from tests.train.test_trainer import config


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_ppo_metrics_reach_the_log_in_both_formats(tmp_path: Path, fmt: str) -> None:
    cfg = config(tmp_path, learner={"class": "ppo", "width": 16}, metrics_format=fmt,
                 epochs=2, eval_episodes=0)
    Trainer(cfg).run()
    records = read_metrics(tmp_path / "run" / f"metrics.{fmt}")
    assert len(records) == 2
    for record in records:
        assert set(record["loss"]) == {"agent_0", "agent_1"}
        for learner in ("agent_0", "agent_1"):
            extra = record["learner_metrics"][learner]
            assert {"policy_loss", "value_loss", "entropy", "approx_kl"} <= set(extra)
            assert all(math.isfinite(v) for v in extra.values())


def test_nested_metrics_become_tensorboard_tags() -> None:
    record = {"epoch": 3, "loss": {"a": 0.5}, "learner_metrics": {"a": {"entropy": 1.25}},
              "reward": {"a": None}, "overlap_steps": [1, 2]}
    assert scalars(record) == {"epoch": 3.0, "loss/a": 0.5, "learner_metrics/a/entropy": 1.25}
