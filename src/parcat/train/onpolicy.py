"""On-policy data: the rollout an actor-critic learner collects, and GAE over it.

Rows arrive batch by batch in step order, each naming its environment
(:attr:`Transitions.env <parcat.train.learner.Transitions.env>`), so every environment's
rows, read in order, are its trajectory. :func:`gae` walks them backwards once.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from parcat.core.errors import CheckpointError

FIELDS = ("obs", "actions", "logp", "values", "next_values", "rewards", "terminated",
          "truncated", "env")
"""The columns of a rollout."""

DTYPES = {"obs": np.float32, "actions": np.float32, "logp": np.float32, "values": np.float32,
          "next_values": np.float32, "rewards": np.float32, "terminated": np.bool_,
          "truncated": np.bool_, "env": np.int64}


class Rollout:
    """Rows collected since the last update, kept as the batches that brought them.

    Args:
        obs_dim: Length of a flat observation.
        action_dim: Columns of an action row (1 for a Discrete action).
    """

    def __init__(self, obs_dim: int, action_dim: int) -> None:
        self.shapes = {"obs": (obs_dim,), "actions": (action_dim,)}
        self.parts: list[dict[str, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(len(part["rewards"]) for part in self.parts)

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Append one batch (every column of :data:`FIELDS`, the same length)."""
        self.parts.append({key: np.asarray(columns[key], dtype=DTYPES[key]) for key in FIELDS})

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column, all rows in arrival order."""
        if not self.parts:
            return {key: np.zeros((0, *self.shapes.get(key, ())), dtype=DTYPES[key])
                    for key in FIELDS}
        return {key: np.concatenate([part[key] for part in self.parts]) for key in FIELDS}

    def clear(self) -> None:
        """Forget every row (after an update)."""
        self.parts = []

    def state_dict(self, prefix: str) -> dict[str, np.ndarray]:
        """The rows as named arrays (``prefix`` + column)."""
        return {prefix + key: value for key, value in self.arrays().items()}

    def load_state_dict(self, arrays: Mapping[str, np.ndarray], prefix: str) -> None:
        """Restore :meth:`state_dict`'s rows.

        Raises:
            CheckpointError: a column is missing or the columns disagree in shape.
        """
        columns: dict[str, np.ndarray] = {}
        for key in FIELDS:
            if prefix + key not in arrays:
                raise CheckpointError(f"rollout state: array '{prefix}{key}' is missing")
            columns[key] = np.asarray(arrays[prefix + key], dtype=DTYPES[key])
        rows = len(columns["rewards"])
        for key, value in columns.items():
            shape = (rows, *self.shapes.get(key, ()))
            if value.shape != shape:
                raise CheckpointError(f"rollout state: array '{prefix}{key}' expected shape "
                                      f"{shape}, got {value.shape}")
        self.parts = [columns] if rows else []


def gae(columns: Mapping[str, np.ndarray], gamma: float,
        lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimates and value targets (Schulman et al., 2016).

    A terminated row's next value is 0; a truncated row's and each environment's last
    row's is ``V(next_obs)`` (``next_values``); no advantage flows back across an
    episode's end.

    Returns:
        ``(advantages, returns)``, float32, one per row.
    """
    gamma32, lam32 = np.float32(gamma), np.float32(gamma * lam)
    rewards, values = columns["rewards"], columns["values"]
    alive = ~columns["terminated"]
    delta = rewards + gamma32 * columns["next_values"] * alive - values
    ends = (columns["terminated"] | columns["truncated"]).tolist()
    envs = columns["env"].tolist()
    deltas = delta.tolist()
    advantages = [0.0] * len(deltas)
    following: dict[int, float] = {}  # each environment's advantage one row later
    for row in range(len(deltas) - 1, -1, -1):
        env = envs[row]
        carried = 0.0 if ends[row] else following.get(env, 0.0)
        following[env] = advantages[row] = deltas[row] + float(lam32) * carried
    adv = np.asarray(advantages, dtype=np.float32)
    return adv, (adv + values).astype(np.float32)
