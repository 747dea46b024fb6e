"""The shipped training configs: they load, build their learners, and finish exploring."""

from __future__ import annotations

from pathlib import Path

import pytest

from parcat.envs.missions import load_mission
from parcat.train.plan import plan_training
from parcat.train.recipes import make_recipes
from tests.train.flags import load

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DQN_CONFIGS = ["train.yaml", "cartpole-dqn.yaml", "acrobot-dqn.yaml", "mountaincar-dqn.yaml",
               "lunarlander-dqn.yaml"]
TRAIN_CONFIGS = [*DQN_CONFIGS, "harvest-ppo.yaml", "evade-ppo.yaml", "pendulum-ppo.yaml",
                 "simple_spread-ppo.yaml"]


@pytest.mark.parametrize("name", TRAIN_CONFIGS)
def test_a_shipped_config_builds_its_learners(name: str) -> None:
    config = load(CONFIGS / name)
    mission = load_mission(config.mission, dict(config.overrides))
    recipes = make_recipes(mission, config)
    learners = [recipe.build() for recipe in recipes.values()]
    assert learners and all(learner.num_observed == 0 for learner in learners)


@pytest.mark.parametrize("name", DQN_CONFIGS)
def test_a_shipped_dqn_config_finishes_exploring_within_its_run(name: str) -> None:
    # configs/train.yaml once decayed epsilon over 20,000 transitions of the 12,000 its
    # run collects: it ended at 0.43, still exploring
    config = load(CONFIGS / name)
    assert config.learner.get("class", "dqn") == "dqn"
    mission = load_mission(config.mission, dict(config.overrides))
    num_envs = plan_training(config, mission, cpus=2).num_envs
    per_learner = config.with_epochs_for(num_envs).epochs * config.steps_per_epoch * num_envs
    if config.shared_learner:
        per_learner *= len(mission.agents())
    assert config.learner["eps_decay_steps"] <= per_learner * 0.8
