"""Single-writer slots guarded by seqlocks: readers take a consistent snapshot, never wait.

A write makes the sequence number odd, writes, and makes it even again; a reader copies
between two reads of it and retries if it was odd or changed (a lock would make a reader
wait for a descheduled writer). Aligned ``int64`` stores and loads are single instructions
and x86-64 keeps them in order, which is all a seqlock needs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from parcat.ipc.shm import Codec

READ_TRIES = 10_000
YIELD_AFTER = 64
"""Retries before a reader yields its core (the writer may be descheduled mid-write)."""


class SeqSlot:
    """One value (in ``data``) with integer fields, one writer, any number of readers;
    ``meta[0]`` is the sequence number, ``meta[1:]`` the fields."""

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
        """A consistent ``(seq, value, fields)``, or ``None`` when the writer stopped in the
        middle of a write (it died) and the caller keeps what it had."""
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
