"""How a self-play Connect Four run's greedy policy plays one move deep (issue 26). Not a test.

For each run directory (``parcat train -c configs/connect_four-dqn.yaml -o RUN``) it prints:

* ``tactics``: on 3,000 positions from random play, the share where the greedy move takes an
  available one-move win, and the share where it blocks the opponent's single one-move win
  (none of its own); with the acting network's mean Q of the winning move beside the best
  other move's.
* ``buffer`` (from ``RUN/player_0/state.npz``): the replay buffer's share of terminal
  transitions and of their rewards, whether each terminal win's move is a winning move, and
  how often greedy takes the win on the buffer's own positions that hold one.
* ``losses``: 200 games a seat against the tests' scripted win-block-centre player, each loss
  named by the learner's last move before it: a missed block (one threat left open), a double
  threat (two or more: none blockable) or a gift (no threat yet: the move let one in).

    .venv/bin/python benchmarks/connect_four_tactics.py RUN [RUN ...]

The rules of the game (four in a row, where a piece lands) come from the tests' scripted
player, which is not part of what trains.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.train.connect_four_heuristic import WinBlockCentre, drop_row, wins  # noqa: E402

Layers = list[tuple[np.ndarray, np.ndarray]]


def q_values(layers: Layers, x: np.ndarray) -> np.ndarray:
    """The ``mlp`` network's outputs, illegal moves (the input's first 7 numbers) at -inf."""
    h = x
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    return np.where(x[:, :7] > 0.5, h, -np.inf)


def as_input(board: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """The network's input for the player to move (plane 0), its winning columns, theirs."""
    legal = [c for c in range(7) if drop_row(board, c) is not None]
    mask = np.zeros(7, np.float32)
    mask[legal] = 1
    mine = [c for c in legal if wins(board[:, :, 0], drop_row(board, c), c)]
    theirs = [c for c in legal if wins(board[:, :, 1], drop_row(board, c), c)]
    return np.concatenate([mask, board.reshape(-1).astype(np.float32)]), mine, theirs


def random_positions(count: int) -> list[tuple[np.ndarray, list[int], list[int]]]:
    """Positions 4 to 29 random moves in, the game not over, seen by the player to move."""
    rng = np.random.default_rng(0)
    out = []
    while len(out) < count:
        board = np.zeros((6, 7, 2), np.int8)
        for _ in range(rng.integers(4, 30)):
            legal = [c for c in range(7) if drop_row(board, c) is not None]
            column = int(rng.choice(legal))
            row = drop_row(board, column)
            if wins(board[:, :, 0], row, column):
                break
            board[row, column, 0] = 1
            board = board[:, :, ::-1].copy()
        else:
            out.append(as_input(board))
    return out


def tactics(layers: Layers) -> str:
    positions = random_positions(3000)
    q = q_values(layers, np.stack([x for x, _, _ in positions]))
    greedy = q.argmax(axis=1)
    won = [greedy[i] in mine for i, (_, mine, _) in enumerate(positions) if mine]
    blocked = [greedy[i] in theirs for i, (_, mine, theirs) in enumerate(positions)
               if not mine and len(theirs) == 1]
    q_win = [q[i, mine].max() for i, (_, mine, _) in enumerate(positions) if mine]
    q_other = [max((q[i, c] for c in range(7) if c not in mine and np.isfinite(q[i, c])),
                   default=np.nan) for i, (_, mine, _) in enumerate(positions) if mine]
    return (f"tactics: takes a win {np.mean(won):.0%} (of {len(won)}), blocks "
            f"{np.mean(blocked):.0%} (of {len(blocked)}); Q of the win {np.mean(q_win):.2f}, "
            f"best other {np.nanmean(q_other):.2f}")


def buffer(layers: Layers, state: Path) -> str:
    with np.load(state) as data:
        obs, actions, rewards, ended = (data[f"buffer.{k}"] for k in
                                        ("obs", "actions", "rewards", "terminated"))
    won = np.flatnonzero(ended & (rewards == 1))
    boards = [x[7:].reshape(6, 7, 2) for x in obs]
    winning = [int(actions[i]) in as_input(boards[i])[1] for i in won[:2000]]
    sample = np.random.default_rng(0).choice(len(actions), min(6000, len(actions)), False)
    holding = [i for i in sample if as_input(boards[i])[1]]
    greedy = q_values(layers, obs[holding]).argmax(axis=1) if holding else []
    took = [greedy[j] in as_input(boards[i])[1] for j, i in enumerate(holding)]
    return (f"buffer: {len(actions):,} transitions, {ended.mean():.1%} terminal "
            f"({np.mean(rewards[ended] == 1):.0%} won); terminal wins on a winning move "
            f"{np.mean(winning):.0%}; greedy takes the win on {np.mean(took):.0%} of its own "
            "positions holding one")


def losses(layers: Layers, learner_first: bool) -> str:
    kinds = dict.fromkeys(("won", "missed win", "missed block", "double threat", "gift"), 0)
    for seed in range(200):
        board, learner_moves, lost = np.zeros((6, 7, 2), np.int8), learner_first, None
        scripted = WinBlockCentre(None)
        scripted.reset(seed)
        last = "gift"
        while (move := as_input(board))[0][:7].any():
            x, mine, theirs = move
            if learner_moves:
                column = int(q_values(layers, x[None]).argmax())
                last = ("missed win" if mine else "double threat" if len(theirs) > 1
                        else "missed block" if theirs and column not in theirs else "gift")
            else:
                column = scripted.step({"observation": board, "action_mask": x[:7]})
            row = drop_row(board, column)
            if wins(board[:, :, 0], row, column):
                lost = not learner_moves
                break
            board[row, column, 0] = 1
            board, learner_moves = board[:, :, ::-1].copy(), not learner_moves
        if lost is not None:
            kinds[last if lost else "won"] += 1
    seat = "first" if learner_first else "second"
    return f"losses ({seat}, 200 games): " + ", ".join(f"{k} {v}" for k, v in kinds.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        with np.load(run / "player_0" / "arrays.npz") as data:
            layers = [(data[f"w{i}"], data[f"b{i}"]) for i in range(len(data.files) // 2)]
        print(run)
        print("  " + tactics(layers))
        if (run / "player_0" / "state.npz").exists():
            print("  " + buffer(layers, run / "player_0" / "state.npz"))
        for first in (True, False):
            print("  " + losses(layers, first))


if __name__ == "__main__":
    main()
