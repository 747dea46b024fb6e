"""``parcat train -m MISSION`` picks the shipped config tuned for the mission."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.train.tuned import CONFIGS, tuned_config
from tests.train.flags import load


def test_a_mission_with_a_tuned_config_gets_it_and_flags_still_win() -> None:
    tuned = load(None, "-m", "gymnasium:Acrobot-v1")
    assert (tuned.total_steps, tuned.learner["width"], tuned.gradient_steps) == (99840, 256, 256)
    assert load(None, "-m", "gymnasium:Acrobot-v1", "--total-steps", "5000",
                "--set", "learner.lr=0.01").total_steps == 5000
    assert load(None, "-m", "gymnasium:Acrobot-v1", "--set",
                "learner.lr=0.01").learner["lr"] == 0.01
    assert tuned_config("gymnasium:Pendulum-v1") == CONFIGS / "pendulum-ppo.yaml"
    assert tuned_config("gymnasium:MountainCar-v0") == CONFIGS / "mountaincar-dqn.yaml"
    assert tuned_config("mpe2.simple_spread_v3") == CONFIGS / "simple_spread-ppo.yaml"
    assert tuned_config("gymnasium:LunarLander-v3") == CONFIGS / "lunarlander-dqn.yaml"


def test_no_tuned_config_for_another_learner_a_given_file_or_other_parameters(
        tmp_path: Path) -> None:
    assert load(None, "-m", "gymnasium:Acrobot-v1", "--learner", "ppo").total_steps is None
    assert load(None, "-m", "goal_tasks").epochs == 20  # configs/train.yaml sets parameters
    own = tmp_path / "own.yaml"
    own.write_text("epochs: 3\n")
    assert load(own, "-m", "gymnasium:Acrobot-v1").total_steps is None


def test_a_file_that_is_no_train_config_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("{{ not yaml")
    (tmp_path / "b.yaml").write_text("- a list\n")
    (tmp_path / "c.yaml").write_text("mission: gymnasium:Acrobot-v1\nepochs: 2\n")
    assert tuned_config("gymnasium:Acrobot-v1", folder=tmp_path) == tmp_path / "c.yaml"
    assert tuned_config("gymnasium:Acrobot-v1", folder=tmp_path / "none") is None


def test_the_tuned_config_is_said_in_one_note(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["train", "-m", "gymnasium:CartPole-v1", "--epochs", "1",
                                      "--steps-per-epoch", "4", "--gradient-steps", "1",
                                      "--eval-episodes", "1", "-o", str(tmp_path / "r"),
                                      "--no-progress"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"note: -m gymnasium:CartPole-v1: using its tuned config {CONFIGS / 'cartpole-dqn.yaml'} "
        "(its figures are at its top; flags override its keys; -c FILE for another)")
