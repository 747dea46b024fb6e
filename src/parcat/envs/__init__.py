"""Built-in environments and adapters for Gymnasium and PettingZoo environments."""

from __future__ import annotations

from parcat.envs.base import AgentID, ParallelEnv, StatsEnv, TaskEnv

__all__ = ["AgentID", "ParallelEnv", "StatsEnv", "TaskEnv"]
