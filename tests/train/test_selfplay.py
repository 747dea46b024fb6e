"""Self-play on turn-based games: one network plays (and learns from) every seat, past
selves join a pool that is saved and resumed, every reward reaches a transition, and a seed
gives the same checkpoint twice. Tiny budgets on Nim (tests/envs/nim.py) and Connect Four;
the 10-minute acceptance is benchmarks/learning.py --only connect_four."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.classic.connect_four.connect_four import raw_env
from typer.testing import CliRunner

from parcat.cli.main import app
from parcat.core.errors import ConfigError
from parcat.policies import checkpoint
from parcat.train.config import TrainConfig
from parcat.train.runs import TOTAL
from parcat.train.selfplay import POOL_FILE, Game, NegamaxDQN, SelfPlayTrainer
from tests.envs.nim import NimEnv
from tests.train.flags import load

ROOT = Path(__file__).resolve().parents[2]
NIM = "tests.envs.nim:NimEnv"
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3"
TINY = {"learning_starts": 50, "batch_size": 16, "width": 16, "buffer_size": 2000,
        "eps_decay_steps": 500}


def nim_config(run: Path, **more: object) -> TrainConfig:
    return TrainConfig(**{"mission": NIM, "epochs": 6, "steps_per_epoch": 20, "envs_per_worker": 4,
                          "gradient_steps": 5, "checkpoint_every": 3, "eval_episodes": 6,
                          "pool_every": 2, "pool_size": 2, "run_dir": str(run),
                          "learner": TINY, **more})  # type: ignore[arg-type]


def weights(run: Path, agent: str) -> dict[str, np.ndarray]:
    return dict(checkpoint.load_policy(run / agent, agent).arrays)


def test_both_seats_play_one_network_and_learn_from_their_own_turns(tmp_path: Path) -> None:
    trainer = SelfPlayTrainer(nim_config(tmp_path / "run"))
    assert trainer.learners["player_0"] is trainer.learners["player_1"]
    seats = []
    learner = trainer.learner
    observe = learner.observe
    learner.observe = lambda batch: (seats.extend(batch.env // trainer.plan.num_envs),  # type: ignore[method-assign]
                                     observe(batch))[1]
    report = trainer.run()
    assert {0, 1} <= set(seats)  # both seats' moves fed the one learner
    run = tmp_path / "run"
    assert all(np.array_equal(a, b) for a, b in zip(weights(run, "player_0").values(),
                                                   weights(run, "player_1").values(),
                                                   strict=True))
    # the state (replay buffer, optimizer) is kept once, beside the first seat's policy
    assert (run / "player_0" / checkpoint.STATE).exists()
    assert not (run / "player_1" / checkpoint.STATE).exists()
    pools = [s.learner_metrics["shared"]["pool"] for s in report.epochs]
    assert pools == [0.0, 1.0, 1.0, 2.0, 2.0, 2.0]  # one joins every 2 epochs; 2 at most
    saved = checkpoint.load_run_arrays(run, POOL_FILE)
    assert saved is not None and saved["epochs"].tolist() == [4, 6]  # the oldest left


def test_every_reward_of_a_game_reaches_the_seat_that_earned_it() -> None:
    trainer = SelfPlayTrainer(nim_config(Path("unused")))
    game = Game(trainer.mission, 0, trainer._flat)
    game.start(seed=3, episode=0)
    length = None
    while length is None:
        obs = game.request[1]
        action = int(np.flatnonzero(obs["action_mask"])[-1])  # take as many as allowed
        length = game.play(action, trainer._flat(obs))
    earned = {agent: sum(t[3] for t in game.transitions if t[0] == agent)
              for agent in game.agents}
    assert earned == pytest.approx(dict(zip(game.agents, game.returns(), strict=True)))
    assert sorted(game.returns())[0] < 0 < sorted(game.returns())[1]  # one won
    assert [t[5] for t in game.transitions].count(True) == 2  # each seat's last move ends it
    game.close()


def test_monte_carlo_hands_over_each_move_with_the_game_s_outcome() -> None:
    trainer = SelfPlayTrainer(nim_config(Path("unused")))
    game = Game(trainer.mission, 0, trainer._flat, monte_carlo=0.5)
    game.start(seed=3, episode=0)
    while game.play(0, trainer._flat(game.request[1])) is None:  # one stone a turn
        assert game.transitions == []  # nothing before the game ends
    for agent, total in zip(game.agents, game.returns(), strict=True):
        rewards = [t[3] for t in game.transitions if t[0] == agent]  # last move first
        assert rewards[-1] == pytest.approx(sum(0.5 ** i * 0.01 for i in range(len(rewards)))
                                            + 0.5 ** (len(rewards) - 1) * (total - 0.01
                                                                            * len(rewards)))
    assert all(t[5] for t in game.transitions)  # nothing is bootstrapped
    game.close()


def test_negamax_ends_each_move_where_the_opponent_moves_next() -> None:
    trainer = SelfPlayTrainer(replace(nim_config(Path("unused")), mission=CONNECT_FOUR,
                                      negamax=True))
    game = Game(trainer.mission, 0, trainer._flat, negamax=0.9)
    game.start(seed=3, episode=0)
    rows = []
    while True:  # column 0 for the first seat, 1 for the second: the first wins on move 7
        rows.append(trainer._flat(game.request[1]))
        if game.play(int(len(rows) % 2 == 0), rows[-1]) is not None:
            break
    moves = game.transitions
    assert len(moves) == len(rows) == 7
    for move, row, seen in zip(moves, rows, rows[1:], strict=False):
        assert np.array_equal(move[1], row) and np.array_equal(move[4], seen)
    assert all((move[3], move[5]) == (0.0, False) for move in moves[:5])
    # the loser's last move let the win in: worth minus the win a turn on, exactly
    assert (moves[5][0], moves[5][3], moves[5][5]) == ("player_1", pytest.approx(-0.9), True)
    assert (moves[-1][0], moves[-1][3], moves[-1][5]) == ("player_0", 1.0, True)  # the win
    game.close()
    trainer.close()


def test_negamax_values_a_move_by_the_opponent_s_best_legal_reply_negated() -> None:
    trainer = SelfPlayTrainer(replace(nim_config(Path("unused")), negamax=True))
    learner = trainer.learner
    assert isinstance(learner, NegamaxDQN)
    assert learner.legal_columns is not None and learner.legal_columns.tolist() == [0, 1, 2]
    q = np.array([[0.5, 9.0, -0.2], [0.3, 0.1, 0.7]], np.float32)
    seen = np.array([[1, 0, 1, 4], [1, 1, 1, 9]], np.float32)  # mask, then the pile
    assert learner._next_value(q, None, seen).tolist() == pytest.approx([-0.5, -0.7])
    # double DQN: the online network's best legal reply, valued by the target network
    online = np.array([[0.0, 5.0, 1.0], [2.0, 0.0, 0.0]], np.float32)
    assert learner._next_value(q, online, seen).tolist() == pytest.approx([0.2, -0.3])
    trainer.close()


def test_mirror_learns_each_move_again_on_the_board_flipped_left_to_right(
        tmp_path: Path) -> None:
    trainer = SelfPlayTrainer(replace(nim_config(tmp_path / "run"), mission=CONNECT_FOUR,
                                      mirror=True, negamax=True, epochs=1))
    board = np.zeros((6, 7, 2), np.int8)
    board[5, 0, 0] = board[5, 1, 1] = board[4, 0, 1] = 1
    mask = np.array([1, 1, 1, 1, 1, 1, 0], np.int8)
    seen = trainer._flat({"observation": board, "action_mask": mask})
    flipped = trainer._flat({"observation": board[:, ::-1], "action_mask": mask[::-1]})
    assert trainer.mirrored is not None and np.array_equal(seen[trainer.mirrored], flipped)
    batches: list[Any] = []
    trainer.learner.observe = batches.append  # type: ignore[method-assign]
    trainer._start()
    while not batches:
        trainer._move()
    plain, mirrored = batches
    assert np.array_equal(plain.obs[:, trainer.mirrored], mirrored.obs)
    assert np.array_equal(plain.next_obs[:, trainer.mirrored], mirrored.next_obs)
    assert np.array_equal(6 - plain.actions, mirrored.actions)
    trainer.close()


def test_a_game_without_one_axis_per_move_cannot_be_mirrored() -> None:
    with pytest.raises(ConfigError, match=r"mirror: the observation 'observation' has shape "
                       r"\(1,\): 0 axes of 3, one per move, where the mirror needs one"):
        SelfPlayTrainer(nim_config(Path("unused"), mirror=True))


def test_a_seed_trains_the_same_network_twice(tmp_path: Path) -> None:
    for name in ("a", "b"):
        SelfPlayTrainer(nim_config(tmp_path / name)).run()
    first, second = weights(tmp_path / "a", "player_0"), weights(tmp_path / "b", "player_0")
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert (json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[-1])
            ["eval_return"]
            == json.loads((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()[-1])
            ["eval_return"])


def test_a_resumed_run_gets_its_pool_back(tmp_path: Path) -> None:
    SelfPlayTrainer(nim_config(tmp_path / "run", epochs=3)).run()
    resumed = SelfPlayTrainer(nim_config(tmp_path / "run"), resume=True)
    assert resumed.start_epoch == 3
    assert [epoch for epoch, _ in resumed.pool] == [2]
    report = resumed.run()
    assert [s.epoch for s in report.epochs] == [4, 5, 6]


def test_parcat_train_plays_connect_four_against_itself(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "train", "-m", CONNECT_FOUR, "--epochs", "2",
         "--steps-per-epoch", "30", "--envs-per-worker", "4", "--eval-episodes", "4",
         "--pool-every", "1", "--set", "learner.learning_starts=20", "--set",
         "learner.buffer_size=1000", "-o", str(tmp_path / "run"), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "the best (epoch 2" in proc.stdout
    assert (f"note: {CONNECT_FOUR} is turn-based: one network learns every seat by self-play"
            in proc.stderr)
    manifest = checkpoint.read_manifest(tmp_path / "run")
    assert set(manifest["agents"]) == {"player_0", "player_1"}
    # the checkpoint plays in parcat eval as trained: legal moves only, from both seats
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "eval", "-m", CONNECT_FOUR, "-p", str(tmp_path / "run"),
         "-p", "random", "--cross", "-n", "4", "--jobs", "1", "-f", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sides = json.loads(proc.stdout)["sides"]
    assert all(row["illegal_moves"] == 0 for row in sides)


def test_a_learner_without_legal_move_masks_is_one_line() -> None:
    result = CliRunner().invoke(app, ["train", "-m", NIM, "--learner", "ppo", "--epochs", "1"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"parcat: error: self-play on '{NIM}': the learner PPOLearner takes no legal-move "
        "masks (act(obs, explore, legal)); use --learner dqn\n")


class BrokenNim(NimEnv):
    """Nim whose every game raises on its 50th step (tests.train.test_selfplay:BrokenNim)."""

    def step(self, action: object) -> None:
        self.moves = getattr(self, "moves", 0) + 1
        if self.moves == 50:
            raise RuntimeError("the board fell over")
        super().step(action)


def test_a_game_that_raises_mid_run_is_one_line_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "parcat", "train", "-m", "tests.train.test_selfplay:BrokenNim",
         "--epochs", "5", "--steps-per-epoch", "20", "--envs-per-worker", "2",
         "--checkpoint-every", "1", "--eval-episodes", "0", "-o", str(run), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    note, error = proc.stderr.splitlines()  # the start's note, then the one error line
    assert note.startswith("note: tests.train.test_selfplay:BrokenNim is turn-based")
    assert (proc.returncode, error + "\n") == (1, (
        "parcat: error: training stopped after 1 epoch(s): game 1 of "
        "'tests.train.test_selfplay:BrokenNim' raised RuntimeError: the board fell over; the "
        f"last checkpoint is {run}\n"))
    assert checkpoint.read_manifest(run)["epoch"] == 1


def test_connect_four_gets_its_tuned_self_play_config(tmp_path: Path) -> None:
    config = load(None, "-m", CONNECT_FOUR)
    assert (config.negamax, config.mirror, config.total_steps) == (True, True, 600_000)
    assert (config.learner["ema"], config.learner["lr_end"]) == (0.999, 5e-5)
    trainer = SelfPlayTrainer(replace(config, run_dir=str(tmp_path / "run")))
    assert trainer.config.epochs == 293  # 600,000 moves in epochs of 32 games x 64 moves
    trainer.close()


@pytest.mark.parametrize("flag", [["--mode", "async"], ["--render"], ["--shared-learner"]])
def test_what_self_play_cannot_do_is_one_line(flag: list[str]) -> None:
    result = CliRunner().invoke(app, ["train", "-m", NIM, "--epochs", "1", *flag])
    assert result.exit_code == 2
    assert result.stderr == (
        f"parcat: error: self-play on '{NIM}' plays every game in this process; "
        f"{' '.join(flag)} is not supported there: leave it out\n")


@pytest.mark.parametrize(("flags", "named"), [
    (["--negamax", "--monte-carlo"], "got DQNLearner"),
    (["--negamax", "--learner", "ppo"], "got PPOLearner"),
])
def test_negamax_beside_what_it_cannot_use_is_one_line(flags: list[str], named: str) -> None:
    result = CliRunner().invoke(app, ["train", "-m", NIM, "--epochs", "1", *flags])
    assert result.exit_code == 2
    assert result.stderr == (
        f"parcat: error: self-play on '{NIM}': --negamax needs two seats (this game has 2), "
        f"--learner dqn ({named}) and no --monte-carlo\n")


class MasklessNim(NimEnv):
    """Nim without an ``action_mask``: two numbers seen (the pile, and what is left of it
    modulo 4), 3 moves, every move legal (taking more than is left takes the rest)
    (tests.train.test_selfplay:MasklessNim)."""

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Box(0, self.high, (2,), np.float32)

    def observe(self, agent: str) -> Any:
        return np.array([self.pile, self.pile % 4], np.float32)

    def step(self, action: Any) -> None:
        super().step(action if action is None else min(int(action), self.pile - 1))


def test_a_game_without_action_masks_trains_and_evaluates(tmp_path: Path) -> None:
    # two numbers seen, three moves: every move is legal, not one per number seen
    report = SelfPlayTrainer(nim_config(tmp_path / "run", epochs=2, checkpoint_every=1,
                                        mission="tests.train.test_selfplay:MasklessNim")).run()
    assert [s.epoch for s in report.epochs] == [1, 2]
    assert not math.isnan(report.epochs[-1].eval_return[TOTAL])


class ResetBreaks(raw_env):  # type: ignore[misc]
    """Connect Four whose reset number ``breaks_on`` in the process ``pid`` raises (the
    checks that read the game's spaces in a worker do not count)
    (tests.train.test_selfplay:ResetBreaks)."""

    pid, resets, breaks_on = 0, 0, 3

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        if os.getpid() == ResetBreaks.pid:
            ResetBreaks.resets += 1
            if ResetBreaks.resets == ResetBreaks.breaks_on:
                raise RuntimeError("the board fell over")
        super().reset(seed, options)


@pytest.mark.parametrize(("breaks_on", "games", "failed", "after"), [
    (3, 4, "game 2", "0 epoch(s)"),  # the third game's first reset, before any epoch
    (4, 2, "evaluation game 0", "1 epoch(s)"),  # the second evaluation (a fixed set)
])
def test_a_game_that_raises_at_start_or_in_evaluation_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breaks_on: int, games: int,
        failed: str, after: str) -> None:
    monkeypatch.setattr(ResetBreaks, "pid", os.getpid())
    monkeypatch.setattr(ResetBreaks, "resets", 0)
    monkeypatch.setattr(ResetBreaks, "breaks_on", breaks_on)
    run, mission = tmp_path / "run", "tests.train.test_selfplay:ResetBreaks"
    result = CliRunner().invoke(app, [
        "train", "-m", mission, "--epochs", "3", "--steps-per-epoch", "3", "--envs-per-worker",
        str(games), "--eval-episodes", "1", "--checkpoint-every", "1", "-o", str(run),
        "--no-progress", "--set", "learner.learning_starts=1000"])
    kept = f"the last checkpoint is {run}" if after == "1 epoch(s)" else "no checkpoint was written"
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (1, (
        f"parcat: error: training stopped after {after}: {failed} of '{mission}' raised "
        f"RuntimeError: the board fell over; {kept}"))
    if after == "1 epoch(s)":
        assert checkpoint.read_manifest(run)["epoch"] == 1
