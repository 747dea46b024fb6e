"""Any learner through parcat train: selection, layouts, resume, async, shared, eval, smoke.

PPO and a learner written outside parcat (:mod:`tests.train.external_learner`) go through
everything DQN goes through in :mod:`tests.train.test_trainer`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parcat.cli.main import main
from parcat.core.errors import ConfigError
from parcat.eval.evaluate import evaluate, make_config
from parcat.policies import checkpoint
from parcat.policies.base import AgentSpec
from parcat.policies.specs import make_policy, parse_policy_spec
from parcat.train.recipes import with_agent_id
from parcat.train.trainer import Trainer
from tests.train.flags import load
from tests.train.test_trainer import GOALS, SMALL, assert_same, config, saved_arrays
from tests.train.test_vecenv import ray_cluster  # noqa: F401  (a fixture)

EXTERNAL_CLASS = "tests.train.external_learner:OneStepReinforce"
LEARNERS = {
    "dqn": {"class": "dqn", **SMALL},
    "ppo": {"class": "ppo", "width": 16, "depth": 1, "minibatch_size": 32},
    "external": {"class": EXTERNAL_CLASS, "lr": 0.5},
}
ROOT = Path(__file__).resolve().parents[2]


def run_of(tmp: Path, name: str, learner: str, **changes: Any) -> Path:
    Trainer(config(tmp / name, learner=LEARNERS[learner], **changes)).run()
    return tmp / name / "run"


@pytest.mark.parametrize("shared", [False, True], ids=["independent", "shared"])
@pytest.mark.parametrize("learner", ["ppo", "external"])
def test_sync_checkpoints_are_bit_identical_for_every_layout(
    tmp_path: Path, learner: str, shared: bool
) -> None:
    ref = run_of(tmp_path, "ref", learner, shared_learner=shared)
    other = run_of(tmp_path, "other", learner, shared_learner=shared, env_workers=2,
                   envs_per_worker=2)
    assert_same(saved_arrays(ref), saved_arrays(other))


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("learner", ["ppo", "external"])
def test_sync_checkpoints_on_ray_actors_equal_the_local_run(tmp_path: Path, learner: str) -> None:
    ref = run_of(tmp_path, "ref", learner)
    on_ray = run_of(tmp_path, "ray", learner, backend="ray", env_workers=2, envs_per_worker=2)
    assert_same(saved_arrays(ref), saved_arrays(on_ray))


@pytest.mark.parametrize("learner", ["ppo", "external"])
def test_resume_equals_an_uninterrupted_run(tmp_path: Path, learner: str) -> None:
    full = run_of(tmp_path, "full", learner, epochs=4, checkpoint_every=2)
    cut = run_of(tmp_path, "cut", learner, epochs=2, checkpoint_every=2)
    resumed = Trainer(config(tmp_path / "cut", learner=LEARNERS[learner], epochs=4,
                             checkpoint_every=2), resume=True)
    assert resumed.start_epoch == 2
    resumed.run()
    assert_same(saved_arrays(full), saved_arrays(cut))


@pytest.mark.parametrize("learner", ["ppo", "external"])
def test_async_mode_rebuilds_any_learner_in_the_learner_process(
    tmp_path: Path, learner: str
) -> None:
    run = run_of(tmp_path, "async", learner, mode="async", epochs=3)
    manifest = checkpoint.read_manifest(run)
    assert manifest["epoch"] == 3
    report = evaluate(make_config(["goal_tasks"], [str(run)], episodes=2, overrides=GOALS,
                                  trust_code=True))
    assert report.status == "complete"


def _agent_spec(trainer: Trainer, index: int) -> AgentSpec:
    return trainer.mission.agents()[index]


@pytest.mark.parametrize("learner", ["dqn", "ppo", "external"])
def test_a_shared_learner_sees_the_agent_id_and_eval_acts_as_trained(
    tmp_path: Path, learner: str
) -> None:
    trainer = Trainer(config(tmp_path, learner=LEARNERS[learner], shared_learner=True))
    trainer.run()
    run = tmp_path / "run"
    saved = checkpoint.load_policy(run / "agent_1", "agent_1")
    assert saved.kwargs["agent_ids"] == ["agent_0", "agent_1"]
    obs = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    shared = trainer.learners["agent_0"]
    assert trainer.learners["agent_1"] is shared
    for index in (0, 1):
        spec = _agent_spec(trainer, index)
        # an external learner's checkpoint names its class: trusted here, as --trust-code
        policy: Any = make_policy(parse_policy_spec(str(run), trust_code=True),
                                  trainer.mission, spec)
        expected = shared.act(with_agent_id(obs, index, 2), explore=False)
        assert [policy.step(o) for o in obs] == list(expected)
    report = evaluate(make_config(["goal_tasks"], [str(run)], episodes=2, overrides=GOALS,
                                  trust_code=True))
    assert report.status == "complete"


@pytest.mark.parametrize(("learner", "margin"), [("ppo", 0.8), ("external", 1.2)])
def test_learning_smoke_beats_random(tmp_path: Path, learner: str, margin: float) -> None:
    """goal_tasks with two agents and direction tasks, 15 epochs of 4 × 20 steps; the
    greedy mean return over 20 episodes, measured with seeds 0-7 (random: 0.04; the
    scripted heuristic ~1.8): ppo 1.13-1.76, external 1.73-1.82. Asserted: random plus
    0.8 (ppo) and 1.2 (external)."""
    learners = {
        "ppo": {"class": "ppo", "width": 32, "depth": 1, "lr": 0.003, "gamma": 0.9},
        "external": {"class": EXTERNAL_CLASS},
    }
    cfg = config(tmp_path, epochs=15, steps_per_epoch=20, gradient_steps=1, checkpoint_every=15,
                 learner=learners[learner])
    Trainer(cfg).run()
    trained = evaluate(make_config(["goal_tasks"], [str(tmp_path / "run")], episodes=20,
                                   overrides=GOALS, trust_code=True)
                       ).to_document()["summary"][0]["mean"]
    random = evaluate(make_config(["goal_tasks"], ["random"], episodes=20,
                                  overrides=GOALS)).to_document()["summary"][0]["mean"]
    assert trained > random + margin, (trained, random)


def test_the_yaml_names_the_learner_and_the_flag_wins(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("learner: {class: ppo, width: 16, gamma: 0.9}\n")
    assert dict(load(path).learner) == {"class": "ppo", "width": 16, "gamma": 0.9}
    # --learner naming another learner: the file's options were written for its own
    flagged = load(path, "--learner", "dqn", "--set", "learner.width=8")
    assert dict(flagged.learner) == {"class": "dqn", "width": 8}
    assert dict(load(path, "--learner", EXTERNAL_CLASS).learner) == {"class": EXTERNAL_CLASS}
    # the same learner (or --set learner.KEY alone) keeps the file's other options
    assert dict(load(path, "--learner", "ppo", "--set", "learner.width=8").learner) \
        == {"class": "ppo", "width": 8, "gamma": 0.9}
    assert dict(load(path, "--set", "learner.gamma=0.5").learner) == \
        {"class": "ppo", "width": 16, "gamma": 0.5}
    with pytest.raises(ConfigError, match=re.escape("ppo: unknown option 'eps_start'; known: ")):
        load(None, "--learner", "ppo", "--set", "learner.eps_start=1.0")


TRAIN = ["train", "--epochs", "1", "--steps-per-epoch", "5", "--env-workers", "0",
         "--envs-per-worker", "2", "--format", "json"]


@pytest.mark.parametrize(("args", "line"), [
    # --learner dqn: -m evade alone would pick configs/evade-ppo.yaml, a tuned PPO
    (["-m", "evade", "--learner", "dqn"], "parcat: error: mission 'evade': agent 'pursuer_0' "
     "has action space Box(-1.0, 1.0, (2,), float32); the dqn learner learns Discrete "
     "actions; use --learner ppo\n"),
    (["--learner", "sac"], "parcat: error: learner 'sac' is not a built-in (dqn, ppo) nor a "
     "'module:Class' reference; give one with --learner or learner.class\n"),
    (["--learner", "nowhere.mod:Learner"], "parcat: error: learner 'nowhere.mod:Learner' "
     "cannot be imported (ModuleNotFoundError: No module named 'nowhere'); built-ins: dqn, "
     "ppo\n"),
])
def test_a_learner_that_cannot_train_the_mission_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], line: str
) -> None:
    assert main([*TRAIN, *args, "--run-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == line


def test_cli_trains_evade_with_ppo_and_the_external_learner_and_evaluates(
    tmp_path: Path
) -> None:
    def parcat(*args: str) -> None:
        result = subprocess.run([sys.executable, "-m", "parcat", *args], cwd=ROOT,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr

    evade = tmp_path / "evade"
    parcat(*TRAIN, "-m", "evade", "--learner", "ppo", "--shared-learner", "--run-dir",
           str(evade))
    parcat("eval", "-m", "evade", "-p", str(evade), "--episodes", "1")
    goals = tmp_path / "goals"
    parcat(*TRAIN, "-m", "goal_tasks", "--learner", EXTERNAL_CLASS, "--run-dir", str(goals))
    # its checkpoint names the external policy class: code from outside parcat
    parcat("eval", "-m", "goal_tasks", "-p", str(goals), "--episodes", "1", "--trust-code")
