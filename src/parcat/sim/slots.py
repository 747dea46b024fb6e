"""The shared memory of a parallel simulation: the latest observation and action per agent.

Every slot is a :class:`~parcat.ipc.seqlock.SeqSlot` (one writer, readers never wait).
Layout of a :class:`SimBlock` (an :class:`~parcat.ipc.shm.ArrayBlock`)::

    header            see parcat.ipc.layout.SimSlots (STOP, STEP, EPISODE)
    per process agent
      obs meta        int64[OBS_FIELDS + 1]  seq | step, episode, published_ns
      obs value       the observation in its space's code
      act meta        int64[ACT_FIELDS + 1]  seq | based_on, compute_ns, cycle statistics
      act value       the action in its space's code
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parcat.ipc.layout import SimSlots
from parcat.ipc.seqlock import SeqSlot
from parcat.ipc.shm import ArrayBlock, Codec

H_STOP, H_STEP, H_EPISODE = SimSlots.STOP, SimSlots.STEP, SimSlots.EPISODE
OBS_FIELDS = 3
"""step, episode, published_ns."""
ACT_FIELDS = 8
"""based_on, compute_ns, then the six numbers of ``CycleStats.as_fields``."""


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
