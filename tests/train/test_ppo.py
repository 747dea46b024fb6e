"""The PPO learner: GAE, the protocol (check_learner), exact resume, Box actions that learn."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.errors import ConfigError, ConformanceError
from parcat.policies.base import AgentSpec
from parcat.testing import check_learner
from parcat.train import DQNLearner, Learner, PPOConfig, PPOLearner, Transitions
from parcat.train.onpolicy import gae
from tests.train.external_learner import OneStepReinforce

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
SMALL = {"width": 16, "depth": 1, "minibatch_size": 16}
EVADE_PPO = Path(__file__).resolve().parents[2] / "configs" / "evade-ppo.yaml"


def spec(action_space: Any, observation_space: Any = OBS) -> AgentSpec:
    return AgentSpec("test", "agent_0", 0, observation_space, action_space)


def test_gae_follows_each_environment_and_stops_at_episode_ends() -> None:
    # rows of two interleaved environments: env 0 runs 3 steps and is truncated after the
    # second; env 1 terminates on its second row; the rollout ends mid-episode for env 0
    columns = {
        "rewards": np.array([1, 10, 2, 20, 3], np.float32),
        "values": np.array([0.5, 5, 0.25, 4, 0.125], np.float32),
        "next_values": np.array([0.25, 4, 7, 9, 8], np.float32),
        "terminated": np.array([0, 0, 0, 1, 0], bool),
        "truncated": np.array([0, 0, 1, 0, 0], bool),
        "env": np.array([0, 1, 0, 1, 0]),
    }
    advantages, returns = gae(columns, gamma=0.5, lam=0.5)
    d = [1 + 0.5 * 0.25 - 0.5, 10 + 0.5 * 4 - 5, 2 + 0.5 * 7 - 0.25, 20 - 4, 3 + 0.5 * 8 - 0.125]
    expected = [d[0] + 0.25 * d[2], d[1] + 0.25 * d[3], d[2], d[3], d[4]]
    np.testing.assert_allclose(advantages, expected, rtol=1e-6)
    np.testing.assert_allclose(returns, np.array(expected) + columns["values"], rtol=1e-6)


@pytest.mark.parametrize("action_space", [spaces.Discrete(4), BOX], ids=["discrete", "box"])
def test_ppo_keeps_the_learner_contract(action_space: Any) -> None:
    check_learner(PPOLearner, spec(action_space), SMALL, seed=3)
    learner = PPOLearner.from_spaces(OBS, action_space, SMALL, 3)
    assert isinstance(learner, Learner)
    check_learner(learner, spec(action_space))


def test_the_other_learners_keep_the_contract() -> None:
    check_learner(DQNLearner, spec(spaces.Discrete(3)),
                  {"width": 8, "depth": 1, "learning_starts": 8, "batch_size": 8})
    check_learner(OneStepReinforce, spec(spaces.Discrete(3)), {"lr": 0.1})


class Broken(OneStepReinforce):
    """Breaks three rules: float actions for a Discrete space, a state that does not load
    back, and NaN weights."""

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        return np.zeros(len(obs_batch), np.float32)

    def load_state_dict(self, arrays: Any) -> None:
        super().load_state_dict(arrays)
        self.w = self.w + 1.0

    def policy_arrays(self) -> dict[str, np.ndarray]:
        return {"w": np.full_like(self.w, np.nan), "b": self.b}


def test_check_learner_names_every_violation() -> None:
    message = ("act(explore=True) must return int64 (8,) actions, got float32 (8,); "
               "policy_arrays()['w'] holds non-finite values; "
               "state_dict() loaded into itself does not round-trip")
    with pytest.raises(ConformanceError, match=re.escape(message)):
        check_learner(Broken(OBS, spaces.Discrete(3), {}, 0), spec(spaces.Discrete(3)))
    with pytest.raises(ConformanceError, match=re.escape(
            "learner has no load_policy_arrays() method; learner has no 'config' attribute")):
        check_learner(object.__new__(_Missing), spec(spaces.Discrete(3)))


class WrongPolicyKwargs(PPOLearner):
    """Declares a wider network than the one it trains."""

    @property
    def policy_kwargs(self) -> dict[str, int]:
        return {"width": 99, "depth": 1}


def test_check_learner_loads_the_declared_policy() -> None:
    message = ("policy_arrays() do not load into parcat.policies.builtin:MLPPolicy: "
               "PolicyError: mlp: array 'w0' expected shape (3, 99), got (3, 16)")
    with pytest.raises(ConformanceError, match=re.escape(message)):
        check_learner(WrongPolicyKwargs, spec(spaces.Discrete(2)), SMALL)


class _Missing:
    policy = "x:Y"
    policy_kwargs: dict[str, Any] = {}
    num_observed = 0

    def act(self) -> None: ...
    def observe(self) -> None: ...
    def train_step(self) -> None: ...
    def state_dict(self) -> None: ...
    def load_state_dict(self) -> None: ...
    def policy_arrays(self) -> None: ...


def _feed(learner: PPOLearner, seed: int, steps: int) -> list[dict[str, float]]:
    """Act on a seeded stream of 4 environments; train every 8 steps."""
    rng = np.random.default_rng(seed)
    metrics = []
    for step in range(steps):
        obs = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
        actions = learner.act(obs)
        rewards = -np.square(np.asarray(actions, np.float32).reshape(4, -1)[:, 0] - obs[:, 0])
        learner.observe(Transitions(obs, actions, rewards, obs[::-1].copy(),
                                    rng.random(4) < 0.1, rng.random(4) < 0.1, np.arange(4)))
        if step % 8 == 7:
            metrics.append(learner.train_step())
    return metrics


def test_a_learner_restored_mid_rollout_continues_bit_for_bit() -> None:
    a = PPOLearner.from_spaces(OBS, BOX, SMALL, 1)
    _feed(a, 0, 12)  # 4 rows into the next rollout
    b = PPOLearner.from_spaces(OBS, BOX, SMALL, 2)
    b.load_state_dict(a.state_dict())
    assert _feed(a, 9, 20) == _feed(b, 9, 20)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(sa[k].tobytes() == sb[k].tobytes() for k in sa)


def test_box_actions_learn_a_continuous_target() -> None:
    """The first action dimension should follow obs[0] (reward -(a0 - obs0)^2): after 400
    steps the greedy error is a fraction of the untrained one (measured with learner and
    stream seeds 0-5: 0.013-0.042 of it; asserted: below 0.2)."""
    obs = np.random.default_rng(7).uniform(-1, 1, (256, 3)).astype(np.float32)

    def greedy_error(learner: PPOLearner) -> float:
        return float(np.mean(np.square(learner.act(obs, explore=False)[:, 0] - obs[:, 0])))

    learner = PPOLearner.from_spaces(OBS, BOX, {**SMALL, "lr": 0.01, "gamma": 0.0}, 0)
    before = greedy_error(learner)
    metrics = _feed(learner, 0, 400)
    assert set(metrics[-1]) == {"loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                                "num_updates"}
    assert greedy_error(learner) < 0.2 * before, (greedy_error(learner), before)


def test_ppo_options_and_spaces_are_checked() -> None:
    with pytest.raises(ConfigError, match=re.escape("ppo: unknown option 'eps_start'; known: "
                                                    "width, depth, lr, gamma, gae_lambda")):
        PPOConfig.from_mapping({"eps_start": 1.0})
    with pytest.raises(ConfigError, match=re.escape(
            "ppo: 'gae_lambda' must be a number in [0, 1], got 1.5")):
        PPOConfig(gae_lambda=1.5)
    with pytest.raises(ConfigError, match=re.escape(
            "ppo: needs Discrete actions starting at 0 or a Box with finite bounds, got "
            "Box(-inf, inf, (2,), float32)")):
        PPOLearner(OBS, spaces.Box(-np.inf, np.inf, (2,), np.float32))


@pytest.mark.parametrize("gradient_steps", [(), ("--gradient-steps", "3")])
def test_the_evade_config_trains_each_learner_once_an_epoch(
        tmp_path: Path, gradient_steps: tuple[str, ...]) -> None:
    """configs/evade-ppo.yaml as shipped: an epoch is 128 steps of 8 environments, 1,024
    transitions per agent, and each of the 4 IPPO learners then runs update_epochs 4 passes
    of minibatches of 256 over them: 16 updates an epoch, whatever --gradient-steps says
    (PPO's later rounds find the rollout empty). This is what its learning figures assume;
    a budget or trainer change that trains more or less often fails here."""
    result = CliRunner().invoke(app, ["train", "-c", str(EVADE_PPO), "--epochs", "2",
                                      "--eval-episodes", "1", *gradient_steps, "-f", "json",
                                      "-o", str(tmp_path / "run")])
    assert result.exit_code == 0, result.stderr
    epochs = json.loads(result.stdout)["epochs"]
    assert [e["total_env_steps"] for e in epochs] == [1024, 2048]
    for epoch, updates in zip(epochs, (16, 32), strict=True):
        learners = epoch["learner_metrics"]
        assert sorted(learners) == ["evader", "pursuer_0", "pursuer_1", "pursuer_2"]
        assert {agent: m["num_updates"] for agent, m in learners.items()} == dict.fromkeys(
            learners, updates)
