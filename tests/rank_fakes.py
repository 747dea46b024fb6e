"""What the rating tests play: a duel whose outcome follows a known Bradley–Terry model, a
policy of a given strength, two Connect Four players (a scripted heuristic, and one that
ignores the action mask), and a slow policy that says when it has begun. Referenced as
``tests.rank_fakes:...`` so workers import them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from parcat.policies.base import AgentSpec

AGENTS = ["player_0", "player_1"]


class DuelEnv:
    """One step: each player's action is its strength r; player_0 wins with probability
    1 / (1 + exp(r_1 - r_0 - seat)), drawn from the episode's seed (+1 / -1 returns)."""

    metadata: dict[str, Any] = {"name": "duel"}

    def __init__(self, seat: float = 0.0) -> None:
        self.seat = seat
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Box(-10.0, 10.0, (1,), np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        self._rng = np.random.default_rng(seed)
        self.agents = list(AGENTS)
        return {a: np.zeros(1, np.float32) for a in AGENTS}, {a: {} for a in AGENTS}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        strength = [float(np.asarray(actions[a]).ravel()[0]) for a in AGENTS]
        first_wins = self._rng.random() < 1 / (1 + np.exp(strength[1] - strength[0] - self.seat))
        rewards = dict(zip(AGENTS, (1.0, -1.0) if first_wins else (-1.0, 1.0), strict=True))
        self.agents = []
        done = {a: True for a in AGENTS}
        return ({a: np.zeros(1, np.float32) for a in AGENTS}, rewards, done, done,
                {a: {} for a in AGENTS})


class Strength:
    """Plays its strength, the rating the duel reads."""

    def __init__(self, agent: AgentSpec, rating: float = 0.0) -> None:
        self.rating = float(rating)

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> Any:
        return np.array([self.rating], np.float32)


def _drop_row(board: np.ndarray, column: int) -> int | None:
    empty = [r for r in range(board.shape[0]) if not board[r, column].any()]
    return max(empty) if empty else None


def _wins(pieces: np.ndarray, row: int, column: int) -> bool:
    """Whether a piece at (row, column) completes four in a line of ``pieces``."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < pieces.shape[0] and 0 <= c < pieces.shape[1] and pieces[r, c]:
                count, r, c = count + 1, r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


class Heuristic:
    """Connect Four written for the test: win if it can, else block, else the legal column
    nearest the centre."""

    def __init__(self, agent: AgentSpec) -> None:
        pass

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> int:
        board, mask = np.asarray(obs["observation"]), np.asarray(obs["action_mask"])
        legal = [c for c in range(board.shape[1]) if mask[c]]
        for player in (0, 1):  # our win first, then their threat
            for column in legal:
                row = _drop_row(board, column)
                if row is not None and _wins(board[:, :, player], row, column):
                    return column
        return min(legal, key=lambda c: abs(c - board.shape[1] // 2))


class IgnoresMask:
    """Plays a column the mask forbids whenever there is one, else column 0: its games end
    on PettingZoo's illegal-move termination."""

    def __init__(self, agent: AgentSpec) -> None:
        pass

    def reset(self, seed: int) -> None:
        pass

    def step(self, obs: Any) -> int:
        forbidden = np.flatnonzero(np.asarray(obs["action_mask"]) == 0)
        return int(forbidden[0]) if forbidden.size else 0


class Slow:
    """Plays action 0, 20 ms a step; creates the file ``marker`` at an episode's tenth step
    (set-up checks step less), so a test knows the episodes have begun."""

    def __init__(self, agent: AgentSpec, marker: str = "") -> None:
        self.marker = Path(marker) if marker else None
        self.steps = 0

    def reset(self, seed: int) -> None:
        self.steps = 0

    def step(self, obs: Any) -> int:
        self.steps += 1
        if self.marker is not None and self.steps == 10:
            self.marker.touch()
        time.sleep(0.02)
        return 0
