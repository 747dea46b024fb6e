"""What parcat's numpy learners share: the ``mlp`` policy's network, Adam, their options'
common fields and checks (:class:`MLPOptions`) and the learner plumbing (:class:`MLPLearner`).

A network's weights live in one flat float32 vector with per-layer (weight, bias) views, so
Adam, gradient clipping and copies are one numpy call each. Acting uses
:func:`forward_acting`, which is ``MLPPolicy.forward``; training uses BLAS on one thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from parcat.core.errors import CheckpointError, ConfigError, brief, clip
from parcat.core.limits import MAX_NET_DEPTH, MAX_NET_WIDTH
from parcat.core.resources import blas_limited
from parcat.policies.builtin import dense_forward
from parcat.train.learner import decode_rng, encode_rng

BETA1, BETA2, ADAM_EPS = 0.9, 0.999, 1e-8
INIT_SCHEMES = ("he", "uniform")
"""Weight initialisations :func:`init_params` draws (the learners' ``init`` option)."""
Layers = list[tuple[np.ndarray, np.ndarray]]
_pinned = False
"""Whether a :func:`blas_pinned` block is running in this process."""


def single_threaded_blas() -> Any:
    """A context in which BLAS runs on one thread: on these small matrices more threads
    cost far more than they give. Inside :func:`blas_pinned` it does nothing."""
    return contextlib.nullcontext() if _pinned else blas_limited(1)


@contextlib.contextmanager
def blas_pinned() -> Iterator[None]:
    """BLAS on one thread for a whole training run: setting the limit for every action
    and every round (:func:`single_threaded_blas`) cost as much CPU as a small network's
    forward pass."""
    global _pinned
    if _pinned:
        yield
        return
    with blas_limited(1):
        _pinned = True
        try:
            yield
        finally:
            _pinned = False


def init_params(sizes: Sequence[int], seed: int, scheme: str = "he") -> np.ndarray:
    """A network's initial parameters, one flat float32 vector: ``he`` draws as ``MLPPolicy``
    does (He-normal, zero biases), ``uniform`` as PyTorch's ``nn.Linear`` (``±1/sqrt(fan_in)``;
    BENCHMARKS.md, Learning: CartPole DQN learns far better with it)."""
    flat = np.zeros(sum(i * o + o for i, o in itertools.pairwise(sizes)), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for (fan_in, fan_out), (w, b) in zip(itertools.pairwise(sizes), views(flat, sizes),
                                         strict=True):
        if scheme == "uniform":
            bound = 1.0 / np.sqrt(fan_in)
            w[...] = rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)
            b[...] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
        else:
            w[...] = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(
                np.float32)
    return flat


def views(flat: np.ndarray, sizes: Sequence[int]) -> Layers:
    """Per-layer (weight, bias) views into a flat parameter vector."""
    layers: Layers = []
    offset = 0
    for fan_in, fan_out in itertools.pairwise(sizes):
        end = offset + fan_in * fan_out
        layers.append((flat[offset:end].reshape(fan_in, fan_out), flat[end : end + fan_out]))
        offset = end + fan_out
    return layers


def assign_layers(layers: Layers, values: Layers) -> None:
    """Copy ``values`` into the (weight, bias) arrays of ``layers``."""
    for (w, b), (new_w, new_b) in zip(layers, values, strict=True):
        w[...], b[...] = new_w, new_b


def forward_acting(layers: Layers, x: np.ndarray) -> np.ndarray:
    """The acting network's outputs: ``MLPPolicy.forward`` itself, so a trained policy acts
    the same bit for bit in training, in its greedy evaluation and in ``parcat eval``."""
    with single_threaded_blas():
        return dense_forward(layers, x)


def forward_blas(layers: Layers, x: np.ndarray) -> list[np.ndarray]:
    """The forward pass for training: every layer's input, then the outputs."""
    activations = [x]
    for i, (w, b) in enumerate(layers):
        h = activations[-1] @ w
        h += b
        if i < len(layers) - 1:
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


def clip_grad(grad: np.ndarray, max_norm: float | None) -> float:
    """Scale ``grad`` in place to a global norm of at most ``max_norm``; return the norm before."""
    norm = float(np.sqrt(np.dot(grad, grad)))
    if max_norm is not None and norm > max_norm:
        grad *= np.float32(max_norm / (norm + 1e-6))
    return norm


def is_int(value: Any) -> bool:
    """An ``int`` and not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite ``int`` or ``float`` and not a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


OptionsT = TypeVar("OptionsT", bound="MLPOptions")


@dataclass(frozen=True)
class MLPOptions:
    """The options every learner on the ``mlp`` network has, checked on construction
    (:class:`ConfigError` naming the field): the integer ranges, ``lr``, the fields in
    [0, 1], then the subclass's :meth:`check`."""

    width: int = 64
    """Units per hidden layer of each network (the ``mlp`` policy's ``width``)."""
    depth: int = 2
    """Number of hidden layers of each network (the ``mlp`` policy's ``depth``)."""
    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor, in [0, 1]."""

    learner: ClassVar[str] = "mlp"  # the name that begins every message
    int_ranges: ClassVar[Mapping[str, tuple[int, int | None]]] = {}  # (lowest, highest or None)
    unit_fields: ClassVar[tuple[str, ...]] = ()  # numbers in [0, 1]
    flags: ClassVar[tuple[str, ...]] = ()  # true or false
    renamed: ClassVar[Mapping[str, str]] = {}  # an old option: what replaced it

    def __post_init__(self) -> None:
        name = self.learner
        for key, (low, high) in {"width": (1, MAX_NET_WIDTH), "depth": (1, MAX_NET_DEPTH),
                                 **self.int_ranges}.items():
            value = getattr(self, key)
            if not is_int(value) or value < low or (high is not None and value > high):
                bounds = f">= {low}" if high is None else f"between {low} and {high:,}"
                raise ConfigError(f"{name}: '{key}' must be an integer {bounds}, "
                                  f"got {brief(value)}")
        if not is_number(self.lr) or self.lr <= 0:
            raise ConfigError(f"{name}: 'lr' must be a number > 0, got {brief(self.lr)}")
        for key in ("gamma", *self.unit_fields):
            value = getattr(self, key)
            if not is_number(value) or not 0 <= value <= 1:
                raise ConfigError(f"{name}: '{key}' must be a number in [0, 1], "
                                  f"got {brief(value)}")
        for key in self.flags:
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{name}: '{key}' must be true or false, "
                                  f"got {brief(getattr(self, key))}")
        self.check()

    def check(self) -> None:
        """The learner's own checks, after the shared ones."""

    def check_positive(self, key: str, off: bool = False) -> None:
        """``key`` a number > 0 (or ``None`` with ``off``), else :class:`ConfigError`."""
        value = getattr(self, key)
        if (value is not None or not off) and (not is_number(value) or value <= 0):
            raise ConfigError(f"{self.learner}: '{key}' must be a number > 0"
                              f"{' or None (off)' if off else ''}, got {brief(value)}")

    @classmethod
    def from_mapping(cls: type[OptionsT], values: Mapping[str, Any]) -> OptionsT:
        """Build the options from a mapping (a YAML file, CLI options); :class:`ConfigError`
        for an unknown key (naming the known ones) or a value out of range."""
        known = [f.name for f in dataclasses.fields(cls)]
        for old, new in cls.renamed.items():
            if old in values:
                raise ConfigError(f"{cls.learner}: option '{old}' is now {new}; rename it")
        unknown = sorted(str(key) for key in values if key not in known)
        if unknown:
            raise ConfigError(f"{cls.learner}: unknown option '{clip(unknown[0])}'; known: "
                              f"{', '.join(known)}")
        return cls(**values)


class MLPLearner:
    """The plumbing of parcat's numpy learners: options (``settings``, an
    ``options_class``), flat parameters with Adam, the acting copy of the ``mlp`` network
    (``_actor`` published as ``_acting``) and the state they share."""

    options_class: ClassVar[Any]
    rebuild: ClassVar[str]  # how a state of another shape is fitted, for error messages
    settings: Any
    policy = "parcat.policies.builtin:MLPPolicy"
    _actor: Layers
    _acting: Layers
    rng: np.random.Generator

    def _init_training(self, params: np.ndarray) -> None:
        self._params = params
        self._grad = np.zeros_like(params)
        self._adam_m, self._adam_v = np.zeros_like(params), np.zeros_like(params)
        self._adam_step = self.num_observed = self.num_updates = 0

    @classmethod
    def check_config(cls, options: Mapping[str, Any]) -> None:
        """Refuse an unknown option or a bad value (:class:`ConfigError`), before a run."""
        cls.options_class.from_mapping(options)

    @property
    def config(self) -> dict[str, Any]:
        """The hyperparameters as a JSON-able mapping (the run manifest's ``learner``)."""
        return dataclasses.asdict(self.settings)

    @property
    def policy_kwargs(self) -> dict[str, int]:
        """Arguments of ``MLPPolicy`` whose ``load_state_dict`` takes the policy arrays."""
        return {"width": self.settings.width, "depth": self.settings.depth}

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The acting network as ``MLPPolicy.state_dict`` names it (``w0, ..., b0, ...``)."""
        arrays = {f"w{i}": w.copy() for i, (w, _) in enumerate(self._acting)}
        return arrays | {f"b{i}": b.copy() for i, (_, b) in enumerate(self._acting)}

    def _publish(self) -> None:
        # fresh arrays, swapped in whole: a concurrent act() sees the old or the new net
        self._acting = [(w.copy(), b.copy()) for w, b in self._actor]

    @property
    def learning_rate(self) -> float:
        """Adam's step size now (``lr``; a learner may schedule it)."""
        return float(self.settings.lr)

    def _adam(self) -> None:  # one Adam step (Kingma & Ba) from ``_grad``
        self._adam_step += 1
        m, v = self._adam_m, self._adam_v
        m *= np.float32(BETA1)
        m += np.float32(1.0 - BETA1) * self._grad
        v *= np.float32(BETA2)
        v += np.float32(1.0 - BETA2) * self._grad * self._grad
        # Kingma & Ba's efficient form: bias corrections folded into the step size
        size = self.learning_rate * math.sqrt(1.0 - BETA2**self._adam_step) / (
            1.0 - BETA1**self._adam_step)
        self._params -= np.float32(size) * m / (np.sqrt(v) + np.float32(ADAM_EPS))

    def _expect(self, arrays: Mapping[str, np.ndarray], key: str,
                shape: tuple[int, ...] | None) -> Any:
        """``arrays[key]`` as an array of ``shape`` (``None``: any), or a
        :class:`CheckpointError` naming the learner and how to rebuild it to fit."""
        name = self.settings.learner
        if key not in arrays:
            raise CheckpointError(f"{name} state: array '{key}' is missing; pass what "
                                  f"{name.upper()}Learner.state_dict() returned")
        value = np.asarray(arrays[key])
        if shape is not None and value.shape != shape:
            raise CheckpointError(f"{name} state: array '{key}' expected shape {shape}, got "
                                  f"{value.shape}; build the learner with {self.rebuild}")
        return value

    def _read_layers(self, arrays: Mapping[str, np.ndarray], layers: Layers,
                     prefix: str = "") -> Layers:
        return [(self._expect(arrays, f"{prefix}w{i}", w.shape),
                 self._expect(arrays, f"{prefix}b{i}", b.shape)) for i, (w, b) in enumerate(layers)]

    def _training_state(self) -> dict[str, np.ndarray]:  # Adam, counters, generator
        return {"adam.m": self._adam_m.copy(), "adam.v": self._adam_v.copy(),
                "adam.step": np.array(self._adam_step, np.int64),
                "num_observed": np.array(self.num_observed, np.int64),
                "num_updates": np.array(self.num_updates, np.int64), "rng": encode_rng(self.rng)}

    def _read_training_state(self, arrays: Mapping[str, np.ndarray]) -> Any:  # checked
        shape = self._params.shape
        return (self._expect(arrays, "adam.m", shape), self._expect(arrays, "adam.v", shape),
                *(int(self._expect(arrays, key, ()))
                  for key in ("adam.step", "num_observed", "num_updates")),
                decode_rng(self._expect(arrays, "rng", None)))

    def _load_training_state(self, read: Any) -> None:
        self._adam_m[...], self._adam_v[...] = read[0], read[1]
        self._adam_step, self.num_observed, self.num_updates, self.rng = read[2:]
