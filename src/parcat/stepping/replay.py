"""Rebuilding the policies of a worker's agents here, mid-episode, by replaying it.

A policy's state (its generator, its memory) lives in the worker that stepped it. Rather
than ask foreign code to be picklable, the policies are built here, reset with the
episode's seeds and fed the observations the workers' policies read, step by step. Each
replayed action must encode to the bytes the worker wrote; otherwise (a policy that is
not a function of its seed and observations) the agents stay on the workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parcat.core.errors import USER_CODE_ERRORS
from parcat.envs.missions import Mission
from parcat.ipc.shm import Codec
from parcat.policies.base import Policy
from parcat.stepping.base import PolicyCache, Seat


def rebuild(cache: PolicyCache, mission: Mission, seats: Sequence[Seat],
            codecs: dict[Any, Codec], steps: Sequence[tuple[dict[Any, Any], dict[Any, Any]]],
            marker: Any = None) -> dict[Any, Policy] | None:
    """The seats' policies, in the state the episode so far left them; ``None`` when a
    replayed action differs from the worker's.

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
