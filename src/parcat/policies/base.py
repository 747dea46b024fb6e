"""The policy contract; :class:`AgentSpec` (defined with the environment contract) is
re-exported here, where policy authors look for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from parcat.envs.base import AgentSpec

__all__ = ["AgentSpec", "AsyncPolicy", "BatchPolicy", "Policy"]


@runtime_checkable
class Policy(Protocol):
    """What a user implements to act in parcat: one instance plays one agent, and draws
    all its randomness from the seed ``reset`` gets at the start of every episode."""

    def reset(self, seed: int) -> None:
        """Start an episode; reseed any randomness and clear any memory."""
        ...

    def step(self, obs: Any) -> Any:
        """Return the action for one observation."""
        ...


@runtime_checkable
class BatchPolicy(Policy, Protocol):
    """A policy that can also act for many agents (or environments) in one call."""

    def step_batch(self, obs_batch: Sequence[Any]) -> Sequence[Any]:
        """Return one action per observation, in order."""
        ...


@runtime_checkable
class AsyncPolicy(Protocol):
    """A policy whose step waits (a model server, an API): parcat keeps many agents' calls
    in flight at once on one event loop per process. It may also define
    ``async def step_batch``; ``reset`` stays sync."""

    def reset(self, seed: int) -> None:
        """Start an episode; reseed any randomness and clear any memory."""
        ...

    async def step(self, obs: Any) -> Any:
        """Return the action for one observation."""
        ...
