"""How big a simulation may be, checked with its config: a run allocates its whole record up
front, so a typo such as ``iters: 1e11`` must be one line naming the key, not a MemoryError."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcat.core.errors import ConfigError
from parcat.ipc.shm import Codec

if TYPE_CHECKING:
    from parcat.sim.config import SimConfig

MAX_ITERS = 100_000_000
MIN_SECONDS = 1e-6
"""Shortest ``period`` and ``cycle_time``; ``MAX_SECONDS`` the longest."""
MAX_SECONDS = 3600.0
MAX_DURATION_S = 7 * 24 * 3600.0
"""Longest run, ``iters * period``."""
MAX_AGENTS = 1024
MAX_PROCESS_AGENTS = 128
"""Most listed agents (each is a process of its own in parallel mode)."""
MAX_RECORD_BYTES = 2 * 1024**3
MAX_SEED = 2**63 - 1

_FIXED_STEP_BYTES = 8 + 8 + 4 + 4  # time_s, step_cost_s, episode, episode_step
_AGENT_STEP_BYTES = 5 * 8  # based_on, compute_s, reward, age_steps, age_s


def step_bytes(config: SimConfig) -> int:
    """Bytes one step adds to the record (without ``state``, which only the env knows)."""
    total = _FIXED_STEP_BYTES
    for agent in config.agents:
        total += _AGENT_STEP_BYTES + Codec.for_space(agent.spec.action_space).nbytes
        if config.debug.log_agent_state:
            total += Codec.for_space(agent.spec.observation_space).nbytes
    return total


def check_size(config: SimConfig, where: str, iters_key: str) -> None:
    """Refuse a run longer than :data:`MAX_DURATION_S` or with a record larger than
    :data:`MAX_RECORD_BYTES`; messages name ``iters_key`` (``'iters'`` or ``--iters``)."""
    if config.iters * config.period > MAX_DURATION_S:
        most = int(MAX_DURATION_S / config.period)
        raise ConfigError(f"{where}: {iters_key} times 'environment.period' is longer than "
                          f"{MAX_DURATION_S / 86400:g} days; at most {most:,} steps fit at this "
                          "period")
    per_step = step_bytes(config)
    if config.iters * per_step > MAX_RECORD_BYTES:
        most = MAX_RECORD_BYTES // per_step
        raise ConfigError(f"{where}: the record of {iters_key} steps would exceed "
                          f"{MAX_RECORD_BYTES / 1024**3:g} GiB; at most {most:,} steps fit for "
                          "these agents")


def check_agents(config_agents: int, listed: int, where: str, mission: str) -> None:
    """Refuse a mission with more than :data:`MAX_AGENTS` agents, or more than
    :data:`MAX_PROCESS_AGENTS` listed (a process each in parallel mode)."""
    if config_agents > MAX_AGENTS:
        raise ConfigError(f"{where}: mission '{mission}' has {config_agents:,} agents; a sim "
                          f"runs at most {MAX_AGENTS:,} (lower its agent-count parameter)")
    if listed > MAX_PROCESS_AGENTS:
        raise ConfigError(f"{where}: {listed:,} agents are listed under 'agents'; at most "
                          f"{MAX_PROCESS_AGENTS} run at their own cycle_time (the others "
                          "play default_policy every step)")
