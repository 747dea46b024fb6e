"""A training environment whose step costs ~0.5 ms of CPU: worth an environment worker.

Referenced as ``tests.train.slowenv:SlowStepEnv`` so that worker processes import it too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes import ScriptedEnv

STEP_US = 500


class SlowStepEnv(ScriptedEnv):
    """:class:`tests.fakes.ScriptedEnv` (2 agents, deterministic for a seed) whose every
    step busy-waits ``busy_us`` microseconds, as a costly simulator would."""

    def __init__(self, agents: int = 2, max_steps: int = 20, busy_us: int = STEP_US,
                 **kwargs: Any) -> None:
        super().__init__(agents=agents, max_steps=max_steps, busy_us=busy_us, **kwargs)


def write_slow_mission(folder: Path) -> Path:
    """A mission YAML for :class:`SlowStepEnv` in ``folder``."""
    path = folder / "slow.yaml"
    path.write_text("name: slow\nenv: tests.train.slowenv:SlowStepEnv\n"
                    f"params: {{agents: 2, max_steps: 20, busy_us: {STEP_US}}}\n")
    return path
