"""A ``--learner`` from outside parcat never takes ``parcat train`` down: a constructor that
exits, crashes, raises or hangs is built once in a worker first and is one line naming the
learner class and agent (exit 1; 2 for a raise), and an async learner process that dies
mid-run is one line naming it, exit 1, with the last checkpoint kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest

from parcat.train import recipes
from parcat.train.dqn import DQNLearner
from tests.reliability.helpers import ROOT, kill_group
from tests.reliability.test_setup_isolation import HAPPENED, assert_one_line, expected_code

LEARNER = '''
import os
from parcat.train.dqn import DQNLearner
from tests.fakes import misbehave

HOW, WHERE = os.environ["LEARNER_HOW"], os.environ["LEARNER_WHERE"]


class L(DQNLearner):
    def __init__(self, *args, **kwargs):
        if WHERE == "init":
            misbehave(HOW)
        super().__init__(*args, **kwargs)
        self.steps = 0

    def train_step(self):
        self.steps += 1
        if WHERE == "train" and self.steps > 50:  # the second round of 50 steps
            misbehave(HOW)
        return super().train_step()
'''
TRAIN = ["train", "-m", "goal_tasks", "--learner", "badlearner:L", "--epochs", "3",
         "--steps-per-epoch", "100", "--eval-episodes", "0", "-o", "run"]


def train(tmp_path: Path, how: str, where: str, *extra: str,
          setup_timeout: str = "60") -> tuple[int, str]:
    """``python -m parcat train`` with the learner module in the working directory (this
    worktree's parcat and tests importable); return its exit code and stderr."""
    (tmp_path / "badlearner.py").write_text(LEARNER)
    path = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "LEARNER_HOW": how, "LEARNER_WHERE": where,
           "PARCAT_SETUP_TIMEOUT": setup_timeout}
    proc = subprocess.Popen([sys.executable, "-m", "parcat", *TRAIN, *extra], cwd=tmp_path,
                            env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=240)
        return proc.returncode, err
    finally:
        kill_group(proc)


@pytest.mark.parametrize("how", ["sys_exit", "os_exit", "segfault", "raise"])
def test_a_learner_constructor_that_fails_is_one_line_naming_class_and_agent(
        tmp_path: Path, how: str) -> None:
    code, err = train(tmp_path, how, "init")
    assert code == expected_code(how), err
    assert_one_line(err, "learner 'badlearner:L' for agent 'agent_0'", HAPPENED[how],
                    "while being built")
    assert not (tmp_path / "run").exists()


def test_a_hanging_learner_constructor_ends_at_the_set_up_deadline(tmp_path: Path) -> None:
    code, err = train(tmp_path, "hang", "init", "--shared-learner", setup_timeout="5")
    assert code == 1, err
    assert_one_line(err, "learner 'badlearner:L' shared by every agent",
                    "did not finish in 5 s (PARCAT_SETUP_TIMEOUT)")


@pytest.mark.parametrize("how", ["segfault", "raise"])
def test_a_dying_async_learner_process_is_one_line_and_keeps_the_checkpoint(
        tmp_path: Path, how: str) -> None:
    code, err = train(tmp_path, how, "train", "--mode", "async", "--checkpoint-every", "1",
                      "--set", "learner.learning_starts=100")
    assert code == 1, err
    assert "Traceback" not in err
    what = "died (signal SIGSEGV)" if how == "segfault" else "raised ValueError: refused"
    assert_one_line(err, "training stopped after 1 epoch(s): the learner process (training "
                    f"badlearner:L) {what}", "the last checkpoint is run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["epoch"] == 1  # the epoch finished before the learner process died


def test_parcat_s_own_learners_are_not_built_in_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_worker(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker was started for a built-in learner")

    monkeypatch.setattr(recipes, "call_in_worker", no_worker)
    recipe = recipes.LearnerRecipe(DQNLearner, gymnasium.spaces.Box(-1, 1, (4,)),
                                   gymnasium.spaces.Discrete(3), {}, 0)
    recipes.check_builds({"agent_0": recipe, "agent_1": recipe})
