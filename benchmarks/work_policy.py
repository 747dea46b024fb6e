"""A policy from outside parcat whose step costs a chosen amount of numpy work (for
``handoff_load.py``): ``work_policy:Work,reps=N`` runs N small matrix-vector products per
step, then draws a random action. The actions depend only on the seed, not on ``reps``."""

from __future__ import annotations

from typing import Any

import numpy as np

from parcat.policies.base import AgentSpec
from parcat.policies.builtin import RandomPolicy

WIDTH = 96


class Work(RandomPolicy):
    """``random``'s actions, after ``reps`` matrix-vector products of numpy work."""

    def __init__(self, spec: AgentSpec, reps: int = 40) -> None:
        super().__init__(spec)
        self.reps = int(reps)
        rng = np.random.default_rng(1)
        self.weights = rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)
        self.state = np.ones(WIDTH)

    def step(self, obs: Any) -> Any:
        """Burn ``reps`` products, then draw the action."""
        x = self.state
        for _ in range(self.reps):
            x = np.tanh(self.weights @ x)
        self.state = x
        return super().step(obs)
