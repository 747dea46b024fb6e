"""The action distributions of :class:`~parcat.train.ppo.PPOLearner`, with their gradients.

Each returns log-probabilities and entropies, and with ``grads`` a function ``grad(g, c)``:
the gradient of ``sum(g * logp) + c * sum(entropy)`` with respect to the network's
outputs and the log standard deviation (empty for categorical).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_LOG_2PI = math.log(2.0 * math.pi)


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def categorical(z: np.ndarray, actions: np.ndarray, grads: bool) -> Any:
    """A categorical over the logits ``z`` at the chosen ``actions``."""
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
    """A diagonal Gaussian (state-independent ``log_std``) at the pre-tanh actions ``u``."""
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
