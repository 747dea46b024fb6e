"""Named arrays in one shared-memory block, and codecs that copy values into them.

An :class:`ArrayBlock` is a header (:mod:`parcat.ipc.layout`) then named, 64-byte aligned
arrays; a :class:`SlotBlock` holds a live flag, an observation and an action slot per hosted
agent. ``Box`` values are copied raw, ``Discrete`` as one int64, any other space flattened:
nothing is pickled per step.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from parcat.ipc.layout import HEADER_SLOTS
from parcat.ipc.shm_names import PREFIX as PREFIX
from parcat.ipc.shm_names import new_block_name
from parcat.ipc.shm_names import remove_stale_blocks as remove_stale_blocks
from parcat.ipc.start import interrupts_deferred

ALIGN = 64
FOLDER = "/dev/shm"
HELD = frozenset({signal.SIGINT, signal.SIGTERM})
"""Held back while a block is created, attached or closed: cut there, a block would be left
that no one unlinks, or open with no one to close it."""


@dataclass(frozen=True)
class Codec:
    """How one space's values are written to and read from a flat slot."""

    space: gymnasium.spaces.Space[Any]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    kind: str  # "box", "discrete" or "flat"

    @classmethod
    def for_space(cls, space: gymnasium.spaces.Space[Any]) -> Codec:
        """Pick the cheapest exact encoding for ``space``."""
        if isinstance(space, spaces.Box):
            return cls(space, tuple(space.shape), np.dtype(space.dtype), "box")
        if isinstance(space, spaces.Discrete):
            return cls(space, (1,), np.dtype(np.int64), "discrete")
        # integers stay integers (float64 rounds int64 values past 2**53)
        flat = np.dtype(spaces.flatten_space(space).dtype)
        dtype = np.dtype(np.int64) if flat.kind in "iub" else np.dtype(np.float64)
        return cls(space, (spaces.flatdim(space),), dtype, "flat")

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def write(self, slot: np.ndarray, value: Any) -> None:
        if self.kind == "box":
            np.copyto(slot, value, casting="unsafe")
        elif self.kind == "discrete":
            slot[0] = value
        else:
            np.copyto(slot, np.asarray(spaces.flatten(self.space, value)), casting="unsafe")

    def read(self, slot: np.ndarray) -> Any:
        """A private copy of the value in ``slot``."""
        if self.kind == "box":
            return slot.copy()
        if self.kind == "discrete":
            return int(slot[0])
        return spaces.unflatten(self.space, slot.copy())


@dataclass(frozen=True)
class AgentSlots:
    """Views into a block for one agent."""

    live: np.ndarray
    obs: np.ndarray
    action: np.ndarray


class SlotBlock:
    """Per-agent observation and action slots in an :class:`ArrayBlock`: the creator owns
    it and unlinks it on :meth:`close`; a worker attaches by name."""

    def __init__(self, codecs: list[tuple[Codec, Codec]], name: str | None = None,
                 create: bool = True) -> None:
        self.codecs = codecs
        specs: dict[str, tuple[tuple[int, ...], Any]] = {}
        for i, (obs_codec, act_codec) in enumerate(codecs):
            specs[f"live{i}"] = ((1,), np.uint8)
            specs[f"obs{i}"] = (obs_codec.shape, obs_codec.dtype)
            specs[f"act{i}"] = (act_codec.shape, act_codec.dtype)
        self.block = ArrayBlock(specs, name=None if create else name)
        self.header = self.block.header
        arrays = self.block.arrays
        self.agents = [
            AgentSlots(arrays[f"live{i}"], arrays[f"obs{i}"], arrays[f"act{i}"])
            for i in range(len(codecs))
        ]

    @property
    def name(self) -> str:
        return self.block.name

    def close(self) -> None:
        """Close (and, for the creator, unlink) the block."""
        self.agents = []
        self.header = np.empty(0, np.int64)
        self.block.close()


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


_OWN: set[str] = set()
"""Blocks this process created and has not unlinked yet."""


def unlink_own_blocks() -> None:
    """Unlink every block this process created and still holds: a last resort at exit (an
    interrupt can land between a block's creation and the code that records it)."""
    for name in list(_OWN):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(FOLDER, name))
            resource_tracker.unregister(f"/{name}", "shared_memory")
        _OWN.discard(name)


class ArrayBlock:
    """Named numpy arrays (``specs``: name → (shape, dtype)) in one shared-memory block
    after its header; ``name`` attaches to a block, ``None`` creates one this process owns."""

    def __init__(self, specs: dict[str, tuple[tuple[int, ...], Any]],
                 name: str | None = None) -> None:
        self.specs = specs
        offsets, size = {}, _align(HEADER_SLOTS * 8)
        for key, (shape, dtype) in specs.items():
            offsets[key] = size
            size = _align(size + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        self.owner = name is None
        if self.owner:
            resource_tracker.ensure_running()  # starting it unblocks both signals
        with interrupts_deferred(HELD):  # cut after the open, the block would be dropped
            self.name, self._mapping = _open(name, size)
            self._buf: memoryview | None = memoryview(self._mapping)
            self.header = np.ndarray((HEADER_SLOTS,), np.int64, self._buf, 0)
            if self.owner:
                self.header[:] = 0
            self.arrays = {key: np.ndarray(shape, dtype, self._buf, offsets[key])
                           for key, (shape, dtype) in specs.items()}

    @property
    def size(self) -> int:
        """The block's size in bytes."""
        return len(self._mapping)

    def close(self) -> None:
        """Drop the views, close the mapping, and unlink it if this process created it."""
        with interrupts_deferred(HELD):
            self.header = np.empty(0, np.int64)
            self.arrays = {}
            if self._buf is not None:
                self._buf.release()
                self._buf = None
                self._mapping.close()
            if self.owner:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(FOLDER, self.name))
                resource_tracker.unregister(f"/{self.name}", "shared_memory")
                _OWN.discard(self.name)
                self.owner = False


def _open(name: str | None, size: int) -> tuple[str, mmap.mmap]:
    """A new block this process owns (``name=None``), or the block ``name`` attached without
    registering it with the resource tracker (its creator unlinks it); its name and a mapping.

    The mapping is made here and the ``SharedMemory`` closed at once: its finalizer is
    Python code, which a Ctrl-C can cut (Python then only prints it), and a block that an
    interrupt keeps from its ``close`` would run it at some later collection; an ``mmap``
    is freed in C.
    """
    if name is None:
        shm = shared_memory.SharedMemory(name=new_block_name(), create=True, size=size)
        _OWN.add(shm.name)
    else:
        register = resource_tracker.register
        resource_tracker.register = lambda *args, **kwargs: None
        try:
            shm = shared_memory.SharedMemory(name=name)
        finally:
            resource_tracker.register = register
    try:
        with open(os.path.join(FOLDER, shm.name), "r+b") as file:
            return shm.name, mmap.mmap(file.fileno(), shm.size)
    finally:
        shm.close()
