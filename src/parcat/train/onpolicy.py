"""On-policy data and distributions for :class:`~parcat.train.ppo.PPOLearner`: the rollout,
GAE over it, and the action distributions with their gradients.

Rows arrive batch by batch in step order, each naming its environment, so every
environment's rows, read in order, are its trajectory; :func:`gae` walks them backwards.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from parcat.core.errors import CheckpointError

DTYPES = {"obs": np.float32, "actions": np.float32, "logp": np.float32, "values": np.float32,
          "next_values": np.float32, "rewards": np.float32, "terminated": np.bool_,
          "truncated": np.bool_, "env": np.int64}
"""The columns of a rollout."""
FIELDS = tuple(DTYPES)
_LOG_2PI = math.log(2.0 * math.pi)


class Rollout:
    """Rows collected since the last update, kept as the batches that brought them
    (``action_dim``: 1 for a Discrete action)."""

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
        """Restore :meth:`state_dict`'s rows (:class:`CheckpointError`: a column missing or
        of another shape)."""
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
    """``(advantages, returns)`` per row, float32 (GAE, Schulman et al., 2016). A
    terminated row's next value is 0, a truncated or last row's ``next_values``; no
    advantage flows back across an episode's end."""
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


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def categorical(z: np.ndarray, actions: np.ndarray, grads: bool) -> Any:
    """Log-probabilities and entropies of a categorical over the logits ``z`` at
    ``actions``; with ``grads`` also ``grad(g, c)``: the gradient of ``sum(g * logp) + c *
    sum(entropy)`` with respect to ``z`` and the log-std (here empty)."""
    shifted = z - z.max(axis=1, keepdims=True)
    log_all = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    probs = np.exp(log_all)
    rows = np.arange(len(z))
    logp = log_all[rows, actions]
    entropy = -(probs * log_all).sum(axis=1)
    if not grads:
        return logp, entropy

    def grad(g: np.ndarray, c: np.float32) -> tuple[np.ndarray, np.ndarray]:
        d_out = -g[:, None] * probs
        d_out[rows, actions] += g
        d_out -= c * probs * (log_all + entropy[:, None])  # d entropy / d z = -p (log p + H)
        return d_out, np.zeros(0, np.float32)

    return logp, entropy, grad


def gaussian(mean: np.ndarray, u: np.ndarray, log_std: np.ndarray, grads: bool) -> Any:
    """:func:`categorical`'s values for a diagonal Gaussian (state-independent ``log_std``)
    at the pre-tanh actions ``u``."""
    std = np.exp(log_std)
    z = (u - mean) / std
    logp = (-0.5 * z * z - log_std - np.float32(0.5 * _LOG_2PI)).sum(axis=1)
    entropy = np.full(len(mean), (log_std + np.float32(0.5 * (1.0 + _LOG_2PI))).sum(),
                      np.float32)
    if not grads:
        return logp, entropy

    def grad(g: np.ndarray, c: np.float32) -> tuple[np.ndarray, np.ndarray]:
        d_log_std = (g[:, None] * (z * z - 1.0)).sum(axis=0) + c * np.float32(len(mean))
        return g[:, None] * z / std, d_log_std.astype(np.float32)

    return logp, entropy, grad
