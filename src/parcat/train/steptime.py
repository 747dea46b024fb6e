"""Timing one step of a mission's environment at start-up, for the layout planner: through
an :class:`~parcat.train.envslice.EnvSlice`, the code every lane runs, with seeded random
actions, so the time includes what a lane adds around ``env.step``."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from parcat.envs.missions import Mission
from parcat.train.envslice import EnvSlice, agent_layouts, array_specs

BUDGET_S = 0.03
"""Wall time spent stepping (building the environment comes on top)."""
MAX_STEPS = 200
"""Steps timed at most: enough for a stable median of a cheap step."""


@dataclass(frozen=True)
class StepTime:
    """What timing the environment found."""

    step_s: float
    """Median seconds of one step (preemption and the rare autoreset do not move it)."""
    steps: int
    """Steps timed (not the first, which may warm caches)."""


def time_env_step(mission: Mission, seed: int = 0, budget_s: float = BUDGET_S,
                  max_steps: int = MAX_STEPS) -> StepTime:
    """Step one environment of ``mission`` for about ``budget_s`` seconds (at least twice);
    what building or stepping it raises propagates."""
    layouts = agent_layouts(mission)
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in array_specs(layouts, 1).items()}
    envs = EnvSlice(mission, 0, 1, seed, arrays)
    try:
        spaces = [spec.action_space for spec in mission.agents()]
        for index, space in enumerate(spaces):
            space.seed(seed + index)
        envs.reset_all()
        times: list[float] = []
        end = time.perf_counter() + budget_s
        while len(times) < max_steps + 1:
            for index, space in enumerate(spaces):
                arrays[f"act{index}"][0] = space.sample()
            start = time.perf_counter()
            envs.step()
            now = time.perf_counter()
            times.append(now - start)
            if now > end and len(times) >= 2:
                break
    finally:
        envs.close()
    return StepTime(statistics.median(times[1:]), len(times) - 1)
