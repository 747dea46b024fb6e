"""The learner contract: what a user implements to train one agent in ``parcat train``.

parcat ships :class:`~parcat.train.dqn.DQNLearner` (numpy); a user may bring any other
(torch, jax) by implementing :class:`Learner`. The trainer runs one learner per agent
(independent learners) and checkpoints it through :meth:`Learner.state_dict`, so a run
resumed from a checkpoint continues bit for bit.

The helpers :func:`encode_rng` and :func:`decode_rng` turn a numpy generator into an
array and back, so a learner's random state fits in its ``state_dict``.

Stateful (memory) learners: ``act`` is called with one row per environment, always in
the same environment order, so a learner can keep one state per environment. If it has a
``reset_states(mask: np.ndarray) -> None`` method, the trainer calls it with a boolean
mask of the environments whose episode just began (all of them at each epoch start), so
those states are cleared at episode boundaries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from parcat.errors import CheckpointError

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


class Transitions(NamedTuple):
    """A batch of transitions, every array with the batch as its first dimension.

    ``terminated`` True means the episode ended in ``next_obs``, so its value is not
    bootstrapped; an episode cut short by a time limit (truncation) is not terminated.
    """

    obs: np.ndarray
    """Observations the actions were taken on."""
    actions: np.ndarray
    """The actions taken."""
    rewards: np.ndarray
    """The rewards they earned."""
    next_obs: np.ndarray
    """The observations that followed (the final one where an episode ended)."""
    terminated: np.ndarray
    """Whether the episode ended in ``next_obs``."""


@runtime_checkable
class Learner(Protocol):
    """One agent's learner: acts, collects transitions, trains, and saves itself.

    Arrays carry a leading batch dimension: ``obs`` is ``(batch, obs_dim)`` float32,
    ``actions`` int64, ``rewards`` float32 and ``terminated`` bool, each ``(batch,)``.
    """

    def act(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """One int64 action per row of ``obs_batch``; epsilon-greedy when ``explore``."""
        ...

    def observe(self, batch: Transitions) -> None:
        """Record a batch of transitions."""
        ...

    def train_step(self) -> dict[str, float]:
        """Run one or more gradient updates; return metrics, or ``{}`` if not warm yet."""
        ...

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to continue bit-identically, as named arrays."""
        ...

    def load_state_dict(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...

    def policy_arrays(self) -> dict[str, np.ndarray]:
        """The greedy network's weights as the policy's ``load_state_dict`` takes them."""
        ...


def encode_rng(rng: np.random.Generator) -> np.ndarray:
    """A generator's full state as a uint8 array (UTF-8 JSON), for a ``state_dict``."""
    text = json.dumps(rng.bit_generator.state, default=_jsonable, sort_keys=True)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode_rng(array: np.ndarray, key: str = "rng") -> np.random.Generator:
    """A new generator in the state that :func:`encode_rng` saved.

    Args:
        array: The uint8 array from :func:`encode_rng`.
        key: Name of the array in its ``state_dict``, for error messages.

    Raises:
        CheckpointError: the array is not an encoded generator state.
    """
    try:
        state = json.loads(np.asarray(array, dtype=np.uint8).tobytes().decode("utf-8"))
        name = state["bit_generator"]
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"array '{key}' is not an encoded generator state: {exc}") from exc
    if name not in _BIT_GENERATORS:
        raise CheckpointError(
            f"array '{key}': bit generator {name!r} is not one of {', '.join(_BIT_GENERATORS)}"
        )
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a generator state")
