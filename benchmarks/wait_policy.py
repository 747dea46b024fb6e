"""A policy that waits, then acts (for ``policy_kinds.py``): ``wait_policy:Wait,ms=5`` sleeps
``ms`` milliseconds a step, a stand-in for a model behind a server or an API, then draws
``random``'s action. The actions depend only on the seed, not on the wait."""

from __future__ import annotations

import time
from typing import Any

from parcat.policies.base import AgentSpec
from parcat.policies.builtin import RandomPolicy


class Wait(RandomPolicy):
    """``random``'s actions, after ``ms`` milliseconds of waiting (no CPU)."""

    def __init__(self, spec: AgentSpec, ms: float = 5.0) -> None:
        super().__init__(spec)
        self.seconds = float(ms) / 1000

    def step(self, obs: Any) -> Any:
        """Wait, then draw the action."""
        time.sleep(self.seconds)
        return super().step(obs)
