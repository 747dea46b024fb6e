"""Numpy multi-layer perceptrons for the built-in learners: the ``mlp`` policy's network.

The weights of a network live in one flat float32 vector with per-layer (weight, bias)
views into it, so Adam, gradient clipping and copies are one numpy call each. Acting uses
:func:`forward_einsum`, op for op ``MLPPolicy.forward``; training uses BLAS
(:func:`forward_blas`, :func:`backward`) on one thread (:func:`single_threaded_blas`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from parcat.core.errors import CheckpointError

BETA1, BETA2, ADAM_EPS = 0.9, 0.999, 1e-8

Layers = list[tuple[np.ndarray, np.ndarray]]

_blas_controller: ThreadpoolController | None = None


def single_threaded_blas() -> Any:
    """A context in which BLAS runs on one thread.

    On these small matrices extra threads cost far more than they give (2.6 ms instead of
    0.12 ms per update on 2 cores), and one thread keeps the sums' order, hence the
    results, independent of the machine's core count.
    """
    global _blas_controller
    if _blas_controller is None:
        _blas_controller = ThreadpoolController()
    return _blas_controller.limit(limits=1, user_api="blas")


INIT_SCHEMES = ("he", "uniform")
"""Weight initialisations :func:`init_params` draws (the learners' ``init`` option)."""


def init_params(sizes: Sequence[int], seed: int, scheme: str = "he") -> np.ndarray:
    """A network's initial parameters, as one flat float32 vector.

    ``he``: He-normal weights and zero biases, drawn exactly as ``MLPPolicy`` draws them.
    ``uniform``: PyTorch's default for ``nn.Linear``: weights and biases uniform in
    ``±1/sqrt(fan_in)``; smaller first Q-values than ``he`` (CartPole DQN measured far
    better with it: BENCHMARKS.md, Learning).
    """
    flat = np.zeros(sum(i * o + o for i, o in itertools.pairwise(sizes)), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for (fan_in, fan_out), (w, b) in zip(
        itertools.pairwise(sizes), views(flat, sizes), strict=True
    ):
        if scheme == "uniform":
            bound = 1.0 / np.sqrt(fan_in)
            w[...] = rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)
            b[...] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
        else:
            scale = np.sqrt(2.0 / fan_in)
            w[...] = (rng.standard_normal((fan_in, fan_out)) * scale).astype(np.float32)
    return flat


def views(flat: np.ndarray, sizes: Sequence[int]) -> Layers:
    """Per-layer (weight, bias) views into a flat parameter vector."""
    layers: Layers = []
    offset = 0
    for fan_in, fan_out in itertools.pairwise(sizes):
        w = flat[offset : offset + fan_in * fan_out].reshape(fan_in, fan_out)
        offset += fan_in * fan_out
        layers.append((w, flat[offset : offset + fan_out]))
        offset += fan_out
    return layers


def forward_einsum(layers: Layers, x: np.ndarray) -> np.ndarray:
    """``MLPPolicy.forward``, op for op: the same actions bit for bit, at any batch size."""
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        x = np.einsum("bi,io->bo", x, w) + b
        if i < last:
            np.maximum(x, 0.0, out=x)
    return x


def forward_blas(layers: Layers, x: np.ndarray) -> list[np.ndarray]:
    """The forward pass for training: every layer's input, then the outputs."""
    activations = [x]
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        h = activations[-1] @ w
        h += b
        if i < last:
            np.maximum(h, 0.0, out=h)
        activations.append(h)
    return activations


def backward(layers: Layers, grads: Layers, inputs: list[np.ndarray], dout: np.ndarray) -> None:
    """Backpropagate ``dout`` (d loss / d outputs), writing into ``grads``."""
    for i in range(len(layers) - 1, -1, -1):
        grad_w, grad_b = grads[i]
        np.matmul(inputs[i].T, dout, out=grad_w)
        np.sum(dout, axis=0, out=grad_b)
        if i > 0:
            dout = dout @ layers[i][0].T
            dout *= inputs[i] > 0  # ReLU: the input is the previous layer's output


def adam_update(params: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, step: int,
                lr: float) -> None:
    """One Adam step (Kingma & Ba) on ``params`` in place; ``step`` counts from 1."""
    m *= np.float32(BETA1)
    m += np.float32(1.0 - BETA1) * grad
    v *= np.float32(BETA2)
    v += np.float32(1.0 - BETA2) * grad * grad
    # Kingma & Ba's efficient form: bias corrections folded into the step size
    size = lr * math.sqrt(1.0 - BETA2**step) / (1.0 - BETA1**step)
    params -= np.float32(size) * m / (np.sqrt(v) + np.float32(ADAM_EPS))


def clip_grad(grad: np.ndarray, max_norm: float | None) -> float:
    """Scale ``grad`` in place to a global norm of at most ``max_norm``; return the norm before."""
    norm = float(np.sqrt(np.dot(grad, grad)))
    if max_norm is not None and norm > max_norm:
        grad *= np.float32(max_norm / (norm + 1e-6))
    return norm


def expect_array(arrays: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...] | None,
                 learner: str, rebuild: str) -> Any:
    """``arrays[key]`` as an array of ``shape``, for a learner's ``load_state_dict``.

    Raises:
        CheckpointError: the array is missing or has another shape; the message names the
            ``learner`` and how to ``rebuild`` it to fit.
    """
    if key not in arrays:
        raise CheckpointError(f"{learner} state: array '{key}' is missing; pass what "
                              f"{learner.upper()}Learner.state_dict() returned")
    value = np.asarray(arrays[key])
    if shape is not None and value.shape != shape:
        raise CheckpointError(f"{learner} state: array '{key}' expected shape {shape}, got "
                              f"{value.shape}; build the learner with {rebuild}")
    return value
