"""Seeds derived from (run seed, mission, episode index, agent) — never from worker or time.

``numpy.random.SeedSequence`` with a spawn key gives independent, reproducible streams,
so an episode has the same seeds wherever and whenever it runs.
"""

from __future__ import annotations

import numpy as np

ENV_STREAM = 0
ASSIGN_STREAM = 1
AGENT_STREAM_BASE = 2


def derive_seed(seed: int, *key: int) -> int:
    """A 32-bit seed from ``seed`` and a spawn key of non-negative integers."""
    sequence = np.random.SeedSequence(entropy=seed, spawn_key=key)
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


def episode_seed(seed: int, mission_key: int, episode_index: int) -> int:
    """The environment seed of one episode."""
    return derive_seed(seed, mission_key, episode_index, ENV_STREAM)


def assignment_seed(seed: int, mission_key: int, episode_index: int) -> int:
    """The seed that assigns policies to agents in one episode."""
    return derive_seed(seed, mission_key, episode_index, ASSIGN_STREAM)


def agent_seed(seed: int, mission_key: int, episode_index: int, agent_index: int) -> int:
    """The seed passed to ``policy.reset`` for one agent of one episode."""
    return derive_seed(seed, mission_key, episode_index, AGENT_STREAM_BASE + agent_index)
