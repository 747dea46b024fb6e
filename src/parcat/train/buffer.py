"""The replay buffer: a ring of transitions that a learner samples uniformly from its own
seed. Storage grows by doubling up to ``capacity``, so a buffer that never fills costs only
what it holds; once full, each new transition overwrites the oldest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from parcat.core.errors import CheckpointError, ConfigError
from parcat.train.learner import Transitions, decode_rng, encode_rng

DTYPES = {"obs": np.float32, "actions": np.int64, "rewards": np.float32,
          "next_obs": np.float32, "terminated": np.bool_}
FIELDS = tuple(DTYPES)
"""Names of the arrays of a transition batch, in ``add_batch`` order."""

_MIN_ROWS = 1024


def transition_bytes(obs_size: int) -> int:
    """Bytes one stored transition of ``obs_size`` float32 numbers takes (two observations,
    an int64 action, a float32 reward and a bool)."""
    return 2 * 4 * obs_size + 8 + 4 + 1


class ReplayBuffer:
    """A seeded ring buffer of at most ``capacity`` transitions (:class:`ConfigError` if
    that is not an integer >= 1); ``seed`` seeds :meth:`sample`'s draws."""

    def __init__(self, capacity: int, obs_shape: int | tuple[int, ...], seed: int = 0) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ConfigError(
                f"replay buffer: 'capacity' must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        self.obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.rng = np.random.default_rng(seed)
        """The sampling generator; part of the buffer's state."""
        self._pos = 0
        self._size = 0
        self._data = self._allocate(0)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of storage allocated now."""
        return sum(array.nbytes for array in self._data.values())

    def add_batch(self, batch: Transitions) -> None:
        """Append a batch of transitions (ValueError if the arrays disagree in shape)."""
        arrays = self._as_batch(*batch[: len(FIELDS)])
        n = len(arrays["actions"])
        if n == 0:
            return
        keep = min(n, self.capacity)
        self._grow(min(self.capacity, self._size + n))
        start = (self._pos + n - keep) % self.capacity
        for key, values in arrays.items():
            _write_ring(self._data[key], start, values[n - keep :])
        self._pos = (self._pos + n) % self.capacity
        self._size = min(self.capacity, self._size + n)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Draw ``batch_size`` transitions uniformly, with replacement, as fresh arrays keyed
        by :data:`FIELDS` (ValueError if the buffer is empty)."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer; add transitions first")
        index = self.rng.integers(0, self._size, size=batch_size)
        return {key: array.take(index, axis=0) for key, array in self._data.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The contents, ring position, capacity and generator state as named arrays."""
        arrays = {key: array[: self._size].copy() for key, array in self._data.items()}
        arrays["pos"] = np.array(self._pos, dtype=np.int64)
        arrays["capacity"] = np.array(self.capacity, dtype=np.int64)
        arrays["rng"] = encode_rng(self.rng)
        return arrays

    def load_state_dict(self, arrays: Mapping[str, np.ndarray], prefix: str = "") -> None:
        """Restore what :meth:`state_dict` returned (its keys after ``prefix``, for a buffer
        saved inside a learner's state); :class:`CheckpointError` naming the full key for a
        missing key or a shape or capacity that does not match."""
        capacity = int(_get(arrays, prefix, "capacity"))
        if capacity != self.capacity:
            raise CheckpointError(
                f"array '{prefix}capacity' is {capacity}, but this buffer holds {self.capacity}; "
                "build the learner with the buffer size it was saved with")
        size, pos = len(_get(arrays, prefix, "actions")), int(_get(arrays, prefix, "pos"))
        if size > capacity or not 0 <= pos < capacity or (size < capacity and pos != size):
            raise CheckpointError(
                f"arrays '{prefix}actions' ({size} rows) and '{prefix}pos' ({pos}) do not "
                f"describe a ring of capacity {capacity}; the state is corrupt")
        data = self._allocate(size)
        for key, target in data.items():
            value = _get(arrays, prefix, key)
            if value.shape != target.shape:
                raise CheckpointError(
                    f"array '{prefix}{key}' expected shape {target.shape}, got {value.shape}")
            target[...] = value
        rng = decode_rng(_get(arrays, prefix, "rng"), f"{prefix}rng")
        self._data, self._size, self._pos, self.rng = data, size, pos, rng

    def _allocate(self, rows: int) -> dict[str, np.ndarray]:
        return {key: np.zeros((rows, *self._shape(key)), dtype) for key, dtype in DTYPES.items()}

    def _shape(self, key: str) -> tuple[int, ...]:
        return self.obs_shape if key.endswith("obs") else ()

    def _grow(self, needed: int) -> None:
        rows = len(self._data["actions"])
        if needed <= rows:
            return
        # until the ring wraps, rows [0, size) are exactly the stored transitions
        bigger = self._allocate(min(self.capacity, max(needed, 2 * rows, _MIN_ROWS)))
        for key, array in self._data.items():
            bigger[key][: self._size] = array[: self._size]
        self._data = bigger

    def _as_batch(self, *arrays: Any) -> dict[str, np.ndarray]:
        batch: dict[str, np.ndarray] = {
            key: np.asarray(value, dtype=DTYPES[key]) for key, value in zip(FIELDS, arrays,
                                                                            strict=True)}
        if batch["actions"].ndim != 1:
            raise ValueError(
                f"replay buffer: 'actions' expected shape (batch,), got {batch['actions'].shape}")
        n = len(batch["actions"])
        for key, value in batch.items():
            shape = (n, *self._shape(key))
            if value.shape != shape:
                raise ValueError(
                    f"replay buffer: '{key}' expected shape {shape} (from {n} actions), "
                    f"got {value.shape}")
        return batch


def _write_ring(target: np.ndarray, start: int, values: np.ndarray) -> None:
    first = min(len(values), len(target) - start)
    target[start : start + first] = values[:first]
    target[: len(values) - first] = values[first:]


def _get(arrays: Mapping[str, np.ndarray], prefix: str, key: str) -> np.ndarray:
    if prefix + key not in arrays:
        raise CheckpointError(f"array '{prefix}{key}' is missing from the learner state")
    return np.asarray(arrays[prefix + key])
