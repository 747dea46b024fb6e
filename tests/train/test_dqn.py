"""Tests of the DQN learner: it learns, it saves and resumes bit for bit, it fits MLPPolicy."""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from parcat.core.errors import CheckpointError, ConfigError
from parcat.policies.base import AgentSpec
from parcat.policies.builtin import MLPPolicy
from parcat.train import DQNConfig, DQNLearner, Learner, Transitions, mlp

FAST = DQNConfig(width=32, batch_size=32, learning_starts=64, buffer_size=2_000)
"""Small enough that every test here runs in well under a second."""


def _stream(learner: DQNLearner, steps: int, seed: int, obs_dim: int) -> list[dict[str, float]]:
    """Act on, observe and train from a seeded random stream; return the metrics."""
    rng = np.random.default_rng(seed)
    metrics = []
    for _ in range(steps):
        obs = rng.standard_normal((4, obs_dim)).astype(np.float32)
        actions = learner.act(obs)
        rewards = (actions == obs.argmax(axis=1) % learner.num_actions).astype(np.float32)
        next_obs = rng.standard_normal((4, obs_dim)).astype(np.float32)
        learner.observe(Transitions(obs, actions, rewards, next_obs, rng.random(4) < 0.3))
        metrics.append(learner.train_step())
    return metrics


def _assert_same_state(a: DQNLearner, b: DQNLearner) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, key
        assert sa[key].tobytes() == sb[key].tobytes(), key


def _q_values(learner: DQNLearner, obs: np.ndarray) -> np.ndarray:
    """The greedy network's outputs, read through MLPPolicy."""
    policy = MLPPolicy(_spec(learner), **learner.policy_kwargs)
    policy.load_state_dict(learner.policy_arrays())
    return policy.forward(np.asarray(obs, dtype=np.float32))


def _spec(learner: DQNLearner) -> AgentSpec:
    return AgentSpec(
        mission="test",
        agent_id="agent_0",
        agent_index=0,
        observation_space=spaces.Box(-np.inf, np.inf, (learner.obs_dim,), np.float32),
        action_space=spaces.Discrete(learner.num_actions),
    )


def test_dqn_learner_is_a_learner() -> None:
    assert isinstance(DQNLearner(3, 2), Learner)


def test_learns_a_contextual_bandit() -> None:
    """Reward 1 for the action that names the largest of the first three inputs."""
    config = replace(FAST, lr=3e-3, eps_decay_steps=1_500, seed=1)
    learner = DQNLearner(4, 3, config)
    rng = np.random.default_rng(0)
    for _ in range(500):
        obs = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
        actions = learner.act(obs)
        rewards = (actions == obs[:, :3].argmax(axis=1)).astype(np.float32)
        learner.observe(Transitions(obs, actions, rewards, obs, np.ones(8, dtype=bool)))
        learner.train_step()
    test = rng.uniform(-1, 1, (1_000, 4)).astype(np.float32)
    accuracy = np.mean(learner.act(test, explore=False) == test[:, :3].argmax(axis=1))
    assert accuracy > 0.9


def _chain_step(state: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, ...]:
    """A 5-state chain: action 1 moves right, 0 left; reaching state 4 pays 1 and ends."""
    next_state = np.clip(state + np.where(actions == 1, 1, -1), 0, 4)
    terminated = next_state == 4
    return next_state, terminated.astype(np.float32), terminated


def test_learns_a_five_state_chain_by_bootstrapping() -> None:
    config = replace(FAST, gamma=0.9, eps_decay_steps=2_000, target_update_interval=400)
    learner = DQNLearner(5, 2, config)
    eye = np.eye(5, dtype=np.float32)
    state, age = np.zeros(8, dtype=np.int64), np.zeros(8, dtype=np.int64)
    for _ in range(600):
        actions = learner.act(eye[state])
        next_state, rewards, terminated = _chain_step(state, actions)
        learner.observe(Transitions(eye[state], actions, rewards, eye[next_state], terminated))
        learner.train_step()
        age += 1
        # a time limit truncates (not terminal: the learner still bootstraps through it)
        done = terminated | (age >= 12)
        state, age = np.where(done, 0, next_state), np.where(done, 0, age)
    assert learner.act(eye[:4], explore=False).tolist() == [1, 1, 1, 1]
    q_right = _q_values(learner, eye[:4])[:, 1]
    np.testing.assert_allclose(q_right, [0.9**3, 0.9**2, 0.9, 1.0], atol=0.1)


@pytest.mark.parametrize(("terminated", "expected"), [(True, 1.0), (False, 2.0)])
def test_terminated_stops_bootstrapping(terminated: bool, expected: float) -> None:
    """One transition that loops on itself: Q = r if terminated, else r / (1 - gamma)."""
    config = DQNConfig(
        lr=1e-2,
        gamma=0.5,
        batch_size=8,
        learning_starts=8,
        buffer_size=8,
        target_update_interval=8,
        seed=2,
    )
    learner = DQNLearner(2, 2, config)
    obs = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (8, 1))
    for _ in range(100):  # each round's 8 transitions pass an interval: the target is copied
        learner.observe(Transitions(obs, np.zeros(8), np.ones(8), obs, np.full(8, terminated)))
        learner.train_many(10)
    assert _q_values(learner, obs[:1])[0, 0] == pytest.approx(expected, abs=0.05)


def test_a_new_learner_has_mlp_policy_initial_weights() -> None:
    learner = DQNLearner(6, 4, DQNConfig(width=16, depth=3, seed=5))
    policy = MLPPolicy(_spec(learner), width=16, depth=3, init_seed=5)
    arrays = learner.policy_arrays()
    assert arrays.keys() == policy.state_dict().keys()
    for key, value in policy.state_dict().items():
        assert arrays[key].dtype == np.float32
        np.testing.assert_array_equal(arrays[key], value)


def test_uniform_init_draws_weights_and_biases_within_one_over_sqrt_fan_in() -> None:
    # PyTorch's nn.Linear default; CartPole's DQN learns far better from it (BENCHMARKS.md)
    learner = DQNLearner(6, 4, DQNConfig(width=16, depth=2, seed=5, init="uniform"))
    arrays = learner.policy_arrays()
    for i, fan_in in enumerate((6, 16, 16)):
        bound = 1 / np.sqrt(fan_in)
        for key in (f"w{i}", f"b{i}"):
            assert np.abs(arrays[key]).max() <= bound
            assert np.abs(arrays[key]).max() > 0.5 * bound  # spread out, biases too
    again = DQNLearner(6, 4, DQNConfig(width=16, depth=2, seed=5, init="uniform"))
    for key, value in again.policy_arrays().items():
        np.testing.assert_array_equal(arrays[key], value)
    he = DQNLearner(6, 4, DQNConfig(width=16, depth=2, seed=5)).policy_arrays()
    assert not np.array_equal(he["w0"], arrays["w0"])
    assert not he["b0"].any()


def test_policy_arrays_act_like_the_learner_in_mlp_policy() -> None:
    learner = DQNLearner(6, 4, FAST)
    _stream(learner, 150, seed=0, obs_dim=6)
    policy = MLPPolicy(_spec(learner), **learner.policy_kwargs)
    policy.load_state_dict(learner.policy_arrays())
    obs = np.random.default_rng(1).standard_normal((200, 6)).astype(np.float32)
    greedy = learner.act(obs, explore=False)
    assert greedy.dtype == np.int64
    assert policy.step_batch(list(obs)) == greedy.tolist()
    # batch-size invariant: one observation at a time gives the same actions
    assert [int(learner.act(o[None], explore=False)[0]) for o in obs[:20]] == greedy[:20].tolist()


def test_exploring_takes_the_greedy_action_where_it_does_not_explore() -> None:
    # exploring multiplies the batch unpadded (1/8 of the CPU): its argmax is still greedy's
    learner = DQNLearner(6, 4, replace(FAST, eps_start=0.0, eps_end=0.0))
    _stream(learner, 150, seed=0, obs_dim=6)
    obs = np.random.default_rng(2).standard_normal((300, 6)).astype(np.float32)
    greedy = learner.act(obs, explore=False)
    assert learner.act(obs).tolist() == greedy.tolist()
    assert [int(learner.act(o[None])[0]) for o in obs[:50]] == greedy[:50].tolist()


def test_a_training_run_holds_blas_at_one_thread_and_gives_it_back() -> None:
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before = blas_threads()
    with mlp.blas_pinned():
        assert blas_threads() and set(blas_threads()) == {1}
        # inside, no per-call limit: setting one costs as much as a small forward pass
        assert isinstance(mlp.single_threaded_blas(), contextlib.nullcontext)
        with mlp.blas_pinned():  # nested (a trainer inside a trainer's process): a no-op
            assert set(blas_threads()) == {1}
        assert isinstance(mlp.single_threaded_blas(), contextlib.nullcontext)
    assert blas_threads() == before
    assert not isinstance(mlp.single_threaded_blas(), contextlib.nullcontext)


def test_train_step_waits_for_a_warm_buffer() -> None:
    learner = DQNLearner(3, 2, DQNConfig(batch_size=16, learning_starts=40))
    obs = np.zeros((39, 3), dtype=np.float32)
    learner.observe(Transitions(obs, np.zeros(39), np.zeros(39), obs, np.zeros(39, dtype=bool)))
    assert learner.train_step() == {}
    one = np.zeros(1)
    learner.observe(Transitions(obs[:1], one, one, obs[:1], np.zeros(1, dtype=bool)))
    metrics = learner.train_step()
    assert set(metrics) == {"loss", "q_mean", "grad_norm", "epsilon", "num_updates"}
    assert metrics["num_updates"] == 1.0
    assert all(isinstance(value, float) for value in metrics.values())


def test_epsilon_decays_linearly_with_observed_transitions() -> None:
    learner = DQNLearner(2, 3, DQNConfig(eps_start=1.0, eps_end=0.1, eps_decay_steps=100))
    obs = np.zeros((50, 2), dtype=np.float32)
    assert learner.epsilon == 1.0
    learner.observe(Transitions(obs, np.zeros(50), np.zeros(50), obs, np.zeros(50, dtype=bool)))
    assert learner.epsilon == pytest.approx(0.55)
    for _ in range(3):
        learner.observe(Transitions(obs, np.zeros(50), np.zeros(50), obs, np.zeros(50, dtype=bool)))
    assert learner.epsilon == pytest.approx(0.1)
    # at epsilon 0.1 about one action in fifteen differs from greedy (1/10 random, 2/3 of those)
    greedy = learner.act(np.zeros((3_000, 2)), explore=False)
    changed = np.mean(learner.act(np.zeros((3_000, 2))) != greedy)
    assert 0.04 < changed < 0.1


@pytest.mark.parametrize(
    "options",
    [{}, {"double": False, "huber": False, "grad_clip": None}, {"grad_clip": 0.01}],
)
def test_same_seed_and_data_are_bit_identical(options: dict[str, Any]) -> None:
    a, b = (DQNLearner(5, 3, replace(FAST, **options, seed=4)) for _ in range(2))
    metrics = _stream(a, 120, seed=9, obs_dim=5)
    assert metrics == _stream(b, 120, seed=9, obs_dim=5)
    assert metrics[-1]["num_updates"] > 0
    _assert_same_state(a, b)
    other = DQNLearner(5, 3, replace(FAST, **options, seed=5))
    _stream(other, 120, seed=9, obs_dim=5)
    assert not np.array_equal(other.policy_arrays()["w0"], a.policy_arrays()["w0"])


def test_state_dict_round_trip_resumes_bit_identically(tmp_path: Path) -> None:
    config = replace(FAST, buffer_size=300, target_update_interval=7)
    a = DQNLearner(5, 3, config)
    _stream(a, 100, seed=0, obs_dim=5)  # the ring has wrapped, the target has been copied
    arrays: dict[str, Any] = a.state_dict()
    np.savez(tmp_path / "state.npz", **arrays)
    # a different seed: everything that matters must come from the state
    b = DQNLearner(
        5,
        3,
        replace(FAST, buffer_size=300, target_update_interval=7, seed=77),
    )
    with np.load(tmp_path / "state.npz") as data:
        b.load_state_dict({key: data[key] for key in data.files})
    _assert_same_state(a, b)
    assert _stream(a, 60, seed=1, obs_dim=5) == _stream(b, 60, seed=1, obs_dim=5)
    _assert_same_state(a, b)


def test_loading_a_mismatched_state_fails_and_changes_nothing() -> None:
    saved = DQNLearner(5, 3, FAST).state_dict()
    learner = DQNLearner(5, 3, replace(FAST, width=16))
    before = learner.state_dict()
    message = (
        "dqn state: array 'online.w0' expected shape (5, 16), got (5, 32); build the learner "
        "with the obs_dim, num_actions, width and depth it was saved with"
    )
    with pytest.raises(CheckpointError, match=re.escape(message)):
        learner.load_state_dict(saved)
    del saved["adam.step"]
    message = "dqn state: array 'adam.step' is missing; pass what DQNLearner.state_dict() returned"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        DQNLearner(5, 3, FAST).load_state_dict(saved)
    after = learner.state_dict()
    assert all(np.array_equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"width": 0}, "dqn: 'width' must be an integer between 1 and 8,192, got 0"),
        ({"depth": 1.5}, "dqn: 'depth' must be an integer between 1 and 64, got 1.5"),
        ({"learning_starts": -1},
         "dqn: 'learning_starts' must be an integer between 0 "
         "and 1,000,000,000, got -1"),
        ({"target_update_interval": True},
         "dqn: 'target_update_interval' must be an integer between 1 and "
         "1,000,000,000, got True"),
        ({"lr": 0.0}, "dqn: 'lr' must be a number > 0, got 0.0"),
        ({"lr": float("nan")}, "dqn: 'lr' must be a number > 0, got nan"),
        ({"gamma": 1.5}, "dqn: 'gamma' must be a number in [0, 1], got 1.5"),
        ({"eps_end": "0.1"}, "dqn: 'eps_end' must be a number in [0, 1], got '0.1'"),
        ({"double": 1}, "dqn: 'double' must be true or false, got 1"),
        ({"init": "xavier"}, "dqn: 'init' must be he or uniform, got 'xavier'"),
        ({"grad_clip": -1}, "dqn: 'grad_clip' must be a number > 0 or None (off), got -1"),
        (
            {"buffer_size": 100},
            "dqn: 'learning_starts' must be <= 'buffer_size' (100), got 500; "
            "training would never start",
        ),
        (
            {"buffer_size": 100, "learning_starts": 0, "batch_size": 128},
            "dqn: 'batch_size' must be <= 'buffer_size' (100), got 128; training would never start",
        ),
    ],
)
def test_config_validation_names_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        DQNConfig(**options)


def test_config_from_mapping_rejects_unknown_keys() -> None:
    assert DQNConfig.from_mapping({"lr": 0.01}) == DQNConfig(lr=0.01)
    message = "dqn: unknown option 'learning_rate'; known: width, depth, lr, gamma,"
    with pytest.raises(ConfigError, match=re.escape(message)):
        DQNConfig.from_mapping({"learning_rate": 0.01})


def test_learner_rejects_bad_sizes_and_observations() -> None:
    with pytest.raises(ConfigError, match=re.escape("dqn: 'num_actions' must be an integer >= 1")):
        DQNLearner(4, 0)
    message = "dqn: obs_batch must have shape (batch, 4), got (2, 3)"
    with pytest.raises(ValueError, match=re.escape(message)):
        DQNLearner(4, 2).act(np.zeros((2, 3)))
    message = "dqn: actions must be in 0 .. 1, got -1 .. 0"
    obs = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=re.escape(message)):
        DQNLearner(4, 2).observe(
            Transitions(obs, np.array([0, -1]), np.zeros(2), obs, np.zeros(2, bool)))


@pytest.mark.parametrize(("old", "message"), [
    ("train_steps", "dqn: option 'train_steps' is now the run's gradient_steps "
                    "(--gradient-steps): updates per epoch; rename it"),
    ("target_update_every", "dqn: option 'target_update_every' is now target_update_interval, "
                            "in environment steps (rl-zoo's unit); rename it"),
])
def test_an_old_option_name_is_one_line_naming_the_new_one(old: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        DQNConfig.from_mapping({old: 4})
