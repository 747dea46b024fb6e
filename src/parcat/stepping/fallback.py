"""The policy-worker fallback: whether handing agents to policy workers still pays, and
moving the workers' agents back into this process when it does not.

:class:`Payoff` compares each window of steps' wall time with an estimate of stepping every
agent inline: the local agents' wall time plus the CPU time the workers report for theirs,
stretched as this process's own CPU time is stretched into wall time on a loaded machine.
When a whole window was lost, the workers' policies are rebuilt here (:func:`rebuild`):
reset with the episode's seeds and fed what the workers' policies read (:class:`StepHistory`),
each action checked against the bytes the worker wrote, so results stay unchanged; a policy
that is not a function of its seed and observations stays on its worker.
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

CHECK_STEPS = 128  # steps in one window of the comparison
PAYOFF_RATIO = 1.0
"""Fall back when a window's wall time exceeds this many times its inline estimate."""
MAX_STRETCH = 10.0  # the most the inline estimate stretches CPU time into wall time
HISTORY_STEPS = 4096
"""Steps of an episode kept to rebuild its workers' policies; a later fallback waits for the
next episode."""


class Payoff:
    """Sums a window's wall time and inline estimate; says when the window was lost (its
    wall time over ``ratio`` times the estimate; 0 forces a fallback at the first check)."""

    def __init__(self, check_steps: int = CHECK_STEPS, ratio: float = PAYOFF_RATIO) -> None:
        if check_steps < 1 or ratio < 0:
            raise ValueError("check_steps must be >= 1 and ratio >= 0")
        self.check_steps = check_steps
        self.ratio = ratio
        self._restart()
        self.verdict = ""
        """Why the last lost window was lost (for the note)."""

    def add(self, wall_s: float, local_wall_s: float, local_cpu_s: float,
            worker_cpu_s: float) -> bool:
        """Count one step (its wall time, the local agents' wall and CPU time, the workers'
        reported CPU time); True when it closes a lost window."""
        self.steps += 1
        self.wall_s += wall_s
        self.local_wall_s += local_wall_s
        self.local_cpu_s += local_cpu_s
        self.worker_cpu_s += worker_cpu_s
        if self.steps < self.check_steps:
            return False
        stretch = 1.0
        if self.local_cpu_s > 0:
            stretch = min(MAX_STRETCH, max(1.0, self.local_wall_s / self.local_cpu_s))
        inline_s = self.local_wall_s + stretch * self.worker_cpu_s
        lost = self.wall_s > self.ratio * inline_s
        if lost:
            n = self.steps
            self.verdict = (f"{self.wall_s / n * 1e3:.3f} ms a step with policy workers vs "
                            f"{inline_s / n * 1e3:.3f} ms estimated inline over {n} steps")
        self._restart()
        return lost

    def _restart(self) -> None:
        self.steps = 0
        self.wall_s = self.local_wall_s = self.local_cpu_s = self.worker_cpu_s = 0.0


@dataclass
class StepHistory:
    """The workers' agents' observations (as the workers read them) and encoded actions."""

    limit: int = HISTORY_STEPS
    steps: list[tuple[dict[Any, Any], dict[Any, np.ndarray]]] = field(default_factory=list)
    complete: bool = True
    """False once the episode ran past ``limit`` (its agents cannot move mid-episode)."""

    def clear(self) -> None:
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
        self.steps.append((obs, actions))


def rebuild(cache: PolicyCache, mission: Mission, seats: Sequence[Seat],
            codecs: dict[Any, Codec], steps: Sequence[tuple[dict[Any, Any], dict[Any, Any]]],
            marker: Any = None) -> dict[Any, Policy] | None:
    """The seats' policies (built in ``cache``) in the state the episode's ``steps`` left
    them; ``None`` when an action they give differs from the worker's (``codecs``: each
    agent's action codec)."""
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
