"""A steadier DQN (issue 26, Connect Four): the learning rate can fall to ``lr_end`` and the
weights that act can be a Polyak average of the online ones (``ema``); either keeps a noisy
game's greedy choice from swinging, both resume bit for bit, self-play checkpoints and pools
the averaged weights, and a config's ``lr: 0.00005`` (or ``--set learner.lr=1e-4``) is a
number. Negamax self-play closes a move the opponent answered with a win at its exact
value, not the network's estimate of the win."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parcat.core.errors import ConfigError
from parcat.policies import checkpoint
from parcat.policies.builtin import dense_forward
from parcat.train import DQNConfig, DQNLearner, Transitions
from parcat.train.selfplay import POOL_FILE, Game, SelfPlayTrainer
from tests.train.flags import load
from tests.train.test_selfplay import CONNECT_FOUR, nim_config

BANDIT = {"width": 16, "batch_size": 16, "learning_starts": 16, "buffer_size": 64, "lr": 1e-2,
          "eps_decay_steps": 0, "eps_end": 1.0, "seed": 3}


def _noisy_bandit(**options: Any) -> tuple[float, float]:
    """A coin flip worth ±1 (mean 0) against a sure 0.25, sampled uniformly: the acting
    network's spread of Q(coin) and the share of greedy choices of the sure arm, over the
    last 100 of 400 rounds."""
    learner = DQNLearner(1, 2, DQNConfig(**BANDIT | options))
    rng = np.random.default_rng(3)
    obs = np.ones((8, 1), np.float32)
    q_coin, sure = [], []
    for round_index in range(400):
        actions = rng.integers(0, 2, 8)
        rewards = np.where(actions == 0, rng.choice([-1.0, 1.0], 8), 0.25).astype(np.float32)
        learner.observe(Transitions(obs, actions, rewards, obs, np.ones(8, bool)))
        learner.train_many(4)
        if round_index >= 300:
            q_coin.append(float(dense_forward(learner._acting, obs[:1])[0, 0]))
            sure.append(int(learner.act(obs[:1], explore=False)[0]) == 1)
    return float(np.std(q_coin)), float(np.mean(sure))


def test_a_falling_learning_rate_or_averaged_weights_stop_a_noisy_choice_swinging() -> None:
    spread, sure = _noisy_bandit()
    assert sure < 0.9  # the online Q of the coin chases its last draws past 0.25
    for options in ({"lr_end": 1e-4, "lr_decay_steps": 2_400}, {"ema": 0.99}):
        steady_spread, steady_sure = _noisy_bandit(**options)
        assert steady_sure == 1.0, options
        assert steady_spread < spread / 2, options


def test_the_learning_rate_falls_linearly_to_lr_end_and_is_adams_step() -> None:
    learner = DQNLearner(2, 2, DQNConfig(lr=1e-3, lr_end=1e-4, lr_decay_steps=100))
    obs = np.zeros((50, 2), np.float32)
    rates = []
    for _ in range(3):
        rates.append(learner.learning_rate)
        learner.observe(Transitions(obs, np.zeros(50), np.zeros(50), obs, np.ones(50, bool)))
    assert rates == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert learner.learning_rate == pytest.approx(1e-4)
    assert DQNLearner(2, 2, DQNConfig(lr=1e-3)).learning_rate == 1e-3  # no lr_end: constant
    # lr_end reached before the first update is a constant lr_end, update for update
    fallen, constant = (DQNLearner(3, 2, DQNConfig(**BANDIT | options)) for options in
                        ({"lr_end": 1e-4, "lr_decay_steps": 1}, {"lr": 1e-4}))
    for learner in (fallen, constant):
        rng = np.random.default_rng(0)
        for _ in range(20):
            x = rng.standard_normal((8, 3)).astype(np.float32)
            learner.observe(Transitions(x, rng.integers(0, 2, 8), rng.random(8), x,
                                        np.ones(8, bool)))
            learner.train_many(2)
    assert fallen.policy_arrays()["w0"].tobytes() == constant.policy_arrays()["w0"].tobytes()


def test_averaged_weights_act_while_the_online_ones_learn_as_without() -> None:
    plain, averaged = (DQNLearner(3, 2, DQNConfig(**BANDIT | options))
                       for options in ({}, {"ema": 0.9}))
    expected = {key: value.copy() for key, value in plain.policy_arrays().items()}
    rng = np.random.default_rng(1)
    for _ in range(30):
        x = rng.standard_normal((8, 3)).astype(np.float32)
        batch = Transitions(x, rng.integers(0, 2, 8), rng.random(8).astype(np.float32), x,
                            np.ones(8, bool))
        for learner in (plain, averaged):
            learner.observe(batch)
            learner.train_step()
        if plain.num_updates:
            for key, online in plain.policy_arrays().items():
                expected[key] += np.float32(0.1) * (online - expected[key])
    state, acting = averaged.state_dict(), averaged.policy_arrays()
    assert all(state[f"online.{key}"].tobytes() == value.tobytes()  # training is unchanged
               for key, value in plain.policy_arrays().items())
    assert all(state[f"ema.{key}"].tobytes() == value.tobytes() for key, value in acting.items())
    for key, value in expected.items():
        np.testing.assert_allclose(acting[key], value, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(acting["w0"], plain.policy_arrays()["w0"])
    averaged.load_policy_arrays(plain.policy_arrays())  # loaded weights act at once
    assert averaged.policy_arrays()["w0"].tobytes() == plain.policy_arrays()["w0"].tobytes()


def test_a_steady_learner_resumes_bit_for_bit() -> None:
    options = {"ema": 0.95, "lr_end": 1e-3, "lr_decay_steps": 300}
    a, b = (DQNLearner(4, 3, DQNConfig(**BANDIT | options | {"seed": seed}))
            for seed in (0, 9))

    def stream(learner: DQNLearner, seed: int) -> list[dict[str, float]]:
        rng = np.random.default_rng(seed)
        metrics = []
        for _ in range(40):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            learner.observe(Transitions(x, learner.act(x), rng.random(4).astype(np.float32),
                                        rng.standard_normal((4, 4)).astype(np.float32),
                                        rng.random(4) < 0.3))
            metrics.append(learner.train_many(2))
        return metrics

    stream(a, 0)
    b.load_state_dict(a.state_dict())
    assert stream(a, 1) == stream(b, 1)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(sa[k].tobytes() == sb[k].tobytes() for k in sa)
    del sa["ema.w1"]
    with pytest.raises(Exception, match=re.escape("array 'ema.w1' is missing")):
        b.load_state_dict(sa)


@pytest.mark.parametrize(("options", "message"), [
    ({"ema": 1}, "dqn: 'ema' must be below 1 (0: act with the online weights), got 1"),
    ({"ema": -0.5}, "dqn: 'ema' must be a number in [0, 1], got -0.5"),
    ({"lr_end": 0}, "dqn: 'lr_end' must be a number > 0 or None (off), got 0"),
    ({"lr_decay_steps": -1},
     "dqn: 'lr_decay_steps' must be an integer between 0 and 1,000,000,000, got -1"),
    ({"lr_end": 1e-5}, "dqn: 'lr_end' and 'lr_decay_steps' are given together"),
    ({"lr_decay_steps": 1000}, "dqn: 'lr_end' and 'lr_decay_steps' are given together"),
])
def test_a_bad_schedule_or_average_is_one_line_naming_the_field(options: dict[str, Any],
                                                                message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        DQNConfig(**options)


def test_self_play_checkpoints_and_pools_the_averaged_weights(tmp_path: Path) -> None:
    run = tmp_path / "run"
    SelfPlayTrainer(nim_config(run, learner={**nim_config(run).learner, "ema": 0.9})).run()
    state = checkpoint.load_state(run / "player_0")
    played = dict(checkpoint.load_policy(run / "player_0", "player_0").arrays)
    assert all(np.array_equal(state[f"ema.{key}"], value) for key, value in played.items())
    assert not np.array_equal(state["online.w0"], played["w0"])
    pool = checkpoint.load_run_arrays(run, POOL_FILE)
    assert pool is not None and np.array_equal(pool[f"{len(pool['epochs']) - 1}.w0"],
                                               played["w0"])  # the last joined at the end


def test_a_number_in_e_notation_is_a_number_in_a_file_and_on_the_command_line(
        tmp_path: Path) -> None:
    file = tmp_path / "train.yaml"
    file.write_text("learner: {lr: 0.00005, lr_end: 1e-6, lr_decay_steps: 1000}\n")
    assert dict(load(file).learner) == {"lr": 5e-5, "lr_end": 1e-6, "lr_decay_steps": 1000}
    assert load(file, "--set", "learner.lr=1e-4").learner["lr"] == 1e-4


@pytest.mark.parametrize("opponent_seat", ["player_0", "player_1"])
def test_a_move_answered_by_a_win_is_worth_minus_the_win_whoever_won(
        opponent_seat: str) -> None:
    """Column 0 for the first seat, 1 for the second: the first wins on move 7, a past self
    in ``opponent_seat``; the learner's last move before the opponent's win is terminal at
    minus gamma, and a learner's win leaves its earlier moves bootstrapped."""
    trainer = SelfPlayTrainer(replace(nim_config(Path("unused")), mission=CONNECT_FOUR,
                                      negamax=True))
    game = Game(trainer.mission, 0, trainer._flat, negamax=0.9)
    game.start(seed=3, episode=0, opponent=object(), seat=opponent_seat)
    move = 0
    while True:
        move += 1
        row = trainer._flat(game.request[1]) if game.learner_moves else None
        if game.play(int(move % 2 == 0), row) is not None:
            break
    closed = [(t[0], round(t[3], 6), bool(t[5])) for t in game.transitions]
    if opponent_seat == "player_0":  # the past self won: the learner's last move let it in
        assert closed == [("player_1", 0.0, False)] * 2 + [("player_1", -0.9, True)]
    else:  # the learner won after the past self's move: nothing to close but the win
        assert closed == [("player_0", 0.0, False)] * 3 + [("player_0", 1.0, True)]
    game.close()
    trainer.close()
