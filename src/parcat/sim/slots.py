"""Shared-memory slots guarded by seqlocks: the latest observation and action per agent.

Each slot has one writer. A write makes the sequence number odd, writes the value and its
fields, and makes it even again; a reader copies the value and fields between two reads of
the sequence number and retries if it was odd or changed — so every read is a consistent
snapshot of one write, and neither side ever waits for the other (a lock would make the
environment wait for a descheduled agent). Stores and loads of the aligned ``int64``
sequence number are single instructions, and x86-64 keeps stores in order and loads in
order, which is all a seqlock needs; each numpy call is an opaque function call, so the
compiler cannot move the value's copy across the sequence-number updates either.

Layout of a :class:`SimBlock` (an :class:`~parcat.parallel.shm.ArrayBlock`)::

    header            STOP flag, environment STEP done, current EPISODE
    per process agent
      obs meta        int64[OBS_FIELDS + 1]  seq | step, episode, published_ns
      obs value       the observation in its space's code
      act meta        int64[ACT_FIELDS + 1]  seq | based_on, compute_ns, cycle statistics
      act value       the action in its space's code
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from parcat.parallel.shm import ArrayBlock, Codec

H_STOP, H_STEP, H_EPISODE = 0, 1, 2
OBS_FIELDS = 3
"""step, episode, published_ns."""
ACT_FIELDS = 8
"""based_on, compute_ns, then the six numbers of ``CycleStats.as_fields``."""
READ_TRIES = 10_000
YIELD_AFTER = 64
"""Retries before a reader yields its core (the writer may be descheduled mid-write)."""


class SeqSlot:
    """One value with integer fields, one writer, any number of readers.

    Args:
        meta: ``int64`` array: ``meta[0]`` is the sequence number, the rest the fields.
        data: Where the value lives.
        codec: How the value is written and read.
    """

    def __init__(self, meta: np.ndarray, data: np.ndarray, codec: Codec) -> None:
        self.meta = meta
        self.data = data
        self.codec = codec

    @property
    def seq(self) -> int:
        """The sequence number: even when consistent, 0 before the first write."""
        return int(self.meta[0])

    def write(self, value: Any, fields: Sequence[int]) -> None:
        """Publish ``value`` and its fields (only the slot's one writer may call this)."""
        meta = self.meta
        meta[0] += 1  # odd: a write is in progress
        self.codec.write(self.data, value)
        meta[1 : 1 + len(fields)] = fields
        meta[0] += 1  # even: consistent again

    def read(self, tries: int = READ_TRIES) -> tuple[int, Any, np.ndarray] | None:
        """A consistent ``(seq, value, fields)``, or ``None`` if no snapshot was consistent.

        ``None`` after ``tries`` attempts means the writer stopped in the middle of a write
        (it died); the caller keeps what it had.
        """
        meta, codec, data = self.meta, self.codec, self.data
        for attempt in range(tries):
            before = int(meta[0])
            if not before & 1:
                value = codec.read(data)
                fields = meta[1:].copy()
                if int(meta[0]) == before:
                    return before, value, fields
            if attempt >= YIELD_AFTER:
                time.sleep(0)
        return None


class SimBlock:
    """The shared memory of a parallel simulation: a header and seqlocked slots.

    Args:
        obs_codecs: One observation codec per process agent.
        act_codecs: One action codec per process agent.
        name: The block to attach to; ``None`` creates one (this process unlinks it).
    """

    def __init__(self, obs_codecs: Sequence[Codec], act_codecs: Sequence[Codec],
                 name: str | None = None) -> None:
        specs: dict[str, tuple[tuple[int, ...], Any]] = {}
        for i, (obs_codec, act_codec) in enumerate(zip(obs_codecs, act_codecs, strict=True)):
            specs[f"om{i}"] = ((OBS_FIELDS + 1,), np.int64)
            specs[f"ov{i}"] = (obs_codec.shape, obs_codec.dtype)
            specs[f"am{i}"] = ((ACT_FIELDS + 1,), np.int64)
            specs[f"av{i}"] = (act_codec.shape, act_codec.dtype)
        self.block = ArrayBlock(specs, name=name)
        arrays = self.block.arrays
        self.header = self.block.header
        self.obs = [SeqSlot(arrays[f"om{i}"], arrays[f"ov{i}"], c)
                    for i, c in enumerate(obs_codecs)]
        self.actions = [SeqSlot(arrays[f"am{i}"], arrays[f"av{i}"], c)
                        for i, c in enumerate(act_codecs)]

    @property
    def name(self) -> str:
        """The block's name, for other processes to attach."""
        return self.block.name

    @property
    def stopped(self) -> bool:
        """Whether the run has been told to stop."""
        return bool(self.header[H_STOP])

    def stop(self) -> None:
        """Tell every process of the run to stop."""
        if len(self.header):
            self.header[H_STOP] = 1

    def close(self) -> None:
        """Drop the views and close (the creator: also unlink) the block."""
        self.obs = []
        self.actions = []
        self.header = np.zeros(0, np.int64)
        self.block.close()
