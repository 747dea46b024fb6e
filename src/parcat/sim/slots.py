"""The shared memory of a parallel simulation: a header (``SimSlots``: STOP, STEP, EPISODE)
and, per process agent, its latest observation (meta: step, episode, published_ns) and action
(meta: based_on, compute_ns, cycle statistics), each a seqlocked slot (one writer, readers
never wait) holding the value in its space's code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parcat.ipc.layout import SimSlots
from parcat.ipc.seqlock import SeqSlot
from parcat.ipc.shm import ArrayBlock, Codec

H_STOP, H_STEP, H_EPISODE = SimSlots.STOP, SimSlots.STEP, SimSlots.EPISODE
OBS_FIELDS = 3
ACT_FIELDS = 8  # based_on, compute_ns, then the six numbers of CycleStats.as_fields


class SimBlock:
    """The block of a run's process agents; ``name=None`` creates one (which this process
    unlinks)."""

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
        """Drop the views and close (the creator: unlink) the block."""
        self.obs = []
        self.actions = []
        self.header = np.zeros(0, np.int64)
        self.block.close()
