"""Single-writer slots guarded by seqlocks: readers take a consistent snapshot, never wait.

Each slot has one writer. A write makes the sequence number odd, writes the value and its
fields, and makes it even again; a reader copies the value and fields between two reads of
the sequence number and retries if it was odd or changed — so every read is a consistent
snapshot of one write, and neither side ever waits for the other (a lock would make a
reader wait for a descheduled writer). Stores and loads of the aligned ``int64``
sequence number are single instructions, and x86-64 keeps stores in order and loads in
order, which is all a seqlock needs; each numpy call is an opaque function call, so the
compiler cannot move the value's copy across the sequence-number updates either.
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
