"""A scripted Connect Four player for the self-play acceptance: win if it can, block if it
must, else a column drawn towards the centre (seeded per episode).

Referenced as ``tests.train.connect_four_heuristic:WinBlockCentre`` (``parcat eval -p``).
PettingZoo's board is (6 rows, 7 columns, 2 planes): plane 0 the mover's pieces, plane 1 the
opponent's; a piece drops to the lowest empty row (the highest row index).
"""

from __future__ import annotations

from typing import Any

import numpy as np

CENTRE_WEIGHTS = np.array([1, 2, 3, 4, 3, 2, 1], dtype=float)
"""How much likelier each column is, when neither a win nor a block decides."""


def wins(board: np.ndarray, row: int, col: int) -> bool:
    """Whether a piece at (row, col) on ``board`` (one player's 6x7 plane) makes four."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < 6 and 0 <= c < 7 and board[r, c]:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


def drop_row(board: np.ndarray, col: int) -> int | None:
    """The row a piece dropped in ``col`` lands on (``None``: the column is full)."""
    empty = np.flatnonzero(board[:, col, 0] + board[:, col, 1] == 0)
    return int(empty[-1]) if len(empty) else None


class WinBlockCentre:
    """Win if it can, block if it must, else centre-ish."""

    def __init__(self, agent_spec: Any) -> None:
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def step(self, obs: Any) -> int:
        board = np.asarray(obs["observation"])
        legal = np.flatnonzero(obs["action_mask"])
        for plane in (0, 1):  # my win first, then the opponent's to block
            for col in legal:
                row = drop_row(board, int(col))
                if row is not None and wins(board[:, :, plane], row, int(col)):
                    return int(col)
        weights = CENTRE_WEIGHTS[legal]
        return int(self.rng.choice(legal, p=weights / weights.sum()))
