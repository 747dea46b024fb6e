"""Moving a worker's agents back into this process mid-episode: their policies rebuilt here.

A policy's state (its generator, its memory) lives in the worker that stepped it. Rather
than ask foreign code to be picklable, the policies are built here, reset with the
episode's seeds and fed the observations the workers' policies read, step by step. Each
action they give must encode to the bytes the worker wrote; otherwise (a policy that is
not a function of its seed and observations) the agents stay on the workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.ipc.shm import Codec
from parcat.policies.base import Policy
from parcat.stepping.base import PolicyCache, Seat

HISTORY_STEPS = 4096
"""Steps of an episode kept to rebuild its workers' policies; a later fallback waits for the
next episode."""


@dataclass
class StepHistory:
    """The workers' agents' observations (as the workers read them) and encoded actions."""

    limit: int = HISTORY_STEPS
    steps: list[tuple[dict[Any, Any], dict[Any, np.ndarray]]] = field(default_factory=list)
    complete: bool = True
    """False once the episode ran past ``limit`` (its agents cannot move mid-episode)."""

    def clear(self) -> None:
        """Forget the last episode."""
        self.steps = []
        self.complete = True

    @property
    def recording(self) -> bool:
        """Whether this step should be recorded."""
        if len(self.steps) >= self.limit:
            self.complete = False
            self.steps = []
        return self.complete

    def add(self, obs: dict[Any, Any], actions: dict[Any, np.ndarray]) -> None:
        """Record one step."""
        self.steps.append((obs, actions))


def rebuild(cache: PolicyCache, mission: Mission, seats: Sequence[Seat],
            codecs: dict[Any, Codec], steps: Sequence[tuple[dict[Any, Any], dict[Any, Any]]],
            marker: Any = None) -> dict[Any, Policy] | None:
    """The seats' policies, in the state the episode so far left them; ``None`` when an
    action they give differs from the worker's.

    Args:
        cache: Where the policies are built (and kept for later episodes).
        mission: The episode's mission.
        seats: The agents to move here.
        codecs: Each agent's action codec.
        steps: Per step, each live agent's observation (as its worker read it) and its
            encoded action.
        marker: This process's acting marker, if any (see :class:`PolicyCache`).
    """
    try:
        policies = cache.reset(mission, seats, marker)
        scratch = {a: np.zeros(c.shape, c.dtype) for a, c in codecs.items()}
        for seen, did in steps:
            for agent_id, obs in seen.items():
                out, expected = scratch[agent_id], did.get(agent_id)
                codecs[agent_id].write(out, policies[agent_id].step(obs))
                if expected is None or out.tobytes() != expected.tobytes():
                    return None
    except USER_CODE_ERRORS:  # PolicyStepError included: a reset that fails here
        return None
    return policies
